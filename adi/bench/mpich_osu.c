/*
 * OSU-style latency, bandwidth and bi-bandwidth over MPI, the MPICH
 * baseline for adi's `examples/osu.rs` Same sizes
 * (1 B .. 4 MiB, powers of two), same measurements, same raw output form:
 *
 *   lat  <bytes> <usec>   one-way latency = half a round trip (MPI_Send/MPI_Recv)
 *   bw   <bytes> <MB/s>   a window of 64 MPI_Isend, MPI_Waitall, a 1-byte ack
 *                         (as osu_bw), MB = 1e6 bytes
 *   bibw <bytes> <MB/s>   both ranks post 64 MPI_Irecv and 64 MPI_Isend, then
 *                         MPI_Waitall (as osu_bibw); bytes counted both ways
 *
 * In `bw` and `bibw` every operation of a window has a buffer of its own
 * (`sbuf + k * len`, `rbuf + k * len`), as in adi's `osu`, whose Rust API
 * owns each in-flight buffer, and as MPI requires of concurrent receives
 * (their buffers must not overlap). OSU's own osu_bw/osu_bibw reuse one
 * send and one receive buffer for the whole window, so from 128 KiB they
 * run in cache where the distinct buffers go to memory; that classic form
 * is printed too, with the path `one`:
 *
 *   bw one <bytes> <MB/s>, bibw one <bytes> <MB/s>
 *
 * Each figure is the median of ROUNDS timed rounds after one warm-up round.
 * Build and run (the ranks pinned to cores 0 and 1):
 *
 *   mpicc.mpich -O2 -o mpich_osu mpich_osu.c
 *   mpiexec.hydra -n 2 -bind-to core ./mpich_osu
 *
 * `cargo xtask bench adi` does this and prints it beside ours with ratios.
 * An optional first argument, a number, scales the iteration counts
 * (default 1.0). Options as `osu`'s: `--tests lat,bw,bibw` (a subset;
 * `latency` is accepted for `lat`), `--min-size BYTES`, `--max-size BYTES`
 * (default 1 and 4194304), `--no-one-buffer` (skip the "one" forms): with
 * them one size of one test runs in a fraction of a second, so that many
 * short runs of the two programs can alternate (a paired comparison that
 * the machine's slow changes of speed do not decide).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 5
#define WINDOW 64
#define MAX_LEN (4 << 20)

/* OSU's iteration counts (osu_util.h: LAT_LOOP_SMALL / LAT_LOOP_LARGE,
 * BW_LOOP_SMALL / BW_LOOP_LARGE, LARGE_MESSAGE_SIZE 8192), as adi's `osu`
 * counts them. */
static int lat_iters(int len) {
    return len <= 8192 ? 10000 : 1000;
}

static int bw_reps(int len) {
    return len <= 8192 ? 100 : 20;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int scaled(int n, double scale) {
    int s = (int)(n * scale);
    return s < 1 ? 1 : s;
}

static int has_test(const char *tests, const char *name) {
    /* `tests` is a comma-separated list; "latency" stands for "lat". */
    size_t n = strlen(name);
    for (const char *p = tests; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if ((l == n && strncmp(p, name, n) == 0) ||
            (strcmp(name, "lat") == 0 && l == 7 && strncmp(p, "latency", 7) == 0))
            return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int rank, size;
    double scale = 1.0;
    const char *tests = "lat,bw,bibw";
    long min_len = 1, max_len = MAX_LEN;
    int one_buffer = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tests") == 0 && i + 1 < argc) {
            tests = argv[++i];
        } else if (strcmp(argv[i], "--min-size") == 0 && i + 1 < argc) {
            min_len = atol(argv[++i]);
        } else if (strcmp(argv[i], "--max-size") == 0 && i + 1 < argc) {
            max_len = atol(argv[++i]);
        } else if (strcmp(argv[i], "--no-one-buffer") == 0) {
            one_buffer = 0;
        } else if (i == 1 && atof(argv[i]) > 0) {
            scale = atof(argv[i]);
        } else {
            fprintf(stderr, "mpich_osu: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (max_len > MAX_LEN) max_len = MAX_LEN;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "mpich_osu: run with exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int peer = 1 - rank;
    /* One buffer per operation of a window (see above). */
    size_t area = (size_t)MAX_LEN * WINDOW;
    /* Page-aligned, as OSU aligns its buffers (align_buffer(ptr,
     * getpagesize())) and as adi's `osu` aligns its latency buffers. */
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) page = 4096;
    char *sbuf = NULL, *rbuf = NULL;
    if (posix_memalign((void **)&sbuf, (size_t)page, area) != 0 ||
        posix_memalign((void **)&rbuf, (size_t)page, area) != 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    memset(sbuf, 0x5a, area);
    memset(rbuf, 0, area);
    MPI_Request req[2 * WINDOW];
    MPI_Status st[2 * WINDOW];
    char ack = 0;
    double samples[ROUNDS];

    for (int len = 1; len <= max_len && has_test(tests, "lat"); len *= 2) {
        if (len < min_len) continue;
        int n = scaled(lat_iters(len), scale);
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

    /* distinct = 1: each operation of a window has its own buffer (the
     * figures compared with adi's); 0: OSU's one buffer ("one"). */
    for (int distinct = 1; distinct >= (one_buffer ? 0 : 1); distinct--) {
        const char *path = distinct ? "" : "one ";
        for (int len = 1; len <= max_len && has_test(tests, "bw"); len *= 2) {
            if (len < min_len) continue;
            int reps = scaled(bw_reps(len), scale);
            size_t step = distinct ? (size_t)len : 0;
            for (int round = 0; round <= ROUNDS; round++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t = MPI_Wtime();
                for (int r = 0; r < reps; r++) {
                    if (rank == 0) {
                        for (int k = 0; k < WINDOW; k++)
                            MPI_Isend(sbuf + k * step, len, MPI_CHAR, peer, 2, MPI_COMM_WORLD,
                                      &req[k]);
                        MPI_Waitall(WINDOW, req, st);
                        MPI_Recv(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    } else {
                        for (int k = 0; k < WINDOW; k++)
                            MPI_Irecv(rbuf + k * step, len, MPI_CHAR, peer, 2, MPI_COMM_WORLD,
                                      &req[k]);
                        MPI_Waitall(WINDOW, req, st);
                        MPI_Send(&ack, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
                    }
                }
                t = MPI_Wtime() - t;
                if (round > 0) samples[round - 1] = (double)reps * WINDOW * len / t / 1e6;
            }
            qsort(samples, ROUNDS, sizeof samples[0], cmp_double);
            if (rank == 0) printf("bw %s%d %.1f\n", path, len, samples[ROUNDS / 2]);
            fflush(stdout);
        }

        for (int len = 1; len <= max_len && has_test(tests, "bibw"); len *= 2) {
            if (len < min_len) continue;
            int reps = scaled(bw_reps(len), scale);
            size_t step = distinct ? (size_t)len : 0;
            for (int round = 0; round <= ROUNDS; round++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t = MPI_Wtime();
                for (int r = 0; r < reps; r++) {
                    for (int k = 0; k < WINDOW; k++)
                        MPI_Irecv(rbuf + k * step, len, MPI_CHAR, peer, 4, MPI_COMM_WORLD, &req[k]);
                    for (int k = 0; k < WINDOW; k++)
                        MPI_Isend(sbuf + k * step, len, MPI_CHAR, peer, 4, MPI_COMM_WORLD,
                                  &req[WINDOW + k]);
                    MPI_Waitall(2 * WINDOW, req, st);
                }
                t = MPI_Wtime() - t;
                if (round > 0) samples[round - 1] = 2.0 * reps * WINDOW * len / t / 1e6;
            }
            qsort(samples, ROUNDS, sizeof samples[0], cmp_double);
            if (rank == 0) printf("bibw %s%d %.1f\n", path, len, samples[ROUNDS / 2]);
            fflush(stdout);
        }
    }

    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
