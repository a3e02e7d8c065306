/*
 * Two-rank MPI ping-pong, the MPICH baseline for shmem-onesided's
 * `benches/pingpong.rs`. Same sizes, same output form:
 *
 *   lat <bytes> <usec>     one-way latency = half a round trip (MPI_Send/MPI_Recv)
 *   bw  <bytes> <MB/s>     window of back-to-back MPI_Isend/MPI_Irecv, then a
 *                          1-byte ack (as OSU's osu_bw), MB = 1e6 bytes
 *
 * Each figure is the median of ROUNDS timed rounds after one warm-up round.
 * Build and run (the ranks pinned to cores 0 and 1):
 *
 *   mpicc.mpich -O2 -o mpich_pingpong mpich_pingpong.c
 *   mpiexec.hydra -n 2 -bind-to core ./mpich_pingpong
 *
 * `cargo xtask bench shmem-onesided` does this and prints both side by side.
 * An optional argument scales the iteration counts (default 1.0).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 5
#define WINDOW_MAX 64

static const int lat_sizes[] = {1, 8, 64, 1024, 65536, 1 << 20};
static const int bw_sizes[] = {65536, 256 << 10, 1 << 20, 4 << 20};

static int lat_iters(int len) {
    if (len <= 1024) return 20000;
    if (len <= 65536) return 2000;
    return 200;
}

static int bw_window(int len) { return len >= (1 << 20) ? 8 : WINDOW_MAX; }
static int bw_reps(int len) { return len >= (1 << 20) ? 10 : 50; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int scaled(int n, double scale) {
    int s = (int)(n * scale);
    return s < 1 ? 1 : s;
}

int main(int argc, char **argv) {
    int rank, size;
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    if (scale <= 0) scale = 1.0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "mpich_pingpong: run with exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int peer = 1 - rank;
    size_t max = 4u << 20;
    char *sbuf = malloc(max), *rbuf = malloc(max);
    if (!sbuf || !rbuf) MPI_Abort(MPI_COMM_WORLD, 2);
    memset(sbuf, 0x5a, max);
    memset(rbuf, 0, max);
    MPI_Request req[WINDOW_MAX];
    MPI_Status st[WINDOW_MAX];
    char ack = 0;

    for (size_t i = 0; i < sizeof lat_sizes / sizeof lat_sizes[0]; i++) {
        int len = lat_sizes[i], n = scaled(lat_iters(len), scale);
        double samples[ROUNDS];
        for (int round = 0; round <= ROUNDS; round++) { /* round 0 warms up */
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            for (int k = 0; k < n; k++) {
                if (rank == 0) {
                    MPI_Send(sbuf, len, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(rbuf, len, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(rbuf, len, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(sbuf, len, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                }
            }
            t = MPI_Wtime() - t;
            if (round > 0) samples[round - 1] = t * 1e6 / (2.0 * n);
        }
        qsort(samples, ROUNDS, sizeof samples[0], cmp_double);
        if (rank == 0) printf("lat %d %.3f\n", len, samples[ROUNDS / 2]);
        fflush(stdout);
    }

    for (size_t i = 0; i < sizeof bw_sizes / sizeof bw_sizes[0]; i++) {
        int len = bw_sizes[i], w = bw_window(len), reps = scaled(bw_reps(len), scale);
        double samples[ROUNDS];
        for (int round = 0; round <= ROUNDS; round++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            for (int r = 0; r < reps; r++) {
                if (rank == 0) {
                    for (int k = 0; k < w; k++)
                        MPI_Isend(sbuf, len, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[k]);
                    MPI_Waitall(w, req, st);
                    MPI_Recv(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    for (int k = 0; k < w; k++)
                        MPI_Irecv(rbuf, len, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[k]);
                    MPI_Waitall(w, req, st);
                    MPI_Send(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
                }
            }
            t = MPI_Wtime() - t;
            if (round > 0) samples[round - 1] = (double)reps * w * len / t / 1e6;
        }
        qsort(samples, ROUNDS, sizeof samples[0], cmp_double);
        if (rank == 0) printf("bw %d %.1f\n", len, samples[ROUNDS / 2]);
        fflush(stdout);
    }

    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
