/* Helpers of the C suite: every line a program prints starts with
 * "r<rank>: ", so that the harness can sort ranks apart while keeping
 * each rank's order. Errors return (MPI_ERRORS_RETURN) on
 * MPI_COMM_WORLD and MPI_COMM_SELF, and programs print error classes,
 * never error strings (those differ between implementations). */
#ifndef TMX_TEST_H
#define TMX_TEST_H

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int T_rank = -1;
static int T_size = 0;

static void say(const char *fmt, ...)
{
    va_list ap;
    char line[4096];
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("r%d: %s\n", T_rank, line);
}

static int t_class(int code)
{
    int c = -1;
    MPI_Error_class(code, &c);
    return c;
}

/* Prints the error class a call returned. */
#define CLASS(label, call) say("%s: class %d", label, t_class(call))

/* Aborts the job if a call that must succeed fails. */
#define OK(call)                                                        \
    do {                                                                \
        int rc_ = (call);                                               \
        if (rc_ != MPI_SUCCESS) {                                       \
            say("FAILED %s: class %d (line %d)", #call, t_class(rc_),   \
                __LINE__);                                              \
            MPI_Abort(MPI_COMM_WORLD, 3);                               \
        }                                                               \
    } while (0)

static void t_init(int *argc, char ***argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &T_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &T_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
}

/* A deterministic value for rank r, index i, salt s. */
static int val(int r, int i, int s)
{
    return (r * 131 + i * 17 + s * 7) % 1000 - 300;
}

#endif
