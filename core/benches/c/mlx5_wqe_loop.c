/*
 * Reference loop for core/benches/mlx5_wqe.rs: the same work written with rdma-core's
 * <infiniband/mlx5dv.h> helpers, compiled -O2 by the bench and timed here.
 *
 *   mlx5_wqe_loop single ITERS REPEATS   one RDMA_WRITE WQE (ctrl + raddr + one data
 *                                        segment) into a 256-WQEBB ring, then the send
 *                                        doorbell record, per iteration
 *   mlx5_wqe_loop batch N ITERS REPEATS  N such WQEs (the last signaled), then one doorbell:
 *                                        barrier, dbrec, barrier, 8-byte ctrl head to the
 *                                        (simulated, ordinary memory) UAR register, barrier,
 *                                        alternate the BlueFlame half
 *
 * Prints "ns_per_wqe X" (best of REPEATS). As in rdma-core's post path (qp.c
 * _mlx5_post_send): bytes 8..11 of the ctrl segment are cleared, the raddr segment is filled
 * field by field, the data segment by mlx5dv_set_data_seg. There is no device here, so every
 * barrier is a compiler barrier (what udma_to_device_barrier is on x86-64); the Rust side
 * does the same.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING_WQEBBS 256
#define barrier() asm volatile("" ::: "memory")

static uint8_t ring[RING_WQEBBS * 64] __attribute__((aligned(64)));
static volatile uint32_t dbrec[2];
static volatile uint64_t uar[0x1000 / 8];

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static inline void *build(uint32_t pc, uint64_t i, uint8_t fm_ce_se)
{
	uint8_t *ctrl = ring + ((size_t)(pc & (RING_WQEBBS - 1)) << MLX5_SEND_WQE_SHIFT);
	struct mlx5_wqe_raddr_seg *r = (void *)(ctrl + 16);
	struct mlx5_wqe_data_seg *d = (void *)(ctrl + 32);
	*(uint32_t *)(ctrl + 8) = 0;
	r->raddr = htobe64(0x7f0000000000ull + i * 64);
	r->rkey = htobe32(0x1234);
	r->reserved = 0;
	mlx5dv_set_data_seg(d, 64, 0x5678, (uintptr_t)(0x550000000000ull + i * 64));
	mlx5dv_set_ctrl_seg((void *)ctrl, (uint16_t)pc, MLX5_OPCODE_RDMA_WRITE, 0, 0x000abc, fm_ce_se,
			    3, 0, 0);
	return ctrl;
}

int main(int argc, char **argv)
{
	int batch_mode = argc == 5 && strcmp(argv[1], "batch") == 0;
	if (!(batch_mode || (argc == 4 && strcmp(argv[1], "single") == 0))) {
		fprintf(stderr, "usage: %s single ITERS REPEATS | batch N ITERS REPEATS\n", argv[0]);
		return 2;
	}
	uint64_t n = batch_mode ? strtoull(argv[2], NULL, 10) : 1;
	uint64_t iters = strtoull(argv[batch_mode ? 3 : 2], NULL, 10);
	int repeats = atoi(argv[batch_mode ? 4 : 3]);
	double best = 1e300;
	uint32_t pc = 0, bf_offset = 0;
	uint64_t i = 0;

	for (int rep = 0; rep < repeats; rep++) {
		double t0 = now_ns();
		if (!batch_mode) {
			for (uint64_t k = 0; k < iters; k++, i++) {
				build(pc, i, MLX5_WQE_CTRL_CQ_UPDATE);
				pc++;
				barrier();
				dbrec[MLX5_SND_DBR] = htobe32(pc & 0xffff);
			}
		} else {
			for (uint64_t k = 0; k < iters; k += n) {
				void *ctrl = NULL;
				for (uint64_t j = 0; j < n; j++, i++) {
					ctrl = build(pc, i, j + 1 == n ? MLX5_WQE_CTRL_CQ_UPDATE : 0);
					pc++;
				}
				barrier();
				dbrec[MLX5_SND_DBR] = htobe32(pc & 0xffff);
				barrier();
				uar[(0x800 + bf_offset) / 8] = *(uint64_t *)ctrl;
				barrier();
				bf_offset ^= 256;
			}
		}
		double dt = (now_ns() - t0) / (double)iters;
		if (dt < best)
			best = dt;
	}
	printf("ns_per_wqe %.3f\n", best);
	return 0;
}
