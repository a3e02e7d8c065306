/* ranks: 2 */
/* MPI_THREAD_MULTIPLE: a thread cancels receives that the main thread
 * waits for in MPI_Waitall (the way to end such a wait), while another
 * receive of the set completes normally. */
#include "tmx_test.h"
#include <pthread.h>
#include <unistd.h>

static MPI_Request reqs[3];

static void *canceller(void *arg)
{
    (void)arg;
    usleep(100000); /* let the main thread enter MPI_Waitall */
    OK(MPI_Cancel(&reqs[0]));
    OK(MPI_Cancel(&reqs[2]));
    return NULL;
}

int main(int argc, char **argv)
{
    int provided;
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &T_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &T_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    say("provided multiple %d", provided == MPI_THREAD_MULTIPLE);
    int never[2], got = -1, v = 42;
    if (T_rank == 1) {
        OK(MPI_Irecv(&never[0], 1, MPI_INT, 0, 99, MPI_COMM_WORLD, &reqs[0]));
        OK(MPI_Irecv(&got, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &reqs[1]));
        OK(MPI_Irecv(&never[1], 1, MPI_INT, 0, 98, MPI_COMM_WORLD, &reqs[2]));
        pthread_t t;
        pthread_create(&t, NULL, canceller, NULL);
        MPI_Status st[3];
        OK(MPI_Waitall(3, reqs, st));
        pthread_join(t, NULL);
        int c0, c1, c2;
        OK(MPI_Test_cancelled(&st[0], &c0));
        OK(MPI_Test_cancelled(&st[1], &c1));
        OK(MPI_Test_cancelled(&st[2], &c2));
        say("waitall: cancelled %d %d %d, got %d tag %d", c0, c1, c2, got, st[1].MPI_TAG);
    }
    if (T_rank == 0)
        OK(MPI_Send(&v, 1, MPI_INT, 1, 7, MPI_COMM_WORLD));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Finalize();
    return 0;
}
