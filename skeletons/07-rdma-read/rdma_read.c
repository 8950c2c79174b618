// SPDX-License-Identifier: MIT
/*
 * rdma_read.c - lesson 07: a one-sided RDMA READ, checked with memcmp().
 *
 *   server:  rdma_read [OPTIONS]
 *   client:  rdma_read [OPTIONS] HOST
 *
 * The server fills a --size byte buffer with a pattern, registers it so
 * that the peer may read it, advertises it (address, rkey, length) with
 * its QP's address over TCP, and then only waits for the client's "done"
 * on that TCP connection: its CPU takes no part in moving the data. The
 * client copies the server's buffer into its own with one RDMA READ and
 * memcmp()s the result against the pattern.
 *
 * The connection itself is lesson 05's work, your 05-send-recv/rc.c:
 * rc_open(), rc_connect(), rc_wait_wc(), rc_close() (see rc.h).
 */
#include "rc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-s SIZE] "
	"[-t SECS] [HOST]";

enum {
	WRID_READ = 1, /* the client's RDMA READ */
};

struct rd_ctx {
	struct rc_ctx *rc; /* device, PD, CQ, QP, TCP connection (rc.h) */
	struct ibv_mr *mr;
	uint8_t *buf;	   /* the server's source, the client's target */
	uint8_t *expect;   /* client: what buf must hold after the READ */
	size_t size;
	int is_server;
};

/*
 * The QP: what the peer may do with it, the queue depths, and room for
 * RDMA READs in flight: max_dest_rd_atomic (RTR) is how many READs from the
 * peer this QP serves at once (the responder keeps state for each until its
 * response is sent); max_rd_atomic (RTS) is how many READs this QP may have
 * outstanding as the requester. Either at 0 and no READ goes through.
 */
static const struct rc_params params = {
	/* TODO 2: allow the peer's RDMA READs through this QP. */
	.access = 0,
	/* END TODO 2 */
	/* TODO 3: let this QP serve one RDMA READ at a time. */
	.max_dest_rd_atomic = 0,
	/* END TODO 3 */
	/* TODO 4: let this QP have one RDMA READ outstanding. */
	.max_rd_atomic = 0,
	/* END TODO 4 */
	.max_send_wr = 2,
	.max_recv_wr = 2,
};

/*
 * Allocate the buffer (server: the pattern, client: zeroed) and what it
 * must hold, and register the buffer in ctx->rc->pd. Returns 0, or -1
 * (message printed); close_buf() undoes what was done either way.
 */
static int init_buf(struct rd_ctx *ctx)
{
	ctx->buf = course_alloc(ctx->size);
	ctx->expect = course_alloc(ctx->size);
	if (!ctx->buf || !ctx->expect)
		return -1;
	course_fill_pattern(ctx->expect, ctx->size, 0);
	if (ctx->is_server)
		course_fill_pattern(ctx->buf, ctx->size, 0);

	/* TODO 1: register ctx->buf (ctx->size bytes) with ibv_reg_mr().
	 * The server's buffer is read by the peer's NIC; the client's is
	 * written by its own NIC when the READ's response arrives. Choose
	 * the access flags for each (man ibv_reg_mr). */
	ctx->mr = NULL;
	errno = course_todo(1, "register ctx->buf with ibv_reg_mr()");
	/* END TODO 1 */
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* Deregister and free what init_buf() made. 0 or -1. */
static int close_buf(struct rd_ctx *ctx)
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
 * On the server, advertise the buffer the client may read in @info: its
 * address, the MR's rkey and its length. The client advertises no buffer
 * (all 0). rc_connect() adds the QP's address.
 */
static void advertise(const struct rd_ctx *ctx, struct qp_info *info)
{
	/* TODO 6: on the server, advertise the buffer the client READs, as
	 * in lesson 06: info->addr (its virtual address), info->rkey (from
	 * the MR), info->length. */
	(void)ctx;
	(void)info;
	course_todo(6, "advertise the server's buffer");
	/* END TODO 6 */
}

/*
 * Client: post one signaled RDMA READ (wr_id WRID_READ) of ctx->size bytes
 * from the address and rkey the server advertised in @theirs into
 * ctx->buf. Returns 0, or -1 (message printed).
 */
static int post_read(struct rd_ctx *ctx, const struct qp_info *theirs)
{
	int ret;

	/* TODO 5: post the READ: a struct ibv_sge for ctx->buf (where the
	 * data lands), a struct ibv_send_wr with .opcode = IBV_WR_RDMA_READ,
	 * .send_flags = IBV_SEND_SIGNALED and .wr.rdma.remote_addr /
	 * .wr.rdma.rkey from @theirs (where it comes from); set ret to what
	 * ibv_post_send() returns. */
	(void)ctx;
	(void)theirs;
	ret = course_todo(5, "post the RDMA READ");
	/* END TODO 5 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Client: READ the server's buffer into ours, wait for it, memcmp() it.
 * Returns 0 when it holds the pattern, 1 when it does not, -1 when the
 * READ failed (messages printed).
 */
static int run_client(struct rd_ctx *ctx, const struct qp_info *theirs)
{
	struct ibv_wc wc;
	size_t bad;

	if (!theirs->addr) {
		fprintf(stderr, "the server advertised no buffer (addr 0)\n");
		return -1;
	}
	/*
	 * No check of ctx->size against theirs->length here, on purpose:
	 * the server's NIC enforces the MR's bounds (see the README).
	 */
	if (post_read(ctx, theirs))
		return -1;
	if (rc_wait_wc(ctx->rc, &wc, "rdma read"))
		return -1;
	printf("read %zu bytes from 0x%016llx rkey 0x%08x\n", ctx->size,
	       (unsigned long long)theirs->addr, theirs->rkey);

	if (memcmp(ctx->buf, ctx->expect, ctx->size)) {
		bad = course_first_diff(ctx->buf, ctx->expect, ctx->size);
		fprintf(stderr,
			"memcmp: mismatch at byte %zu: got 0x%02x, expected 0x%02x\n",
			bad, ctx->buf[bad], ctx->expect[bad]);
		return 1;
	}
	printf("memcmp: OK (%zu bytes match)\n", ctx->size);
	return 0;
}

int main(int argc, char **argv)
{
	struct course_opts o;
	struct qp_info mine = {}, theirs;
	struct rd_ctx ctx = {};
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

	advertise(&ctx, &mine);
	if (rc_connect(ctx.rc, &o, &mine, &theirs))
		goto out_close_buf;

	if (ctx.is_server) {
		/* The server's whole part in the data path: waiting. */
		printf("serving %zu bytes at 0x%016llx rkey 0x%08x\n",
		       ctx.size, (unsigned long long)mine.addr, mine.rkey);
		result = 0;
	} else {
		result = run_client(&ctx, &theirs);
		if (result < 0)
			goto out_close_buf;
	}
	/* The client says it is done; the server keeps its MR until then. */
	if (course_oob_sync(ctx.rc->oob_fd, 'D', o.timeout))
		goto out_close_buf;
	if (ctx.is_server)
		printf("client done\n");
	ret = result;

out_close_buf:
	if (close_buf(&ctx))
		ret = 1;
	if (rc_close(ctx.rc))
		ret = 1;
	return ret;
}
