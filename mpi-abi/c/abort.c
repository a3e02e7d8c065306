/* ranks: 1 2 */
/* MPI_Abort: the job ends with the code given (the launcher's exit
 * status), whatever the other ranks are doing. Only a lone rank prints
 * before the abort: with more, Hydra may drop output the aborting job had
 * not forwarded yet (seen under load), and the comparison would be of
 * Hydra's timing. */
#include "tmx_test.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (T_size == 1)
        say("before");
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (T_rank == 0)
        MPI_Abort(MPI_COMM_WORLD, 7);
    else {
        int x;
        MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    say("not reached");
    MPI_Finalize();
    return 0;
}
