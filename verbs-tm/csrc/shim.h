/* verbs-tm's C shim over libibverbs: flat functions over the TM verbs that
 * rdma-core defines as static inline in <infiniband/verbs.h>
 * (ibv_create_srq_ex, ibv_post_srq_ops, ibv_create_cq_ex, ibv_start_poll /
 * ibv_next_poll / ibv_end_poll, the ibv_wc_read_* family including
 * ibv_wc_read_tm_info, ibv_query_device_ex, ibv_post_send,
 * ibv_post_srq_recv), so that the Rust side needs no copy of the
 * verbs_context layout. Every function returns 0 or a positive errno. */
#ifndef VERBS_TM_SHIM_H
#define VERBS_TM_SHIM_H

#include <stddef.h>
#include <stdint.h>

struct vtm_dev;
struct ibv_context;
struct ibv_cq_ex;
struct ibv_srq;
struct ibv_qp;
struct ibv_mr;

struct vtm_caps {
	uint32_t max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge;
	uint32_t max_srq_wr, max_qp_wr, max_cqe, path_mtu;
	uint64_t max_mr_size;
};

struct vtm_sge {
	uint64_t addr;
	uint32_t length, lkey;
};

/* One tag-list operation (struct ibv_ops_wr without the chain pointers). */
struct vtm_op {
	uint64_t wr_id;
	uint32_t opcode, flags, unexpected_cnt, handle;
	uint64_t recv_wr_id, tag, mask;
	struct vtm_sge sge;
	int32_t num_sge;
};

struct vtm_wc {
	uint64_t wr_id;
	uint32_t status, opcode, wc_flags, byte_len, imm_data, qp_num;
	uint64_t tm_tag;
	uint32_t tm_priv, pad;
};

struct vtm_addr {
	uint8_t gid[16];
	uint32_t qpn, psn, mtu;
	uint16_t lid, pad;
};

int vtm_open(const char *name, struct vtm_dev **out, char *err, size_t errlen);
void vtm_close(struct vtm_dev *dev);
const char *vtm_dev_name(struct vtm_dev *dev);
int vtm_query(struct vtm_dev *dev, struct vtm_caps *caps);

int vtm_create_cq(struct ibv_context *ctx, uint32_t cqe, uint64_t wc_flags,
		  int extended, struct ibv_cq_ex **out);
int vtm_destroy_cq(struct ibv_cq_ex *cq);

int vtm_create_srq(struct ibv_context *ctx, void *pd, uint32_t comp_mask,
		   uint32_t srq_type, struct ibv_cq_ex *cq, uint32_t *max_wr,
		   uint32_t *max_sge, uint32_t max_num_tags, uint32_t max_ops,
		   struct ibv_srq **out);
int vtm_destroy_srq(struct ibv_srq *srq);

int vtm_post_srq_ops(struct ibv_srq *srq, struct vtm_op *ops, int n,
		     int *bad);
int vtm_post_srq_recv(struct ibv_srq *srq, uint64_t wr_id,
		      const struct vtm_sge *sge, int n);

int vtm_create_qp(void *pd, struct ibv_cq_ex *send_cq,
		  struct ibv_cq_ex *recv_cq, struct ibv_srq *srq,
		  uint32_t max_send_wr, uint32_t max_send_sge,
		  struct ibv_qp **out);
int vtm_destroy_qp(struct ibv_qp *qp);
uint32_t vtm_qp_num(struct ibv_qp *qp);
int vtm_local_addr(struct vtm_dev *dev, struct ibv_qp *qp,
		   struct vtm_addr *out);
int vtm_connect(struct vtm_dev *dev, struct ibv_qp *qp,
		const struct vtm_addr *local, const struct vtm_addr *remote);
int vtm_qp_state(struct ibv_qp *qp, int *state);

int vtm_post_send(struct ibv_qp *qp, uint64_t wr_id, uint32_t opcode,
		  uint32_t flags, const struct vtm_sge *sge, int n,
		  uint32_t imm, uint64_t remote_addr, uint32_t rkey);

int vtm_reg_mr(void *pd, void *addr, size_t len, uint32_t access,
	       struct ibv_mr **out, uint32_t *lkey, uint32_t *rkey);
int vtm_dereg_mr(struct ibv_mr *mr);

/* Polls up to max completions into out; returns how many (>= 0) or a
 * negative errno. */
int vtm_poll(struct ibv_cq_ex *cq, struct vtm_wc *out, int max);

struct ibv_context *vtm_dev_context(struct vtm_dev *dev);
void *vtm_dev_pd(struct vtm_dev *dev);

#endif
