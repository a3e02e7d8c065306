/* ranks: 1 2 */
/* MPI_Abort: the job ends with the code given (the launcher's exit
 * status), whatever the other ranks are doing. The aborting rank waits a
 * moment first: Hydra drops output it has not forwarded when the job
 * aborts, and under load the lines printed before the barrier were lost. */
#include "tmx_test.h"
#include <unistd.h>

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    say("before");
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (T_rank == 0) {
        usleep(300000);
        MPI_Abort(MPI_COMM_WORLD, 7);
    } else {
        int x;
        MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    say("not reached");
    MPI_Finalize();
    return 0;
}
