/* verbs-tm's C shim over libibverbs (see shim.h). Compiled by build.rs only
 * with the `ibverbs` cargo feature, against the system's rdma-core headers. */
#include "shim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#define VTM_PORT 1
#define VTM_MAX_CHAIN 64

struct vtm_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[64];
	enum ibv_mtu mtu;
	uint16_t lid;
	union ibv_gid gid;
};

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	switch (m) {
	case IBV_MTU_256: return 256;
	case IBV_MTU_512: return 512;
	case IBV_MTU_1024: return 1024;
	case IBV_MTU_2048: return 2048;
	case IBV_MTU_4096: return 4096;
	}
	return 1024;
}

static int errno_or(int fallback)
{
	return errno ? errno : fallback;
}

int vtm_open(const char *name, struct vtm_dev **out, char *err, size_t errlen)
{
	int num = 0, i, rc = ENODEV;
	struct ibv_device **list;

	*out = NULL;
	errno = 0;
	list = ibv_get_device_list(&num);
	if (!list) {
		rc = errno_or(ENOSYS);
		snprintf(err, errlen, "no RDMA subsystem (ibv_get_device_list: %s)",
			 strerror(rc));
		return rc;
	}
	snprintf(err, errlen, "%d RDMA device(s), none with IBV_TM_CAP_RC", num);
	for (i = 0; i < num; i++) {
		struct ibv_device_attr_ex attr;
		struct ibv_port_attr port;
		struct ibv_context *ctx;
		struct vtm_dev *dev;
		const char *dn = ibv_get_device_name(list[i]);

		if (name && dn && strcmp(name, dn) != 0)
			continue;
		ctx = ibv_open_device(list[i]);
		if (!ctx)
			continue;
		memset(&attr, 0, sizeof(attr));
		if (ibv_query_device_ex(ctx, NULL, &attr) ||
		    !(attr.tm_caps.flags & IBV_TM_CAP_RC) ||
		    ibv_query_port(ctx, VTM_PORT, &port) ||
		    port.state != IBV_PORT_ACTIVE) {
			ibv_close_device(ctx);
			continue;
		}
		dev = calloc(1, sizeof(*dev));
		if (!dev) {
			ibv_close_device(ctx);
			rc = ENOMEM;
			break;
		}
		dev->ctx = ctx;
		dev->pd = ibv_alloc_pd(ctx);
		if (!dev->pd) {
			free(dev);
			ibv_close_device(ctx);
			continue;
		}
		snprintf(dev->name, sizeof(dev->name), "%s", dn ? dn : "rdma");
		dev->mtu = port.active_mtu;
		dev->lid = port.lid;
		if (ibv_query_gid(ctx, VTM_PORT, 0, &dev->gid))
			memset(&dev->gid, 0, sizeof(dev->gid));
		*out = dev;
		rc = 0;
		err[0] = 0;
		break;
	}
	ibv_free_device_list(list);
	return rc;
}

void vtm_close(struct vtm_dev *dev)
{
	if (!dev)
		return;
	if (dev->pd)
		ibv_dealloc_pd(dev->pd);
	if (dev->ctx)
		ibv_close_device(dev->ctx);
	free(dev);
}

const char *vtm_dev_name(struct vtm_dev *dev) { return dev->name; }
struct ibv_context *vtm_dev_context(struct vtm_dev *dev) { return dev->ctx; }
void *vtm_dev_pd(struct vtm_dev *dev) { return dev->pd; }

int vtm_query(struct vtm_dev *dev, struct vtm_caps *caps)
{
	struct ibv_device_attr_ex attr;
	int rc;

	memset(&attr, 0, sizeof(attr));
	rc = ibv_query_device_ex(dev->ctx, NULL, &attr);
	if (rc)
		return rc;
	caps->max_rndv_hdr_size = attr.tm_caps.max_rndv_hdr_size;
	caps->max_num_tags = attr.tm_caps.max_num_tags;
	caps->flags = attr.tm_caps.flags;
	caps->max_ops = attr.tm_caps.max_ops;
	caps->max_sge = attr.tm_caps.max_sge;
	caps->max_srq_wr = (uint32_t)attr.orig_attr.max_srq_wr;
	caps->max_qp_wr = (uint32_t)attr.orig_attr.max_qp_wr;
	caps->max_cqe = (uint32_t)attr.orig_attr.max_cqe;
	caps->max_mr_size = attr.orig_attr.max_mr_size;
	caps->path_mtu = mtu_bytes(dev->mtu);
	return 0;
}

int vtm_create_cq(struct ibv_context *ctx, uint32_t cqe, uint64_t wc_flags,
		  int extended, struct ibv_cq_ex **out)
{
	errno = 0;
	if (extended) {
		struct ibv_cq_init_attr_ex a;

		memset(&a, 0, sizeof(a));
		a.cqe = cqe;
		a.wc_flags = wc_flags;
		*out = ibv_create_cq_ex(ctx, &a);
	} else {
		struct ibv_cq *cq = ibv_create_cq(ctx, (int)cqe, NULL, NULL, 0);

		/* Only the extended CQ is ever polled; a plain one exists for
		 * create_srq's validation. It is handed back as an opaque
		 * pointer and never cast to ibv_cq_ex by the shim. */
		*out = (struct ibv_cq_ex *)cq;
	}
	return *out ? 0 : errno_or(EINVAL);
}

int vtm_destroy_cq(struct ibv_cq_ex *cq)
{
	return ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

int vtm_create_srq(struct ibv_context *ctx, void *pd, uint32_t comp_mask,
		   uint32_t srq_type, struct ibv_cq_ex *cq, uint32_t *max_wr,
		   uint32_t *max_sge, uint32_t max_num_tags, uint32_t max_ops,
		   struct ibv_srq **out)
{
	struct ibv_srq_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.attr.max_wr = *max_wr;
	a.attr.max_sge = *max_sge;
	a.comp_mask = comp_mask;
	a.srq_type = (enum ibv_srq_type)srq_type;
	a.pd = pd;
	a.cq = cq ? ibv_cq_ex_to_cq(cq) : NULL;
	a.tm_cap.max_num_tags = max_num_tags;
	a.tm_cap.max_ops = max_ops;
	errno = 0;
	*out = ibv_create_srq_ex(ctx, &a);
	if (!*out)
		return errno_or(EINVAL);
	*max_wr = a.attr.max_wr;
	*max_sge = a.attr.max_sge;
	return 0;
}

int vtm_destroy_srq(struct ibv_srq *srq)
{
	return ibv_destroy_srq(srq);
}

int vtm_post_srq_ops(struct ibv_srq *srq, struct vtm_op *ops, int n, int *bad)
{
	struct ibv_ops_wr wrs[VTM_MAX_CHAIN];
	struct ibv_sge sges[VTM_MAX_CHAIN];
	struct ibv_ops_wr *bad_wr = NULL;
	int i, rc;

	*bad = 0;
	if (n <= 0)
		return 0;
	if (n > VTM_MAX_CHAIN)
		return EINVAL;
	memset(wrs, 0, sizeof(wrs[0]) * (size_t)n);
	for (i = 0; i < n; i++) {
		wrs[i].wr_id = ops[i].wr_id;
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		wrs[i].opcode = (enum ibv_ops_wr_opcode)ops[i].opcode;
		wrs[i].flags = (int)ops[i].flags;
		wrs[i].tm.unexpected_cnt = ops[i].unexpected_cnt;
		wrs[i].tm.handle = ops[i].handle;
		wrs[i].tm.add.recv_wr_id = ops[i].recv_wr_id;
		wrs[i].tm.add.tag = ops[i].tag;
		wrs[i].tm.add.mask = ops[i].mask;
		sges[i].addr = ops[i].sge.addr;
		sges[i].length = ops[i].sge.length;
		sges[i].lkey = ops[i].sge.lkey;
		wrs[i].tm.add.sg_list = ops[i].num_sge > 0 ? &sges[i] : NULL;
		wrs[i].tm.add.num_sge = ops[i].num_sge > 0 ? 1 : 0;
	}
	rc = ibv_post_srq_ops(srq, wrs, &bad_wr);
	/* ADD's handle is written at post time, for every WR posted. */
	for (i = 0; i < n; i++) {
		if (rc && bad_wr == &wrs[i])
			break;
		ops[i].handle = wrs[i].tm.handle;
	}
	if (rc)
		*bad = bad_wr ? (int)(bad_wr - wrs) : 0;
	return rc;
}

int vtm_post_srq_recv(struct ibv_srq *srq, uint64_t wr_id,
		      const struct vtm_sge *sge, int n)
{
	struct ibv_sge s[4];
	struct ibv_recv_wr wr, *bad = NULL;
	int i;

	if (n > 4 || n < 0)
		return EINVAL;
	for (i = 0; i < n; i++) {
		s[i].addr = sge[i].addr;
		s[i].length = sge[i].length;
		s[i].lkey = sge[i].lkey;
	}
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = s;
	wr.num_sge = n;
	return ibv_post_srq_recv(srq, &wr, &bad);
}

int vtm_create_qp(void *pd, struct ibv_cq_ex *send_cq,
		  struct ibv_cq_ex *recv_cq, struct ibv_srq *srq,
		  uint32_t max_send_wr, uint32_t max_send_sge,
		  struct ibv_qp **out)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.send_cq = ibv_cq_ex_to_cq(send_cq);
	a.recv_cq = ibv_cq_ex_to_cq(recv_cq);
	a.srq = srq;
	a.cap.max_send_wr = max_send_wr;
	a.cap.max_send_sge = max_send_sge;
	a.qp_type = IBV_QPT_RC;
	errno = 0;
	*out = ibv_create_qp(pd, &a);
	return *out ? 0 : errno_or(EINVAL);
}

int vtm_destroy_qp(struct ibv_qp *qp) { return ibv_destroy_qp(qp); }
uint32_t vtm_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

int vtm_local_addr(struct vtm_dev *dev, struct ibv_qp *qp,
		   struct vtm_addr *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out->gid, dev->gid.raw, 16);
	out->qpn = qp->qp_num;
	out->psn = qp->qp_num & 0xffffff;
	out->lid = dev->lid;
	out->mtu = (uint32_t)dev->mtu;
	return 0;
}

int vtm_connect(struct vtm_dev *dev, struct ibv_qp *qp,
		const struct vtm_addr *local, const struct vtm_addr *remote)
{
	struct ibv_qp_attr a;
	int rc;
	static const uint8_t zero[16];

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = VTM_PORT;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			    IBV_ACCESS_REMOTE_WRITE;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = remote->mtu < (uint32_t)dev->mtu ?
		     (enum ibv_mtu)remote->mtu : dev->mtu;
	a.dest_qp_num = remote->qpn;
	a.rq_psn = remote->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = remote->lid;
	a.ah_attr.port_num = VTM_PORT;
	if (memcmp(remote->gid, zero, 16) != 0) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, remote->gid, 16);
		a.ah_attr.grh.sgid_index = 0;
		a.ah_attr.grh.hop_limit = 64;
	}
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (rc)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = local->psn;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int vtm_qp_state(struct ibv_qp *qp, int *state)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &init);

	if (!rc)
		*state = (int)a.qp_state;
	return rc;
}

int vtm_post_send(struct ibv_qp *qp, uint64_t wr_id, uint32_t opcode,
		  uint32_t flags, const struct vtm_sge *sge, int n,
		  uint32_t imm, uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_sge s[4];
	struct ibv_send_wr wr, *bad = NULL;
	int i;

	if (n > 4 || n < 0)
		return EINVAL;
	for (i = 0; i < n; i++) {
		s[i].addr = sge[i].addr;
		s[i].length = sge[i].length;
		s[i].lkey = sge[i].lkey;
	}
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = s;
	wr.num_sge = n;
	wr.opcode = (enum ibv_wr_opcode)opcode;
	wr.send_flags = flags;
	wr.imm_data = htobe32(imm);
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

int vtm_reg_mr(void *pd, void *addr, size_t len, uint32_t access,
	       struct ibv_mr **out, uint32_t *lkey, uint32_t *rkey)
{
	errno = 0;
	*out = ibv_reg_mr(pd, addr, len, (int)access);
	if (!*out)
		return errno_or(EINVAL);
	*lkey = (*out)->lkey;
	*rkey = (*out)->rkey;
	return 0;
}

int vtm_dereg_mr(struct ibv_mr *mr) { return ibv_dereg_mr(mr); }

int vtm_poll(struct ibv_cq_ex *cq, struct vtm_wc *out, int max)
{
	struct ibv_poll_cq_attr attr = {0};
	int n = 0, rc;

	if (max <= 0)
		return 0;
	rc = ibv_start_poll(cq, &attr);
	if (rc == ENOENT)
		return 0;
	if (rc)
		return -rc;
	for (;;) {
		struct vtm_wc *w = &out[n];

		memset(w, 0, sizeof(*w));
		w->wr_id = cq->wr_id;
		w->status = (uint32_t)cq->status;
		w->opcode = (uint32_t)ibv_wc_read_opcode(cq);
		w->wc_flags = (uint32_t)ibv_wc_read_wc_flags(cq);
		w->byte_len = ibv_wc_read_byte_len(cq);
		w->qp_num = ibv_wc_read_qp_num(cq);
		if (w->wc_flags & IBV_WC_WITH_IMM)
			w->imm_data = be32toh(ibv_wc_read_imm_data(cq));
		if (w->wc_flags & IBV_WC_TM_MATCH) {
			struct ibv_wc_tm_info tm;

			ibv_wc_read_tm_info(cq, &tm);
			w->tm_tag = tm.tag;
			w->tm_priv = tm.priv;
		}
		n++;
		if (n == max)
			break;
		rc = ibv_next_poll(cq);
		if (rc == ENOENT)
			break;
		if (rc) {
			ibv_end_poll(cq);
			return n ? n : -rc;
		}
	}
	ibv_end_poll(cq);
	return n;
}
