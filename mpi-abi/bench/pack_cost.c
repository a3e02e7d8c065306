/* Instruction counts of sending and putting strided data through the C
 * library: what packing a derived datatype costs, for before/after
 * comparisons under callgrind (repeatable whatever the machine is
 * doing, unlike timings).
 *
 * Two ranks, one element of MPI_Type_vector(131072, 1, 2, MPI_DOUBLE):
 * every other double of a 2 MiB buffer, 1 MiB packed. REPS times rank 0
 * runs send_vector (MPI_Send; rank 1 receives it with the same type),
 * then REPS fence epochs in which rank 0 runs put_vector (MPI_Put of the
 * vector into rank 1's window as 131072 contiguous doubles). Divide a
 * function's inclusive count in rank 0's profile by REPS for the cost
 * per call; the memset lines show the zero-filling of buffers that
 * packing then overwrites.
 *
 *   mpicc.mpich -O2 -o pack_cost mpi-abi/bench/pack_cost.c
 *   target/release/tmrun -n 2 valgrind --tool=callgrind \
 *       --callgrind-out-file=cg.%p ./pack_cost
 *   callgrind_annotate --inclusive=yes cg.<pid of rank 0> \
 *       | grep -E 'send_vector|put_vector|memset|memcpy'
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N 131072
#define REPS 10

__attribute__((noinline)) static void send_vector(const double *buf, MPI_Datatype t) {
    MPI_Send(buf, 1, t, 1, 0, MPI_COMM_WORLD);
}

__attribute__((noinline)) static void put_vector(const double *buf, MPI_Datatype t, MPI_Win w) {
    MPI_Put(buf, 1, t, 1, 0, N, MPI_DOUBLE, w);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    double *buf = malloc(2 * N * sizeof(double));
    double *win_buf = calloc(N, sizeof(double));
    for (int i = 0; i < 2 * N; i++)
        buf[i] = me == 0 ? i : -1;
    MPI_Datatype vec;
    MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    for (int r = 0; r < REPS; r++) {
        if (me == 0)
            send_vector(buf, vec);
        else
            MPI_Recv(buf, 1, vec, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Win win;
    MPI_Win_create(win_buf, N * sizeof(double), sizeof(double), MPI_INFO_NULL,
                   MPI_COMM_WORLD, &win);
    for (int r = 0; r < REPS; r++) {
        MPI_Win_fence(0, win);
        if (me == 0)
            put_vector(buf, vec, win);
        MPI_Win_fence(0, win);
    }
    int bad = 0;
    if (me == 1)
        for (int i = 0; i < N; i++)
            bad |= buf[2 * i] != 2.0 * i || win_buf[i] != 2.0 * i;
    MPI_Win_free(&win);
    MPI_Type_free(&vec);
    MPI_Finalize();
    if (bad)
        fprintf(stderr, "rank %d: wrong data\n", me);
    return bad;
}
