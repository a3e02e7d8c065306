/* ranks: 2 3 4 */
/* Intercommunicators: create from two halves of the world, sizes and
 * groups, point-to-point between the groups (sources are remote ranks),
 * dup, merge in both orders. */
#include "tmx_test.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int color = T_rank % 2, lrank, lsize;
    MPI_Comm half, inter, inter2, merged;
    OK(MPI_Comm_split(MPI_COMM_WORLD, color, T_rank, &half));
    OK(MPI_Comm_rank(half, &lrank));
    OK(MPI_Comm_size(half, &lsize));
    /* Leaders: local rank 0 of each half, world ranks 0 and 1. */
    OK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 42, &inter));
    int flag, size, rsize, rank;
    OK(MPI_Comm_test_inter(inter, &flag));
    OK(MPI_Comm_size(inter, &size));
    OK(MPI_Comm_remote_size(inter, &rsize));
    OK(MPI_Comm_rank(inter, &rank));
    say("inter %d: rank %d size %d remote %d", flag, rank, size, rsize);
    MPI_Group rg, wg;
    OK(MPI_Comm_remote_group(inter, &rg));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    int r0 = 0, w0;
    OK(MPI_Group_translate_ranks(rg, 1, &r0, wg, &w0));
    say("remote rank 0 is world rank %d", w0);
    /* Each rank of the even half sends to remote rank (rank % rsize). */
    int v = T_rank * 100, got = -1;
    MPI_Status st;
    if (color == 0) {
        OK(MPI_Send(&v, 1, MPI_INT, rank % rsize, 7, inter));
    } else {
        /* Odd rank r receives from every even rank that targets it. */
        for (int s = 0; s < rsize; s++) {
            if (s % size != rank)
                continue;
            OK(MPI_Recv(&got, 1, MPI_INT, s, 7, inter, &st));
            say("got %d from remote rank %d", got, st.MPI_SOURCE);
        }
    }
    OK(MPI_Comm_dup(inter, &inter2));
    OK(MPI_Comm_test_inter(inter2, &flag));
    OK(MPI_Comm_remote_size(inter2, &rsize));
    say("dup: inter %d remote %d", flag, rsize);
    /* Odd half high: evens come first. */
    OK(MPI_Intercomm_merge(inter2, color, &merged));
    int mrank, msize, sum;
    OK(MPI_Comm_rank(merged, &mrank));
    OK(MPI_Comm_size(merged, &msize));
    OK(MPI_Allreduce(&T_rank, &sum, 1, MPI_INT, MPI_SUM, merged));
    say("merged: rank %d of %d, sum %d", mrank, msize, sum);
    OK(MPI_Comm_free(&merged));
    /* Odd half low: odds come first. */
    OK(MPI_Intercomm_merge(inter, !color, &merged));
    OK(MPI_Comm_rank(merged, &mrank));
    say("merged the other way: rank %d", mrank);
    OK(MPI_Comm_free(&merged));
    OK(MPI_Group_free(&rg));
    OK(MPI_Group_free(&wg));
    OK(MPI_Comm_free(&inter2));
    OK(MPI_Comm_free(&inter));
    OK(MPI_Comm_free(&half));
    MPI_Finalize();
    return 0;
}
