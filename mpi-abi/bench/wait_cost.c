/* Instruction counts of waiting in a blocking receive through the C
 * library, for before/after comparisons under callgrind (repeatable
 * whatever the machine is doing, unlike timings).
 *
 * wait_recv: rank 0 receives REPS (default 200) messages of 8 B from rank 1
 * in MPI_Recv, while rank 1 computes WORK (default 20000) loop iterations
 * before each send, so rank 0 spends most of each call polling. What a
 * pass costs is what an arrival waits for: half a pass on average, plus
 * the pass that takes the message.
 *
 * Open MPI: opal_progress's inclusive count over its calls is one pass.
 * MPICH (ch4:ucx): ucp_worker_progress's, plus the caller's loop. tmx:
 * between passes under the device's lock (calls of
 * Endpoint::take_finished) a blocking receive looks at its source's ring
 * without the lock; with --dump-instr=yes, the execution count of that
 * look's load in Device::recv_into (find it with objdump -d) is the
 * number of looks, and recv_into's inclusive count over it the cost per
 * look with the passes included.
 *
 *   mpicc.mpich -O2 -o wait_cost mpi-abi/bench/wait_cost.c
 *   TMX_ADI_SPIN=100000000 TMX_SHMEM_TUNE=inline_calibrate=off,cma_calibrate=off \
 *       WORK=20000 target/release/tmrun -n 2 valgrind --tool=callgrind \
 *       --dump-instr=yes --toggle-collect=wait_recv \
 *       --callgrind-out-file=cg.%p ./wait_cost
 *   mpiexec.hydra -n 2 valgrind ... (the same; MPICH)
 *   mpicc.openmpi -O2 -o wait_cost_ompi mpi-abi/bench/wait_cost.c
 *   mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 valgrind ...
 *   callgrind_annotate --inclusive=yes cg.<pid of rank 0> | grep -E \
 *       'wait_recv|recv_into|opal_progress|ucp_worker_progress'
 *
 * TMX_ADI_SPIN keeps tmx's wait from yielding the processor (a system
 * call) after 4,096 idle passes; Open MPI and MPICH do not yield here.
 * The init calibrations are off: with them on, some runs under valgrind
 * held an eager message queued as unexpected through the whole wait, and
 * every pass of the receive was then a full one.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int reps = 200;
static long work = 20000;
static volatile long sink;

/* Rank 1's computation between two sends. */
__attribute__((noinline)) static void compute(void) {
    long s = 0;
    for (long i = 0; i < work; i++) {
        s += i ^ (s >> 3);
        sink = s;
    }
}

__attribute__((noinline)) static void wait_recv(char *buf) {
    for (int i = 0; i < reps; i++)
        MPI_Recv(buf, 8, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv) {
    int rank;
    char buf[8] = {0};
    const char *e = getenv("REPS");
    if (e)
        reps = atoi(e);
    e = getenv("WORK");
    if (e)
        work = atol(e);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* Warm-up: connections and lazy set-up are not counted. */
    if (rank == 0)
        MPI_Recv(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else if (rank == 1)
        MPI_Send(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        wait_recv(buf);
    } else if (rank == 1) {
        for (int i = 0; i < reps; i++) {
            compute();
            MPI_Send(buf, 8, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("wait_cost: %d receives, work %ld\n", reps, work);
    MPI_Finalize();
    return 0;
}
