/* ranks: 1 2 3 4 */
/* Blocking collectives: every one, with MPI_IN_PLACE where MPI allows
 * it, several roots, predefined operations on several types, MINLOC and
 * MAXLOC, a user-defined non-commutative operation. */
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

static void reductions(void)
{
    int in[5], out[5];
    for (int i = 0; i < 5; i++)
        in[i] = val(T_rank, i, 2);
    MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN, MPI_PROD, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR, MPI_LXOR};
    const char *names[] = {"sum", "max", "min", "prod", "band", "bor", "bxor", "land", "lor", "lxor"};
    for (int k = 0; k < 10; k++) {
        OK(MPI_Allreduce(in, out, 5, MPI_INT, ops[k], MPI_COMM_WORLD));
        say("allreduce int %s: %d %d %d %d %d", names[k], out[0], out[1], out[2], out[3], out[4]);
    }
    for (int root = 0; root < T_size; root += 2) {
        memset(out, 0, sizeof out);
        OK(MPI_Reduce(in, out, 5, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
        say("reduce root %d: %d %d", root, out[0], out[4]);
    }
    double d = T_rank + 0.5, dout;
    OK(MPI_Allreduce(&d, &dout, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    say("allreduce double sum %g", dout);
    OK(MPI_Allreduce(&d, &dout, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    say("allreduce double max %g", dout);
    float f = T_rank * 2.0f, fout;
    OK(MPI_Allreduce(&f, &fout, 1, MPI_FLOAT, MPI_PROD, MPI_COMM_WORLD));
    say("allreduce float prod %g", fout);
    long l = 1L << 40, lout;
    OK(MPI_Allreduce(&l, &lout, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    say("allreduce long sum %ld", lout);
    unsigned char uc = (unsigned char)(200 + T_rank), ucout;
    OK(MPI_Allreduce(&uc, &ucout, 1, MPI_UNSIGNED_CHAR, MPI_SUM, MPI_COMM_WORLD));
    say("allreduce uchar sum %u", ucout);
    short sh = (short)(T_rank - 1), shout;
    OK(MPI_Allreduce(&sh, &shout, 1, MPI_SHORT, MPI_MIN, MPI_COMM_WORLD));
    say("allreduce short min %d", shout);
    unsigned long long ull = 3ULL << T_rank, ullout;
    OK(MPI_Allreduce(&ull, &ullout, 1, MPI_UNSIGNED_LONG_LONG, MPI_BOR, MPI_COMM_WORLD));
    say("allreduce ull bor %llu", ullout);
    _Bool b = T_rank % 2, bout;
    OK(MPI_Allreduce(&b, &bout, 1, MPI_C_BOOL, MPI_LOR, MPI_COMM_WORLD));
    say("allreduce bool lor %d", bout);
    double _Complex z, zout;
    __real__ z = T_rank + 1;
    __imag__ z = 1.0;
    OK(MPI_Allreduce(&z, &zout, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
    say("allreduce complex prod %g %g", __real__ zout, __imag__ zout);
    /* In place. */
    for (int i = 0; i < 5; i++)
        out[i] = in[i];
    OK(MPI_Allreduce(MPI_IN_PLACE, out, 5, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    say("allreduce in place max %d %d", out[0], out[4]);
    for (int i = 0; i < 5; i++)
        out[i] = in[i];
    if (T_rank == 0)
        OK(MPI_Reduce(MPI_IN_PLACE, out, 5, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    else
        OK(MPI_Reduce(in, NULL, 5, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    if (T_rank == 0)
        say("reduce in place %d %d", out[0], out[4]);
}

static void locs(void)
{
    struct { double v; int i; } di = {(double)((T_rank * 7) % 3), T_rank}, dio;
    OK(MPI_Allreduce(&di, &dio, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    say("maxloc double_int %g at %d", dio.v, dio.i);
    OK(MPI_Allreduce(&di, &dio, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    say("minloc double_int %g at %d", dio.v, dio.i);
    int ii[4] = {T_rank % 2, T_rank, -T_rank, T_rank}, iio[4];
    OK(MPI_Allreduce(ii, iio, 2, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD));
    say("maxloc 2int %d at %d, %d at %d", iio[0], iio[1], iio[2], iio[3]);
    struct { float v; int i; } fi = {1.5f * (T_rank % 2), T_rank}, fio;
    OK(MPI_Allreduce(&fi, &fio, 1, MPI_FLOAT_INT, MPI_MINLOC, MPI_COMM_WORLD));
    say("minloc float_int %g at %d", fio.v, fio.i);
    struct { long v; int i; } li = {100 - T_rank, T_rank}, lio;
    OK(MPI_Allreduce(&li, &lio, 1, MPI_LONG_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    say("maxloc long_int %ld at %d", lio.v, lio.i);
    struct { short v; int i; } si = {(short)(T_rank / 2), T_rank}, sio;
    OK(MPI_Allreduce(&si, &sio, 1, MPI_SHORT_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    say("maxloc short_int %d at %d", sio.v, sio.i);
}

static void user_op(void)
{
    MPI_Op op;
    MPI_Datatype mat;
    int commute = -1;
    OK(MPI_Type_contiguous(4, MPI_INT, &mat));
    OK(MPI_Type_commit(&mat));
    OK(MPI_Op_create(matmul, 0, &op));
    OK(MPI_Op_commutative(op, &commute));
    say("user op commutative %d", commute);
    int m[8] = {1, T_rank + 1, 0, 1, 2, 0, T_rank, 1}, r[8];
    OK(MPI_Allreduce(m, r, 2, mat, op, MPI_COMM_WORLD));
    say("matmul allreduce: %d %d %d %d / %d %d %d %d", r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    OK(MPI_Reduce(m, r, 2, mat, op, T_size - 1, MPI_COMM_WORLD));
    if (T_rank == T_size - 1)
        say("matmul reduce: %d %d %d %d", r[0], r[1], r[2], r[3]);
    OK(MPI_Scan(m, r, 1, mat, op, MPI_COMM_WORLD));
    say("matmul scan: %d %d %d %d", r[0], r[1], r[2], r[3]);
    int a[4] = {1, 2, 3, 4}, b[4] = {0, 1, 1, 0};
    OK(MPI_Reduce_local(a, b, 1, mat, op));
    say("reduce_local: %d %d %d %d", b[0], b[1], b[2], b[3]);
    OK(MPI_Op_commutative(MPI_SUM, &commute));
    say("sum commutative %d", commute);
    OK(MPI_Op_free(&op));
    say("op freed %d", op == MPI_OP_NULL);
    OK(MPI_Type_free(&mat));
}

static void movers(void)
{
    int n = T_size, mine[3], all[12], counts[4], displs[4];
    for (int i = 0; i < 3; i++)
        mine[i] = T_rank * 10 + i;
    /* bcast from each root */
    for (int root = 0; root < n; root++) {
        int v[2] = {T_rank, root};
        OK(MPI_Bcast(v, 2, MPI_INT, root, MPI_COMM_WORLD));
        say("bcast root %d: %d %d", root, v[0], v[1]);
    }
    /* gather, gatherv (reverse layout), gather in place */
    memset(all, -1, sizeof all);
    OK(MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, n - 1, MPI_COMM_WORLD));
    if (T_rank == n - 1)
        say("gather: %d %d %d %d", all[0], all[1], all[2 * n - 2], all[2 * n - 1]);
    for (int i = 0, off = 0; i < n; i++) {
        counts[i] = 1 + i % 3;
        off += counts[i];
        displs[i] = 12 - off;
    }
    memset(all, -1, sizeof all);
    OK(MPI_Gatherv(mine, 1 + T_rank % 3, MPI_INT, all, counts, displs, MPI_INT, 0, MPI_COMM_WORLD));
    if (T_rank == 0) {
        char line[256] = "";
        for (int i = 0; i < 12; i++)
            sprintf(line + strlen(line), " %d", all[i]);
        say("gatherv:%s", line);
    }
    for (int i = 0; i < 12; i++)
        all[i] = 100 + i;
    if (T_rank == 0)
        OK(MPI_Gather(MPI_IN_PLACE, 2, MPI_INT, all, 2, MPI_INT, 0, MPI_COMM_WORLD));
    else
        OK(MPI_Gather(mine, 2, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD));
    if (T_rank == 0)
        say("gather in place: %d %d %d", all[0], all[1], all[2 * n - 1]);
    /* scatter, scatterv, scatter in place */
    for (int i = 0; i < 12; i++)
        all[i] = 200 + i;
    int got[3] = {-1, -1, -1};
    OK(MPI_Scatter(all, 2, MPI_INT, got, 2, MPI_INT, 0, MPI_COMM_WORLD));
    say("scatter: %d %d", got[0], got[1]);
    for (int i = 0; i < n; i++)
        counts[i] = 1 + (i + 1) % 3, displs[i] = 2 * i;
    memset(got, -1, sizeof got);
    OK(MPI_Scatterv(all, counts, displs, MPI_INT, got, 3, MPI_INT, n - 1, MPI_COMM_WORLD));
    say("scatterv: %d %d %d", got[0], got[1], got[2]);
    if (T_rank == 0)
        OK(MPI_Scatter(all, 2, MPI_INT, MPI_IN_PLACE, 2, MPI_INT, 0, MPI_COMM_WORLD));
    else
        OK(MPI_Scatter(NULL, 0, MPI_INT, got, 2, MPI_INT, 0, MPI_COMM_WORLD));
    say("scatter in place: %d %d (all[0] %d)", got[0], got[1], all[0]);
    /* allgather, allgatherv, in place */
    memset(all, -1, sizeof all);
    OK(MPI_Allgather(mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD));
    say("allgather: %d %d", all[0], all[n - 1]);
    for (int i = 0; i < n; i++)
        counts[i] = 1 + i % 2, displs[i] = 3 * i;
    memset(all, -1, sizeof all);
    OK(MPI_Allgatherv(mine, 1 + T_rank % 2, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD));
    say("allgatherv: %d %d %d %d", all[0], all[1], all[3], all[4]);
    for (int i = 0; i < 12; i++)
        all[i] = -1;
    all[T_rank] = T_rank * 3;
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 1, MPI_INT, MPI_COMM_WORLD));
    say("allgather in place: %d %d", all[0], all[n - 1]);
    /* alltoall, alltoallv, alltoallw, in place */
    int sb[8], rb[8];
    for (int i = 0; i < 2 * n; i++)
        sb[i] = T_rank * 100 + i;
    OK(MPI_Alltoall(sb, 2, MPI_INT, rb, 2, MPI_INT, MPI_COMM_WORLD));
    say("alltoall: %d %d %d", rb[0], rb[1], rb[2 * n - 1]);
    int sc[4], sd[4], rc[4], rd[4];
    for (int i = 0; i < n; i++) {
        sc[i] = 1 + (T_rank + i) % 2;
        sd[i] = 2 * i;
        rc[i] = 1 + (T_rank + i) % 2;
        rd[i] = 2 * (n - 1 - i);
    }
    memset(rb, -1, sizeof rb);
    OK(MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, MPI_COMM_WORLD));
    say("alltoallv: %d %d %d %d", rb[0], rb[1], rb[2 * n - 2], rb[2 * n - 1]);
    MPI_Datatype ts[4], tr[4];
    int swb[4], rwb[4];
    for (int i = 0; i < n; i++) {
        ts[i] = MPI_INT, tr[i] = MPI_INT, sc[i] = 1, rc[i] = 1;
        swb[i] = 4 * i, rwb[i] = 4 * (n - 1 - i);
    }
    memset(rb, -1, sizeof rb);
    OK(MPI_Alltoallw(sb, sc, swb, ts, rb, rc, rwb, tr, MPI_COMM_WORLD));
    say("alltoallw: %d %d", rb[0], rb[n - 1]);
    for (int i = 0; i < n; i++)
        rb[i] = T_rank * 10 + i;
    OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, 1, MPI_INT, MPI_COMM_WORLD));
    say("alltoall in place: %d %d", rb[0], rb[n - 1]);
}

static void scans(void)
{
    int v[2] = {T_rank + 1, 10 - T_rank}, r[2] = {-7, -7};
    OK(MPI_Scan(v, r, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    say("scan: %d %d", r[0], r[1]);
    r[0] = r[1] = -7;
    OK(MPI_Exscan(v, r, 2, MPI_INT, MPI_PROD, MPI_COMM_WORLD));
    if (T_rank > 0)
        say("exscan: %d %d", r[0], r[1]);
    r[0] = v[0], r[1] = v[1];
    OK(MPI_Scan(MPI_IN_PLACE, r, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    say("scan in place: %d %d", r[0], r[1]);
    int send[8], recv[4], counts[4];
    for (int i = 0; i < 8; i++)
        send[i] = T_rank + i;
    for (int i = 0; i < T_size; i++)
        counts[i] = 1 + i % 2;
    memset(recv, -1, sizeof recv);
    OK(MPI_Reduce_scatter(send, recv, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    say("reduce_scatter: %d %d", recv[0], recv[1]);
    OK(MPI_Reduce_scatter_block(send, recv, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    say("reduce_scatter_block: %d %d", recv[0], recv[1]);
    OK(MPI_Reduce_scatter_block(MPI_IN_PLACE, send, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    say("reduce_scatter_block in place: %d", send[0]);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    reductions();
    locs();
    user_op();
    movers();
    scans();
    OK(MPI_Barrier(MPI_COMM_WORLD));
    say("done");
    MPI_Finalize();
    return 0;
}
