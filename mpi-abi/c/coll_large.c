/* ranks: 2 3 4 */
/* Blocking allreduce and all-to-all on sizes that take the long-message
 * algorithms (Rabenseifner, pairwise exchange) as well as short ones:
 * predefined operations, MPI_IN_PLACE, a non-commutative user operation
 * on many elements of a contiguous type and of a vector type (not
 * contiguous), alltoallv with blocks in reverse order and empty blocks,
 * and the same calls nonblocking. Results are printed as checksums. */
#include "tmx_test.h"

/* 2x2 integer matrices multiplied in rank order (not commutative). */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int *a = in, *b = inout;
    (void)dt;
    for (int i = 0; i < *len; i++, a += 4, b += 4) {
        int c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                    a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

static long long sum_ll(const long long *v, int n)
{
    long long s = 0;
    for (int i = 0; i < n; i++)
        s = s * 31 + v[i];
    return s;
}

static long long sum_d(const double *v, int n)
{
    long long s = 0;
    for (int i = 0; i < n; i++)
        s = s * 31 + (long long)v[i];
    return s;
}

static long long sum_i(const int *v, int n)
{
    long long s = 0;
    for (int i = 0; i < n; i++)
        s = s * 31 + v[i];
    return s;
}

static void allreduces(void)
{
    static const int counts[] = {1, 7, 300, 5000, 70000};
    for (unsigned k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        int n = counts[k];
        double *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
        long long *li = malloc(n * sizeof *li), *lo = malloc(n * sizeof *lo);
        for (int i = 0; i < n; i++) {
            in[i] = val(T_rank, i, 3) % 1000;
            li[i] = val(T_rank, i, 5);
        }
        OK(MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        say("allreduce double sum %d: %lld", n, sum_d(out, n));
        OK(MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
        say("allreduce double max %d: %lld", n, sum_d(out, n));
        OK(MPI_Allreduce(li, lo, n, MPI_LONG_LONG, MPI_BXOR, MPI_COMM_WORLD));
        say("allreduce long long bxor %d: %lld", n, sum_ll(lo, n));
        OK(MPI_Allreduce(li, lo, n, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD));
        say("allreduce long long min %d: %lld", n, sum_ll(lo, n));
        memcpy(out, in, n * sizeof *in);
        OK(MPI_Allreduce(MPI_IN_PLACE, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        say("allreduce in place %d: %lld", n, sum_d(out, n));
        MPI_Request r;
        OK(MPI_Iallreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        say("iallreduce double sum %d: %lld", n, sum_d(out, n));
        free(in);
        free(out);
        free(li);
        free(lo);
    }
}

static void derived_and_user(void)
{
    MPI_Datatype mat, strided;
    MPI_Op op;
    OK(MPI_Type_contiguous(4, MPI_INT, &mat));
    OK(MPI_Type_commit(&mat));
    OK(MPI_Op_create(matmul, 0, &op));
    int n = 3000;
    int *m = malloc(n * 4 * sizeof *m), *r = malloc(n * 4 * sizeof *r);
    for (int i = 0; i < n; i++) {
        m[4 * i] = 1;
        m[4 * i + 1] = (T_rank + i) % 3;
        m[4 * i + 2] = 0;
        m[4 * i + 3] = 1 + (i + T_rank) % 2;
    }
    OK(MPI_Allreduce(m, r, n, mat, op, MPI_COMM_WORLD));
    say("matmul allreduce %d: %lld", n, sum_i(r, 4 * n));
    OK(MPI_Allreduce(MPI_IN_PLACE, m, n, mat, op, MPI_COMM_WORLD));
    say("matmul allreduce in place %d: %lld", n, sum_i(m, 4 * n));
    /* Every other matrix: not contiguous (the packed path). */
    OK(MPI_Type_vector(n / 2, 1, 2, mat, &strided));
    OK(MPI_Type_commit(&strided));
    memset(r, 0, n * 4 * sizeof *r);
    OK(MPI_Allreduce(m, r, 1, strided, op, MPI_COMM_WORLD));
    say("matmul allreduce vector type: %lld", sum_i(r, 4 * n));
    OK(MPI_Op_free(&op));
    OK(MPI_Type_free(&mat));
    OK(MPI_Type_free(&strided));
    free(m);
    free(r);
}

static void alltoalls(void)
{
    static const int per[] = {1, 100, 9000};
    for (unsigned k = 0; k < sizeof per / sizeof per[0]; k++) {
        int n = per[k], total = n * T_size;
        int *sb = malloc(total * sizeof *sb), *rb = malloc(total * sizeof *rb);
        for (int i = 0; i < total; i++)
            sb[i] = val(T_rank, i, 7);
        OK(MPI_Alltoall(sb, n, MPI_INT, rb, n, MPI_INT, MPI_COMM_WORLD));
        say("alltoall %d: %lld", n, sum_i(rb, total));
        MPI_Request r;
        OK(MPI_Ialltoall(sb, n, MPI_INT, rb, n, MPI_INT, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        say("ialltoall %d: %lld", n, sum_i(rb, total));
        memcpy(rb, sb, total * sizeof *sb);
        OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, n, MPI_INT, MPI_COMM_WORLD));
        say("alltoall in place %d: %lld", n, sum_i(rb, total));
        /* alltoallv: rank d gets (d + me) % 3 * n / 2 ints, receive blocks
         * in reverse rank order. */
        int *sc = malloc(T_size * sizeof(int)), *sd = malloc(T_size * sizeof(int));
        int *rc = malloc(T_size * sizeof(int)), *rd = malloc(T_size * sizeof(int));
        int so = 0, ro = 0;
        for (int d = 0; d < T_size; d++) {
            sc[d] = (d + T_rank) % 3 * n / 2;
            sd[d] = so;
            so += sc[d];
        }
        for (int s = T_size - 1; s >= 0; s--) {
            rc[s] = (s + T_rank) % 3 * n / 2;
            rd[s] = ro;
            ro += rc[s];
        }
        int *vs = malloc((so + 1) * sizeof *vs), *vr = malloc((ro + 1) * sizeof *vr);
        for (int i = 0; i < so; i++)
            vs[i] = val(T_rank, i, 11);
        memset(vr, 0, (ro + 1) * sizeof *vr);
        OK(MPI_Alltoallv(vs, sc, sd, MPI_INT, vr, rc, rd, MPI_INT, MPI_COMM_WORLD));
        say("alltoallv %d: %lld", n, sum_i(vr, ro));
        free(vs);
        free(vr);
        free(sc);
        free(sd);
        free(rc);
        free(rd);
        free(sb);
        free(rb);
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    allreduces();
    derived_and_user();
    alltoalls();
    MPI_Finalize();
    return 0;
}
