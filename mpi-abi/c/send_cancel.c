/* ranks: 2 */
/* MPICH's send-cancel case: a send not yet matched, cancelled, then
 * waited for: the wait must return without the receiver's help (it is
 * blocked in a receive of another message), MPI_Test_cancelled tells,
 * and the receiver learns whether to receive it. For each send mode and
 * for sizes from one byte to a rendezvous-sized megabyte.
 *
 * MPICH 4.0.2 hangs here (its wait on the cancelled 10000-byte send never
 * returns), so this program is compared with send_cancel.out, the
 * outcome tmx guarantees: no wait hangs; an unmatched synchronous send is
 * always withdrawn; a standard or buffered send is withdrawn or received
 * (which one depends on its protocol), never both and never lost; and
 * nothing is left over at the end. */
#include "tmx_test.h"

static const int sizes[4] = {1, 100, 10000, 1000000};

static void one(int mode, int cs)
{
    int source = 0, dest = T_size - 1;
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Status status;
    MPI_Request req;
    int flag, n = sizes[cs];
    if (T_rank == source) {
        char *buf = calloc(n, 1), *bsend = NULL;
        int bsize = n + MPI_BSEND_OVERHEAD;
        switch (mode) {
        case 0: OK(MPI_Isend(buf, n, MPI_CHAR, dest, cs + n + 1, comm, &req)); break;
        case 1:
            bsend = malloc(bsize);
            OK(MPI_Buffer_attach(bsend, bsize));
            OK(MPI_Ibsend(buf, n, MPI_CHAR, dest, cs + n + 1, comm, &req));
            break;
        case 2: OK(MPI_Issend(buf, n, MPI_CHAR, dest, cs + n + 1, comm, &req)); break;
        }
        OK(MPI_Cancel(&req));
        OK(MPI_Wait(&req, &status));
        OK(MPI_Test_cancelled(&status, &flag));
        if (mode == 2)
            say("mode %d size %d: cancelled %d", mode, n, flag);
        if (flag)
            n = 0;
        OK(MPI_Send(&n, 1, MPI_INT, dest, 123, comm));
        n = cs + sizes[cs] + 1;
        OK(MPI_Send(&n, 1, MPI_INT, dest, 123, comm));
        if (bsend) {
            void *b;
            int s;
            OK(MPI_Buffer_detach(&b, &s));
            free(bsend);
        }
        free(buf);
    } else if (T_rank == dest) {
        int nn, tag;
        OK(MPI_Recv(&nn, 1, MPI_INT, source, 123, comm, &status));
        OK(MPI_Recv(&tag, 1, MPI_INT, source, 123, comm, &status));
        if (nn > 0) {
            char *b = malloc(nn);
            OK(MPI_Recv(b, nn, MPI_CHAR, source, tag, comm, &status));
            free(b);
        }
        int left = 1;
        OK(MPI_Iprobe(source, cs + sizes[cs] + 1, comm, &left, &status));
        say("mode %d size %d: received all or nothing %d, nothing left %d", mode, sizes[cs],
            nn == 0 || nn == sizes[cs], !left);
    }
    OK(MPI_Barrier(comm));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    for (int mode = 0; mode < 3; mode++)
        for (int cs = 0; cs < 4; cs++)
            one(mode, cs);
    MPI_Finalize();
    return 0;
}
