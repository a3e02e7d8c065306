/* A real MPICH program for the launcher's interop tests: tmrun must speak
 * PMI-1 exactly as libmpich 4.0.2 expects. Usage: allreduce [abort CODE]
 * (with "abort", rank 1 calls MPI_Abort(MPI_COMM_WORLD, CODE) after the
 * allreduce). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, size, sum = 0, want;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    want = size * (size - 1) / 2;
    if (argc >= 3 && strcmp(argv[1], "abort") == 0 && rank == 1) {
        fprintf(stderr, "allreduce: rank 1 calls MPI_Abort(%s)\n", argv[2]);
        MPI_Abort(MPI_COMM_WORLD, atoi(argv[2]));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (sum != want) {
        printf("allreduce: rank %d of %d FAILED sum %d want %d\n", rank, size, sum, want);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    printf("allreduce: rank %d of %d ok sum %d\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
