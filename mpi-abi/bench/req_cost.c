/* Instruction counts of the request fast path through the C library, for
 * before/after comparisons under callgrind (repeatable whatever the
 * machine is doing, unlike timings).
 *
 * Two ranks, REPS windows of 64 one-byte messages (as the bandwidth
 * benchmark's small sizes): rank 0 runs isend_window (64 MPI_Isend) and
 * waitall_sends (one MPI_Waitall over them), rank 1 irecv_window (64
 * MPI_Irecv) and waitall_recvs; then rank 1 acknowledges the window.
 * Then REPS windows where rank 0 runs isend_wait (64 times MPI_Isend
 * and MPI_Wait: the wait of a send already complete) and rank 1
 * receives as before.
 * Divide a function's inclusive count by 64 x REPS for the cost per
 * request.
 *
 *   mpicc.mpich -O2 -Wno-stringop-overflow -o req_cost mpi-abi/bench/req_cost.c
 *   target/release/tmrun -n 2 valgrind --tool=callgrind \
 *       --callgrind-out-file=cg.%p ./req_cost
 *   callgrind_annotate --inclusive=yes cg.<pid> | grep -E 'window|waitall|isend_wait'
 *
 * (gcc may fold the two identical waitall functions into one: then the
 * sends' waitall is listed under waitall_recvs in rank 0's profile.)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define WINDOW 64

static char buf[WINDOW];

__attribute__((noinline)) static void isend_window(MPI_Request *r) {
    for (int i = 0; i < WINDOW; i++)
        MPI_Isend(buf + i, 1, MPI_CHAR, 1, 1, MPI_COMM_WORLD, &r[i]);
}

__attribute__((noinline)) static void waitall_sends(MPI_Request *r) {
    MPI_Waitall(WINDOW, r, MPI_STATUSES_IGNORE);
}

__attribute__((noinline)) static void isend_wait(MPI_Request *r) {
    for (int i = 0; i < WINDOW; i++) {
        MPI_Isend(buf + i, 1, MPI_CHAR, 1, 1, MPI_COMM_WORLD, &r[i]);
        MPI_Wait(&r[i], MPI_STATUS_IGNORE);
    }
}

__attribute__((noinline)) static void irecv_window(MPI_Request *r) {
    for (int i = 0; i < WINDOW; i++)
        MPI_Irecv(buf + i, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &r[i]);
}

__attribute__((noinline)) static void waitall_recvs(MPI_Request *r) {
    MPI_Waitall(WINDOW, r, MPI_STATUSES_IGNORE);
}

int main(int argc, char **argv) {
    int rank, reps = 200;
    const char *e = getenv("REPS");
    if (e) reps = atoi(e);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Request r[WINDOW];
    char ack = 0;
    for (int k = 0; k < reps; k++) {
        if (rank == 0) {
            isend_window(r);
            waitall_sends(r);
            MPI_Recv(&ack, 1, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            irecv_window(r);
            waitall_recvs(r);
            MPI_Send(&ack, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
        }
    }
    for (int k = 0; k < reps; k++) {
        if (rank == 0) {
            isend_wait(r);
            MPI_Recv(&ack, 1, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            irecv_window(r);
            waitall_recvs(r);
            MPI_Send(&ack, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) printf("req_cost: %d windows of %d\n", reps, WINDOW);
    MPI_Finalize();
    return 0;
}
