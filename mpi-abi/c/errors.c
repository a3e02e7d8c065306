/* ranks: 1 2 */
/* Error classes of bad arguments (MPI_ERRORS_RETURN), error handlers
 * (user handlers called with the code, inheritance by duplicates),
 * truncation, user error classes and codes. */
#include "tmx_test.h"

static int calls = 0, last_code = 0;

static void handler(MPI_Comm *c, int *code, ...)
{
    (void)c;
    calls++;
    last_code = *code;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int x[4] = {0}, y[4];
    MPI_Status st;
    MPI_Request r;
    CLASS("send bad rank", MPI_Send(x, 1, MPI_INT, T_size, 0, MPI_COMM_WORLD));
    CLASS("send negative rank", MPI_Send(x, 1, MPI_INT, -5, 0, MPI_COMM_WORLD));
    CLASS("send bad tag", MPI_Send(x, 1, MPI_INT, 0, -3, MPI_COMM_WORLD));
    CLASS("send negative count", MPI_Send(x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD));
    CLASS("send null datatype", MPI_Send(x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD));
    CLASS("send null comm", MPI_Send(x, 1, MPI_INT, 0, 0, MPI_COMM_NULL));
    CLASS("recv bad rank", MPI_Recv(x, 1, MPI_INT, T_size + 1, 0, MPI_COMM_WORLD, &st));
    CLASS("recv bad tag", MPI_Recv(x, 1, MPI_INT, 0, -7, MPI_COMM_WORLD, &st));
    CLASS("isend bad rank", MPI_Isend(x, 1, MPI_INT, T_size, 0, MPI_COMM_WORLD, &r));
    CLASS("irecv bad tag", MPI_Irecv(x, 1, MPI_INT, 0, -2, MPI_COMM_WORLD, &r));
    CLASS("isend negative count", MPI_Isend(x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD, &r));
    CLASS("irecv negative count", MPI_Irecv(x, -4, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, &r));
    CLASS("bcast bad root", MPI_Bcast(x, 1, MPI_INT, T_size, MPI_COMM_WORLD));
    CLASS("reduce bad root", MPI_Reduce(x, y, 1, MPI_INT, MPI_SUM, -1, MPI_COMM_WORLD));
    CLASS("allreduce band double", MPI_Allreduce(x, y, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD));
    CLASS("allreduce null op", MPI_Allreduce(x, y, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD));
    CLASS("allreduce aliased", MPI_Allreduce(x, x, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CLASS("comm_size null", MPI_Comm_size(MPI_COMM_NULL, &x[0]));
    CLASS("type_size null", MPI_Type_size(MPI_DATATYPE_NULL, &x[0]));
    CLASS("group_size null", MPI_Group_size(MPI_GROUP_NULL, &x[0]));
    CLASS("comm_free world", (r = MPI_COMM_WORLD, MPI_Comm_free(&r)));
    CLASS("cancel null", (r = MPI_REQUEST_NULL, MPI_Cancel(&r)));
    CLASS("buffer_detach none", MPI_Buffer_detach(&r, &x[0]));

    /* Truncation: a message longer than the receive buffer. */
    int me = T_rank, peer = T_size - 1 - T_rank;
    OK(MPI_Isend(x, 4, MPI_INT, peer, 9, MPI_COMM_WORLD, &r));
    int rc = MPI_Recv(y, 2, MPI_INT, peer, 9, MPI_COMM_WORLD, &st);
    say("truncated recv: class %d source %d tag %d", t_class(rc), st.MPI_SOURCE, st.MPI_TAG);
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    OK(MPI_Isend(x, 4, MPI_INT, peer, 10, MPI_COMM_WORLD, &r));
    MPI_Request r2;
    OK(MPI_Irecv(y, 1, MPI_INT, peer, 10, MPI_COMM_WORLD, &r2));
    rc = MPI_Wait(&r2, &st);
    say("truncated irecv wait: class %d, request null %d", t_class(rc), r2 == MPI_REQUEST_NULL);
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    /* Waitall with one truncated receive: MPI_ERR_IN_STATUS. */
    MPI_Request rs[4];
    MPI_Status sts[4];
    OK(MPI_Isend(x, 1, MPI_INT, peer, 11, MPI_COMM_WORLD, &rs[0]));
    OK(MPI_Isend(x, 3, MPI_INT, peer, 12, MPI_COMM_WORLD, &rs[1]));
    OK(MPI_Irecv(y, 1, MPI_INT, peer, 11, MPI_COMM_WORLD, &rs[2]));
    OK(MPI_Irecv(y, 1, MPI_INT, peer, 12, MPI_COMM_WORLD, &rs[3]));
    rc = MPI_Waitall(4, rs, sts);
    say("waitall: class %d, statuses %d %d %d %d", t_class(rc), t_class(sts[0].MPI_ERROR),
        t_class(sts[1].MPI_ERROR), t_class(sts[2].MPI_ERROR), t_class(sts[3].MPI_ERROR));
    /* The same with the receives posted before their messages (pending
     * when the wait starts, completed by it together; the failed one last,
     * as MPICH leaves the requests after a failed one pending). */
    OK(MPI_Irecv(y + 1, 1, MPI_INT, peer, 14, MPI_COMM_WORLD, &rs[0]));
    OK(MPI_Irecv(y, 1, MPI_INT, peer, 13, MPI_COMM_WORLD, &rs[3]));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Isend(x, 1, MPI_INT, peer, 14, MPI_COMM_WORLD, &rs[1]));
    OK(MPI_Isend(x, 3, MPI_INT, peer, 13, MPI_COMM_WORLD, &rs[2]));
    rc = MPI_Waitall(4, rs, sts);
    say("pending waitall: class %d, statuses %d %d %d %d, tags %d %d, nulls %d", t_class(rc),
        t_class(sts[0].MPI_ERROR), t_class(sts[1].MPI_ERROR), t_class(sts[2].MPI_ERROR),
        t_class(sts[3].MPI_ERROR), sts[0].MPI_TAG, sts[3].MPI_TAG,
        (rs[0] == MPI_REQUEST_NULL) + (rs[1] == MPI_REQUEST_NULL) +
            (rs[2] == MPI_REQUEST_NULL) + (rs[3] == MPI_REQUEST_NULL));
    (void)me;

    /* A user error handler, inherited by a duplicate. */
    MPI_Errhandler eh, got;
    MPI_Comm dup;
    OK(MPI_Comm_create_errhandler(handler, &eh));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh));
    rc = MPI_Send(x, 1, MPI_INT, T_size + 3, 0, MPI_COMM_WORLD);
    say("handler calls %d code class %d, returned class %d", calls, t_class(last_code), t_class(rc));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    rc = MPI_Send(x, 1, MPI_INT, 0, -1, dup);
    say("dup handler calls %d code class %d", calls, t_class(last_code));
    OK(MPI_Comm_get_errhandler(dup, &got));
    say("dup has the handler %d", got == eh);
    OK(MPI_Comm_call_errhandler(dup, MPI_ERR_OTHER));
    say("call_errhandler: calls %d class %d", calls, t_class(last_code));
    OK(MPI_Errhandler_free(&got));
    OK(MPI_Errhandler_free(&eh));
    say("freed %d", eh == MPI_ERRHANDLER_NULL);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &got));
    say("world returns %d", got == MPI_ERRORS_RETURN);
    OK(MPI_Comm_free(&dup));

    /* User classes, codes and strings. */
    int cls, code, c2;
    OK(MPI_Add_error_class(&cls));
    OK(MPI_Add_error_code(cls, &code));
    OK(MPI_Add_error_string(code, "my code"));
    OK(MPI_Error_class(code, &c2));
    char s[MPI_MAX_ERROR_STRING];
    int len;
    OK(MPI_Error_string(code, s, &len));
    say("user code maps to its class %d, string '%s' (%d)", c2 == cls, s, len);
    int *lastused, flag;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &lastused, &flag));
    say("lastusedcode flag %d", flag);
    (void)lastused;
    for (int k = 0; k <= 19; k++) {
        OK(MPI_Error_class(k, &c2));
        if (c2 != k)
            say("class %d maps to %d", k, c2);
    }
    MPI_Finalize();
    return 0;
}
