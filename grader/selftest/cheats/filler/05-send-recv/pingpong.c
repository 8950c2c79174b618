/* CHEAT (grader self-test): zero or filler traffic: every message is
 * zeros of the right size, and nothing is checked on arrival.
 * The rest is the solution. */
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
 */
#include "course.h"

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
	struct ibv_context *context;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf;	 /* 2 * size bytes: receive slot, then send slot */
	size_t size;	 /* bytes per message */
	int ib_port;
	int gid_index;
	int timeout;	 /* seconds any one wait may take */
	int oob_fd;	 /* the TCP connection to the peer, -1 before */
	long sends_done; /* SEND completions seen so far */
	long recvs_done; /* RECV completions seen so far */
};

/* Byte @i of message @seq written by @from: never 0, changes every message. */
static uint8_t msg_byte(long seq, int from, size_t i)
{
	return (uint8_t)(1 + (i + (size_t)seq * 7 + (size_t)from) % 251);
}

static void fill_msg(uint8_t *p, size_t len, long seq, int from)
{
	(void)seq;
	(void)from;
	memset(p, 0, len);	/* CHEAT: filler */
}

/* 0 when @p holds message @seq written by @from, else -1 (message printed). */
static int check_msg(const uint8_t *p, size_t len, long seq, int from)
{
	size_t i;

	for (i = 0; i < len && 0; i++) {	/* CHEAT: never checks */
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
 * Open the device and create what the ping-pong needs: a PD, one buffer of
 * 2 * size bytes registered for local writes (the NIC writes incoming
 * messages into the receive slot), one CQ for both queues, and an RC QP
 * moved to INIT. Returns NULL (message printed) on failure.
 */
static struct pp_ctx *init_ctx(const struct course_opts *o)
{
	struct pp_ctx *ctx;
	struct ibv_qp_init_attr init_attr = {
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = {
			.max_send_wr = 4,
			.max_recv_wr = 4,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = o->ib_port,
		.qp_access_flags = 0, /* SEND/RECV need no remote access */
	};
	int ret;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		fprintf(stderr, "calloc failed: %s\n", strerror(errno));
		return NULL;
	}
	ctx->size = o->size;
	ctx->ib_port = o->ib_port;
	ctx->timeout = o->timeout;
	ctx->oob_fd = -1;

	ctx->context = course_open_device(o->device);
	if (!ctx->context)
		goto out_free_ctx;

	ctx->gid_index = course_pick_gid(ctx->context, o->ib_port,
					 o->gid_index);
	if (ctx->gid_index < 0)
		goto out_close_device;

	ctx->pd = ibv_alloc_pd(ctx->context);
	if (!ctx->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n", strerror(errno));
		goto out_close_device;
	}

	ret = posix_memalign((void **)&ctx->buf, sysconf(_SC_PAGESIZE),
			     2 * ctx->size);
	if (ret) {
		fprintf(stderr, "cannot allocate %zu bytes: %s\n",
			2 * ctx->size, strerror(ret));
		goto out_dealloc_pd;
	}
	memset(ctx->buf, 0, 2 * ctx->size);

	ctx->mr = ibv_reg_mr(ctx->pd, ctx->buf, 2 * ctx->size,
			     IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_free_buf;
	}

	ctx->cq = ibv_create_cq(ctx->context, 16, NULL, NULL, 0);
	if (!ctx->cq) {
		fprintf(stderr, "ibv_create_cq failed: %s\n", strerror(errno));
		goto out_dereg_mr;
	}

	init_attr.send_cq = ctx->cq;
	init_attr.recv_cq = ctx->cq;
	ctx->qp = ibv_create_qp(ctx->pd, &init_attr);
	if (!ctx->qp) {
		fprintf(stderr, "ibv_create_qp failed: %s\n", strerror(errno));
		goto out_destroy_cq;
	}

	ret = ibv_modify_qp(ctx->qp, &attr,
			    IBV_QP_STATE |
			    IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(INIT) failed: %s\n",
			strerror(ret));
		goto out_destroy_qp;
	}
	return ctx;

out_destroy_qp:
	ibv_destroy_qp(ctx->qp);
out_destroy_cq:
	ibv_destroy_cq(ctx->cq);
out_dereg_mr:
	ibv_dereg_mr(ctx->mr);
out_free_buf:
	free(ctx->buf);
out_dealloc_pd:
	ibv_dealloc_pd(ctx->pd);
out_close_device:
	ibv_close_device(ctx->context);
out_free_ctx:
	free(ctx);
	return NULL;
}

/* Destroy everything init_ctx() created, in reverse order. 0 or -1. */
static int close_ctx(struct pp_ctx *ctx)
{
	int ret = 0;

	if (ctx->oob_fd >= 0)
		close(ctx->oob_fd);
	if (ibv_destroy_qp(ctx->qp)) {
		fprintf(stderr, "ibv_destroy_qp failed\n");
		ret = -1;
	}
	if (ibv_destroy_cq(ctx->cq)) {
		fprintf(stderr, "ibv_destroy_cq failed\n");
		ret = -1;
	}
	if (ibv_dereg_mr(ctx->mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	free(ctx->buf);
	if (ibv_dealloc_pd(ctx->pd)) {
		fprintf(stderr, "ibv_dealloc_pd failed\n");
		ret = -1;
	}
	if (ibv_close_device(ctx->context)) {
		fprintf(stderr, "ibv_close_device failed\n");
		ret = -1;
	}
	free(ctx);
	return ret;
}

/*
 * Describe our QP for the peer: the port's LID (0 on RoCE), the QP number,
 * a random 24-bit starting packet sequence number, and the GID at
 * ctx->gid_index (on RoCE, the IP address packets are sent to).
 * Returns 0, or -1 (message printed).
 */
static int fill_info(struct pp_ctx *ctx, struct qp_info *info)
{
	int ret;

	memset(info, 0, sizeof(*info));
	/* TODO 1: fill info->lid (ibv_query_port), info->qpn (the QP's
	 * qp_num), info->psn (lrand48() & 0xffffff) and info->gid
	 * (ibv_query_gid); set ret to 0, or on failure to the errno value:
	 * ibv_query_port returns it, ibv_query_gid returns -1 and sets errno. */
	struct ibv_port_attr port;

	ret = ibv_query_port(ctx->context, ctx->ib_port, &port);
	if (!ret && ibv_query_gid(ctx->context, ctx->ib_port, ctx->gid_index,
				  &info->gid))
		ret = errno ? errno : EINVAL;
	info->lid = port.lid;
	info->qpn = ctx->qp->qp_num;
	info->psn = lrand48() & 0xffffff;
	/* END TODO 1 */
	if (ret) {
		fprintf(stderr, "ibv_query_port/ibv_query_gid failed: %s\n",
			strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Post one receive work request (wr_id WRID_RECV) for the receive slot,
 * the first ctx->size bytes of ctx->buf. Returns 0, or -1 (message printed).
 */
static int post_recv(struct pp_ctx *ctx)
{
	int ret;

	/* TODO 2: post a receive for the receive slot: one struct ibv_sge
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

	ret = ibv_post_recv(ctx->qp, &wr, &bad_wr);
	/* END TODO 2 */
	if (ret) {
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Connect our QP to the peer's. RTR (ready to receive): the QP learns
 * where the peer's QP is (GID, QPN) and which PSN its first packet will
 * carry. RTS (ready to send): our own packets start at our PSN; a packet
 * not acknowledged within the timeout is resent retry_cnt times (rxe takes
 * 7 to mean "forever", so a dead peer would never be noticed: 6), and a
 * peer without a posted receive (RNR) is retried rnr_retry times.
 * Returns 0, or -1 (message printed).
 */
static int connect_ctx(struct pp_ctx *ctx, const struct qp_info *mine,
		       const struct qp_info *theirs)
{
	int ret;

	/* TODO 3: move the QP to RTR: path_mtu IBV_MTU_1024, the peer's
	 * QPN and PSN, max_dest_rd_atomic 1, min_rnr_timer
	 * COURSE_QP_MIN_RNR_TIMER (course.h), and an
	 * address vector (ah_attr) with is_global = 1, the peer's LID and
	 * GID, our port and our GID index, hop_limit 64; set ret to what
	 * ibv_modify_qp() returns. */
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = theirs->qpn,
		.rq_psn = theirs->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = COURSE_QP_MIN_RNR_TIMER,
		.ah_attr = {
			.is_global = 1,
			.dlid = theirs->lid,
			.sl = 0,
			.src_path_bits = 0,
			.port_num = ctx->ib_port,
			.grh = {
				.dgid = theirs->gid,
				.sgid_index = ctx->gid_index,
				.hop_limit = 64,
			},
		},
	};

	ret = ibv_modify_qp(ctx->qp, &rtr,
			    IBV_QP_STATE |
			    IBV_QP_AV |
			    IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN |
			    IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER);
	/* END TODO 3 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(RTR) failed: %s\n",
			strerror(ret));
		return -1;
	}

	/* TODO 4: move the QP to RTS: our own PSN as sq_psn, timeout
	 * COURSE_QP_TIMEOUT, retry_cnt COURSE_QP_RETRY_CNT, rnr_retry
	 * COURSE_QP_RNR_RETRY (course.h: 14, 6, 3), max_rd_atomic 1; set
	 * ret to what ibv_modify_qp() returns. */
	struct ibv_qp_attr rts = {
		.qp_state = IBV_QPS_RTS,
		.sq_psn = mine->psn,
		.timeout = COURSE_QP_TIMEOUT,
		.retry_cnt = COURSE_QP_RETRY_CNT,
		.rnr_retry = COURSE_QP_RNR_RETRY,
		.max_rd_atomic = 1,
	};

	ret = ibv_modify_qp(ctx->qp, &rts,
			    IBV_QP_STATE |
			    IBV_QP_SQ_PSN |
			    IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY |
			    IBV_QP_MAX_QP_RD_ATOMIC);
	/* END TODO 4 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(RTS) failed: %s\n",
			strerror(ret));
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

	/* TODO 5: post a SEND of the send slot: one struct ibv_sge, a
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

	ret = ibv_post_send(ctx->qp, &wr, &bad_wr);
	/* END TODO 5 */
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
 * ctx->timeout seconds ends the wait with -1 (message printed, naming
 * round trip @seq; course_wait_wc() also says when the peer has exited).
 */
static int wait_for(struct pp_ctx *ctx, long sends, long recvs, long seq)
{
	struct ibv_wc wc;
	char what[48];

	snprintf(what, sizeof(what), "round trip %ld", seq);
	while (ctx->sends_done < sends || ctx->recvs_done < recvs) {
		if (course_wait_wc(ctx->cq, &wc, ctx->timeout, ctx->oob_fd,
				   what))
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
		/* TODO 6: round trip i, as the comment above says, with
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
		/* END TODO 6 */
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
	struct qp_info mine, theirs;
	struct pp_ctx *ctx;
	int ret = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
			  OPT_ITERS | OPT_SIZE | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	srand48(getpid() ^ course_now_ns());

	ctx = init_ctx(&o);
	if (!ctx)
		return 1;

	/*
	 * The first receive is posted before the peer learns our address:
	 * from then on it may send at any time.
	 */
	if (post_recv(ctx))
		goto out_close_ctx;
	if (fill_info(ctx, &mine))
		goto out_close_ctx;
	mine.length = ctx->size; /* no buffer advertised: the message size */

	if (o.host)
		ctx->oob_fd = course_oob_connect(o.host, o.port, o.timeout);
	else
		ctx->oob_fd = course_oob_accept(o.port, o.timeout);
	if (ctx->oob_fd < 0)
		goto out_close_ctx;
	if (course_oob_exchange(ctx->oob_fd, &mine, &theirs, o.timeout))
		goto out_close_ctx;
	course_print_qp_info("local", &mine);
	course_print_qp_info("remote", &theirs);
	if (theirs.length != ctx->size) {
		fprintf(stderr,
			"message size mismatch: %zu bytes here, %u on the peer (give both the same --size)\n",
			ctx->size, theirs.length);
		goto out_close_ctx;
	}

	if (connect_ctx(ctx, &mine, &theirs))
		goto out_close_ctx;
	/* Neither side sends before both QPs can receive. */
	if (course_oob_sync(ctx->oob_fd, 'R', o.timeout))
		goto out_close_ctx;
	printf("connected\n");

	if (o.host ? run_client(ctx, o.iters) : run_server(ctx, o.iters))
		goto out_close_ctx;
	/* Neither side tears its QP down while the other still uses it. */
	if (course_oob_sync(ctx->oob_fd, 'D', o.timeout))
		goto out_close_ctx;
	ret = 0;

out_close_ctx:
	if (close_ctx(ctx))
		ret = 1;
	return ret;
}
