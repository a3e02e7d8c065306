/*
 * The MPICH baseline for adi's `examples/osu_ddt.rs`: non-contiguous
 * point-to-point, every message one element of
 * MPI_Type_vector(n, 1, 2, MPI_DOUBLE) (every other double of a buffer
 * twice the packed size). Same sizes (8 B .. 1 MiB packed), iteration
 * counts and raw output:
 *
 *   ddt_lat_vector <bytes> <usec>  half a round trip of MPI_Send/MPI_Recv
 *   ddt_bw_vector  <bytes> <MB/s>  a window of 64 MPI_Isend / MPI_Irecv
 *                                  (one buffer per operation), MPI_Waitall,
 *                                  a 1-byte ack; MB = 1e6 packed bytes
 *
 * Each figure is the median of ROUNDS timed rounds after one warm-up round.
 *
 *   mpicc.mpich -O2 -o mpich_ddt mpich_ddt.c
 *   mpiexec.hydra -n 2 -bind-to core ./mpich_ddt
 *
 * `cargo xtask bench adi` does this and prints it beside ours with ratios.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 5
#define WINDOW 64
#define MAX_LEN (1 << 20)

static int lat_iters(int len) {
    if (len <= 8192) return 10000;
    if (len <= 65536) return 1000;
    return 100;
}

static int bw_reps(int len) {
    if (len <= 8192) return 100;
    if (len <= 65536) return 20;
    return 4;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "mpich_ddt: run with exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int peer = 1 - rank;
    size_t span = (size_t)2 * MAX_LEN;
    char *sbuf = malloc(span * WINDOW), *rbuf = malloc(span * WINDOW);
    if (!sbuf || !rbuf) MPI_Abort(MPI_COMM_WORLD, 2);
    memset(sbuf, 0x5a, span * WINDOW);
    memset(rbuf, 0, span * WINDOW);
    MPI_Request req[WINDOW];
    MPI_Status st[WINDOW];
    char ack = 0;
    double samples[ROUNDS];

    for (int len = 8; len <= MAX_LEN; len *= 2) {
        MPI_Datatype t;
        MPI_Type_vector(len / 8, 1, 2, MPI_DOUBLE, &t);
        MPI_Type_commit(&t);
        size_t step = (size_t)2 * len;

        int n = lat_iters(len);
        for (int round = 0; round <= ROUNDS; round++) { /* round 0 warms up */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int k = 0; k < n; k++) {
                if (rank == 0) {
                    MPI_Send(sbuf, 1, t, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, 1, t, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rbuf, 1, t, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sbuf, 1, t, peer, 1, MPI_COMM_WORLD);
                }
            }
            double dt = MPI_Wtime() - t0;
            if (round > 0) samples[round - 1] = dt * 1e6 / (2.0 * n);
        }
        qsort(samples, ROUNDS, sizeof samples[0], cmp_double);
        if (rank == 0) printf("ddt_lat_vector %d %.3f\n", len, samples[ROUNDS / 2]);

        int reps = bw_reps(len);
        for (int round = 0; round <= ROUNDS; round++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int r = 0; r < reps; r++) {
                if (rank == 0) {
                    for (int k = 0; k < WINDOW; k++)
                        MPI_Isend(sbuf + k * step, 1, t, peer, 2, MPI_COMM_WORLD, &req[k]);
                    MPI_Waitall(WINDOW, req, st);
                    MPI_Recv(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    for (int k = 0; k < WINDOW; k++)
                        MPI_Irecv(rbuf + k * step, 1, t, peer, 2, MPI_COMM_WORLD, &req[k]);
                    MPI_Waitall(WINDOW, req, st);
                    MPI_Send(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
                }
            }
            double dt = MPI_Wtime() - t0;
            if (round > 0) samples[round - 1] = (double)reps * WINDOW * len / dt / 1e6;
        }
        qsort(samples, ROUNDS, sizeof samples[0], cmp_double);
        if (rank == 0) printf("ddt_bw_vector %d %.1f\n", len, samples[ROUNDS / 2]);
        fflush(stdout);
        MPI_Type_free(&t);
    }

    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
