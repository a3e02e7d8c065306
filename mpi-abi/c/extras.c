/* ranks: 1 2 3 */
/* The rest of the surface: the _x query forms, address arithmetic, the
 * deprecated attribute calls, persistent sends in every mode, matched
 * probes without blocking, testsome, the nonblocking v/w collectives
 * and neighbourhood forms, info on communicators, versions. */
#include "tmx_test.h"

static int deleted;

static int del(MPI_Comm c, int k, void *v, void *e)
{
    (void)c, (void)k, (void)v, (void)e;
    deleted++;
    return MPI_SUCCESS;
}

static void queries(void)
{
    MPI_Datatype v;
    MPI_Count size, lb, ext, tlb, text;
    OK(MPI_Type_vector(2, 2, 3, MPI_DOUBLE, &v));
    OK(MPI_Type_commit(&v));
    OK(MPI_Type_size_x(v, &size));
    OK(MPI_Type_get_extent_x(v, &lb, &ext));
    OK(MPI_Type_get_true_extent_x(v, &tlb, &text));
    say("x forms: size %lld extent %lld %lld true %lld %lld", (long long)size, (long long)lb, (long long)ext,
        (long long)tlb, (long long)text);
    OK(MPI_Type_set_name(v, "my vector"));
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Type_get_name(v, name, &len));
    say("named '%s' %d", name, len);
    MPI_Status st;
    OK(MPI_Status_set_elements_x(&st, MPI_DOUBLE, 3));
    MPI_Count e;
    OK(MPI_Get_elements_x(&st, v, &e));
    int c;
    OK(MPI_Get_count(&st, v, &c));
    say("elements_x %lld count undefined %d", (long long)e, c == MPI_UNDEFINED);
    OK(MPI_Status_set_cancelled(&st, 1));
    int flag;
    OK(MPI_Test_cancelled(&st, &flag));
    say("test_cancelled %d", flag);
    OK(MPI_Type_free(&v));
    int arr[10];
    MPI_Aint a0, a5;
    OK(MPI_Get_address(&arr[0], &a0));
    OK(MPI_Get_address(&arr[5], &a5));
    say("aint_diff %ld, aint_add back %d", (long)MPI_Aint_diff(a5, a0), MPI_Aint_add(a0, 20) == a5);
    int v1, v2;
    OK(MPI_Get_version(&v1, &v2));
    say("version at least 3.1: %d", v1 * 10 + v2 >= 31);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    OK(MPI_Get_library_version(lib, &len));
    say("library version nonempty %d", len > 0 && (int)strlen(lib) == len);
}

static void old_attrs(void)
{
    int kv, flag;
    void *got;
    OK(MPI_Keyval_create(MPI_NULL_COPY_FN, del, &kv, NULL));
    OK(MPI_Attr_put(MPI_COMM_WORLD, kv, (void *)9));
    OK(MPI_Attr_get(MPI_COMM_WORLD, kv, &got, &flag));
    say("attr_get flag %d value %ld", flag, (long)got);
    OK(MPI_Attr_delete(MPI_COMM_WORLD, kv));
    say("attr_delete called delete %d", deleted);
    OK(MPI_Keyval_free(&kv));
    int wk;
    OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN, &wk, NULL));
    OK(MPI_Win_free_keyval(&wk));
    say("win keyval freed %d", wk == MPI_KEYVAL_INVALID);
    MPI_Errhandler weh;
    OK(MPI_Win_create_errhandler((MPI_Win_errhandler_function *)del, &weh));
    OK(MPI_Errhandler_free(&weh));
    say("win errhandler freed %d", weh == MPI_ERRHANDLER_NULL);
    MPI_Info in, out;
    OK(MPI_Info_create(&in));
    OK(MPI_Info_set(in, "mpi_assert_no_any_source", "false"));
    MPI_Comm d;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_set_info(d, in));
    OK(MPI_Comm_get_info(d, &out));
    say("comm_get_info gives an info %d", out != MPI_INFO_NULL);
    OK(MPI_Info_free(&out));
    OK(MPI_Info_free(&in));
    OK(MPI_Comm_free(&d));
}

static void persistent_modes(void)
{
    int next = (T_rank + 1) % T_size, prev = (T_rank + T_size - 1) % T_size;
    int out[3], in[3];
    MPI_Request r[6];
    char *buf = malloc(sizeof(int) + MPI_BSEND_OVERHEAD);
    OK(MPI_Buffer_attach(buf, sizeof(int) + MPI_BSEND_OVERHEAD));
    OK(MPI_Ssend_init(&out[0], 1, MPI_INT, next, 60, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Rsend_init(&out[1], 1, MPI_INT, next, 61, MPI_COMM_WORLD, &r[1]));
    OK(MPI_Bsend_init(&out[2], 1, MPI_INT, next, 62, MPI_COMM_WORLD, &r[2]));
    for (int i = 0; i < 3; i++)
        OK(MPI_Recv_init(&in[i], 1, MPI_INT, prev, 60 + i, MPI_COMM_WORLD, &r[3 + i]));
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3; i++)
            out[i] = T_rank * 10 + i + round * 100;
        for (int i = 3; i < 6; i++)
            OK(MPI_Start(&r[i]));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int i = 0; i < 3; i++)
            OK(MPI_Start(&r[i]));
        int done = 0, idx[6], n;
        MPI_Status sts[6];
        while (done < 6) {
            OK(MPI_Testsome(6, r, &n, idx, sts));
            done += n == MPI_UNDEFINED ? 6 : n;
        }
        say("persistent modes round %d: %d %d %d", round, in[0], in[1], in[2]);
    }
    for (int i = 0; i < 6; i++)
        OK(MPI_Request_free(&r[i]));
    void *b;
    int s;
    OK(MPI_Buffer_detach(&b, &s));
    free(buf);
}

static void probes(void)
{
    int peer = T_size - 1 - T_rank, v = T_rank + 40, got = -1, flag = 0;
    MPI_Message m;
    MPI_Status st;
    MPI_Request r;
    OK(MPI_Send(&v, 1, MPI_INT, peer, 70, MPI_COMM_WORLD));
    while (!flag)
        OK(MPI_Improbe(peer, 70, MPI_COMM_WORLD, &flag, &m, &st));
    OK(MPI_Imrecv(&got, 1, MPI_INT, &m, &r));
    OK(MPI_Wait(&r, &st));
    say("improbe/imrecv got %d from %d", got, st.MPI_SOURCE);
}

static void nb_v(void)
{
    int n = T_size, me = T_rank;
    int cnt[4], dsp[4], sb[8], rb[8];
    MPI_Request r;
    for (int i = 0; i < n; i++)
        cnt[i] = 1, dsp[i] = n - 1 - i;
    for (int i = 0; i < 8; i++)
        sb[i] = me * 10 + i, rb[i] = -1;
    OK(MPI_Iallgatherv(&me, 1, MPI_INT, rb, cnt, dsp, MPI_INT, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("iallgatherv %d %d", rb[0], rb[n - 1]);
    OK(MPI_Ialltoallv(sb, cnt, dsp, MPI_INT, rb, cnt, dsp, MPI_INT, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("ialltoallv %d %d", rb[0], rb[n - 1]);
    int bd[4];
    MPI_Datatype ts[4];
    for (int i = 0; i < n; i++)
        bd[i] = 4 * i, ts[i] = MPI_INT;
    OK(MPI_Ialltoallw(sb, cnt, bd, ts, rb, cnt, bd, ts, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("ialltoallw %d %d", rb[0], rb[n - 1]);
    int one = 1, res = -1, counts[4];
    for (int i = 0; i < n; i++)
        counts[i] = 1;
    int src[4] = {me, me + 1, me + 2, me + 3};
    OK(MPI_Ireduce_scatter(src, &res, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("ireduce_scatter %d", res);
    OK(MPI_Iscatterv(sb, cnt, dsp, MPI_INT, &res, 1, MPI_INT, 0, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("iscatterv %d", res);
    (void)one;
}

static void nb_neighbors(void)
{
    int dims[1] = {T_size}, per[1] = {1}, co[1];
    MPI_Comm c;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, per, 0, &c));
    OK(MPI_Cart_coords(c, T_rank, 1, co));
    say("cart_coords %d", co[0]);
    int nr;
    int index[1] = {0}, edges[1] = {0};
    OK(MPI_Graph_map(MPI_COMM_WORLD, 1, index, edges, &nr));
    say("graph_map %d", nr);
    int rb[2] = {-1, -1}, cnt[2] = {1, 1}, dsp[2] = {1, 0}, sb[2] = {T_rank * 2, T_rank * 2 + 1};
    MPI_Request r;
    OK(MPI_Ineighbor_allgather(&T_rank, 1, MPI_INT, rb, 1, MPI_INT, c, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("ineighbor_allgather %d %d", rb[0], rb[1]);
    OK(MPI_Ineighbor_allgatherv(&T_rank, 1, MPI_INT, rb, cnt, dsp, MPI_INT, c, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("ineighbor_allgatherv %d %d", rb[0], rb[1]);
    OK(MPI_Ineighbor_alltoallv(sb, cnt, dsp, MPI_INT, rb, cnt, dsp, MPI_INT, c, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("ineighbor_alltoallv %d %d", rb[0], rb[1]);
    MPI_Aint bd[2] = {0, 4};
    MPI_Datatype ts[2] = {MPI_INT, MPI_INT};
    OK(MPI_Ineighbor_alltoallw(sb, cnt, bd, ts, rb, cnt, bd, ts, c, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    say("ineighbor_alltoallw %d %d", rb[0], rb[1]);
    OK(MPI_Comm_free(&c));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    queries();
    old_attrs();
    persistent_modes();
    if (T_size > 1) /* MPICH 4.0 never matches a message to self with MPI_Improbe */
        probes();
    nb_v();
    nb_neighbors();
    MPI_Finalize();
    return 0;
}
