/* The same-binary benchmark of `cargo xtask bench abi`: compiled once
 * with mpicc.mpich, run on MPICH's libmpich.so.12 and on tmx's (and,
 * compiled with mpicc.openmpi, on Open MPI for the collectives).
 *
 * Output, rank 0 only, one line per measurement:
 *     <test> <ranks> <bytes> <microseconds>
 * pt2pt: latency (half round trip of a ping-pong between ranks 0 and 1),
 * bw and bibw (a window of 64 nonblocking sends, as OSU's; the figure is
 * microseconds per message, lower is better); one-sided, as OSU's
 * defaults (a passive-target epoch of MPI_Win_lock_all on a window of
 * MPI_Win_allocate): put, get and accumulate latency (one operation and
 * MPI_Win_flush to rank 1) and put bandwidth (64 puts, then one flush;
 * microseconds per put); collectives: allreduce
 * (MPI_SUM of doubles), bcast, alltoall (bytes per peer) and barrier, the
 * median over the ranks' maxima per iteration window.
 *
 * Arguments: [--quick] (a few iterations: a smoke check, not a
 * measurement). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, quick;

static int iters(size_t bytes)
{
    int n = bytes <= 8192 ? 10000 : bytes <= 65536 ? 2000 : bytes <= 1048576 ? 200 : 40;
    return quick ? 3 : n;
}

static void report(const char *test, size_t bytes, double usec)
{
    double worst;
    MPI_Reduce(&usec, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s %d %zu %.3f\n", test, size, bytes, worst);
}

static void pt2pt(char *buf, char *buf2)
{
    static const size_t sizes[] = {1, 8, 64, 512, 4096, 32768, 262144, 1048576, 4194304};
    for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        int it = iters(n), warm = it / 10 + 1;
        double t = 0;
        if (rank < 2) {
            int peer = 1 - rank;
            for (int i = 0; i < it + warm; i++) {
                if (i == warm)
                    t = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf2, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf2, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                }
            }
            t = (MPI_Wtime() - t) * 1e6 / it / 2;
        }
        report("latency", n, t);
        MPI_Barrier(MPI_COMM_WORLD);
        /* Bandwidth and bi-bandwidth: a window of 64 messages. */
        for (int bi = 0; bi < 2; bi++) {
            MPI_Request r[128];
            MPI_Status st[128];
            int rounds = it / 64 + 2;
            t = 0;
            if (rank < 2) {
                int peer = 1 - rank;
                for (int i = 0; i < rounds + 1; i++) {
                    if (i == 1)
                        t = MPI_Wtime();
                    int k2 = 0;
                    if (rank == 0 || bi)
                        for (int j = 0; j < 64; j++)
                            MPI_Isend(buf, n, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &r[k2++]);
                    if (rank == 1 || bi)
                        for (int j = 0; j < 64; j++)
                            MPI_Irecv(buf2, n, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &r[k2++]);
                    MPI_Waitall(k2, r, st);
                    if (rank == 1 && !bi)
                        MPI_Send(buf, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
                    if (rank == 0 && !bi)
                        MPI_Recv(buf2, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                }
                t = (MPI_Wtime() - t) * 1e6 / rounds / 64;
            }
            report(bi ? "bibw" : "bw", n, t);
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
}

/* One-sided: rank 0 reaches rank 1's window; rank 1 only waits. */
static void onesided(char *buf, size_t max)
{
    static const size_t sizes[] = {8, 64, 512, 4096, 32768, 262144, 1048576, 4194304};
    char *base;
    MPI_Win win;
    MPI_Win_allocate(max, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock_all(0, win);
    for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        int it = iters(n), warm = it / 10 + 1;
        for (int op = 0; op < 4; op++) {
            static const char *names[] = {"put_latency", "get_latency", "acc_latency", "put_bw"};
            double t = 0;
            if (rank == 0) {
                int reps = op == 3 ? it / 64 + 2 : it + warm;
                int start = op == 3 ? 1 : warm;
                for (int i = 0; i < reps; i++) {
                    if (i == start)
                        t = MPI_Wtime();
                    if (op == 0)
                        MPI_Put(buf, n, MPI_CHAR, 1, 0, n, MPI_CHAR, win);
                    else if (op == 1)
                        MPI_Get(buf, n, MPI_CHAR, 1, 0, n, MPI_CHAR, win);
                    else if (op == 2)
                        MPI_Accumulate(buf, n / 8, MPI_DOUBLE, 1, 0, n / 8, MPI_DOUBLE, MPI_SUM, win);
                    else
                        for (int j = 0; j < 64; j++)
                            MPI_Put(buf, n, MPI_CHAR, 1, 0, n, MPI_CHAR, win);
                    MPI_Win_flush(1, win);
                }
                t = (MPI_Wtime() - t) * 1e6 / (op == 3 ? (double)(reps - start) * 64 : it);
            }
            report(names[op], n, t);
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
}

static void colls(char *buf, char *buf2)
{
    static const size_t sizes[] = {8, 1024, 65536, 1048576};
    for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        int it = iters(n), warm = it / 10 + 1;
        double t = 0;
        for (int i = 0; i < it + warm; i++) {
            if (i == warm)
                t = MPI_Wtime();
            MPI_Allreduce(buf, buf2, n / sizeof(double), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        report("allreduce", n, (MPI_Wtime() - t) * 1e6 / it);
        for (int i = 0; i < it + warm; i++) {
            if (i == warm)
                t = MPI_Wtime();
            MPI_Bcast(buf, n, MPI_CHAR, i % size, MPI_COMM_WORLD);
        }
        report("bcast", n, (MPI_Wtime() - t) * 1e6 / it);
        size_t per = n / size ? n / size : 1;
        for (int i = 0; i < it + warm; i++) {
            if (i == warm)
                t = MPI_Wtime();
            MPI_Alltoall(buf, per, MPI_CHAR, buf2, per, MPI_CHAR, MPI_COMM_WORLD);
        }
        report("alltoall", per, (MPI_Wtime() - t) * 1e6 / it);
    }
    int it = iters(0), warm = it / 10 + 1;
    double t = 0;
    for (int i = 0; i < it + warm; i++) {
        if (i == warm)
            t = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
    }
    report("barrier", 0, (MPI_Wtime() - t) * 1e6 / it);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    size_t max = 4194304;
    char *buf = calloc(max, 1), *buf2 = calloc(max, 1);
    if (size >= 2) {
        pt2pt(buf, buf2);
        onesided(buf, max);
    }
    colls(buf, buf2);
    free(buf);
    free(buf2);
    MPI_Finalize();
    return 0;
}
