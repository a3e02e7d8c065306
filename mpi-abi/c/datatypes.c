/* ranks: 1 2 */
/* Datatypes: sizes, extents and names of predefined types, every
 * constructor, envelopes and contents, pack/unpack (native and
 * external32), get_count/get_elements, and derived types on the wire
 * (including absolute addresses from MPI_BOTTOM). */
#include "tmx_test.h"

static void predefined(void)
{
    MPI_Datatype t[] = {MPI_CHAR, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR, MPI_BYTE, MPI_SHORT, MPI_INT,
                        MPI_UNSIGNED, MPI_LONG, MPI_UNSIGNED_LONG, MPI_LONG_LONG, MPI_FLOAT, MPI_DOUBLE,
                        MPI_LONG_DOUBLE, MPI_PACKED, MPI_WCHAR, MPI_C_BOOL, MPI_INT8_T, MPI_UINT16_T,
                        MPI_INT32_T, MPI_UINT64_T, MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX, MPI_AINT,
                        MPI_OFFSET, MPI_COUNT, MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_SHORT_INT,
                        MPI_2INT, MPI_LONG_DOUBLE_INT};
    for (unsigned i = 0; i < sizeof t / sizeof t[0]; i++) {
        int size, len, ni, na, nd, comb;
        MPI_Aint lb, ext, tlb, text;
        char name[MPI_MAX_OBJECT_NAME];
        OK(MPI_Type_size(t[i], &size));
        OK(MPI_Type_get_extent(t[i], &lb, &ext));
        OK(MPI_Type_get_true_extent(t[i], &tlb, &text));
        OK(MPI_Type_get_name(t[i], name, &len));
        OK(MPI_Type_get_envelope(t[i], &ni, &na, &nd, &comb));
        say("%s: size %d lb %ld extent %ld true %ld %ld, combiner %d", name, size, (long)lb, (long)ext,
            (long)tlb, (long)text, comb);
    }
}

static void show(const char *what, MPI_Datatype t)
{
    int size, ni, na, nd, comb;
    MPI_Aint lb, ext, tlb, text;
    OK(MPI_Type_size(t, &size));
    OK(MPI_Type_get_extent(t, &lb, &ext));
    OK(MPI_Type_get_true_extent(t, &tlb, &text));
    OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    say("%s: size %d lb %ld extent %ld true %ld %ld; envelope %d %d %d combiner %d", what, size, (long)lb,
        (long)ext, (long)tlb, (long)text, ni, na, nd, comb);
    if (comb != MPI_COMBINER_NAMED) {
        int ints[64];
        MPI_Aint addrs[16];
        MPI_Datatype types[16];
        OK(MPI_Type_get_contents(t, 64, 16, 16, ints, addrs, types));
        char line[512] = "";
        for (int k = 0; k < ni; k++)
            sprintf(line + strlen(line), " i%d", ints[k]);
        for (int k = 0; k < na; k++)
            sprintf(line + strlen(line), " a%ld", (long)addrs[k]);
        for (int k = 0; k < nd; k++) {
            int c2, x1, x2, x3;
            OK(MPI_Type_get_envelope(types[k], &x1, &x2, &x3, &c2));
            sprintf(line + strlen(line), " t(%s)", c2 == MPI_COMBINER_NAMED ? "named" : "derived");
            if (c2 != MPI_COMBINER_NAMED)
                OK(MPI_Type_free(&types[k]));
            else
                sprintf(line + strlen(line), "%s", types[k] == MPI_INT ? "=int" : types[k] == MPI_DOUBLE ? "=double" : "");
        }
        say("  contents:%s", line);
    }
    /* Pack it: the bytes a packed element holds. */
    int psize;
    OK(MPI_Type_commit(&t));
    OK(MPI_Pack_size(2, t, MPI_COMM_WORLD, &psize));
    say("  pack_size(2) %d", psize);
}

static void constructors(void)
{
    MPI_Datatype t, u;
    OK(MPI_Type_contiguous(3, MPI_INT, &t)); show("contiguous", t); MPI_Type_free(&t);
    OK(MPI_Type_vector(3, 2, 4, MPI_DOUBLE, &t)); show("vector", t); MPI_Type_free(&t);
    OK(MPI_Type_vector(2, 1, -3, MPI_INT, &t)); show("vector negative stride", t); MPI_Type_free(&t);
    OK(MPI_Type_create_hvector(2, 3, 20, MPI_SHORT, &t)); show("hvector", t); MPI_Type_free(&t);
    int bl[3] = {2, 1, 3}, di[3] = {5, 0, 10};
    OK(MPI_Type_indexed(3, bl, di, MPI_INT, &t)); show("indexed", t); MPI_Type_free(&t);
    MPI_Aint hd[3] = {16, 0, 40};
    OK(MPI_Type_create_hindexed(3, bl, hd, MPI_INT, &t)); show("hindexed", t); MPI_Type_free(&t);
    OK(MPI_Type_create_indexed_block(3, 2, di, MPI_INT, &t)); show("indexed_block", t); MPI_Type_free(&t);
    OK(MPI_Type_create_hindexed_block(3, 1, hd, MPI_DOUBLE, &t)); show("hindexed_block", t); MPI_Type_free(&t);
    int sbl[3] = {1, 2, 1};
    MPI_Aint sd[3] = {0, 8, 24};
    MPI_Datatype st[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    OK(MPI_Type_create_struct(3, sbl, sd, st, &t)); show("struct", t);
    OK(MPI_Type_create_resized(t, -8, 64, &u)); show("resized", u); MPI_Type_free(&u);
    OK(MPI_Type_dup(t, &u)); show("dup", u); MPI_Type_free(&u);
    OK(MPI_Type_contiguous(2, t, &u)); show("contiguous of struct", u); MPI_Type_free(&u);
    MPI_Type_free(&t);
    int sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 2};
    OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t)); show("subarray C", t); MPI_Type_free(&t);
    OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &t)); show("subarray F", t); MPI_Type_free(&t);
    int gs[2] = {8, 6}, ds[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC}, da[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[2] = {2, 2};
    for (int r = 0; r < 4; r++) {
        OK(MPI_Type_create_darray(4, r, 2, gs, ds, da, ps, MPI_ORDER_C, MPI_INT, &t));
        char what[64];
        sprintf(what, "darray C rank %d", r);
        show(what, t);
        MPI_Type_free(&t);
        OK(MPI_Type_create_darray(4, r, 2, gs, ds, da, ps, MPI_ORDER_FORTRAN, MPI_INT, &t));
        sprintf(what, "darray F rank %d", r);
        show(what, t);
        MPI_Type_free(&t);
    }
    int g1[1] = {10}, d1[1] = {MPI_DISTRIBUTE_CYCLIC}, a1[1] = {3}, p1[1] = {3};
    OK(MPI_Type_create_darray(3, 2, 1, g1, d1, a1, p1, MPI_ORDER_C, MPI_DOUBLE, &t)); show("darray cyclic(3)", t); MPI_Type_free(&t);
}

static void packing(void)
{
    MPI_Datatype v;
    int data[12], out[12], pos = 0;
    char buf[256];
    for (int i = 0; i < 12; i++)
        data[i] = i * 11;
    OK(MPI_Type_vector(3, 1, 4, MPI_INT, &v));
    OK(MPI_Type_commit(&v));
    OK(MPI_Pack(data, 1, v, buf, sizeof buf, &pos, MPI_COMM_WORLD));
    OK(MPI_Pack(&data[1], 2, MPI_INT, buf, sizeof buf, &pos, MPI_COMM_WORLD));
    say("packed %d bytes", pos);
    int p2 = 0;
    memset(out, -1, sizeof out);
    OK(MPI_Unpack(buf, pos, &p2, out, 1, v, MPI_COMM_WORLD));
    OK(MPI_Unpack(buf, pos, &p2, &out[1], 2, MPI_INT, MPI_COMM_WORLD));
    say("unpacked to %d: %d %d %d %d %d %d", p2, out[0], out[1], out[2], out[3], out[4], out[8]);
    unsigned char ext[64];
    MPI_Aint ep = 0, esize;
    OK(MPI_Pack_external_size("external32", 1, v, &esize));
    OK(MPI_Pack_external("external32", data, 1, v, ext, sizeof ext, &ep));
    say("external32 %ld bytes (size %ld): %02x %02x %02x %02x %02x %02x %02x %02x", (long)ep, (long)esize,
        ext[0], ext[1], ext[2], ext[3], ext[4], ext[5], ext[6], ext[7]);
    MPI_Aint ep2 = 0;
    memset(out, -1, sizeof out);
    OK(MPI_Unpack_external("external32", ext, ep, &ep2, out, 1, v));
    say("external32 back: %d %d %d", out[0], out[4], out[8]);
    MPI_Type_free(&v);
}

static void wire(void)
{
    if (T_size < 2)
        return;
    /* A struct with padding, sent as 3 elements; received as packed
     * doubles/ints through MPI_BYTE counts. */
    struct rec { char c; double d[2]; int i; } r[3];
    int bl[3] = {1, 2, 1};
    MPI_Aint disp[3], base;
    MPI_Datatype types[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, t;
    MPI_Get_address(&r[0], &base);
    MPI_Get_address(&r[0].c, &disp[0]);
    MPI_Get_address(&r[0].d, &disp[1]);
    MPI_Get_address(&r[0].i, &disp[2]);
    for (int k = 0; k < 3; k++)
        disp[k] -= base;
    OK(MPI_Type_create_struct(3, bl, disp, types, &t));
    OK(MPI_Type_commit(&t));
    MPI_Status st;
    if (T_rank == 0) {
        for (int k = 0; k < 3; k++) {
            r[k].c = 'a' + k, r[k].d[0] = k + 0.25, r[k].d[1] = -k, r[k].i = 100 * k;
        }
        OK(MPI_Send(r, 3, t, 1, 1, MPI_COMM_WORLD));
        OK(MPI_Send(r, 2, t, 1, 2, MPI_COMM_WORLD));
    } else {
        memset(r, 0, sizeof r);
        OK(MPI_Recv(r, 3, t, 0, 1, MPI_COMM_WORLD, &st));
        int n, e;
        MPI_Get_count(&st, t, &n);
        MPI_Get_elements(&st, t, &e);
        say("struct recv count %d elements %d: %c %g %g %d / %c %d", n, e, r[0].c, r[0].d[0], r[1].d[1],
            r[2].i, r[2].c, r[1].i);
        /* Receive 2 elements into room for 3, look at partial counts. */
        char raw[200];
        OK(MPI_Recv(raw, 200, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &st));
        MPI_Get_count(&st, MPI_BYTE, &n);
        MPI_Get_elements(&st, t, &e);
        say("as bytes: %d, elements of the struct %d", n, e);
        int cnt;
        MPI_Get_count(&st, MPI_DOUBLE, &cnt);
        say("count as doubles undefined %d", cnt == MPI_UNDEFINED);
    }
    /* Absolute addresses with MPI_BOTTOM. */
    int a = 7 + T_rank, b[2] = {T_rank, -T_rank};
    MPI_Aint ad[2];
    MPI_Get_address(&a, &ad[0]);
    MPI_Get_address(b, &ad[1]);
    int ab[2] = {1, 2};
    MPI_Datatype at;
    OK(MPI_Type_create_hindexed(2, ab, ad, MPI_INT, &at));
    OK(MPI_Type_commit(&at));
    OK(MPI_Sendrecv_replace(MPI_BOTTOM, 1, at, 1 - T_rank, 3, 1 - T_rank, 3, MPI_COMM_WORLD, &st));
    say("bottom: a %d b %d %d", a, b[0], b[1]);
    MPI_Type_free(&at);
    MPI_Type_free(&t);
}

static void errors(void)
{
    MPI_Datatype t;
    CLASS("contiguous negative", MPI_Type_contiguous(-1, MPI_INT, &t));
    CLASS("vector null oldtype", MPI_Type_vector(1, 1, 1, MPI_DATATYPE_NULL, &t));
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    int x[2];
    CLASS("send uncommitted", MPI_Send(x, 1, t, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    MPI_Datatype p = MPI_INT;
    CLASS("free predefined", MPI_Type_free(&p));
    MPI_Type_free(&t);
    int ints[4];
    MPI_Aint addrs[4];
    MPI_Datatype types[4];
    CLASS("contents of named", MPI_Type_get_contents(MPI_INT, 4, 4, 4, ints, addrs, types));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (T_rank == 0) {
        predefined();
        constructors();
        packing();
        errors();
    }
    wire();
    MPI_Finalize();
    return 0;
}
