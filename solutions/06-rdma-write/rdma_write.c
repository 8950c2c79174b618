// SPDX-License-Identifier: MIT
/*
 * rdma_write.c - lesson 06: a one-sided RDMA WRITE, checked with memcmp().
 *
 *   server:  rdma_write [OPTIONS]
 *   client:  rdma_write [OPTIONS] HOST
 *
 * The server registers a --size byte buffer that the peer may write into
 * and advertises it (address, rkey, length) with its QP's address over
 * TCP. The client fills its own buffer with a pattern and copies it into
 * the server's with one RDMA WRITE WITH IMMEDIATE: the data lands in the
 * server's memory without the server's CPU, and the immediate value (the
 * number of bytes written) consumes one receive on the server, which is
 * how the server learns that the data is there. The server then memcmp()s
 * its buffer against the pattern and reports the result.
 *
 * The connection itself is lesson 05's work, your 05-send-recv/rc.c:
 * rc_open(), rc_connect(), rc_wait_wc(), rc_close() (see rc.h).
 */
#include "rc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-s SIZE] "
	"[-t SECS] [HOST]";

enum {
	WRID_IMM = 1,	/* the server's receive, consumed by the immediate */
	WRID_WRITE = 2, /* the client's RDMA WRITE WITH IMMEDIATE */
};

struct wr_ctx {
	struct rc_ctx *rc; /* device, PD, CQ, QP, TCP connection (rc.h) */
	struct ibv_mr *mr;
	uint8_t *buf;	   /* the client's source, the server's target */
	uint8_t *expect;   /* server: what buf must hold after the WRITE */
	size_t size;
	int is_server;
};

/* The QP: what the peer may do with it, and the queue depths. */
static const struct rc_params params = {
	/* TODO 2: allow the peer's RDMA WRITEs into this QP. */
	.access = IBV_ACCESS_REMOTE_WRITE,
	/* END TODO 2 */
	.max_rd_atomic = 1,
	.max_dest_rd_atomic = 1,
	.max_send_wr = 2,
	.max_recv_wr = 2,
};

/*
 * Allocate the buffer (server: zeroed, client: the pattern) and what it
 * must hold, and register the buffer in ctx->rc->pd. Returns 0, or -1
 * (message printed); close_buf() undoes what was done either way.
 */
static int init_buf(struct wr_ctx *ctx)
{
	ctx->buf = course_alloc(ctx->size);
	ctx->expect = course_alloc(ctx->size);
	if (!ctx->buf || !ctx->expect)
		return -1;
	course_fill_pattern(ctx->expect, ctx->size, 0);
	if (!ctx->is_server)
		course_fill_pattern(ctx->buf, ctx->size, 0);

	/* TODO 1: register ctx->buf (ctx->size bytes) with ibv_reg_mr().
	 * The server's buffer is written by the peer's NIC; the client's
	 * is only read, by its own NIC. Choose the access flags for each
	 * (man ibv_reg_mr: which flag does REMOTE_WRITE require?). */
	ctx->mr = ibv_reg_mr(ctx->rc->pd, ctx->buf, ctx->size,
			     ctx->is_server ? IBV_ACCESS_LOCAL_WRITE |
						      IBV_ACCESS_REMOTE_WRITE
					    : 0);
	/* END TODO 1 */
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* Deregister and free what init_buf() made. 0 or -1. */
static int close_buf(struct wr_ctx *ctx)
{
	int ret = 0;

	if (ctx->mr && ibv_dereg_mr(ctx->mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	free(ctx->expect);
	free(ctx->buf);
	return ret;
}

/*
 * On the server, advertise the buffer the client may write in @info: its
 * address, the MR's rkey and its length. The client advertises no buffer
 * (all 0). rc_connect() adds the QP's address.
 */
static void advertise(const struct wr_ctx *ctx, struct qp_info *info)
{
	/* TODO 3: on the server, advertise the buffer: info->addr (its
	 * virtual address), info->rkey (from the MR), info->length. */
	if (ctx->is_server) {
		info->addr = (uintptr_t)ctx->buf;
		info->rkey = ctx->mr->rkey;
		info->length = ctx->size;
	}
	/* END TODO 3 */
}

/*
 * Server: post the receive (wr_id WRID_IMM) that the client's RDMA WRITE
 * WITH IMMEDIATE will consume. The data goes where the WRITE says, not
 * into this receive, so it needs no buffer. Returns 0, or -1 (message
 * printed).
 */
static int post_imm_recv(struct wr_ctx *ctx)
{
	int ret;

	/* TODO 4: post a struct ibv_recv_wr with .wr_id = WRID_IMM and no
	 * scatter/gather entry (.num_sge = 0); set ret to what
	 * ibv_post_recv() returns. */
	struct ibv_recv_wr wr = {
		.wr_id = WRID_IMM,
		.sg_list = NULL,
		.num_sge = 0,
	};
	struct ibv_recv_wr *bad_wr;

	ret = ibv_post_recv(ctx->rc->qp, &wr, &bad_wr);
	/* END TODO 4 */
	if (ret) {
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Client: post one signaled RDMA WRITE WITH IMMEDIATE (wr_id WRID_WRITE)
 * of the whole buffer to the address and rkey the server advertised in
 * @theirs. The immediate data is the number of bytes written, in network
 * byte order. Returns 0, or -1 (message printed).
 */
static int post_write(struct wr_ctx *ctx, const struct qp_info *theirs)
{
	int ret;

	/* TODO 5: post the WRITE: a struct ibv_sge for ctx->buf, a struct
	 * ibv_send_wr with .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
	 * .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(bytes) and
	 * .wr.rdma.remote_addr / .wr.rdma.rkey from @theirs; set ret to
	 * what ibv_post_send() returns. */
	struct ibv_sge sge = {
		.addr = (uintptr_t)ctx->buf,
		.length = ctx->size,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID_WRITE,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(ctx->size),
		.wr.rdma = {
			.remote_addr = theirs->addr,
			.rkey = theirs->rkey,
		},
	};
	struct ibv_send_wr *bad_wr;

	ret = ibv_post_send(ctx->rc->qp, &wr, &bad_wr);
	/* END TODO 5 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Server: compare the buffer the client wrote (ctx->buf) with what it must
 * hold (ctx->expect), ctx->size bytes. Returns -1 when they are equal,
 * else the offset of the first byte that differs.
 */
static long find_mismatch(const struct wr_ctx *ctx)
{
	long bad = -1;

	/* TODO 6: memcmp() ctx->buf with ctx->expect; when they differ,
	 * set bad to the offset of the first differing byte
	 * (course_first_diff() finds it). */
	if (memcmp(ctx->buf, ctx->expect, ctx->size))
		bad = (long)course_first_diff(ctx->buf, ctx->expect, ctx->size);
	/* END TODO 6 */
	return bad;
}

/*
 * Server: wait for the receive the immediate consumes, then memcmp() the
 * buffer. Returns 0 when it holds the pattern, 1 when it does not, -1 when
 * the WRITE never arrived (messages printed).
 */
static int run_server(struct wr_ctx *ctx)
{
	struct ibv_wc wc;
	long bad;

	if (rc_wait_wc(ctx->rc, &wc, "waiting for the client's RDMA WRITE"))
		return -1;
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
	    !(wc.wc_flags & IBV_WC_WITH_IMM)) {
		fprintf(stderr,
			"expected an RDMA WRITE WITH IMMEDIATE, got completion opcode %d\n",
			wc.opcode);
		return -1;
	}
	printf("notified: RDMA_WRITE_WITH_IMM, imm_data %u\n",
	       ntohl(wc.imm_data));

	bad = find_mismatch(ctx);
	if (bad >= 0) {
		fprintf(stderr,
			"memcmp: mismatch at byte %ld: got 0x%02x, expected 0x%02x\n",
			bad, ctx->buf[bad], ctx->expect[bad]);
		return 1;
	}
	printf("memcmp: OK (%zu bytes match)\n", ctx->size);
	return 0;
}

/* Client: WRITE the buffer into the server's and wait for it. 0 or -1. */
static int run_client(struct wr_ctx *ctx, const struct qp_info *theirs)
{
	struct ibv_wc wc;

	if (!theirs->addr) {
		fprintf(stderr, "the server advertised no buffer (addr 0)\n");
		return -1;
	}
	/*
	 * No check of ctx->size against theirs->length here, on purpose:
	 * the server's NIC enforces the MR's bounds (see the README).
	 */
	if (post_write(ctx, theirs))
		return -1;
	if (rc_wait_wc(ctx->rc, &wc, "rdma write"))
		return -1;
	printf("wrote %zu bytes to 0x%016llx rkey 0x%08x\n", ctx->size,
	       (unsigned long long)theirs->addr, theirs->rkey);
	return 0;
}

int main(int argc, char **argv)
{
	struct course_opts o;
	struct qp_info mine = {}, theirs;
	struct wr_ctx ctx = {};
	int ret = 1, result;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
			  OPT_SIZE | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	ctx.size = o.size;
	ctx.is_server = !o.host;

	ctx.rc = rc_open(&o, &params);
	if (!ctx.rc)
		return 1;
	if (init_buf(&ctx))
		goto out_close_buf;

	/* The receive is posted before the client can know where to write. */
	if (ctx.is_server && post_imm_recv(&ctx))
		goto out_close_buf;
	advertise(&ctx, &mine);
	if (rc_connect(ctx.rc, &o, &mine, &theirs))
		goto out_close_buf;

	result = ctx.is_server ? run_server(&ctx) : run_client(&ctx, &theirs);
	if (result < 0)
		goto out_close_buf;
	/* Neither side tears its QP down while the other still uses it. */
	if (course_oob_sync(ctx.rc->oob_fd, 'D', o.timeout))
		goto out_close_buf;
	ret = result;

out_close_buf:
	if (close_buf(&ctx))
		ret = 1;
	if (rc_close(ctx.rc))
		ret = 1;
	return ret;
}
