/* A test double of the verbs context for verbs-tm's C shim: a fake
 * `struct verbs_context` (and SRQ, extended CQ, QP) whose operations record
 * their calls, so that the shim's dispatch through rdma-core's static
 * inline verbs and its error paths are checked without a NIC.
 *
 * Built and run by tests/ibverbs_shim.rs: cc shim.c shim_double.c -libverbs.
 * Prints one line per check and "N passed, M failed"; exits non-zero on a
 * failure. */
#include "shim.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

static int passed, failed;

#define CHECK(cond, what)                                                   \
	do {                                                                \
		if (cond) {                                                 \
			passed++;                                           \
		} else {                                                    \
			failed++;                                           \
			printf("FAILED: %s (%s:%d)\n", what, __FILE__,       \
			       __LINE__);                                   \
		}                                                           \
	} while (0)

static struct verbs_context vctx;
static struct ibv_srq srq;
static struct ibv_cq_ex cq;
static struct ibv_qp qp;

/* What the mocks saw. */
static int ops_calls, ops_fail_at = -1, ops_fail_rc;
static struct ibv_ops_wr seen_ops[8];
static int srq_ex_calls;
static struct ibv_srq_init_attr_ex seen_srq;
static int cq_ex_calls;
static uint64_t seen_wc_flags;
static int recv_calls, send_calls;
static struct ibv_recv_wr seen_recv;
static struct ibv_sge seen_recv_sge;
static struct ibv_send_wr seen_send;
static struct ibv_sge seen_send_sge;

/* Scripted completions. */
struct script {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	unsigned int flags;
	uint32_t byte_len, qp_num, imm_be;
	uint64_t tag;
	uint32_t priv;
};
static struct script scripted[4];
static int n_scripted, pos, start_calls, end_calls, tm_reads, next_fail_at = -1;

static int mock_post_srq_ops(struct ibv_srq *s, struct ibv_ops_wr *wr,
			     struct ibv_ops_wr **bad)
{
	int i = 0;

	(void)s;
	ops_calls++;
	for (; wr; wr = wr->next, i++) {
		if (i == ops_fail_at) {
			*bad = wr;
			return ops_fail_rc;
		}
		if (wr->opcode == IBV_WR_TAG_ADD)
			wr->tm.handle = 100 + (uint32_t)i;
		if (i < 8)
			seen_ops[i] = *wr;
	}
	return 0;
}

static struct ibv_srq *mock_create_srq_ex(struct ibv_context *ctx,
					  struct ibv_srq_init_attr_ex *a)
{
	srq_ex_calls++;
	seen_srq = *a;
	if (a->tm_cap.max_num_tags == 0) {
		errno = EINVAL;
		return NULL;
	}
	a->attr.max_wr = a->attr.max_wr + 1; /* granted >= requested */
	srq.context = ctx;
	return &srq;
}

static int mock_start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *a)
{
	(void)a;
	start_calls++;
	if (pos >= n_scripted)
		return ENOENT;
	c->wr_id = scripted[pos].wr_id;
	c->status = scripted[pos].status;
	return 0;
}

static int mock_next_poll(struct ibv_cq_ex *c)
{
	if (pos == next_fail_at)
		return EIO;
	pos++;
	if (pos >= n_scripted)
		return ENOENT;
	c->wr_id = scripted[pos].wr_id;
	c->status = scripted[pos].status;
	return 0;
}

static void mock_end_poll(struct ibv_cq_ex *c)
{
	(void)c;
	end_calls++;
	/* The entry being read when the poll ended is consumed. */
	if (pos < n_scripted)
		pos++;
}

static enum ibv_wc_opcode mock_opcode(struct ibv_cq_ex *c) { (void)c; return scripted[pos].opcode; }
static uint32_t mock_byte_len(struct ibv_cq_ex *c) { (void)c; return scripted[pos].byte_len; }
static __be32 mock_imm(struct ibv_cq_ex *c) { (void)c; return scripted[pos].imm_be; }
static uint32_t mock_qp_num(struct ibv_cq_ex *c) { (void)c; return scripted[pos].qp_num; }
static unsigned int mock_flags(struct ibv_cq_ex *c) { (void)c; return scripted[pos].flags; }
static void mock_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *tm)
{
	(void)c;
	tm_reads++;
	tm->tag = scripted[pos].tag;
	tm->priv = scripted[pos].priv;
}

static struct ibv_cq_ex *mock_create_cq_ex(struct ibv_context *ctx,
					   struct ibv_cq_init_attr_ex *a)
{
	cq_ex_calls++;
	seen_wc_flags = a->wc_flags;
	cq.context = ctx;
	cq.start_poll = mock_start_poll;
	cq.next_poll = mock_next_poll;
	cq.end_poll = mock_end_poll;
	cq.read_opcode = mock_opcode;
	cq.read_byte_len = mock_byte_len;
	cq.read_imm_data = mock_imm;
	cq.read_qp_num = mock_qp_num;
	cq.read_wc_flags = mock_flags;
	cq.read_tm_info = mock_tm_info;
	return &cq;
}

static int mock_post_srq_recv(struct ibv_srq *s, struct ibv_recv_wr *wr,
			      struct ibv_recv_wr **bad)
{
	(void)s;
	(void)bad;
	recv_calls++;
	seen_recv = *wr;
	seen_recv_sge = wr->sg_list[0];
	return 0;
}

static int mock_post_send(struct ibv_qp *q, struct ibv_send_wr *wr,
			  struct ibv_send_wr **bad)
{
	(void)q;
	(void)bad;
	send_calls++;
	seen_send = *wr;
	seen_send_sge = wr->sg_list[0];
	return 0;
}

static void setup(void)
{
	memset(&vctx, 0, sizeof(vctx));
	vctx.sz = sizeof(vctx);
	vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	vctx.post_srq_ops = mock_post_srq_ops;
	vctx.create_srq_ex = mock_create_srq_ex;
	vctx.create_cq_ex = mock_create_cq_ex;
	vctx.context.ops.post_srq_recv = mock_post_srq_recv;
	vctx.context.ops.post_send = mock_post_send;
	srq.context = &vctx.context;
	qp.context = &vctx.context;
	qp.qp_num = 77;
}

static void test_post_srq_ops(void)
{
	struct vtm_op ops[3];
	int bad = -1, rc;

	memset(ops, 0, sizeof(ops));
	ops[0].wr_id = 1;
	ops[0].opcode = IBV_WR_TAG_ADD;
	ops[0].flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC;
	ops[0].unexpected_cnt = 0x10005;
	ops[0].recv_wr_id = 55;
	ops[0].tag = 0xabc;
	ops[0].mask = ~0ull;
	ops[0].sge.addr = 0x1000;
	ops[0].sge.length = 64;
	ops[0].sge.lkey = 9;
	ops[0].num_sge = 1;
	ops[1].wr_id = 2;
	ops[1].opcode = IBV_WR_TAG_DEL;
	ops[1].flags = IBV_OPS_SIGNALED;
	ops[1].handle = 7;
	ops[2].wr_id = 3;
	ops[2].opcode = IBV_WR_TAG_SYNC;
	rc = vtm_post_srq_ops(&srq, ops, 3, &bad);
	CHECK(rc == 0 && ops_calls == 1, "post_srq_ops dispatches to verbs_context.post_srq_ops");
	CHECK(ops[0].handle == 100, "the ADD's handle is written back");
	CHECK(seen_ops[0].tm.add.sg_list && seen_ops[0].tm.add.sg_list->lkey == 9 &&
	      seen_ops[0].tm.add.num_sge == 1 && seen_ops[0].tm.add.recv_wr_id == 55 &&
	      seen_ops[0].tm.add.tag == 0xabc && seen_ops[0].tm.unexpected_cnt == 0x10005,
	      "the ADD's fields reach the provider");
	CHECK(seen_ops[1].tm.handle == 7 && seen_ops[1].opcode == IBV_WR_TAG_DEL &&
	      seen_ops[2].opcode == IBV_WR_TAG_SYNC && seen_ops[2].flags == 0,
	      "the chain keeps its order and flags");

	/* The provider refuses the second: bad index 1, the first's handle set. */
	ops_fail_at = 1;
	ops_fail_rc = ENOMEM;
	ops[0].handle = 0;
	rc = vtm_post_srq_ops(&srq, ops, 3, &bad);
	CHECK(rc == ENOMEM && bad == 1, "bad_wr becomes the index of the failing WR");
	CHECK(ops[0].handle == 100, "WRs before the failing one keep their handle");
	ops_fail_at = -1;

	/* An old provider without post_srq_ops: EOPNOTSUPP, bad = first. */
	vctx.post_srq_ops = NULL;
	bad = -1;
	rc = vtm_post_srq_ops(&srq, ops, 2, &bad);
	CHECK(rc == EOPNOTSUPP && bad == 0, "a missing op gives EOPNOTSUPP at WR 0");
	vctx.post_srq_ops = mock_post_srq_ops;

	/* A context too small to hold the op (sz check of verbs_get_ctx_op). */
	vctx.sz = 8;
	rc = vtm_post_srq_ops(&srq, ops, 1, &bad);
	CHECK(rc == EOPNOTSUPP, "a context smaller than the op's offset gives EOPNOTSUPP");
	vctx.sz = sizeof(vctx);
	CHECK(vtm_post_srq_ops(&srq, ops, 65, &bad) == EINVAL, "chains longer than 64 are refused");
	CHECK(vtm_post_srq_ops(&srq, ops, 0, &bad) == 0, "an empty chain posts nothing");
}

static void test_create(void)
{
	struct ibv_cq_ex *c = NULL;
	struct ibv_srq *s = NULL;
	uint32_t max_wr = 40, max_sge = 1;
	int rc;

	rc = vtm_create_cq(&vctx.context, 128, IBV_WC_EX_WITH_TM_INFO, 1, &c);
	CHECK(rc == 0 && c == &cq && cq_ex_calls == 1 &&
	      seen_wc_flags == IBV_WC_EX_WITH_TM_INFO,
	      "create_cq_ex dispatches with the wc_flags");
	rc = vtm_create_srq(&vctx.context, (void *)0x1, IBV_SRQ_INIT_ATTR_TYPE |
			    IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
			    IBV_SRQ_INIT_ATTR_TM, IBV_SRQT_TM, c, &max_wr, &max_sge,
			    15, 32, &s);
	CHECK(rc == 0 && s == &srq && srq_ex_calls == 1, "create_srq_ex dispatches");
	CHECK(seen_srq.srq_type == IBV_SRQT_TM && seen_srq.tm_cap.max_num_tags == 15 &&
	      seen_srq.tm_cap.max_ops == 32 && seen_srq.cq == (struct ibv_cq *)&cq &&
	      seen_srq.attr.max_wr == 40,
	      "the TM-SRQ attributes reach the provider");
	CHECK(max_wr == 41, "the granted max_wr is written back");
	max_wr = 40;
	rc = vtm_create_srq(&vctx.context, (void *)0x1, IBV_SRQ_INIT_ATTR_TYPE |
			    IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
			    IBV_SRQ_INIT_ATTR_TM, IBV_SRQT_TM, c, &max_wr, &max_sge,
			    0, 32, &s);
	CHECK(rc == EINVAL && s == NULL && max_wr == 40, "the provider's EINVAL comes back");
	vctx.create_srq_ex = NULL;
	rc = vtm_create_srq(&vctx.context, (void *)0x1, IBV_SRQ_INIT_ATTR_TYPE |
			    IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
			    IBV_SRQ_INIT_ATTR_TM, IBV_SRQT_TM, c, &max_wr, &max_sge,
			    15, 32, &s);
	CHECK(rc == EOPNOTSUPP, "no create_srq_ex: EOPNOTSUPP");
	vctx.create_srq_ex = mock_create_srq_ex;
	vctx.create_cq_ex = NULL;
	rc = vtm_create_cq(&vctx.context, 128, 0, 1, &c);
	CHECK(rc == EOPNOTSUPP, "no create_cq_ex: EOPNOTSUPP");
	vctx.create_cq_ex = mock_create_cq_ex;
}

static void test_poll(void)
{
	struct vtm_wc wc[4];
	int n;

	memset(scripted, 0, sizeof(scripted));
	scripted[0] = (struct script){ .wr_id = 5, .opcode = IBV_WC_TM_ADD,
				       .flags = IBV_WC_TM_SYNC_REQ };
	scripted[1] = (struct script){ .wr_id = 6, .opcode = IBV_WC_TM_RECV,
				       .flags = IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID |
						IBV_WC_WITH_IMM,
				       .byte_len = 99, .qp_num = 77,
				       .imm_be = htobe32(0x01020304), .tag = 0xfeed,
				       .priv = 3 };
	scripted[2] = (struct script){ .wr_id = 7, .opcode = IBV_WC_TM_RECV,
				       .status = IBV_WC_TM_RNDV_INCOMPLETE,
				       .flags = IBV_WC_TM_DATA_VALID };
	n_scripted = 3;
	pos = 0;
	n = vtm_poll(&cq, wc, 2);
	CHECK(n == 2 && start_calls == 1 && end_calls == 1, "poll stops at max and ends the poll");
	CHECK(wc[0].wr_id == 5 && wc[0].opcode == IBV_WC_TM_ADD &&
	      wc[0].wc_flags == IBV_WC_TM_SYNC_REQ, "first completion read");
	CHECK(wc[1].byte_len == 99 && wc[1].qp_num == 77 && wc[1].imm_data == 0x01020304 &&
	      wc[1].tm_tag == 0xfeed && wc[1].tm_priv == 3,
	      "byte_len, qp_num, imm (host order) and tm_info read");
	CHECK(tm_reads == 1, "tm_info is read only with IBV_WC_TM_MATCH");
	n = vtm_poll(&cq, wc, 4);
	CHECK(n == 1 && wc[0].status == IBV_WC_TM_RNDV_INCOMPLETE && wc[0].wr_id == 7,
	      "the rest comes with the next poll, status kept");
	n = vtm_poll(&cq, wc, 4);
	CHECK(n == 0 && end_calls == 2, "an empty CQ (ENOENT) is 0 without end_poll");
	n_scripted = 3;
	pos = 0;
	next_fail_at = 0;
	n = vtm_poll(&cq, wc, 4);
	CHECK(n == 1, "an error from next_poll after one entry returns that entry");
	next_fail_at = -1;
}

static void test_post(void)
{
	struct vtm_sge s = { .addr = 0x2000, .length = 32, .lkey = 4 };
	int rc;

	rc = vtm_post_srq_recv(&srq, 0x4000000000000003ull, &s, 1);
	CHECK(rc == 0 && recv_calls == 1 && seen_recv.wr_id == 0x4000000000000003ull &&
	      seen_recv.num_sge == 1 && seen_recv_sge.addr == 0x2000 &&
	      seen_recv_sge.lkey == 4, "post_srq_recv dispatches through ops");
	rc = vtm_post_send(&qp, 9, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, &s, 1, 0,
			   0x10000, 33);
	CHECK(rc == 0 && send_calls == 1 && seen_send.opcode == IBV_WR_RDMA_READ &&
	      seen_send.wr.rdma.remote_addr == 0x10000 && seen_send.wr.rdma.rkey == 33 &&
	      seen_send.send_flags == IBV_SEND_SIGNALED && seen_send_sge.length == 32,
	      "post_send (RDMA READ) dispatches with the remote address and key");
	rc = vtm_post_send(&qp, 10, IBV_WR_SEND_WITH_IMM, 0, &s, 1, 0x0a0b0c0d, 0, 0);
	CHECK(rc == 0 && seen_send.imm_data == htobe32(0x0a0b0c0d),
	      "immediate data goes big-endian");
	CHECK(vtm_post_send(&qp, 1, IBV_WR_SEND, 0, &s, 5, 0, 0, 0) == EINVAL,
	      "too many SGEs are refused");
}

static void test_no_device(void)
{
	struct vtm_dev *dev = (struct vtm_dev *)0x1;
	char err[160];
	int rc = vtm_open(NULL, &dev, err, sizeof(err));

	if (rc == 0) {
		printf("note: a TM-capable device is present (%s)\n", vtm_dev_name(dev));
		vtm_close(dev);
		return;
	}
	CHECK(dev == NULL && err[0] != 0 && strchr(err, '\n') == NULL,
	      "no device: NULL and a one-line reason");
	printf("no-device reason: %s (errno %d)\n", err, rc);
}

int main(void)
{
	setup();
	test_post_srq_ops();
	test_create();
	test_poll();
	test_post();
	test_no_device();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
