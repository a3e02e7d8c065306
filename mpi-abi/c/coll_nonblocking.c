/* ranks: 1 2 3 4 */
/* Nonblocking collectives: each one, several in flight at once and
 * completed in another order, mixed with blocking ones, and progress
 * made inside other calls (a rank blocked in a receive still advances
 * its pending collective). */
#include "tmx_test.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = T_size, me = T_rank;
    MPI_Request r[16];
    int k = 0;
    int bc[2] = {me, 0}, red[3], all[3], ag[8], a2a_s[8], a2a_r[8], sc[3], ex[3], gv[8], g[8], s_r[2];
    int mine[3] = {me + 1, me * 2, -me};
    if (me == 0)
        bc[1] = 77;
    OK(MPI_Ibcast(bc, 2, MPI_INT, 0, MPI_COMM_WORLD, &r[k++]));
    OK(MPI_Ireduce(mine, red, 3, MPI_INT, MPI_SUM, n - 1, MPI_COMM_WORLD, &r[k++]));
    OK(MPI_Iallreduce(mine, all, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r[k++]));
    OK(MPI_Iallgather(&me, 1, MPI_INT, ag, 1, MPI_INT, MPI_COMM_WORLD, &r[k++]));
    for (int i = 0; i < n; i++)
        a2a_s[i] = me * 100 + i;
    OK(MPI_Ialltoall(a2a_s, 1, MPI_INT, a2a_r, 1, MPI_INT, MPI_COMM_WORLD, &r[k++]));
    OK(MPI_Iscan(mine, sc, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[k++]));
    ex[0] = ex[1] = ex[2] = -9;
    OK(MPI_Iexscan(mine, ex, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[k++]));
    OK(MPI_Igather(&me, 1, MPI_INT, g, 1, MPI_INT, 0, MPI_COMM_WORLD, &r[k++]));
    int cnts[4], dsp[4];
    for (int i = 0; i < n; i++)
        cnts[i] = 1, dsp[i] = n - 1 - i;
    OK(MPI_Igatherv(&me, 1, MPI_INT, gv, cnts, dsp, MPI_INT, n - 1, MPI_COMM_WORLD, &r[k++]));
    int src[8];
    for (int i = 0; i < 8; i++)
        src[i] = 500 + i;
    OK(MPI_Iscatter(src, 2, MPI_INT, s_r, 2, MPI_INT, 0, MPI_COMM_WORLD, &r[k++]));
    OK(MPI_Ibarrier(MPI_COMM_WORLD, &r[k++]));
    int rsb[4] = {me, me, me, me}, rsr = -1;
    OK(MPI_Ireduce_scatter_block(rsb, &rsr, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[k++]));
    /* A blocking collective while the others are in flight. */
    int b = me, bs;
    OK(MPI_Allreduce(&b, &bs, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    say("blocking allreduce in between: %d", bs);
    /* Complete in reverse order. */
    for (int i = k - 1; i >= 0; i--)
        OK(MPI_Wait(&r[i], MPI_STATUS_IGNORE));
    say("ibcast %d %d", bc[0], bc[1]);
    if (me == n - 1)
        say("ireduce %d %d %d", red[0], red[1], red[2]);
    say("iallreduce %d %d %d", all[0], all[1], all[2]);
    say("iallgather %d %d", ag[0], ag[n - 1]);
    say("ialltoall %d %d", a2a_r[0], a2a_r[n - 1]);
    say("iscan %d %d %d", sc[0], sc[1], sc[2]);
    if (me > 0)
        say("iexscan %d %d %d", ex[0], ex[1], ex[2]);
    if (me == 0)
        say("igather %d %d", g[0], g[n - 1]);
    if (me == n - 1)
        say("igatherv %d %d", gv[0], gv[n - 1]);
    say("iscatter %d %d", s_r[0], s_r[1]);
    say("ireduce_scatter_block %d", rsr);
    /* Waitall over a mix, testall polling. */
    int x = me, y = -1, z = -1;
    OK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_PROD, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Ibcast(&z, 1, MPI_INT, n - 1, MPI_COMM_WORLD, &r[1]));
    if (me == n - 1)
        z = 5;
    /* (z is written at the root before completion only in the buffer
     * the root already handed over; it sends what it had at the call.) */
    int flag = 0;
    while (!flag)
        OK(MPI_Testall(2, r, &flag, MPI_STATUSES_IGNORE));
    say("testall: prod %d, bcast at non-roots %d", y, me == n - 1 ? -1 : z);
    /* Progress from inside a blocking receive: rank 1 waits for its
     * ibarrier, then sends; rank 0 posts its ibarrier and blocks in the
     * receive. */
    if (n > 1) {
        MPI_Request ib;
        OK(MPI_Ibarrier(MPI_COMM_WORLD, &ib));
        if (me == 0) {
            int v;
            OK(MPI_Recv(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            OK(MPI_Wait(&ib, MPI_STATUS_IGNORE));
            say("progress inside recv: got %d", v);
        } else {
            OK(MPI_Wait(&ib, MPI_STATUS_IGNORE));
            if (me == 1) {
                int v = 1234;
                OK(MPI_Send(&v, 1, MPI_INT, 0, 99, MPI_COMM_WORLD));
            }
        }
    }
    MPI_Finalize();
    return 0;
}
