/* ranks: 1 2 3 4 */
/* Active-target RMA with fence over the program's memory
 * (MPI_Win_create): puts, gets, accumulates with a displacement unit,
 * derived origin and target datatypes, request-based forms, and the
 * window's attributes, name and group. */
#include "tmx_test.h"

#define N 8

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int me = T_rank, n = T_size;
    int *buf = malloc(sizeof(int) * N * n);
    for (int i = 0; i < N * n; i++)
        buf[i] = -1;
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof(int) * N * n, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));

    void *base;
    MPI_Aint *size;
    int *unit, *flavor, *model, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
    say("base is buf %d (flag %d)", base == (void *)buf, flag);
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &size, &flag));
    OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag));
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    OK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag));
    say("size %ld unit %d flavor create %d model unified %d", (long)*size, *unit,
        *flavor == MPI_WIN_FLAVOR_CREATE, *model == MPI_WIN_UNIFIED);
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Win_set_name(win, "fence window"));
    OK(MPI_Win_get_name(win, name, &len));
    say("name '%s' %d", name, len);
    MPI_Group g;
    int gs;
    OK(MPI_Win_get_group(win, &g));
    OK(MPI_Group_size(g, &gs));
    say("group size %d", gs);
    OK(MPI_Group_free(&g));

    /* Puts: my value to slot me*N of every rank. */
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));
    for (int t = 0; t < n; t++) {
        int v = 100 + me;
        OK(MPI_Put(&v, 1, MPI_INT, t, me * N, 1, MPI_INT, win));
    }
    OK(MPI_Win_fence(0, win));
    for (int r = 0; r < n; r++)
        say("after put slot %d = %d", r * N, buf[r * N]);
    /* A fence(0) also opens the next epoch: local reads of exposed
     * memory after it would race with that epoch's remote puts (an
     * erroneous program), so every rank reads before anyone goes on. */
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Local stores, then gets from the right neighbour. */
    for (int i = 1; i < N; i++)
        buf[me * N + i] = val(me, i, 1);
    OK(MPI_Win_fence(0, win));
    int right = (me + 1) % n, got[N];
    OK(MPI_Get(got, N - 1, MPI_INT, right, right * N + 1, N - 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < N - 1; i++)
        say("got[%d] = %d", i, got[i]);

    /* Accumulate SUM into slot 1 of rank 0 from everyone; a strided
     * target (vector) with a contiguous origin. */
    int ones[3] = {me + 1, 10 * (me + 1), 100 * (me + 1)};
    MPI_Datatype vec;
    OK(MPI_Type_vector(3, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    OK(MPI_Accumulate(ones, 3, MPI_INT, 0, 1, 1, vec, MPI_SUM, win));
    OK(MPI_Win_fence(0, win));
    if (me == 0)
        say("acc slots 1 3 5 = %d %d %d", buf[1], buf[3], buf[5]);
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* A strided origin put into contiguous slots of the left neighbour. */
    int src[6] = {me, -1, me * 2, -1, me * 3, -1};
    int left = (me + n - 1) % n;
    OK(MPI_Put(src, 1, vec, left, left * N + 2, 3, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    say("strided put landed %d %d %d", buf[me * N + 2], buf[me * N + 3], buf[me * N + 4]);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Type_free(&vec));

    /* Request-based forms (valid in passive-target epochs only): the
     * fence epochs end, lock_all, then fences again. */
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    OK(MPI_Win_lock_all(0, win));
    MPI_Request rq[3];
    int rv = 7 * me, rg = -5, old[2] = {-9, -9};
    OK(MPI_Rput(&rv, 1, MPI_INT, right, right * N + 6, 1, MPI_INT, win, &rq[0]));
    OK(MPI_Rget(&rg, 1, MPI_INT, right, right * N, 1, MPI_INT, win, &rq[1]));
    int inc[2] = {1, 2};
    OK(MPI_Raccumulate(inc, 2, MPI_INT, right, right * N + 4, 2, MPI_INT, MPI_SUM, win, &rq[2]));
    OK(MPI_Waitall(3, rq, MPI_STATUSES_IGNORE));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    say("rget %d, rput landed %d, raccumulate %d %d", rg, buf[me * N + 6], buf[me * N + 4], buf[me * N + 5]);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, win));

    /* Get_accumulate: NO_OP reads, REPLACE swaps. */
    int neu = 1000 + me;
    OK(MPI_Get_accumulate(NULL, 0, MPI_INT, &old[0], 1, MPI_INT, right, right * N + 6, 1, MPI_INT, MPI_NO_OP, win));
    OK(MPI_Win_fence(0, win));
    OK(MPI_Get_accumulate(&neu, 1, MPI_INT, &old[1], 1, MPI_INT, right, right * N + 6, 1, MPI_INT, MPI_REPLACE, win));
    OK(MPI_Win_fence(0, win));
    say("get_accumulate no_op %d replace old %d now %d", old[0], old[1], buf[me * N + 6]);

    /* Doubles with a byte displacement unit window. */
    double d[4] = {0, 0, 0, 0};
    MPI_Win dw;
    OK(MPI_Win_create(d, sizeof d, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &dw));
    OK(MPI_Win_fence(0, dw));
    double x = 0.5 * (me + 1);
    OK(MPI_Accumulate(&x, 1, MPI_DOUBLE, 0, sizeof(double) * 2, 1, MPI_DOUBLE, MPI_SUM, dw));
    OK(MPI_Accumulate(&x, 1, MPI_DOUBLE, 0, sizeof(double) * 3, 1, MPI_DOUBLE, MPI_MAX, dw));
    OK(MPI_Win_fence(0, dw));
    if (me == 0)
        say("double sum %.2f max %.2f", d[2], d[3]);
    OK(MPI_Win_free(&dw));
    say("freed null %d", dw == MPI_WIN_NULL);

    /* MPI_PROC_NULL targets do nothing. */
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(&rv, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win));
    OK(MPI_Get(&rg, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    OK(MPI_Win_free(&win));
    say("buffer kept: slot %d = %d", me * N, buf[me * N]);
    free(buf);
    MPI_Finalize();
    return 0;
}
