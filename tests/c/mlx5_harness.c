/*
 * Conformance oracle for rdmesh's mlx5 formats (tests/tests/mlx5_conformance.rs).
 *
 * Builds send WQEs in a ring the way rdma-core's mlx5 provider lays them out
 * (providers/mlx5/qp.c _mlx5_post_send: segment order, zero-length SGEs skipped, atomics'
 * 8-byte data segment, inline segment with MLX5_INLINE_SEG wrapping at the ring end, DS and
 * WQEBB accounting, 16-bit WQE index), using only the public definitions of
 * <infiniband/mlx5dv.h>: mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg, mlx5dv_set_dgram_seg,
 * mlx5dv_set_eth_seg, struct mlx5_wqe_raddr_seg / mlx5_wqe_atomic_seg / mlx5_wqe_inl_data_seg
 * filled field by field, and reads CQEs through struct mlx5_cqe64, struct mlx5_err_cqe and
 * mlx5dv_get_cqe_owner/opcode/se/format.
 *
 * Protocol: one command per stdin line, one or more result lines per command on stdout.
 *   ring LOG2_WQEBBS START_PC QPN         -> "ok"
 *   post OP SIGNALED SOLICITED FENCE IMM RADDR RKEY COMPARE SWAP_ADD NSGE {ADDR LKEY LEN}*
 *        INLINE_HEX|-                      -> "W INDEX DS HEX" and "D DBREC_HEX"
 *   dump                                  -> "R HEX" (the whole ring)
 *   cqe HEX128                            -> "C f1 f2 ..." (decimal fields, see below)
 *   dgram KEY DQP EXT SRSL FLMLID RLID RMAC_HEX TCLASS HOPLIMIT GRHGIDFL RGID_HEX -> "G HEX"
 *   eth CS_FLAGS MSS HDR_HEX|-            -> "E HEX"
 * Numbers are decimal; OP is one of nop send send_imm send_inval rdma_write rdma_write_imm
 * rdma_read atomic_cs atomic_fa. Padding the provider leaves stale is zeroed here (rdmesh
 * writes zeros there too).
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *ring;
static size_t ring_len;
static uint32_t wqe_cnt;
static uint32_t cur_post;
static uint32_t qpn;

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static size_t unhex(const char *s, uint8_t *out, size_t max)
{
	size_t n = 0;
	if (strcmp(s, "-") == 0)
		return 0;
	while (s[0] && s[1] && n < max) {
		out[n++] = (uint8_t)(hexval(s[0]) << 4 | hexval(s[1]));
		s += 2;
	}
	return n;
}

static void puthex(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", p[i]);
}

/* Copy into the ring at byte offset off, wrapping at qend; returns the new offset. */
static size_t ring_copy(size_t off, const uint8_t *src, size_t n)
{
	size_t first = ring_len - off < n ? ring_len - off : n;
	memcpy(ring + off, src, first);
	if (n > first) {
		memcpy(ring, src + first, n - first);
		return n - first;
	}
	off += first;
	return off == ring_len ? 0 : off;
}

static size_t ring_zero(size_t off, size_t n)
{
	static const uint8_t z[1024];
	return ring_copy(off, z, n);
}

static int opcode_of(const char *op)
{
	static const struct { const char *name; int op; } t[] = {
		{ "nop", MLX5_OPCODE_NOP },
		{ "send", MLX5_OPCODE_SEND },
		{ "send_imm", MLX5_OPCODE_SEND_IMM },
		{ "send_inval", MLX5_OPCODE_SEND_INVAL },
		{ "rdma_write", MLX5_OPCODE_RDMA_WRITE },
		{ "rdma_write_imm", MLX5_OPCODE_RDMA_WRITE_IMM },
		{ "rdma_read", MLX5_OPCODE_RDMA_READ },
		{ "atomic_cs", MLX5_OPCODE_ATOMIC_CS },
		{ "atomic_fa", MLX5_OPCODE_ATOMIC_FA },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (strcmp(t[i].name, op) == 0)
			return t[i].op;
	return -1;
}

static char *tok(void)
{
	char *t = strtok(NULL, " \t\r\n");
	if (!t) {
		fprintf(stderr, "harness: missing argument\n");
		exit(2);
	}
	return t;
}

static uint64_t num(void)
{
	return strtoull(tok(), NULL, 10);
}

static void cmd_post(void)
{
	char *op = tok();
	int opcode = opcode_of(op);
	int signaled = (int)num(), solicited = (int)num(), fence = (int)num();
	uint32_t imm = (uint32_t)num();
	uint64_t raddr = num();
	uint32_t rkey = (uint32_t)num();
	uint64_t compare = num(), swap_add = num();
	int nsge = (int)num();
	uint64_t addr[256];
	uint32_t lkey[256], len[256];
	static uint8_t inl[1024];
	size_t inl_len;
	uint32_t idx = cur_post & (wqe_cnt - 1);
	uint8_t *ctrl = ring + ((size_t)idx << MLX5_SEND_WQE_SHIFT);
	size_t off = (size_t)idx << MLX5_SEND_WQE_SHIFT;
	int size = sizeof(struct mlx5_wqe_ctrl_seg) / 16;
	uint8_t fm_ce_se;
	int atomic = opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_FA;

	if (opcode < 0 || nsge > 256) {
		fprintf(stderr, "harness: bad post\n");
		exit(2);
	}
	for (int i = 0; i < nsge; i++) {
		addr[i] = num();
		lkey[i] = (uint32_t)num();
		len[i] = (uint32_t)num();
	}
	inl_len = unhex(tok(), inl, sizeof(inl));

	/* rdma-core: *(uint32_t *)(seg + 8) = 0 clears signature and the reserved bytes. */
	memset(ctrl + 8, 0, 4);
	off += sizeof(struct mlx5_wqe_ctrl_seg);

	if (opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM ||
	    opcode == MLX5_OPCODE_RDMA_READ || atomic) {
		struct mlx5_wqe_raddr_seg *r = (void *)(ring + off);
		r->raddr = htobe64(raddr);
		r->rkey = htobe32(rkey);
		r->reserved = 0;
		off += sizeof(*r);
		size += sizeof(*r) / 16;
		if (atomic) {
			struct mlx5_wqe_atomic_seg *a = (void *)(ring + off);
			if (opcode == MLX5_OPCODE_ATOMIC_CS) {
				a->swap_add = htobe64(swap_add);
				a->compare = htobe64(compare);
			} else {
				a->swap_add = htobe64(swap_add);
				a->compare = 0; /* rdma-core leaves it unwritten; rdmesh writes 0 */
			}
			off += sizeof(*a);
			size += sizeof(*a) / 16;
		}
	}
	if (off == ring_len)
		off = 0;

	if (inl_len) {
		struct mlx5_wqe_inl_data_seg *seg = (void *)(ring + off);
		size_t seg_bytes = (inl_len + sizeof(seg->byte_count) + 15) & ~(size_t)15;
		size_t o = off + sizeof(seg->byte_count);
		o = ring_copy(o, inl, inl_len);
		ring_zero(o, seg_bytes - sizeof(seg->byte_count) - inl_len);
		seg->byte_count = htobe32((uint32_t)inl_len | MLX5_INLINE_SEG);
		size += (int)(seg_bytes / 16);
	} else {
		for (int i = 0; i < nsge; i++) {
			if (off == ring_len)
				off = 0;
			if (!len[i])
				continue;
			mlx5dv_set_data_seg((void *)(ring + off), atomic ? 8 : len[i], lkey[i],
					    (uintptr_t)addr[i]);
			off += sizeof(struct mlx5_wqe_data_seg);
			size += sizeof(struct mlx5_wqe_data_seg) / 16;
		}
	}

	fm_ce_se = (signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
		   (solicited ? MLX5_WQE_CTRL_SOLICITED : 0) | (fence ? MLX5_WQE_CTRL_FENCE : 0);
	mlx5dv_set_ctrl_seg((void *)ctrl, (uint16_t)(cur_post & 0xffff), (uint8_t)opcode, 0, qpn,
			    fm_ce_se, (uint8_t)size, 0, htobe32(imm));

	printf("W %u %d ", cur_post & 0xffff, size);
	for (int i = 0; i < size * 16; i++)
		printf("%02x", ring[(((size_t)idx << MLX5_SEND_WQE_SHIFT) + i) % ring_len]);
	printf("\n");

	cur_post += (size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	{
		uint32_t dbrec[2] = { 0, 0 };
		dbrec[MLX5_SND_DBR] = htobe32(cur_post & 0xffff);
		printf("D ");
		puthex((uint8_t *)&dbrec[MLX5_SND_DBR], 4);
		printf("\n");
	}
}

static void cmd_cqe(void)
{
	uint8_t buf[64] __attribute__((aligned(64)));
	struct mlx5_cqe64 *c = (void *)buf;
	struct mlx5_err_cqe *e = (void *)buf;
	if (unhex(tok(), buf, 64) != 64) {
		fprintf(stderr, "harness: cqe needs 64 bytes\n");
		exit(2);
	}
	printf("C %u %u %u %u %u %u %u %u %u %u %u %u %llu %u %u %u %u %u %u\n",
	       mlx5dv_get_cqe_opcode(c), mlx5dv_get_cqe_owner(c), mlx5dv_get_cqe_se(c),
	       mlx5dv_get_cqe_format(c), be32toh(c->byte_cnt),
	       be32toh(c->sop_drop_qpn) & 0xffffff, be16toh(c->wqe_counter),
	       be32toh(c->imm_inval_pkey), be32toh(c->srqn_uidx), be32toh(c->flags_rqpn),
	       be16toh(c->slid), be16toh(c->vlan_info), (unsigned long long)be64toh(c->timestamp),
	       be32toh(c->sop_drop_qpn), c->signature, be16toh(c->wqe_id), e->syndrome,
	       e->vendor_err_synd, be32toh(e->s_wqe_opcode_qpn));
}

static void cmd_dgram(void)
{
	struct mlx5_wqe_datagram_seg seg;
	uint64_t key = num();
	uint32_t dqp = (uint32_t)num();
	uint8_t ext = (uint8_t)num(), srsl = (uint8_t)num(), flmlid = (uint8_t)num();
	uint16_t rlid = (uint16_t)num();
	uint8_t rmac[6], rgid[16];
	uint8_t tclass, hop;
	uint32_t grh;
	unhex(tok(), rmac, 6);
	tclass = (uint8_t)num();
	hop = (uint8_t)num();
	grh = (uint32_t)num();
	unhex(tok(), rgid, 16);
	memset(&seg, 0, sizeof(seg));
	mlx5dv_set_dgram_seg(&seg, key, dqp, ext, srsl, flmlid, rlid, rmac, tclass, hop, grh, rgid);
	printf("G ");
	puthex((uint8_t *)&seg, sizeof(seg));
	printf("\n");
}

static void cmd_eth(void)
{
	static uint8_t buf[1024];
	struct mlx5_wqe_eth_seg *seg = (void *)buf;
	uint8_t cs = (uint8_t)num();
	uint16_t mss = (uint16_t)num();
	static uint8_t hdr[1000];
	size_t h = unhex(tok(), hdr, sizeof(hdr));
	/* Segment size as rdma-core counts it (qp.c set_tso_eth_seg / the non-TSO path):
	 * the 16-byte base holds inline_hdr_start[2]; further header bytes round up to 16. */
	size_t n = h <= 2 ? 16 : 16 + ((h - 2 + 15) & ~(size_t)15);
	memset(buf, 0, sizeof(buf));
	mlx5dv_set_eth_seg(seg, cs, mss, (uint16_t)h, hdr);
	printf("E ");
	puthex(buf, n);
	printf("\n");
}

int main(void)
{
	static char line[1 << 16];
	setvbuf(stdout, NULL, _IOFBF, 1 << 20);
	while (fgets(line, sizeof(line), stdin)) {
		char *cmd = strtok(line, " \t\r\n");
		if (!cmd)
			continue;
		if (strcmp(cmd, "ring") == 0) {
			unsigned log2 = (unsigned)num();
			wqe_cnt = 1u << log2;
			cur_post = (uint32_t)num();
			qpn = (uint32_t)num();
			ring_len = (size_t)wqe_cnt * MLX5_SEND_WQE_BB;
			free(ring);
			ring = calloc(1, ring_len);
			printf("ok\n");
		} else if (strcmp(cmd, "post") == 0) {
			cmd_post();
		} else if (strcmp(cmd, "dump") == 0) {
			printf("R ");
			puthex(ring, ring_len);
			printf("\n");
		} else if (strcmp(cmd, "cqe") == 0) {
			cmd_cqe();
		} else if (strcmp(cmd, "dgram") == 0) {
			cmd_dgram();
		} else if (strcmp(cmd, "eth") == 0) {
			cmd_eth();
		} else {
			fprintf(stderr, "harness: unknown command %s\n", cmd);
			return 2;
		}
	}
	fflush(stdout);
	return 0;
}
