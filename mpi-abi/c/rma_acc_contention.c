/* ranks: 2 3 4 */
/* Accumulates from every rank at once into the same elements of rank 0's
 * MPI_Win_allocate window, under lock_all with a flush per operation (the
 * one-element MPI_SUM of the OSU-style benchmarks), on MPI_LONG, MPI_INT
 * and MPI_DOUBLE, and MPI_Put/MPI_Get of predefined types: no update is
 * lost (each element is updated atomically), and the errors of a
 * misplaced operation are raised on that path too. */
#include "tmx_test.h"

#define ROUNDS 500

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int me = T_rank, n = T_size;
    char *mem;
    MPI_Win win;
    OK(MPI_Win_allocate(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    for (int i = 0; i < 64; i++)
        mem[i] = 0;
    OK(MPI_Barrier(MPI_COMM_WORLD));

    long one_l = 1;
    int one_i[2] = {1, 2};
    double one_d = 0.5;
    CLASS("get outside an epoch", MPI_Get(&one_l, 1, MPI_LONG, 0, 0, 1, MPI_LONG, win));
    CLASS("accumulate outside an epoch",
          MPI_Accumulate(&one_l, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win));
    CLASS("put to MPI_PROC_NULL outside an epoch",
          MPI_Put(&one_l, 1, MPI_LONG, MPI_PROC_NULL, 0, 1, MPI_LONG, win));

    OK(MPI_Win_lock_all(0, win));
    for (int r = 0; r < ROUNDS; r++) {
        OK(MPI_Accumulate(&one_l, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win));
        OK(MPI_Win_flush(0, win));
        OK(MPI_Accumulate(one_i, 2, MPI_INT, 0, 8, 2, MPI_INT, MPI_SUM, win));
        OK(MPI_Win_flush(0, win));
        OK(MPI_Accumulate(&one_d, 1, MPI_DOUBLE, 0, 16, 1, MPI_DOUBLE, MPI_SUM, win));
        OK(MPI_Win_flush(0, win));
    }
    /* Each rank's own slot: put, flush, get back. */
    long mine = 1000 + me, back = 0;
    OK(MPI_Put(&mine, 1, MPI_LONG, 0, 24 + 8 * me, 1, MPI_LONG, win));
    OK(MPI_Win_flush(0, win));
    OK(MPI_Get(&back, 1, MPI_LONG, 0, 24 + 8 * me, 1, MPI_LONG, win));
    OK(MPI_Win_flush(0, win));
    say("own slot read back %ld", back);
    CLASS("zero-size put", MPI_Put(&one_l, 0, MPI_LONG, 0, 0, 0, MPI_LONG, win));
    CLASS("negative origin count", MPI_Put(&one_l, -1, MPI_LONG, 0, 0, 1, MPI_LONG, win));
    CLASS("negative displacement", MPI_Get(&back, 1, MPI_LONG, 0, -1, 1, MPI_LONG, win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (me == 0) {
        long *l = (long *)mem;
        int *i = (int *)(mem + 8);
        double *d = (double *)(mem + 16);
        say("long sum %ld (expect %d)", l[0], n * ROUNDS);
        say("int sums %d %d (expect %d %d)", i[0], i[1], n * ROUNDS, 2 * n * ROUNDS);
        say("double sum %.1f (expect %.1f)", d[0], 0.5 * n * ROUNDS);
        for (int r = 0; r < n; r++)
            say("slot %d holds %ld", r, l[3 + r]);
    }
    OK(MPI_Win_free(&win));
    MPI_Finalize();
    return 0;
}
