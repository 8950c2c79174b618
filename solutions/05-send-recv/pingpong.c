// SPDX-License-Identifier: MIT
/*
 * pingpong.c - lesson 05: a SEND/RECV ping-pong between two processes.
 *
 *   server:  pingpong [OPTIONS]
 *   client:  pingpong [OPTIONS] HOST
 *
 * The two processes swap the address of their queue pair (LID, QPN, PSN,
 * GID) over TCP, connect their RC QPs to each other and bounce --iters
 * messages of --size bytes: the client SENDs ping i, the server answers
 * with pong i. Every message carries a pattern made from its sequence
 * number and its sender, checked on arrival. The client prints the average
 * round-trip time. Give both sides the same --iters and --size.
 *
 * The connection is rc.c's (rc.h): TODOs 1-4 are there, 5-7 here.
 */
#include "rc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-n ITERS] "
	"[-s SIZE] [-t SECS] [HOST]";

/* The wr_id of our two kinds of work request, to tell completions apart. */
enum {
	WRID_RECV = 1,
	WRID_SEND = 2,
};

/* Who wrote a message: part of its pattern, so an echo does not pass. */
enum {
	FROM_CLIENT = 'c',
	FROM_SERVER = 's',
};

struct pp_ctx {
	struct rc_ctx *rc; /* device, PD, CQ, QP, TCP connection (rc.c) */
	struct ibv_mr *mr;
	uint8_t *buf;	 /* 2 * size bytes: receive slot, then send slot */
	size_t size;	 /* bytes per message */
	long sends_done; /* SEND completions seen so far */
	long recvs_done; /* RECV completions seen so far */
};

/* The QP (rc.h): SEND/RECV need no remote access; a few requests deep. */
static const struct rc_params params = {
	.access = 0,
	.max_rd_atomic = 1,
	.max_dest_rd_atomic = 1,
	.max_send_wr = 4,
	.max_recv_wr = 4,
	.cq_size = 16,
};

/* Byte @i of message @seq written by @from: never 0, changes every message. */
static uint8_t msg_byte(long seq, int from, size_t i)
{
	return (uint8_t)(1 + (i + (size_t)seq * 7 + (size_t)from) % 251);
}

static void fill_msg(uint8_t *p, size_t len, long seq, int from)
{
	course_fill_pattern(p, len, (size_t)seq * 7 + (size_t)from);
}

/* 0 when @p holds message @seq written by @from, else -1 (message printed). */
static int check_msg(const uint8_t *p, size_t len, long seq, int from)
{
	size_t i;

	for (i = 0; i < len; i++) {
		if (p[i] != msg_byte(seq, from, i)) {
			fprintf(stderr,
				"message %ld from the %s: byte %zu is 0x%02x, expected 0x%02x\n",
				seq, from == FROM_CLIENT ? "client" : "server",
				i, p[i], msg_byte(seq, from, i));
			return -1;
		}
	}
	return 0;
}

/*
 * Open the connection's verbs objects (rc_open(): device, PD, CQ, an RC QP
 * in INIT) and what the ping-pong adds: one buffer of 2 * size bytes
 * registered for local writes (the NIC writes incoming messages into the
 * receive slot). Returns NULL (message printed) on failure.
 */
static struct pp_ctx *init_ctx(const struct course_opts *o)
{
	struct pp_ctx *ctx;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		fprintf(stderr, "calloc failed: %s\n", strerror(errno));
		return NULL;
	}
	ctx->size = o->size;

	ctx->rc = rc_open(o, &params);
	if (!ctx->rc)
		goto out_free_ctx;

	ctx->buf = course_alloc(2 * ctx->size);
	if (!ctx->buf)
		goto out_close_rc;

	ctx->mr = ibv_reg_mr(ctx->rc->pd, ctx->buf, 2 * ctx->size,
			     IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_free_buf;
	}
	return ctx;

out_free_buf:
	free(ctx->buf);
out_close_rc:
	rc_close(ctx->rc);
out_free_ctx:
	free(ctx);
	return NULL;
}

/* Destroy everything init_ctx() created, in reverse order. 0 or -1. */
static int close_ctx(struct pp_ctx *ctx)
{
	int ret = 0;

	if (ibv_dereg_mr(ctx->mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	free(ctx->buf);
	if (rc_close(ctx->rc))
		ret = -1;
	free(ctx);
	return ret;
}

/*
 * Post one receive work request (wr_id WRID_RECV) for the receive slot,
 * the first ctx->size bytes of ctx->buf. Returns 0, or -1 (message printed).
 */
static int post_recv(struct pp_ctx *ctx)
{
	int ret;

	/* TODO 5: post a receive for the receive slot: one struct ibv_sge
	 * (addr, length, the MR's lkey) in a struct ibv_recv_wr with
	 * .wr_id = WRID_RECV; set ret to what ibv_post_recv() returns. */
	struct ibv_sge sge = {
		.addr = (uintptr_t)ctx->buf,
		.length = ctx->size,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = WRID_RECV,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad_wr;

	ret = ibv_post_recv(ctx->rc->qp, &wr, &bad_wr);
	/* END TODO 5 */
	if (ret) {
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Post one signaled SEND (wr_id WRID_SEND) of the send slot: bytes
 * [size, 2 * size) of ctx->buf. Returns 0, or -1 (message printed).
 */
static int post_send(struct pp_ctx *ctx)
{
	int ret;

	/* TODO 6: post a SEND of the send slot: one struct ibv_sge, a
	 * struct ibv_send_wr with .wr_id = WRID_SEND, .opcode =
	 * IBV_WR_SEND and .send_flags = IBV_SEND_SIGNALED; set ret to what
	 * ibv_post_send() returns. */
	struct ibv_sge sge = {
		.addr = (uintptr_t)(ctx->buf + ctx->size),
		.length = ctx->size,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID_SEND,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad_wr;

	ret = ibv_post_send(ctx->rc->qp, &wr, &bad_wr);
	/* END TODO 6 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Poll the CQ until @sends SEND and @recvs RECV completions have been seen
 * in total (they may arrive in any order). A completion that did not
 * succeed, a received message of the wrong length, or no completion within
 * --timeout seconds ends the wait with -1 (message printed, naming
 * round trip @seq; rc_wait_wc() also says when the peer has exited).
 */
static int wait_for(struct pp_ctx *ctx, long sends, long recvs, long seq)
{
	struct ibv_wc wc;
	char what[48];

	snprintf(what, sizeof(what), "round trip %ld", seq);
	while (ctx->sends_done < sends || ctx->recvs_done < recvs) {
		if (rc_wait_wc(ctx->rc, &wc, what))
			return -1;
		switch (wc.wr_id) {
		case WRID_SEND:
			ctx->sends_done++;
			break;
		case WRID_RECV:
			if (wc.byte_len != ctx->size) {
				fprintf(stderr,
					"%s: received %u bytes, expected %zu\n",
					what, wc.byte_len, ctx->size);
				return -1;
			}
			ctx->recvs_done++;
			break;
		default:
			fprintf(stderr,
				"%s: completion with unknown wr_id %llu\n",
				what, (unsigned long long)wc.wr_id);
			return -1;
		}
	}
	return 0;
}

/*
 * The client: @iters round trips. Round trip i: SEND ping i, wait until
 * both that SEND and the RECV of pong i have completed, check pong i, and
 * post the receive for pong i+1 before ping i+1 can provoke it. Then print
 * the count of verified pongs and the average round-trip time.
 * Returns 0, or -1 (message printed).
 */
static int run_client(struct pp_ctx *ctx, long iters)
{
	uint8_t *rslot = ctx->buf, *sslot = ctx->buf + ctx->size;
	uint64_t start = course_now_ns();
	long i;

	for (i = 0; i < iters; i++) {
		/* TODO 7: round trip i, as the comment above says, with
		 * fill_msg(), post_send(), wait_for(), check_msg() and
		 * post_recv() - in the right order (run_server() below is
		 * its mirror image). Return -1 on any failure. */
		fill_msg(sslot, ctx->size, i, FROM_CLIENT);
		if (post_send(ctx))
			return -1;
		if (wait_for(ctx, i + 1, i + 1, i))
			return -1;
		if (check_msg(rslot, ctx->size, i, FROM_SERVER))
			return -1;
		if (i + 1 < iters && post_recv(ctx))
			return -1;
		/* END TODO 7 */
	}
	printf("verified %ld messages of %zu bytes\n", iters, ctx->size);
	printf("average rtt: %.2f us (%ld round trips of %zu bytes)\n",
	       (course_now_ns() - start) / 1e3 / iters, iters, ctx->size);
	return 0;
}

/*
 * The server: @iters times, wait for ping i, check it, post the receive
 * for ping i+1 *before* answering (the client sends ping i+1 as soon as
 * pong i arrives), then SEND pong i. Returns 0, or -1 (message printed).
 */
static int run_server(struct pp_ctx *ctx, long iters)
{
	uint8_t *rslot = ctx->buf, *sslot = ctx->buf + ctx->size;
	long i;

	for (i = 0; i < iters; i++) {
		/* ping i, and pong i-1 done: its send slot is reused now */
		if (wait_for(ctx, i, i + 1, i))
			return -1;
		if (check_msg(rslot, ctx->size, i, FROM_CLIENT))
			return -1;
		if (i + 1 < iters && post_recv(ctx))
			return -1;
		fill_msg(sslot, ctx->size, i, FROM_SERVER);
		if (post_send(ctx))
			return -1;
	}
	if (wait_for(ctx, iters, iters, iters - 1))
		return -1;
	printf("verified %ld messages of %zu bytes\n", iters, ctx->size);
	return 0;
}

int main(int argc, char **argv)
{
	struct course_opts o;
	struct qp_info mine = {}, theirs;
	struct pp_ctx *ctx;
	int ret = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
			  OPT_ITERS | OPT_SIZE | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);

	ctx = init_ctx(&o);
	if (!ctx)
		return 1;

	/*
	 * The first receive is posted before the peer learns our address:
	 * from then on it may send at any time.
	 */
	if (post_recv(ctx))
		goto out_close_ctx;
	mine.length = ctx->size; /* no buffer advertised: the message size */

	/* TCP, the exchange, RTR, RTS, the 'R' barrier, "connected" (rc.c) */
	if (rc_connect(ctx->rc, &o, &mine, &theirs))
		goto out_close_ctx;
	if (theirs.length != ctx->size) {
		fprintf(stderr,
			"message size mismatch: %zu bytes here, %u on the peer (give both the same --size)\n",
			ctx->size, theirs.length);
		goto out_close_ctx;
	}

	if (o.host ? run_client(ctx, o.iters) : run_server(ctx, o.iters))
		goto out_close_ctx;
	/* Neither side tears its QP down while the other still uses it. */
	if (course_oob_sync(ctx->rc->oob_fd, 'D', o.timeout))
		goto out_close_ctx;
	ret = 0;

out_close_ctx:
	if (close_ctx(ctx))
		ret = 1;
	return ret;
}
