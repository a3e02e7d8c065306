/* ranks: 1 2 */
/* RMA error classes with MPI_ERRORS_RETURN on the window, window error
 * handlers, and window attributes of user keyvals. */
#include "tmx_test.h"

static int handled;

static void handler(MPI_Win *w, int *code, ...)
{
    (void)w;
    int c;
    MPI_Error_class(*code, &c);
    handled = c;
}

static int deleted;

static int del(MPI_Win w, int k, void *v, void *e)
{
    (void)w, (void)k, (void)e;
    deleted += *(int *)v;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int me = T_rank, n = T_size;
    int buf[4] = {0, 0, 0, 0};
    MPI_Win win;
    OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Errhandler eh;
    OK(MPI_Win_get_errhandler(win, &eh));
    say("default handler fatal %d", eh == MPI_ERRORS_ARE_FATAL);
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int v = 1;
    CLASS("put outside an epoch", MPI_Put(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
    CLASS("unlock without lock", MPI_Win_unlock(0, win));
    CLASS("bad lock type", MPI_Win_lock(12345, 0, 0, win));
    CLASS("complete without start", MPI_Win_complete(win));
    CLASS("shared_query of a created window", MPI_Win_shared_query(win, 0, &(MPI_Aint){0}, &(int){0}, &(void *){0}));
    OK(MPI_Win_fence(0, win));
    CLASS("put to a rank outside", MPI_Put(&v, 1, MPI_INT, n, 0, 1, MPI_INT, win));
    CLASS("accumulate with MPI_OP_NULL", MPI_Accumulate(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_OP_NULL, win));
    CLASS("negative target displacement", MPI_Put(&v, 1, MPI_INT, 0, -1, 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CLASS("negative size", MPI_Win_create(buf, -1, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &(MPI_Win){0}));
    CLASS("invalid window", MPI_Win_fence(0, MPI_WIN_NULL));

    /* A user handler, called by MPI_Win_call_errhandler and by errors. */
    MPI_Errhandler mine;
    OK(MPI_Win_create_errhandler(handler, &mine));
    OK(MPI_Win_set_errhandler(win, mine));
    OK(MPI_Win_call_errhandler(win, MPI_ERR_OTHER));
    say("handler saw class %d", handled);
    handled = -1;
    int rc = MPI_Win_unlock(me, win);
    say("unlock error class %d, handler saw %d", t_class(rc), handled);
    OK(MPI_Win_get_errhandler(win, &eh));
    say("get_errhandler is mine %d", eh == mine);
    OK(MPI_Errhandler_free(&eh));
    OK(MPI_Errhandler_free(&mine));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));

    /* Attributes of a user keyval, deleted at free. */
    int kv, val1 = 5, val2 = 7, *got, flag;
    OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, del, &kv, NULL));
    OK(MPI_Win_set_attr(win, kv, &val1));
    OK(MPI_Win_get_attr(win, kv, &got, &flag));
    say("attr %d flag %d", *got, flag);
    OK(MPI_Win_set_attr(win, kv, &val2));
    OK(MPI_Win_delete_attr(win, kv));
    OK(MPI_Win_get_attr(win, kv, &got, &flag));
    say("after delete flag %d, deleted %d", flag, deleted);
    OK(MPI_Win_set_attr(win, kv, &val1));
    MPI_Info info;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "no_locks", "false"));
    OK(MPI_Win_set_info(win, info));
    OK(MPI_Info_free(&info));
    OK(MPI_Win_get_info(win, &info));
    OK(MPI_Info_free(&info));
    OK(MPI_Win_free(&win));
    say("deleted at free %d", deleted);
    OK(MPI_Win_free_keyval(&kv));
    MPI_Finalize();
    return 0;
}
