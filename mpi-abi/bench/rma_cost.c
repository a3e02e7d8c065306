/* Instruction counts of one-sided calls to a node-local target through
 * the C library, for before/after comparisons under callgrind
 * (repeatable whatever the machine is doing, unlike timings).
 *
 * Two ranks, a window of MPI_Win_allocate (4 KiB), as abi_bench.c's RMA
 * rows. Under MPI_Win_lock_all, rank 0 runs REPS times (default 1000)
 * each of:
 *   put_flush   MPI_Put of 8 bytes (MPI_CHAR) to rank 1, MPI_Win_flush
 *   put64_flush 64 x MPI_Put of 8 bytes, one MPI_Win_flush
 *   get_flush   MPI_Get of 8 bytes, MPI_Win_flush
 *   acc_int     MPI_Accumulate of 2 MPI_INT, MPI_SUM, MPI_Win_flush
 *   acc_double  MPI_Accumulate of 1 MPI_DOUBLE, MPI_SUM, MPI_Win_flush
 * and put_only / flush_only (REPS x 64 MPI_Put without a flush; REPS
 * MPI_Win_flush with nothing outstanding) to split the pair. Rank 1
 * waits in a barrier meanwhile. Then both ranks run REPS fence epochs
 * (fence_put: MPI_Win_fence, an 8-byte MPI_Put to the other rank, and
 * the closing fence is the next epoch's opening one); its count includes
 * waiting for the peer at each fence, so compare it run to run only.
 *
 * Divide a function's inclusive count by REPS (put64_flush and put_only:
 * by 64 x REPS for the cost per put) for the cost per call.
 *
 *   mpicc.mpich -O2 -o rma_cost mpi-abi/bench/rma_cost.c
 *   target/release/tmrun -n 2 valgrind --tool=callgrind \
 *       --callgrind-out-file=cg.%p ./rma_cost
 *   callgrind_annotate --inclusive=yes cg.<pid> | grep -E 'flush|acc_|put|fence'
 *
 * The same binary on MPICH: mpiexec.hydra -n 2 valgrind ... ./rma_cost
 * Open MPI (its own build of the program, osc/sm):
 *   mpicc.openmpi -O2 -o rma_cost.ompi mpi-abi/bench/rma_cost.c
 *   mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 \
 *       --mca osc sm --mca btl self,vader valgrind ... ./rma_cost.ompi
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define WINDOW 64

static int reps = 1000;
static char obuf[WINDOW * 8];
static char gbuf[8];
static int ibuf[2] = {1, 2};
static double dbuf[1] = {1.0};

__attribute__((noinline)) static void put_flush(MPI_Win win) {
    for (int i = 0; i < reps; i++) {
        MPI_Put(obuf, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, win);
        MPI_Win_flush(1, win);
    }
}

__attribute__((noinline)) static void put64_flush(MPI_Win win) {
    for (int i = 0; i < reps; i++) {
        for (int j = 0; j < WINDOW; j++)
            MPI_Put(obuf + 8 * j, 8, MPI_CHAR, 1, 8 * j, 8, MPI_CHAR, win);
        MPI_Win_flush(1, win);
    }
}

__attribute__((noinline)) static void put_only(MPI_Win win) {
    for (int i = 0; i < reps; i++)
        for (int j = 0; j < WINDOW; j++)
            MPI_Put(obuf + 8 * j, 8, MPI_CHAR, 1, 8 * j, 8, MPI_CHAR, win);
}

__attribute__((noinline)) static void flush_only(MPI_Win win) {
    for (int i = 0; i < reps; i++)
        MPI_Win_flush(1, win);
}

__attribute__((noinline)) static void get_flush(MPI_Win win) {
    for (int i = 0; i < reps; i++) {
        MPI_Get(gbuf, 8, MPI_CHAR, 1, 0, 8, MPI_CHAR, win);
        MPI_Win_flush(1, win);
    }
}

__attribute__((noinline)) static void acc_int(MPI_Win win) {
    for (int i = 0; i < reps; i++) {
        MPI_Accumulate(ibuf, 2, MPI_INT, 1, 1024, 2, MPI_INT, MPI_SUM, win);
        MPI_Win_flush(1, win);
    }
}

__attribute__((noinline)) static void acc_double(MPI_Win win) {
    for (int i = 0; i < reps; i++) {
        MPI_Accumulate(dbuf, 1, MPI_DOUBLE, 1, 1032, 1, MPI_DOUBLE, MPI_SUM, win);
        MPI_Win_flush(1, win);
    }
}

__attribute__((noinline)) static void fence_put(MPI_Win win, int peer) {
    for (int i = 0; i < reps; i++) {
        MPI_Win_fence(0, win);
        MPI_Put(obuf, 8, MPI_CHAR, peer, 2048, 8, MPI_CHAR, win);
    }
    MPI_Win_fence(0, win);
}

int main(int argc, char **argv) {
    int rank, size;
    const char *e = getenv("REPS");
    if (e)
        reps = atoi(e);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "rma_cost: run with 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    char *base;
    MPI_Win win;
    MPI_Win_allocate(4096, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock_all(0, win);
    if (rank == 0) {
        put_flush(win);
        put64_flush(win);
        put_only(win);
        flush_only(win);
        get_flush(win);
        acc_int(win);
        acc_double(win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_unlock_all(win);
    fence_put(win, 1 - rank);
    MPI_Win_free(&win);
    if (rank == 0)
        printf("rma_cost: %d reps done\n", reps);
    MPI_Finalize();
    return 0;
}
