/* ranks: 1 2 4 */
/* A dynamic window over attached program memory: addresses exchanged
 * with MPI_Get_address, puts and gets by address. */
#include "tmx_test.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int me = T_rank, n = T_size;
    int right = (me + 1) % n, left = (me + n - 1) % n;
    /* A dynamic window: attach, exchange addresses, put by address. */
    MPI_Win dw;
    OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dw));
    int *flavor, flag;
    OK(MPI_Win_get_attr(dw, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    say("flavor dynamic %d", *flavor == MPI_WIN_FLAVOR_DYNAMIC);
    int *region = calloc(4, sizeof(int));
    OK(MPI_Win_attach(dw, region, 4 * sizeof(int)));
    MPI_Aint mine, *all = malloc(sizeof(MPI_Aint) * n);
    OK(MPI_Get_address(region, &mine));
    OK(MPI_Allgather(&mine, 1, MPI_AINT, all, 1, MPI_AINT, MPI_COMM_WORLD));
    OK(MPI_Win_fence(0, dw));
    int v[2] = {me, 100 + me};
    OK(MPI_Put(v, 2, MPI_INT, right, MPI_Aint_add(all[right], sizeof(int)), 2, MPI_INT, dw));
    OK(MPI_Win_fence(0, dw));
    say("dynamic region %d %d %d %d", region[0], region[1], region[2], region[3]);
    int got = -1;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, left, 0, dw));
    OK(MPI_Get(&got, 1, MPI_INT, left, MPI_Aint_add(all[left], 2 * sizeof(int)), 1, MPI_INT, dw));
    OK(MPI_Win_unlock(left, dw));
    say("dynamic get %d", got);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_detach(dw, region));
    OK(MPI_Win_free(&dw));
    free(region);
    free(all);
    MPI_Finalize();
    return 0;
}
