/* ranks: 1 2 3 4 */
/* Point-to-point: blocking and nonblocking sends in every mode, status
 * fields, wildcards, probes, sendrecv, persistent requests, the set
 * completion calls, MPI_PROC_NULL. */
#include "tmx_test.h"

static void ring(void)
{
    int next = (T_rank + 1) % T_size, prev = (T_rank + T_size - 1) % T_size;
    int out[8], in[8];
    MPI_Status st;
    for (int i = 0; i < 8; i++)
        out[i] = val(T_rank, i, 1);
    OK(MPI_Sendrecv(out, 8, MPI_INT, next, 5, in, 8, MPI_INT, prev, 5, MPI_COMM_WORLD, &st));
    int n;
    MPI_Get_count(&st, MPI_INT, &n);
    say("sendrecv from %d tag %d count %d: %d %d", st.MPI_SOURCE, st.MPI_TAG, n, in[0], in[7]);
    OK(MPI_Sendrecv_replace(out, 8, MPI_INT, next, 6, prev, 6, MPI_COMM_WORLD, &st));
    say("replace from %d: %d %d", st.MPI_SOURCE, out[0], out[7]);
}

static void modes(void)
{
    int peer = T_size - 1 - T_rank, v[4], w[4];
    MPI_Request r[4];
    MPI_Status st[4];
    char *buf = malloc(4 * (sizeof(int) * 4 + MPI_BSEND_OVERHEAD));
    int bsize = 4 * (sizeof(int) * 4 + MPI_BSEND_OVERHEAD);
    OK(MPI_Buffer_attach(buf, bsize));
    for (int m = 0; m < 4; m++) {
        for (int i = 0; i < 4; i++)
            v[i] = val(T_rank, i, m);
        OK(MPI_Irecv(w, 4, MPI_INT, peer, 10 + m, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        switch (m) {
        case 0: OK(MPI_Send(v, 4, MPI_INT, peer, 10 + m, MPI_COMM_WORLD)); break;
        case 1: OK(MPI_Ssend(v, 4, MPI_INT, peer, 10 + m, MPI_COMM_WORLD)); break;
        case 2: OK(MPI_Rsend(v, 4, MPI_INT, peer, 10 + m, MPI_COMM_WORLD)); break;
        case 3: OK(MPI_Bsend(v, 4, MPI_INT, peer, 10 + m, MPI_COMM_WORLD)); break;
        }
        OK(MPI_Wait(&r[0], &st[0]));
        say("mode %d: from %d tag %d data %d %d %d %d, request null %d", m, st[0].MPI_SOURCE,
            st[0].MPI_TAG, w[0], w[1], w[2], w[3], r[0] == MPI_REQUEST_NULL);
    }
    void *back;
    int backsize;
    OK(MPI_Buffer_detach(&back, &backsize));
    say("detached same buffer %d size %d", back == buf, backsize == bsize);
    free(buf);
    /* Nonblocking modes together, completed with waitall. */
    int out[4][2], in[4][2];
    for (int m = 0; m < 4; m++)
        out[m][0] = T_rank, out[m][1] = m;
    MPI_Request rr[8];
    for (int m = 0; m < 4; m++)
        OK(MPI_Irecv(in[m], 2, MPI_INT, peer, 20 + m, MPI_COMM_WORLD, &rr[4 + m]));
    buf = malloc(2 * sizeof(int) + MPI_BSEND_OVERHEAD);
    OK(MPI_Buffer_attach(buf, 2 * sizeof(int) + MPI_BSEND_OVERHEAD));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Isend(out[0], 2, MPI_INT, peer, 20, MPI_COMM_WORLD, &rr[0]));
    OK(MPI_Issend(out[1], 2, MPI_INT, peer, 21, MPI_COMM_WORLD, &rr[1]));
    OK(MPI_Irsend(out[2], 2, MPI_INT, peer, 22, MPI_COMM_WORLD, &rr[2]));
    OK(MPI_Ibsend(out[3], 2, MPI_INT, peer, 23, MPI_COMM_WORLD, &rr[3]));
    MPI_Status sts[8];
    OK(MPI_Waitall(8, rr, sts));
    for (int m = 0; m < 4; m++)
        say("nb mode %d: from %d tag %d got %d %d", m, sts[4 + m].MPI_SOURCE, sts[4 + m].MPI_TAG,
            in[m][0], in[m][1]);
    OK(MPI_Buffer_detach(&back, &backsize));
    free(buf);
}

static void wildcards(void)
{
    /* Every rank sends one message to rank 0; rank 0 receives them with
     * MPI_ANY_SOURCE after probing, in source order by tag selection. */
    int v = T_rank * 10;
    MPI_Status st;
    if (T_rank != 0)
        OK(MPI_Send(&v, 1, MPI_INT, 0, 100 + T_rank, MPI_COMM_WORLD));
    if (T_rank == 0) {
        for (int s = 1; s < T_size; s++) {
            int flag = 0, got, n;
            OK(MPI_Probe(MPI_ANY_SOURCE, 100 + s, MPI_COMM_WORLD, &st));
            OK(MPI_Get_count(&st, MPI_INT, &n));
            say("probe tag %d: source %d count %d", 100 + s, st.MPI_SOURCE, n);
            OK(MPI_Iprobe(st.MPI_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
            say("iprobe flag %d tag %d", flag, st.MPI_TAG);
            OK(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, 100 + s, MPI_COMM_WORLD, &st));
            say("recv %d from %d", got, st.MPI_SOURCE);
        }
        int flag = 1;
        OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        say("nothing left: flag %d", flag);
    }
    /* Rank 0 has looked for leftovers before anyone sends again. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* Matched probe. */
    if (T_size > 1) {
        if (T_rank == 1) {
            double d[3] = {1.5, 2.5, 3.5};
            OK(MPI_Send(d, 3, MPI_DOUBLE, 0, 7, MPI_COMM_WORLD));
        } else if (T_rank == 0) {
            MPI_Message msg;
            double d[3];
            int n;
            OK(MPI_Mprobe(1, 7, MPI_COMM_WORLD, &msg, &st));
            OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
            OK(MPI_Mrecv(d, 3, MPI_DOUBLE, &msg, &st));
            say("mrecv %d doubles: %g %g %g, message null %d", n, d[0], d[1], d[2],
                msg == MPI_MESSAGE_NULL);
        }
    }
}

static void proc_null(void)
{
    MPI_Status st;
    int x = 5, n = -1;
    OK(MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
    OK(MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st));
    MPI_Get_count(&st, MPI_INT, &n);
    say("proc_null: source %d tag %d count %d x %d", st.MPI_SOURCE, st.MPI_TAG, n, x);
    MPI_Request r;
    OK(MPI_Irecv(&x, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, &st));
    MPI_Message msg;
    OK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st));
    say("mprobe proc_null: no_proc %d", msg == MPI_MESSAGE_NO_PROC);
    OK(MPI_Mrecv(&x, 1, MPI_INT, &msg, &st));
    say("mrecv no_proc: source %d", st.MPI_SOURCE);
}

static void persistent(void)
{
    int next = (T_rank + 1) % T_size, prev = (T_rank + T_size - 1) % T_size;
    int out, in;
    MPI_Request r[2];
    MPI_Status st[2];
    OK(MPI_Send_init(&out, 1, MPI_INT, next, 30, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Recv_init(&in, 1, MPI_INT, prev, 30, MPI_COMM_WORLD, &r[1]));
    for (int k = 0; k < 3; k++) {
        out = T_rank * 100 + k;
        OK(MPI_Startall(2, r));
        OK(MPI_Waitall(2, r, st));
        say("persistent round %d: got %d from %d", k, in, st[1].MPI_SOURCE);
    }
    /* Inactive persistent requests complete at once with an empty status. */
    int flag;
    OK(MPI_Test(&r[0], &flag, &st[0]));
    say("inactive test: flag %d null %d", flag, r[0] == MPI_REQUEST_NULL);
    OK(MPI_Request_free(&r[0]));
    OK(MPI_Request_free(&r[1]));
    say("freed: %d %d", r[0] == MPI_REQUEST_NULL, r[1] == MPI_REQUEST_NULL);
}

static void sets(void)
{
    int next = (T_rank + 1) % T_size, prev = (T_rank + T_size - 1) % T_size;
    int out[3], in[3];
    MPI_Request r[4];
    MPI_Status st[4];
    for (int i = 0; i < 3; i++) {
        out[i] = T_rank + i;
        OK(MPI_Irecv(&in[i], 1, MPI_INT, prev, 40 + i, MPI_COMM_WORLD, &r[i]));
    }
    r[3] = MPI_REQUEST_NULL;
    for (int i = 2; i >= 0; i--)
        OK(MPI_Send(&out[i], 1, MPI_INT, next, 40 + i, MPI_COMM_WORLD));
    int done = 0, idx[4], count;
    while (done < 3) {
        OK(MPI_Waitsome(4, r, &count, idx, st));
        for (int k = 0; k < count; k++)
            done++;
    }
    OK(MPI_Waitsome(4, r, &count, idx, st));
    say("waitsome: all %d, then outcount undefined %d, got %d %d %d", done,
        count == MPI_UNDEFINED, in[0], in[1], in[2]);
    int index;
    OK(MPI_Waitany(4, r, &index, &st[0]));
    say("waitany on nulls: index undefined %d", index == MPI_UNDEFINED);
    OK(MPI_Irecv(&in[0], 1, MPI_INT, prev, 50, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Send(&out[0], 1, MPI_INT, next, 50, MPI_COMM_WORLD));
    OK(MPI_Waitany(4, r, &index, &st[0]));
    say("waitany: index %d tag %d", index, st[0].MPI_TAG);
    int flag = 0;
    OK(MPI_Irecv(&in[0], 1, MPI_INT, prev, 51, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Request_get_status(r[0], &flag, &st[0]));
    OK(MPI_Send(&out[0], 1, MPI_INT, next, 51, MPI_COMM_WORLD));
    while (!flag)
        OK(MPI_Testany(4, r, &index, &flag, &st[0]));
    say("testany: index %d value %d", index, in[0]);
    OK(MPI_Testall(4, r, &flag, MPI_STATUSES_IGNORE));
    say("testall on nulls: flag %d", flag);
}

static void window(void)
{
    /* Windows of 64 messages each way, one MPI_Waitall over the 128
     * requests (as the bandwidth benchmarks): receives posted before
     * their messages (pending when the wait starts), then sends first.
     * Each message has its own tag, so a status in the wrong place, or
     * data in the wrong buffer, shows. */
    enum { W = 64 };
    int peer = T_size - 1 - T_rank;
    int out[W], in[W];
    MPI_Request r[2 * W];
    MPI_Status st[2 * W];
    for (int order = 0; order < 2; order++) {
        for (int i = 0; i < W; i++)
            out[i] = val(T_rank, i, order), in[i] = -1;
        if (order == 0) {
            for (int i = 0; i < W; i++)
                OK(MPI_Irecv(&in[i], 1, MPI_INT, peer, 60 + i, MPI_COMM_WORLD, &r[i]));
            OK(MPI_Barrier(MPI_COMM_WORLD));
        }
        for (int i = 0; i < W; i++)
            OK(MPI_Isend(&out[i], 1, MPI_INT, peer, 60 + i, MPI_COMM_WORLD, &r[W + i]));
        if (order == 1)
            for (int i = 0; i < W; i++)
                OK(MPI_Irecv(&in[i], 1, MPI_INT, peer, 60 + i, MPI_COMM_WORLD, &r[i]));
        OK(MPI_Waitall(2 * W, r, st));
        int bad = 0, nulls = 0, count;
        for (int i = 0; i < W; i++) {
            OK(MPI_Get_count(&st[i], MPI_INT, &count));
            bad += in[i] != val(peer, i, order) || st[i].MPI_SOURCE != peer ||
                   st[i].MPI_TAG != 60 + i || count != 1;
        }
        for (int i = 0; i < 2 * W; i++)
            nulls += r[i] == MPI_REQUEST_NULL;
        say("window order %d: wrong %d, null requests %d", order, bad, nulls);
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    /* The receives of a window completed by MPI_Testall polling, then by
     * MPI_Waitany and MPI_Waitsome: each exactly once, in its place. */
    for (int how = 0; how < 3; how++) {
        int seen[W] = {0}, bad = 0, flag = 0, n = 0, idx[W], count;
        for (int i = 0; i < W; i++)
            in[i] = -1, out[i] = val(T_rank, i, 5 + how);
        for (int i = 0; i < W; i++)
            OK(MPI_Irecv(&in[i], 1, MPI_INT, peer, 60 + i, MPI_COMM_WORLD, &r[i]));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int i = 0; i < W; i++)
            OK(MPI_Isend(&out[i], 1, MPI_INT, peer, 60 + i, MPI_COMM_WORLD, &r[W + i]));
        if (how == 0) {
            while (!flag)
                OK(MPI_Testall(W, r, &flag, st));
            for (int i = 0; i < W; i++)
                seen[i] += st[i].MPI_TAG == 60 + i;
        } else {
            while (n < W) {
                if (how == 1) {
                    OK(MPI_Waitany(W, r, &idx[0], &st[0]));
                    count = 1;
                } else {
                    OK(MPI_Waitsome(W, r, &count, idx, st));
                }
                for (int k = 0; k < count; k++)
                    seen[idx[k]] += st[k].MPI_TAG == 60 + idx[k];
                n += count;
            }
        }
        for (int i = 0; i < W; i++)
            bad += seen[i] != 1 || in[i] != val(peer, i, 5 + how) || r[i] != MPI_REQUEST_NULL;
        OK(MPI_Waitall(W, r + W, MPI_STATUSES_IGNORE));
        say("window completed by %s: wrong %d", how == 0 ? "testall" : how == 1 ? "waitany" : "waitsome", bad);
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
}

/* Small sends that complete in their call, through each call that takes
 * a request: get_status (the request stays), test, testany, testsome,
 * waitany, waitsome, testall, wait, free. */
static void done_sends(void)
{
    int peer = T_size - 1 - T_rank, out[8], in[8], flag = 0, index, count, idx[2];
    MPI_Request r[8], rr[8];
    MPI_Status st[8];
    for (int i = 0; i < 8; i++) {
        out[i] = val(T_rank, i, 7);
        in[i] = -1;
        OK(MPI_Irecv(&in[i], 1, MPI_INT, peer, 70 + i, MPI_COMM_WORLD, &rr[i]));
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < 8; i++)
        OK(MPI_Isend(&out[i], 1, MPI_INT, peer, 70 + i, MPI_COMM_WORLD, &r[i]));
    for (flag = 0; !flag;)
        OK(MPI_Request_get_status(r[0], &flag, &st[0]));
    say("get_status: request kept %d", r[0] != MPI_REQUEST_NULL);
    for (flag = 0; !flag;)
        OK(MPI_Test(&r[0], &flag, &st[0]));
    say("test: request null %d, not cancelled %d", r[0] == MPI_REQUEST_NULL,
        (MPI_Test_cancelled(&st[0], &flag), !flag));
    for (flag = 0; !flag;)
        OK(MPI_Testany(2, r, &index, &flag, &st[0]));
    say("testany: index %d, request null %d", index, r[1] == MPI_REQUEST_NULL);
    for (count = 0; count == 0;)
        OK(MPI_Testsome(2, &r[1], &count, idx, st));
    say("testsome: count %d index %d, request null %d", count, idx[0], r[2] == MPI_REQUEST_NULL);
    OK(MPI_Waitany(2, &r[2], &index, &st[0]));
    say("waitany: index %d, request null %d", index, r[3] == MPI_REQUEST_NULL);
    OK(MPI_Waitsome(2, &r[3], &count, idx, st));
    say("waitsome: count %d index %d, request null %d", count, idx[0], r[4] == MPI_REQUEST_NULL);
    for (flag = 0; !flag;)
        OK(MPI_Testall(2, &r[4], &flag, st));
    say("testall: requests null %d", r[4] == MPI_REQUEST_NULL && r[5] == MPI_REQUEST_NULL);
    OK(MPI_Wait(&r[6], &st[0]));
    OK(MPI_Request_free(&r[7]));
    say("wait and free: requests null %d", r[6] == MPI_REQUEST_NULL && r[7] == MPI_REQUEST_NULL);
    OK(MPI_Waitall(8, rr, st));
    say("received %d %d %d %d", in[0], in[3], in[6], in[7]);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    ring();
    modes();
    wildcards();
    proc_null();
    persistent();
    sets();
    done_sends();
    window();
    MPI_Finalize();
    return 0;
}
