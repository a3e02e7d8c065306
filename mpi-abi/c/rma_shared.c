/* ranks: 1 2 4 */
/* Shared-memory windows: MPI_Win_allocate_shared (contiguous and not),
 * MPI_Win_shared_query, loads and stores through the pointers, and RMA
 * on the same window. */
#include "tmx_test.h"

static void run(int noncontig)
{
    int me = T_rank, n = T_size;
    MPI_Info info;
    OK(MPI_Info_create(&info));
    if (noncontig)
        OK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
    int *mine;
    MPI_Win win;
    /* Rank r has r + 1 ints. */
    OK(MPI_Win_allocate_shared(sizeof(int) * (me + 1), sizeof(int), info, MPI_COMM_WORLD, &mine, &win));
    OK(MPI_Info_free(&info));
    int *flavor, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    say("flavor shared %d", *flavor == MPI_WIN_FLAVOR_SHARED);
    OK(MPI_Win_lock_all(0, win));
    for (int i = 0; i <= me; i++)
        mine[i] = 100 * me + i;
    OK(MPI_Win_sync(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_sync(win));
    for (int r = 0; r < n; r++) {
        MPI_Aint size;
        int unit, *p;
        OK(MPI_Win_shared_query(win, r, &size, &unit, &p));
        say("segment %d: size %ld unit %d last %d", r, (long)size, unit, p[r]);
        if (!noncontig && r > 0) {
            int *prev;
            MPI_Aint ps;
            OK(MPI_Win_shared_query(win, r - 1, &ps, &unit, &prev));
            say("contiguous %d", (char *)prev + ps == (char *)p);
        }
    }
    MPI_Aint size;
    int unit, *p;
    OK(MPI_Win_shared_query(win, MPI_PROC_NULL, &size, &unit, &p));
    say("proc_null query: size %ld first %d", (long)size, p[0]);
    /* RMA on the shared window: add to the last rank's first int. */
    int one = 1;
    OK(MPI_Accumulate(&one, 1, MPI_INT, n - 1, 0, 1, MPI_INT, MPI_SUM, win));
    OK(MPI_Win_flush_all(win));
    OK(MPI_Win_sync(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_sync(win));
    OK(MPI_Win_shared_query(win, n - 1, &size, &unit, &p));
    say("after accumulates %d", p[0]);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Win_free(&win));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    run(0);
    run(1);
    MPI_Finalize();
    return 0;
}
