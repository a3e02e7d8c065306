/* ranks: 1 2 */
/* The environment: MPI_Init_thread levels, Query_thread,
 * Is_thread_main, Initialized/Finalized, Wtime/Wtick, the processor
 * name, Alloc_mem/Free_mem, generalized requests, MPI_Pcontrol. */
#include "tmx_test.h"

static int queried, freed;

static int query_fn(void *extra, MPI_Status *st)
{
    queried++;
    MPI_Status_set_elements(st, MPI_INT, *(int *)extra);
    MPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}

static int free_fn(void *extra)
{
    (void)extra;
    freed++;
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    int flag, provided;
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Initialized(&flag);
    (void)flag;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &T_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &T_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    say("provided %d", provided);
    int q;
    OK(MPI_Query_thread(&q));
    say("query %d", q);
    OK(MPI_Is_thread_main(&flag));
    say("main %d", flag);
    OK(MPI_Initialized(&flag));
    say("initialized %d", flag);
    double t0 = MPI_Wtime(), t1 = MPI_Wtime();
    say("wtime monotonic %d, tick positive %d", t1 >= t0, MPI_Wtick() > 0);
    char name[MPI_MAX_PROCESSOR_NAME];
    int len;
    OK(MPI_Get_processor_name(name, &len));
    say("processor name length positive %d, terminated %d", len > 0, (int)strlen(name) == len);
    int *mem;
    OK(MPI_Alloc_mem(100 * sizeof(int), MPI_INFO_NULL, &mem));
    for (int i = 0; i < 100; i++)
        mem[i] = i;
    say("alloc_mem works %d", mem[99] == 99);
    OK(MPI_Free_mem(mem));
    OK(MPI_Pcontrol(1));
    /* A generalized request completed by the program. */
    MPI_Request gr;
    int count = 5;
    OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &count, &gr));
    OK(MPI_Test(&gr, &flag, MPI_STATUS_IGNORE));
    say("grequest before complete: flag %d", flag);
    OK(MPI_Grequest_complete(gr));
    MPI_Status st;
    OK(MPI_Wait(&gr, &st));
    int got;
    OK(MPI_Get_count(&st, MPI_INT, &got));
    say("grequest: count %d source %d queried %d freed %d null %d", got, st.MPI_SOURCE, queried, freed,
        gr == MPI_REQUEST_NULL);
    MPI_Comm parent;
    OK(MPI_Comm_get_parent(&parent));
    say("no parent %d", parent == MPI_COMM_NULL);
    MPI_Finalize();
    MPI_Finalized(&flag);
    say("finalized %d", flag);
    return 0;
}
