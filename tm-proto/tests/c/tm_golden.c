/* Golden wire bytes for tm-proto, produced with rdma-core's own structs.
 *
 * Builds against Debian's libibverbs-dev (infiniband/tm_types.h) and prints one
 * line per message: "<name> <hex bytes>". tm-proto's golden test compiles and
 * runs this and compares every line with its own encoding, so the Rust codec is
 * checked against the C definitions a NIC consumer uses, not against our own
 * reading of them.
 */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/tm_types.h>

static void dump(const char *name, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	printf("%s ", name);
	for (size_t i = 0; i < len; i++)
		printf("%02x", p[i]);
	printf("\n");
}

static size_t tmh(unsigned char *out, uint8_t op, const uint8_t res[3], uint32_t ctx, uint64_t tag)
{
	struct ibv_tmh h;
	memset(&h, 0, sizeof(h));
	h.opcode = op;
	memcpy(h.reserved, res, 3);
	h.app_ctx = htobe32(ctx);
	h.tag = htobe64(tag);
	memcpy(out, &h, sizeof(h));
	return sizeof(h);
}

static size_t rvh(unsigned char *out, uint64_t va, uint32_t rkey, uint32_t len)
{
	struct ibv_rvh r;
	r.va = htobe64(va);
	r.rkey = htobe32(rkey);
	r.len = htobe32(len);
	memcpy(out, &r, sizeof(r));
	return sizeof(r);
}

int main(void)
{
	_Static_assert(sizeof(struct ibv_tmh) == 16, "TMH is 16 bytes");
	_Static_assert(sizeof(struct ibv_rvh) == 16, "RVH is 16 bytes");
	const uint8_t zero[3] = { 0, 0, 0 };
	const uint8_t ucx[3] = { 0x05, 0xa1, 0xb2 }; /* UCX-style private bytes */
	unsigned char buf[128];
	size_t n;

	/* eager: TMH(EAGER) | "abc" */
	n = tmh(buf, IBV_TMH_EAGER, zero, 0x01020304u, 0x1122334455667788ull);
	memcpy(buf + n, "abc", 3);
	dump("eager", buf, n + 3);

	/* eager with an empty payload and an MPI envelope tag (ctx 0xABCD, src 0x123456, tag 0x789ABC) */
	n = tmh(buf, IBV_TMH_EAGER, zero, 0, 0xABCD123456789ABCull);
	dump("eager_empty", buf, n);

	/* rendezvous request: TMH(RNDV) | RVH | 2 bytes of metadata */
	n = tmh(buf, IBV_TMH_RNDV, ucx, 0xdeadbeefu, 0x0000abcd00000001ull);
	n += rvh(buf + n, 0x00007fffdeadb000ull, 0x12345678u, 0x00100000u);
	buf[n++] = 0xaa;
	buf[n++] = 0xbb;
	dump("rndv", buf, n);

	/* FIN answering that request: opcode FIN, reserved/app_ctx/tag copied, RVH copied */
	n = tmh(buf, IBV_TMH_FIN, ucx, 0xdeadbeefu, 0x0000abcd00000001ull);
	n += rvh(buf + n, 0x00007fffdeadb000ull, 0x12345678u, 0x00100000u);
	dump("fin", buf, n);

	/* no-tag: UCX active-message header {tmh_opcode, am_id} plus one data byte */
	buf[0] = IBV_TMH_NO_TAG;
	buf[1] = 0x07;
	buf[2] = 0x42;
	dump("notag", buf, 3);
	return 0;
}
