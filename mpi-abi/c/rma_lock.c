/* ranks: 1 2 3 4 */
/* Passive-target RMA on MPI_Win_allocate memory: the program loads and
 * stores the base pointer; lock/unlock (shared and exclusive),
 * lock_all, flush, fetch_and_op, compare_and_swap, accumulate,
 * get_accumulate and their request-based forms. */
#include "tmx_test.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int me = T_rank, n = T_size;
    long *mem;
    MPI_Win win;
    OK(MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    int *flavor, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    say("flavor allocate %d", *flavor == MPI_WIN_FLAVOR_ALLOCATE);
    void *base;
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
    say("base attribute is the pointer %d", base == (void *)mem);
    /* Local stores, made visible by the lock epoch's synchronization. */
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, win));
    for (int i = 0; i < 8; i++)
        mem[i] = 0;
    mem[7] = 1000 + me;
    OK(MPI_Win_unlock(me, win));
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* A counter on rank 0: every rank fetch-and-adds 5 times. */
    long one = 1, prev;
    long maxprev = -1;
    for (int i = 0; i < 5; i++) {
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        OK(MPI_Fetch_and_op(&one, &prev, MPI_LONG, 0, 0, MPI_SUM, win));
        OK(MPI_Win_unlock(0, win));
        if (prev > maxprev)
            maxprev = prev;
    }
    say("fetched values increase %d", maxprev >= 4 && maxprev < 5 * n);

    /* A mutex by compare-and-swap on rank 0's slot 1; the holder
     * increments slot 2 with put/get inside its critical section. */
    for (int i = 0; i < 3; i++) {
        long zero = 0, mine = me + 1, seen = -1;
        OK(MPI_Win_lock_all(0, win));
        do {
            OK(MPI_Compare_and_swap(&mine, &zero, &seen, MPI_LONG, 0, 1, win));
            OK(MPI_Win_flush(0, win));
        } while (seen != 0);
        long c;
        OK(MPI_Get(&c, 1, MPI_LONG, 0, 2, 1, MPI_LONG, win));
        OK(MPI_Win_flush(0, win));
        c++;
        OK(MPI_Put(&c, 1, MPI_LONG, 0, 2, 1, MPI_LONG, win));
        OK(MPI_Win_flush(0, win));
        OK(MPI_Compare_and_swap(&zero, &mine, &seen, MPI_LONG, 0, 1, win));
        OK(MPI_Win_unlock_all(win));
        if (seen != mine)
            say("mutex release saw %ld", seen);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Exclusive lock: accumulate and get_accumulate on the right
     * neighbour; request-based forms under lock_all. */
    int right = (me + 1) % n;
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win));
    long add[2] = {me + 1, 2 * (me + 1)};
    OK(MPI_Accumulate(add, 2, MPI_LONG, right, 3, 2, MPI_LONG, MPI_SUM, win));
    long fetched[2] = {-1, -1};
    OK(MPI_Get_accumulate(add, 2, MPI_LONG, fetched, 2, MPI_LONG, right, 3, 2, MPI_LONG, MPI_MAX, win));
    OK(MPI_Win_unlock(right, win));
    say("get_accumulate fetched %ld %ld", fetched[0], fetched[1]);
    OK(MPI_Barrier(MPI_COMM_WORLD));

    OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
    MPI_Request rq[2];
    long r7 = -1, ra[1] = {-1};
    long three = 3;
    OK(MPI_Rget(&r7, 1, MPI_LONG, right, 7, 1, MPI_LONG, win, &rq[0]));
    OK(MPI_Rget_accumulate(&three, 1, MPI_LONG, ra, 1, MPI_LONG, right, 5, 1, MPI_LONG, MPI_SUM, win, &rq[1]));
    OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    OK(MPI_Win_flush_all(win));
    OK(MPI_Win_flush_local_all(win));
    OK(MPI_Win_flush_local(right, win));
    OK(MPI_Win_unlock_all(win));
    say("rget %ld rget_accumulate old %ld", r7, ra[0]);
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Local loads after the epochs: the program reads its memory. */
    OK(MPI_Win_lock(MPI_LOCK_SHARED, me, 0, win));
    OK(MPI_Win_sync(win));
    say("mem: %ld %ld %ld %ld %ld %ld %ld %ld", me == 0 ? mem[0] : -7, mem[1], me == 0 ? mem[2] : -7, mem[3],
        mem[4], mem[5], mem[6], mem[7]);
    OK(MPI_Win_unlock(me, win));
    OK(MPI_Win_free(&win));
    MPI_Finalize();
    return 0;
}
