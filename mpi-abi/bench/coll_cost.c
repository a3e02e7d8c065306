/* Instruction counts of blocking collectives through the C library, for
 * before/after comparisons under callgrind (repeatable whatever the
 * machine is doing, unlike timings).
 *
 * Each function below runs REPS calls (default 50) of one collective at
 * one size (MPI_DOUBLE sums for allreduce, MPI_CHAR for bcast and
 * alltoall, as abi_bench.c). With the --dump-before options below, each
 * function's calls are one profile part (parts 2 to 4 are the single
 * warm-up calls, part 1 the start-up); in each part, the function's inclusive count divided
 * by REPS is the cost per call, and memcpy's inclusive count divided by
 * REPS the bytes copied per call (about one instruction per byte for
 * large copies). The counts include polling while the peer is late,
 * which grows with the machine's load: for tmx, subtract the inclusive
 * count of the device's progress passes (Device::check_since_on) and of
 * its blocking receives' waits (Device::recv_into, keeping one average
 * pass, its inclusive count divided by the calls of Endpoint::try_recv,
 * per receive) to get the work of the call itself.
 *
 *   mpicc.mpich -O2 -o coll_cost mpi-abi/bench/coll_cost.c
 *   target/release/tmrun -n 2 valgrind --tool=callgrind \
 *       --dump-before=sr_8 --dump-before='ar_*' --dump-before='bc_*' \
 *       --dump-before='a2a_*' --dump-before=check --callgrind-out-file=cg.%p ./coll_cost
 *   mpiexec.hydra -n 2 valgrind --tool=callgrind ... (the same options)
 *   callgrind_annotate --inclusive=yes cg.<pid>.<part> | grep -E ':(ar|bc|a2a)_|memcpy'
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reps = 50;
static char *sbuf, *rbuf;

#define AR(name, bytes)                                                          \
    __attribute__((noinline)) static void name(void) {                           \
        for (int i = 0; i < reps; i++)                                           \
            MPI_Allreduce(sbuf, rbuf, (bytes) / 8, MPI_DOUBLE, MPI_SUM,          \
                          MPI_COMM_WORLD);                                       \
    }
#define BC(name, bytes)                                                          \
    __attribute__((noinline)) static void name(void) {                           \
        for (int i = 0; i < reps; i++)                                           \
            MPI_Bcast(sbuf, (bytes), MPI_CHAR, i % 2, MPI_COMM_WORLD);           \
    }
#define A2A(name, bytes)                                                         \
    __attribute__((noinline)) static void name(void) {                           \
        for (int i = 0; i < reps; i++)                                           \
            MPI_Alltoall(sbuf, (bytes), MPI_CHAR, rbuf, (bytes), MPI_CHAR,       \
                         MPI_COMM_WORLD);                                        \
    }

/* The floor of allreduce 8 B on 2 ranks: the one exchange of its
 * message as one MPI_Send and one MPI_Recv of 8 B (each rank sends, then
 * receives its peer's). */
__attribute__((noinline)) static void sr_8(void) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = rank ^ 1;
    if (peer >= size)
        return;
    for (int i = 0; i < reps; i++) {
        MPI_Send(sbuf, 1, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD);
        MPI_Recv(rbuf, 1, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}

AR(ar_8, 8)
AR(ar_1k, 1024)
AR(ar_64k, 65536)
AR(ar_1m, 1048576)
BC(bc_8, 8)
BC(bc_1k, 1024)
BC(bc_64k, 65536)
BC(bc_1m, 1048576)
A2A(a2a_4, 4)
A2A(a2a_8, 8)
A2A(a2a_512, 512)
A2A(a2a_64k, 65536)

/* A check that the sums are right (both libraries print the same). */
__attribute__((noinline)) static void check(int rank) {
    MPI_Allreduce(sbuf, rbuf, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%g %g %g %g\n", ((double *)rbuf)[0], ((double *)rbuf)[1],
               ((double *)rbuf)[2], ((double *)rbuf)[3]);
}

int main(int argc, char **argv) {
    int rank, size;
    const char *e = getenv("REPS");
    if (e)
        reps = atoi(e);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t len = (size_t)4 << 20;
    sbuf = malloc(len);
    rbuf = malloc(len);
    for (size_t i = 0; i < len / 8; i++)
        ((double *)sbuf)[i] = (double)(i % 1000) + rank;
    memset(rbuf, 0, len);
    /* One of each first: connections, pools and lazy set-up are not
     * counted below. */
    int r = reps;
    reps = 1;
    ar_1m();
    bc_1m();
    a2a_64k();
    reps = r;
    MPI_Barrier(MPI_COMM_WORLD);
    sr_8();
    ar_8();
    ar_1k();
    ar_64k();
    ar_1m();
    bc_8();
    bc_1k();
    bc_64k();
    bc_1m();
    a2a_4();
    a2a_8();
    a2a_512();
    a2a_64k();
    check(rank);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
