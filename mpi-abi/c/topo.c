/* ranks: 1 2 3 4 */
/* Process topologies: dims_create, Cartesian grids (coords, rank,
 * shift, sub), graphs, distributed graphs, neighbourhood collectives
 * (blocking and nonblocking). */
#include "tmx_test.h"

static void dims(void)
{
    int cases[][4] = {{6, 2, 0, 0}, {12, 2, 0, 0}, {16, 3, 0, 0}, {24, 3, 0, 3}, {7, 2, 0, 0}, {36, 2, 0, 0}, {1, 3, 0, 0}};
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int d[3] = {0, 0, cases[i][3]};
        int nd = cases[i][1] == 3 ? 3 : 2;
        if (nd == 2)
            d[1] = 0;
        OK(MPI_Dims_create(cases[i][0], nd, d));
        say("dims_create %d in %d: %d %d %d", cases[i][0], nd, d[0], d[1], nd == 3 ? d[2] : -1);
    }
    int bad[2] = {3, 0};
    CLASS("dims_create not divisible", MPI_Dims_create(10, 2, bad));
}

static void cart(void)
{
    int d[2] = {0, 0}, p[2] = {1, 0};
    MPI_Comm c;
    OK(MPI_Dims_create(T_size, 2, d));
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, d, p, 0, &c));
    int st;
    OK(MPI_Topo_test(c, &st));
    say("topo_test cart %d, world %d", st == MPI_CART, (MPI_Topo_test(MPI_COMM_WORLD, &st), st == MPI_UNDEFINED));
    int nd, dims2[2], per[2], co[2], r;
    OK(MPI_Cartdim_get(c, &nd));
    OK(MPI_Cart_get(c, 2, dims2, per, co));
    OK(MPI_Cart_rank(c, co, &r));
    say("cart %d dims %dx%d periods %d%d coords %d,%d rank %d", nd, dims2[0], dims2[1], per[0], per[1], co[0], co[1], r);
    for (int dir = 0; dir < 2; dir++)
        for (int disp = -1; disp <= 2; disp += 3) {
            int s, t;
            OK(MPI_Cart_shift(c, dir, disp, &s, &t));
            say("shift dir %d disp %d: %d %d", dir, disp, s, t);
        }
    int wrap[2] = {-1, 0};
    OK(MPI_Cart_rank(c, wrap, &r));
    say("rank of (-1,0) %d", r);
    int out_of[2] = {0, dims2[1]};
    CLASS("rank out of non-periodic range", MPI_Cart_rank(c, out_of, &r));
    int remain[2] = {0, 1};
    MPI_Comm sub;
    OK(MPI_Cart_sub(c, remain, &sub));
    int sr, ss, snd;
    OK(MPI_Comm_rank(sub, &sr));
    OK(MPI_Comm_size(sub, &ss));
    OK(MPI_Cartdim_get(sub, &snd));
    say("cart_sub: rank %d of %d, %d dims", sr, ss, snd);
    /* Neighbourhood collectives on the grid. */
    int sb[4], rb[4];
    for (int i = 0; i < 4; i++)
        sb[i] = T_rank * 10 + i, rb[i] = -1;
    OK(MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, c));
    say("neighbor_alltoall: %d %d %d %d", rb[0], rb[1], rb[2], rb[3]);
    for (int i = 0; i < 4; i++)
        rb[i] = -1;
    OK(MPI_Neighbor_allgather(&T_rank, 1, MPI_INT, rb, 1, MPI_INT, c));
    say("neighbor_allgather: %d %d %d %d", rb[0], rb[1], rb[2], rb[3]);
    MPI_Request req;
    for (int i = 0; i < 4; i++)
        rb[i] = -1;
    OK(MPI_Ineighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, c, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    say("ineighbor_alltoall: %d %d %d %d", rb[0], rb[1], rb[2], rb[3]);
    int cnt[4] = {1, 1, 1, 1}, dsp[4] = {3, 2, 1, 0};
    for (int i = 0; i < 4; i++)
        rb[i] = -1;
    OK(MPI_Neighbor_allgatherv(&T_rank, 1, MPI_INT, rb, cnt, dsp, MPI_INT, c));
    say("neighbor_allgatherv: %d %d %d %d", rb[0], rb[1], rb[2], rb[3]);
    for (int i = 0; i < 4; i++)
        rb[i] = -1;
    OK(MPI_Neighbor_alltoallv(sb, cnt, dsp, MPI_INT, rb, cnt, dsp, MPI_INT, c));
    say("neighbor_alltoallv: %d %d %d %d", rb[0], rb[1], rb[2], rb[3]);
    MPI_Aint bd[4] = {0, 4, 8, 12};
    MPI_Datatype ts[4] = {MPI_INT, MPI_INT, MPI_INT, MPI_INT};
    for (int i = 0; i < 4; i++)
        rb[i] = -1;
    OK(MPI_Neighbor_alltoallw(sb, cnt, bd, ts, rb, cnt, bd, ts, c));
    say("neighbor_alltoallw: %d %d %d %d", rb[0], rb[1], rb[2], rb[3]);
    int nr;
    OK(MPI_Cart_map(MPI_COMM_WORLD, 2, d, p, &nr));
    say("cart_map %d", nr);
    OK(MPI_Comm_free(&sub));
    OK(MPI_Comm_free(&c));
}

static void graph(void)
{
    /* A ring with an extra edge to 0. */
    int n = T_size, index[4], edges[12], ne = 0;
    for (int i = 0; i < n; i++) {
        edges[ne++] = (i + 1) % n;
        if (i != 0)
            edges[ne++] = 0;
        index[i] = ne;
    }
    MPI_Comm g;
    OK(MPI_Graph_create(MPI_COMM_WORLD, n, index, edges, 0, &g));
    int nn, nedges, st, cnt, nb[8];
    OK(MPI_Topo_test(g, &st));
    OK(MPI_Graphdims_get(g, &nn, &nedges));
    OK(MPI_Graph_neighbors_count(g, T_rank, &cnt));
    OK(MPI_Graph_neighbors(g, T_rank, 8, nb));
    say("graph %d: %d nodes %d edges, %d neighbours: %d %d", st == MPI_GRAPH, nn, nedges, cnt, nb[0],
        cnt > 1 ? nb[1] : -1);
    int gi[4], ge[12];
    OK(MPI_Graph_get(g, 4, 12, gi, ge));
    say("graph_get index %d edges %d", gi[n - 1], ge[0]);
    OK(MPI_Comm_free(&g));
    /* Distributed graph: every rank sends to the next. */
    MPI_Comm dg;
    int src = (T_rank + n - 1) % n, dst = (T_rank + 1) % n, w = 3;
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &src, &w, 1, &dst, &w, MPI_INFO_NULL, 0, &dg));
    int in, out, weighted, s2, d2, sw, dw;
    OK(MPI_Dist_graph_neighbors_count(dg, &in, &out, &weighted));
    OK(MPI_Dist_graph_neighbors(dg, 1, &s2, &sw, 1, &d2, &dw));
    say("dist adjacent: in %d out %d weighted %d: %d->me->%d weights %d %d", in, out, weighted, s2, d2, sw, dw);
    int v = T_rank * 7, got = -1;
    OK(MPI_Neighbor_alltoall(&v, 1, MPI_INT, &got, 1, MPI_INT, dg));
    say("dist neighbor_alltoall got %d", got);
    OK(MPI_Comm_free(&dg));
    /* Rank 0 names every edge i -> (i+2)%n, unweighted. */
    int srcs[4], degs[4], dsts[4];
    int k = 0;
    if (T_rank == 0)
        for (int i = 0; i < n; i++)
            srcs[k] = i, degs[k] = 1, dsts[k] = (i + 2) % n, k++;
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, k, srcs, degs, dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &dg));
    OK(MPI_Dist_graph_neighbors_count(dg, &in, &out, &weighted));
    OK(MPI_Dist_graph_neighbors(dg, 1, &s2, MPI_UNWEIGHTED, 1, &d2, MPI_UNWEIGHTED));
    say("dist graph: in %d out %d weighted %d: %d->me->%d", in, out, weighted, s2, d2);
    OK(MPI_Comm_free(&dg));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    dims();
    cart();
    graph();
    MPI_Finalize();
    return 0;
}
