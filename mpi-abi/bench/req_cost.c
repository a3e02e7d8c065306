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
 * receives as before. Then REPS windows of the bi-directional pattern of
 * abi_bench.c's bibw: both ranks run bi_isends (64 MPI_Isend), bi_irecvs
 * (64 MPI_Irecv) and bi_waitall (one MPI_Waitall over the 128).
 * Divide a function's inclusive count by 64 x REPS for the cost per
 * request (bi_waitall: per message pair, a send and a receive).
 * BYTES (default 1) sets the message size. The counts of the receiving
 * side and of the waits include the polling while the peer is behind,
 * which depends on how the two processes run (compare several runs).
 *
 *   mpicc.mpich -O2 -Wno-stringop-overflow -o req_cost mpi-abi/bench/req_cost.c
 *   target/release/tmrun -n 2 valgrind --tool=callgrind \
 *       --callgrind-out-file=cg.%p ./req_cost
 *   callgrind_annotate --inclusive=yes cg.<pid> | grep -E 'window|waitall|isend_wait|bi_'
 *
 * The same binary on MPICH: mpiexec.hydra -n 2 valgrind ... ./req_cost
 *
 * (gcc may fold the two identical waitall functions into one: then the
 * sends' waitall is listed under waitall_recvs in rank 0's profile.)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define WINDOW 64

static char *buf, *buf2;
static int bytes = 1;

__attribute__((noinline)) static void isend_window(MPI_Request *r) {
    for (int i = 0; i < WINDOW; i++)
        MPI_Isend(buf + i * bytes, bytes, MPI_CHAR, 1, 1, MPI_COMM_WORLD, &r[i]);
}

__attribute__((noinline)) static void waitall_sends(MPI_Request *r) {
    MPI_Waitall(WINDOW, r, MPI_STATUSES_IGNORE);
}

__attribute__((noinline)) static void isend_wait(MPI_Request *r) {
    for (int i = 0; i < WINDOW; i++) {
        MPI_Isend(buf + i * bytes, bytes, MPI_CHAR, 1, 1, MPI_COMM_WORLD, &r[i]);
        MPI_Wait(&r[i], MPI_STATUS_IGNORE);
    }
}

__attribute__((noinline)) static void irecv_window(MPI_Request *r) {
    for (int i = 0; i < WINDOW; i++)
        MPI_Irecv(buf + i * bytes, bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &r[i]);
}

__attribute__((noinline)) static void bi_isends(MPI_Request *r, int peer) {
    for (int i = 0; i < WINDOW; i++)
        MPI_Isend(buf + i * bytes, bytes, MPI_CHAR, peer, 4, MPI_COMM_WORLD, &r[i]);
}

__attribute__((noinline)) static void bi_irecvs(MPI_Request *r, int peer) {
    for (int i = 0; i < WINDOW; i++)
        MPI_Irecv(buf2 + i * bytes, bytes, MPI_CHAR, peer, 4, MPI_COMM_WORLD, &r[i]);
}

__attribute__((noinline)) static void bi_waitall(MPI_Request *r) {
    MPI_Waitall(2 * WINDOW, r, MPI_STATUSES_IGNORE);
}

__attribute__((noinline)) static void waitall_recvs(MPI_Request *r) {
    MPI_Waitall(WINDOW, r, MPI_STATUSES_IGNORE);
}

int main(int argc, char **argv) {
    int rank, reps = 200;
    const char *e = getenv("REPS");
    if (e) reps = atoi(e);
    e = getenv("BYTES");
    if (e && atoi(e) > 0) bytes = atoi(e);
    buf = calloc(WINDOW, bytes);
    buf2 = calloc(WINDOW, bytes);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Request r[2 * WINDOW];
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
    for (int k = 0; k < reps; k++) {
        if (rank < 2) {
            bi_isends(r, 1 - rank);
            bi_irecvs(r + WINDOW, 1 - rank);
            bi_waitall(r);
        }
    }
    if (rank == 0) printf("req_cost: %d windows of %d, %d bytes\n", reps, WINDOW, bytes);
    free(buf);
    free(buf2);
    MPI_Finalize();
    return 0;
}
