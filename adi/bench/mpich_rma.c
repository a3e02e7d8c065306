/* MPICH baseline for adi/examples/osu_rma.rs: the same loops, the same
 * sizes and iteration counts, the same output lines (`<test> <bytes>
 * <value>`; usec per iteration for latencies, MB/s = 10^6 bytes/s for
 * bandwidths; the median of 5 rounds, `--rounds N`). Windows from MPI_Win_allocate, then MPI_Win_create (rows "@create"); rank 0 origin, rank 1 target.
 *
 *   mpicc.mpich -O2 -o mpich_rma adi/bench/mpich_rma.c
 *   mpiexec.hydra -n 2 -bind-to core ./mpich_rma [--quick] [--rounds N] [--max-size BYTES]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static const char *ALL[] = {"put_lat_fence", "get_lat_fence", "acc_lat_fence",
                            "put_lat_lock",  "get_lat_lock",  "put_lat_flush",
                            "get_lat_flush", "put_bw_flush",  "get_bw_flush"};

static int is_bw(const char *t) { return strstr(t, "_bw_") != NULL; }

static int iters(const char *t, size_t size, int quick) {
    int n = is_bw(t) ? (size <= 65536 ? 20 : 5) : (size <= 8192 ? 1000 : 100);
    if (quick) {
        n /= 20;
        if (n < 2) n = 2;
    }
    return n;
}

static double run(MPI_Win win, char *buf, char *rbuf, const char *t, size_t size, int it) {
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int warm = it / 10 > 0 ? it / 10 : 1;
    int fence = strstr(t, "_fence") != NULL;
    int count = (int)size;
    MPI_Barrier(MPI_COMM_WORLD);
    if (me != 0) {
        if (fence) {
            MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
            for (int i = 0; i < warm + it; i++) MPI_Win_fence(0, win);
            MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        return 0.0;
    }
    double t0 = MPI_Wtime(), el_fence = 0.0;
    if (fence) {
        MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
        for (int i = 0; i < warm + it; i++) {
            if (i == warm) t0 = MPI_Wtime();
            if (!strcmp(t, "put_lat_fence"))
                MPI_Put(buf, count, MPI_BYTE, 1, 0, count, MPI_BYTE, win);
            else if (!strcmp(t, "get_lat_fence"))
                MPI_Get(rbuf, count, MPI_BYTE, 1, 0, count, MPI_BYTE, win);
            else
                MPI_Accumulate(buf, count / 4, MPI_INT, 1, 0, count / 4, MPI_INT, MPI_SUM, win);
            MPI_Win_fence(0, win);
        }
        el_fence = MPI_Wtime() - t0;
        MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    } else if (strstr(t, "_lock")) {
        for (int i = 0; i < warm + it; i++) {
            if (i == warm) t0 = MPI_Wtime();
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            if (!strncmp(t, "put", 3))
                MPI_Put(buf, count, MPI_BYTE, 1, 0, count, MPI_BYTE, win);
            else
                MPI_Get(rbuf, count, MPI_BYTE, 1, 0, count, MPI_BYTE, win);
            MPI_Win_unlock(1, win);
        }
    } else {
        int per = is_bw(t) ? WINDOW : 1;
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (int i = 0; i < warm + it; i++) {
            if (i == warm) t0 = MPI_Wtime();
            for (int k = 0; k < per; k++) {
                if (!strncmp(t, "put", 3))
                    MPI_Put(buf, count, MPI_BYTE, 1, 0, count, MPI_BYTE, win);
                else
                    MPI_Get(rbuf, count, MPI_BYTE, 1, 0, count, MPI_BYTE, win);
            }
            MPI_Win_flush(1, win);
        }
        MPI_Win_unlock(1, win);
    }
    double el = fence ? el_fence : MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (is_bw(t)) return (double)size * WINDOW * it / el / 1e6;
    return el * 1e6 / it;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int quick = 0, rounds = 5;
    size_t max = 1 << 20;
    MPI_Init(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
            if (rounds < 1) rounds = 1;
            if (rounds > 64) rounds = 64;
        } else if (!strcmp(argv[i], "--raw")) { /* always raw */ }
    }
    int me, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np != 2) {
        if (me == 0) fprintf(stderr, "mpich_rma needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char *buf = malloc(max), *rbuf = malloc(max);
    memset(buf, 1, max);
    size_t sizes[16];
    int ns = 0;
    for (size_t s = 8; s <= max; s *= 4) sizes[ns++] = s;
    if (max >= (1 << 20) && sizes[ns - 1] != (1 << 20)) sizes[ns++] = 1 << 20;
    /* Flavour 0: MPI_Win_allocate; flavour 1: MPI_Win_create on malloc'd
       memory (rows suffixed "@create"). */
    for (int flavour = 0; flavour < 2; flavour++) {
        char *base = NULL, *cmem = NULL;
        MPI_Win win;
        if (flavour == 0) {
            MPI_Win_allocate((MPI_Aint)(max < 8 ? 8 : max), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
            memset(base, 0, max);
        } else {
            cmem = calloc(max < 8 ? 8 : max, 1);
            MPI_Win_create(cmem, (MPI_Aint)(max < 8 ? 8 : max), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        }
        for (unsigned k = 0; k < sizeof ALL / sizeof ALL[0]; k++)
            for (int j = 0; j < ns; j++) {
                double vals[64];
                for (int r = 0; r < rounds; r++)
                    vals[r] = run(win, buf, rbuf, ALL[k], sizes[j], iters(ALL[k], sizes[j], quick));
                qsort(vals, rounds, sizeof vals[0], cmp_double);
                double v = vals[rounds / 2];
                if (me == 0) printf("%s%s %zu %.2f\n", ALL[k], flavour ? "@create" : "", sizes[j], v);
                fflush(stdout);
            }
        MPI_Win_free(&win);
        free(cmem);
    }
    free(buf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
