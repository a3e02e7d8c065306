/* ranks: 1 */
/* MPI_ERRORS_ARE_FATAL, the default: a bad rank ends the job, whose exit
 * status is the error class (MPI_ERR_RANK). One rank: with more, Hydra
 * may drop output the aborting job had not forwarded yet. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, x = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("r%d: before\n", rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        MPI_Send(&x, 1, MPI_INT, 99, 0, MPI_COMM_WORLD);
    else
        MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("r%d: not reached\n", rank);
    MPI_Finalize();
    return 0;
}
