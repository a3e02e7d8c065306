/* ranks: 2 3 4 */
/* Collectives on an intercommunicator (evens and odds): barrier, bcast,
 * reduce, allreduce, gather(v), scatter(v), allgather(v), alltoall(v/w),
 * reduce_scatter(_block), blocking and nonblocking, with MPI_ROOT and
 * MPI_PROC_NULL roots; a non-commutative user operation; errors. */
#include "tmx_test.h"

static int color, lrank, lsize, rsize;

/* A 2x2 integer matrix product: not commutative. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int *a = in, *b = inout;
    (void)dt;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                    a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

/* The root argument: `root` of group `g` (local rank), seen from here. */
static int root_arg(int g, int root)
{
    if (color == g)
        return lrank == root ? MPI_ROOT : MPI_PROC_NULL;
    return root;
}

static void show(const char *what, const int *v, int n)
{
    char line[2048];
    int at = 0;
    for (int i = 0; i < n && at < 2000; i++)
        at += snprintf(line + at, sizeof line - at, " %d", v[i]);
    line[at] = 0;
    say("%s:%s", what, line);
}

static void wait_or_not(MPI_Request *r, int nb)
{
    if (nb)
        OK(MPI_Wait(r, MPI_STATUS_IGNORE));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    color = T_rank % 2;
    MPI_Comm half, inter;
    OK(MPI_Comm_split(MPI_COMM_WORLD, color, T_rank, &half));
    OK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 9, &inter));
    OK(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
    OK(MPI_Comm_rank(inter, &lrank));
    OK(MPI_Comm_size(inter, &lsize));
    OK(MPI_Comm_remote_size(inter, &rsize));
    MPI_Op mm;
    MPI_Datatype mat;
    OK(MPI_Op_create(matmul, 0, &mm));
    OK(MPI_Type_contiguous(4, MPI_INT, &mat));
    OK(MPI_Type_commit(&mat));
    MPI_Request r = MPI_REQUEST_NULL;
    int buf[64], out[64], counts[8], displs[8];

    for (int nb = 0; nb < 2; nb++) {
        say("-- %s", nb ? "nonblocking" : "blocking");
        if (nb) {
            OK(MPI_Ibarrier(inter, &r));
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        } else {
            OK(MPI_Barrier(inter));
        }

        /* Bcast from group nb's local rank 0. */
        for (int i = 0; i < 6; i++)
            buf[i] = color == nb && lrank == 0 ? val(T_rank, i, 1) : -1;
        if (nb)
            OK(MPI_Ibcast(buf, 6, MPI_INT, root_arg(nb, 0), inter, &r));
        else
            OK(MPI_Bcast(buf, 6, MPI_INT, root_arg(nb, 0), inter));
        wait_or_not(&r, nb);
        show("bcast", buf, 6);

        /* Reduce (matrix product, in rank order) to group 1 - nb's last
         * rank, and a sum to group nb's rank 0. */
        int last = color == 1 - nb ? lsize - 1 : rsize - 1;
        for (int i = 0; i < 8; i++)
            buf[i] = val(T_rank, i, 2) % 5;
        for (int i = 0; i < 8; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Ireduce(buf, out, 2, mat, mm, root_arg(1 - nb, last), inter, &r));
        else
            OK(MPI_Reduce(buf, out, 2, mat, mm, root_arg(1 - nb, last), inter));
        wait_or_not(&r, nb);
        show("reduce matmul", out, 8);
        if (nb)
            OK(MPI_Ireduce(buf, out, 8, MPI_INT, MPI_SUM, root_arg(nb, 0), inter, &r));
        else
            OK(MPI_Reduce(buf, out, 8, MPI_INT, MPI_SUM, root_arg(nb, 0), inter));
        wait_or_not(&r, nb);
        show("reduce sum", out, 8);

        /* Allreduce: the other group's product and maximum. */
        if (nb)
            OK(MPI_Iallreduce(buf, out, 2, mat, mm, inter, &r));
        else
            OK(MPI_Allreduce(buf, out, 2, mat, mm, inter));
        wait_or_not(&r, nb);
        show("allreduce matmul", out, 8);
        if (nb)
            OK(MPI_Iallreduce(buf, out, 8, MPI_INT, MPI_MAX, inter, &r));
        else
            OK(MPI_Allreduce(buf, out, 8, MPI_INT, MPI_MAX, inter));
        wait_or_not(&r, nb);
        show("allreduce max", out, 8);

        /* Gather to group 0's rank 0, gatherv (remote rank j gives j + 1
         * ints, reversed places) to group 1's rank 0. */
        for (int i = 0; i < 8; i++)
            buf[i] = val(T_rank, i, 3 + nb);
        for (int i = 0; i < 64; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Igather(buf, 2, MPI_INT, out, 2, MPI_INT, root_arg(0, 0), inter, &r));
        else
            OK(MPI_Gather(buf, 2, MPI_INT, out, 2, MPI_INT, root_arg(0, 0), inter));
        wait_or_not(&r, nb);
        show("gather", out, 2 * rsize);
        int off = 0;
        for (int j = rsize - 1; j >= 0; j--) {
            counts[j] = j + 1;
            displs[j] = off;
            off += j + 1;
        }
        for (int i = 0; i < 64; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Igatherv(buf, lrank + 1, MPI_INT, out, counts, displs, MPI_INT,
                            root_arg(1, 0), inter, &r));
        else
            OK(MPI_Gatherv(buf, lrank + 1, MPI_INT, out, counts, displs, MPI_INT,
                           root_arg(1, 0), inter));
        wait_or_not(&r, nb);
        show("gatherv", out, off);

        /* Scatter from group 1's last rank, scatterv from group 0's rank 0. */
        int slast = color == 1 ? lsize - 1 : rsize - 1;
        for (int i = 0; i < 64; i++)
            buf[i] = val(T_rank, i, 5 + nb);
        for (int i = 0; i < 8; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Iscatter(buf, 3, MPI_INT, out, 3, MPI_INT, root_arg(1, slast), inter, &r));
        else
            OK(MPI_Scatter(buf, 3, MPI_INT, out, 3, MPI_INT, root_arg(1, slast), inter));
        wait_or_not(&r, nb);
        show("scatter", out, 3);
        for (int i = 0; i < 8; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Iscatterv(buf, counts, displs, MPI_INT, out, lrank + 1, MPI_INT,
                             root_arg(0, 0), inter, &r));
        else
            OK(MPI_Scatterv(buf, counts, displs, MPI_INT, out, lrank + 1, MPI_INT,
                            root_arg(0, 0), inter));
        wait_or_not(&r, nb);
        show("scatterv", out, lrank + 1);

        /* Allgather and allgatherv of the other group's data. */
        for (int i = 0; i < 8; i++)
            buf[i] = val(T_rank, i, 7 + nb);
        for (int i = 0; i < 64; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Iallgather(buf, 2, MPI_INT, out, 2, MPI_INT, inter, &r));
        else
            OK(MPI_Allgather(buf, 2, MPI_INT, out, 2, MPI_INT, inter));
        wait_or_not(&r, nb);
        show("allgather", out, 2 * rsize);
        for (int i = 0; i < 64; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Iallgatherv(buf, lrank + 1, MPI_INT, out, counts, displs, MPI_INT, inter,
                               &r));
        else
            OK(MPI_Allgatherv(buf, lrank + 1, MPI_INT, out, counts, displs, MPI_INT, inter));
        wait_or_not(&r, nb);
        show("allgatherv", out, off);

        /* Alltoall, alltoallv ((local + 2 remote) % 3 ints from each
         * local rank to each remote one), alltoallw of the same. */
        for (int i = 0; i < 64; i++)
            buf[i] = val(T_rank, i, 9 + nb);
        for (int i = 0; i < 64; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Ialltoall(buf, 2, MPI_INT, out, 2, MPI_INT, inter, &r));
        else
            OK(MPI_Alltoall(buf, 2, MPI_INT, out, 2, MPI_INT, inter));
        wait_or_not(&r, nb);
        show("alltoall", out, 2 * rsize);
        int sc[8], sd[8], rc[8], rd[8], so = 0, ro = 0;
        for (int j = 0; j < rsize; j++) {
            sc[j] = (lrank + 2 * j) % 3;
            sd[j] = so;
            so += sc[j];
            rc[j] = (j + 2 * lrank) % 3;
            rd[j] = ro;
            ro += rc[j];
        }
        for (int i = 0; i < 64; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Ialltoallv(buf, sc, sd, MPI_INT, out, rc, rd, MPI_INT, inter, &r));
        else
            OK(MPI_Alltoallv(buf, sc, sd, MPI_INT, out, rc, rd, MPI_INT, inter));
        wait_or_not(&r, nb);
        show("alltoallv", out, ro);
        MPI_Datatype ts[8];
        int sb[8], rb[8];
        for (int j = 0; j < rsize; j++) {
            ts[j] = MPI_INT;
            sb[j] = sd[j] * (int)sizeof(int);
            rb[j] = rd[j] * (int)sizeof(int);
        }
        for (int i = 0; i < 64; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Ialltoallw(buf, sc, sb, ts, out, rc, rb, ts, inter, &r));
        else
            OK(MPI_Alltoallw(buf, sc, sb, ts, out, rc, rb, ts, inter));
        wait_or_not(&r, nb);
        show("alltoallw", out, ro);

        /* Reduce_scatter: 6 ints in all, split over the local group;
         * reduce_scatter_block: 2 per local rank. Each gets its part of
         * the other group's sum. The totals must agree between the
         * groups, so the blocks are laid out per group size. */
        int rs[8], total = 6;
        for (int i = 0; i < lsize; i++)
            rs[i] = i == lsize - 1 ? total - (total / lsize) * (lsize - 1) : total / lsize;
        for (int i = 0; i < 12; i++)
            buf[i] = val(T_rank, i, 11 + nb);
        for (int i = 0; i < 8; i++)
            out[i] = -1;
        if (nb)
            OK(MPI_Ireduce_scatter(buf, out, rs, MPI_INT, MPI_SUM, inter, &r));
        else
            OK(MPI_Reduce_scatter(buf, out, rs, MPI_INT, MPI_SUM, inter));
        wait_or_not(&r, nb);
        show("reduce_scatter", out, rs[lrank]);
        if (lsize == rsize) {
            for (int i = 0; i < 8; i++)
                out[i] = -1;
            if (nb)
                OK(MPI_Ireduce_scatter_block(buf, out, 2, MPI_INT, MPI_SUM, inter, &r));
            else
                OK(MPI_Reduce_scatter_block(buf, out, 2, MPI_INT, MPI_SUM, inter));
            wait_or_not(&r, nb);
            show("reduce_scatter_block", out, 2);
        }
    }

    /* Errors: a root outside the remote group; scan is not defined on
     * intercommunicators. */
    CLASS("bcast root out of range", MPI_Bcast(buf, 1, MPI_INT, rsize, inter));
    CLASS("scan", MPI_Scan(buf, out, 1, MPI_INT, MPI_SUM, inter));
    OK(MPI_Barrier(inter));
    OK(MPI_Op_free(&mm));
    OK(MPI_Type_free(&mat));
    OK(MPI_Comm_free(&inter));
    OK(MPI_Comm_free(&half));
    MPI_Finalize();
    return 0;
}
