/* Instruction counts of MPI_Irecv through the C library in two repeatable
 * cases, for before/after comparisons under callgrind:
 *   irecv_unexp: 64 one-byte receives whose messages are already queued as
 *     unexpected (the receiver drained them while it waited for a later
 *     "go" message);
 *   irecv_pre: 64 one-byte receives posted before any message is sent.
 * Each runs REPS (default 100) times on rank 1; divide the function's
 * inclusive count by 64 x REPS for the cost per MPI_Irecv. waitall_pre,
 * the MPI_Waitall of the posted-first window, is the receiver's completion
 * of such receives (with --toggle-collect=waitall_pre; most of it is
 * polling while the sender sends: compare the functions that complete).
 *
 *   mpicc.mpich -O2 -g -Wno-stringop-overflow -o irecv_cost mpi-abi/bench/irecv_cost.c
 *   target/release/tmrun -n 2 valgrind --tool=callgrind \
 *     --toggle-collect=irecv_unexp --toggle-collect=irecv_pre \
 *     --callgrind-out-file=cg.%p ./irecv_cost
 *   mpiexec.hydra -n 2 valgrind ...the same... ./irecv_cost   (MPICH)
 *   callgrind_annotate --inclusive=yes cg.<pid> | grep irecv_
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#define WINDOW 64
static char buf[WINDOW];
__attribute__((noinline)) static void irecv_unexp(MPI_Request *r) {
    for (int i = 0; i < WINDOW; i++)
        MPI_Irecv(buf + i, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &r[i]);
}
__attribute__((noinline)) static void irecv_pre(MPI_Request *r) {
    for (int i = 0; i < WINDOW; i++)
        MPI_Irecv(buf + i, 1, MPI_CHAR, 0, 5, MPI_COMM_WORLD, &r[i]);
}
__attribute__((noinline)) static void waitall_pre(MPI_Request *r) {
    MPI_Waitall(WINDOW, r, MPI_STATUSES_IGNORE);
}
int main(int argc, char **argv) {
    int rank, reps = 100;
    const char *e = getenv("REPS");
    if (e) reps = atoi(e);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Request r[WINDOW];
    char ack = 0;
    for (int k = 0; k < reps; k++) {
        if (rank == 0) {
            for (int i = 0; i < WINDOW; i++)
                MPI_Isend(buf + i, 1, MPI_CHAR, 1, 1, MPI_COMM_WORLD, &r[i]);
            MPI_Waitall(WINDOW, r, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_CHAR, 1, 3, MPI_COMM_WORLD);
            MPI_Recv(&ack, 1, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(&ack, 1, MPI_CHAR, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            irecv_unexp(r);
            MPI_Waitall(WINDOW, r, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
        }
    }
    for (int k = 0; k < reps; k++) {
        if (rank == 0) {
            MPI_Recv(&ack, 1, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < WINDOW; i++)
                MPI_Isend(buf + i, 1, MPI_CHAR, 1, 5, MPI_COMM_WORLD, &r[i]);
            MPI_Waitall(WINDOW, r, MPI_STATUSES_IGNORE);
        } else if (rank == 1) {
            irecv_pre(r);
            MPI_Send(&ack, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
            waitall_pre(r);
        }
    }
    if (rank == 0) printf("irecv_cost: %d windows of %d\n", reps, WINDOW);
    MPI_Finalize();
    return 0;
}
