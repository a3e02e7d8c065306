/* ranks: 2 3 4 */
/* General active-target synchronization (post/start/complete/wait and
 * Win_test) on a ring. */
#include "tmx_test.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int me = T_rank, n = T_size;
    int right = (me + 1) % n, left = (me + n - 1) % n;
    int buf[4] = {0, 0, 0, 0};
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Group world, gl, gr;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    OK(MPI_Group_incl(world, 1, &left, &gl));
    OK(MPI_Group_incl(world, 1, &right, &gr));
    for (int round = 0; round < 3; round++) {
        OK(MPI_Win_post(gl, 0, win));
        OK(MPI_Win_start(gr, 0, win));
        int v = 10 * me + round;
        OK(MPI_Put(&v, 1, MPI_INT, right, round, 1, MPI_INT, win));
        int g = -1;
        OK(MPI_Get(&g, 1, MPI_INT, right, 3, 1, MPI_INT, win));
        OK(MPI_Win_complete(win));
        say("round %d got %d", round, g);
        if (round == 1) {
            int flag = 0;
            while (!flag)
                OK(MPI_Win_test(win, &flag));
        } else {
            OK(MPI_Win_wait(win));
        }
        buf[3] = buf[round] + 1;
        say("round %d exposed %d", round, buf[round]);
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    OK(MPI_Group_free(&gl));
    OK(MPI_Group_free(&gr));
    OK(MPI_Group_free(&world));
    OK(MPI_Win_free(&win));

    MPI_Finalize();
    return 0;
}
