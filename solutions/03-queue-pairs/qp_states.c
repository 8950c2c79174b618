// SPDX-License-Identifier: MIT
/*
 * qp_states - create two RC queue pairs, walk them by hand through
 * RESET -> INIT -> RTR -> RTS, connect them to each other on one port and
 * move one SEND through them.
 *
 * usage: qp_states [-d DEVICE] [-i IB_PORT] [-g GID_INDEX] [-t SECS]
 *                  [--msg TEXT] [--skip-state]
 *
 * Output (README.md has the details):
 *
 *   device DEV port P gid_index G gid GID
 *   A qpn 0xQPN state RESET          (then B; then both INIT, RTR, RTS)
 *   ...
 *   A sent N bytes
 *   B received N bytes: TEXT
 *
 * With --skip-state, after the two RESET lines, A is asked to go from
 * RESET straight to RTR, which must be refused:
 *
 *   A RESET -> RTR refused: STRERROR (ERRNAME)
 *   A qpn 0xQPN state RESET
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "course.h"

static const char usage[] =
	"[-d DEVICE] [-i IB_PORT] [-g GID_INDEX] [-t SECS] [--msg TEXT] [--skip-state]";

#define MSG_MAX 256
#define START_PSN 0x1234 /* both QPs start their packet numbers here */

/* One side of the connection: a completion queue and a queue pair. */
struct endpoint {
	const char *name; /* "A" or "B" */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

/* Everything this program creates; close_ctx() releases it. */
struct qp_ctx {
	struct ibv_context *context;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	char buf[2 * MSG_MAX]; /* A sends from the first half, B receives
				  into the second */
	struct endpoint ep[2];
	int ib_port;
	enum ibv_mtu mtu; /* the port's active MTU */
	int gid_index;
	union ibv_gid gid;
	int timeout;
};

static const char *qp_state_str(enum ibv_qp_state state)
{
	switch (state) {
	case IBV_QPS_RESET:
		return "RESET";
	case IBV_QPS_INIT:
		return "INIT";
	case IBV_QPS_RTR:
		return "RTR";
	case IBV_QPS_RTS:
		return "RTS";
	case IBV_QPS_SQD:
		return "SQD";
	case IBV_QPS_SQE:
		return "SQE";
	case IBV_QPS_ERR:
		return "ERR";
	default:
		return "UNKNOWN";
	}
}

/*
 * print_state - ask the device which state @ep's QP is in, with
 * ibv_query_qp() and attr_mask IBV_QP_STATE, and print
 *   NAME qpn 0xQPN state STATE
 * (QPN is ep->qp->qp_num, STATE from qp_state_str()). Do not print what
 * you believe the state is: print what the device answers.
 * Returns 0, or -1 after printing one line naming the failed call.
 */
static int print_state(struct endpoint *ep)
{
	struct ibv_qp_init_attr init_attr;
	struct ibv_qp_attr attr = {};
	int ret;

	/* TODO 1: query the QP's state into attr.qp_state with
	 * ibv_query_qp() (0 or an errno value). man ibv_query_qp */
	ret = ibv_query_qp(ep->qp, &attr, IBV_QP_STATE, &init_attr);
	/* END TODO 1 */
	if (ret) {
		fprintf(stderr, "ibv_query_qp(%s) failed: %s\n",
			ep->name, strerror(ret));
		return -1;
	}
	printf("%s qpn 0x%06x state %s\n", ep->name, ep->qp->qp_num,
	       qp_state_str(attr.qp_state));
	return 0;
}

/*
 * init_endpoint - create @ep's completion queue (room for 4 completions)
 * and then its queue pair in ctx->pd: type RC, ep->cq as both send_cq
 * and recv_cq, room for 4 send and 4 receive work requests of 1
 * scatter/gather entry each. A new QP starts in RESET.
 * Returns 0, or -1 after printing one line naming the failed call (and
 * with nothing left allocated).
 */
static int init_endpoint(struct qp_ctx *ctx, struct endpoint *ep)
{
	struct ibv_qp_init_attr attr = {};

	/* TODO 2: create ep->cq with ibv_create_cq() (no completion
	 * channel, vector 0; NULL and errno on failure). man ibv_create_cq */
	ep->cq = ibv_create_cq(ctx->context, 4, NULL, NULL, 0);
	/* END TODO 2 */
	if (!ep->cq) {
		fprintf(stderr, "ibv_create_cq(%s) failed: %s\n",
			ep->name, strerror(errno));
		return -1;
	}

	/* TODO 3: fill attr and create ep->qp with ibv_create_qp() (NULL
	 * and errno on failure). man ibv_create_qp */
	attr = (struct ibv_qp_init_attr){
		.send_cq = ep->cq,
		.recv_cq = ep->cq,
		.qp_type = IBV_QPT_RC,
		.cap = {
			.max_send_wr = 4,
			.max_recv_wr = 4,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	ep->qp = ibv_create_qp(ctx->pd, &attr);
	/* END TODO 3 */
	if (!ep->qp) {
		fprintf(stderr, "ibv_create_qp(%s) failed: %s\n",
			ep->name, strerror(errno));
		goto out_destroy_cq;
	}
	return 0;

out_destroy_cq:
	ibv_destroy_cq(ep->cq);
	ep->cq = NULL;
	return -1;
}

/*
 * to_init - move @ep's QP from RESET to INIT with ibv_modify_qp():
 *   qp_state        IBV_QPS_INIT
 *   pkey_index      0
 *   port_num        ctx->ib_port
 *   qp_access_flags 0 (SEND/RECV need no remote access rights)
 * and the attr_mask bit for each of them (IBV_QP_STATE, IBV_QP_PKEY_INDEX,
 * IBV_QP_PORT, IBV_QP_ACCESS_FLAGS).
 * Returns what ibv_modify_qp() returns: 0 or an errno value.
 */
static int to_init(struct qp_ctx *ctx, struct endpoint *ep)
{
	/* TODO 4: fill a struct ibv_qp_attr and call ibv_modify_qp().
	 * man ibv_modify_qp */
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = ctx->ib_port,
		.qp_access_flags = 0,
	};

	return ibv_modify_qp(ep->qp, &attr,
			     IBV_QP_STATE |
			     IBV_QP_PKEY_INDEX |
			     IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS);
	/* END TODO 4 */
}

/*
 * to_rtr - move @ep's QP to RTR (ready to receive) from the QP numbered
 * @remote_qpn whose port has the GID @remote_gid:
 *   qp_state            IBV_QPS_RTR
 *   path_mtu            ctx->mtu
 *   dest_qp_num         remote_qpn
 *   rq_psn              START_PSN (the first packet number the peer sends)
 *   max_dest_rd_atomic  1
 *   min_rnr_timer       COURSE_QP_MIN_RNR_TIMER (course.h: 12, 0.64 ms)
 *   ah_attr             how to reach the peer: RoCE needs a global route
 *                       header, so is_global 1, grh.dgid @remote_gid,
 *                       grh.sgid_index ctx->gid_index, grh.hop_limit 1,
 *                       and port_num ctx->ib_port
 * with the matching attr_mask bits (IBV_QP_STATE, IBV_QP_AV,
 * IBV_QP_PATH_MTU, IBV_QP_DEST_QPN, IBV_QP_RQ_PSN,
 * IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER).
 * Returns what ibv_modify_qp() returns: 0 or an errno value.
 */
static int to_rtr(struct qp_ctx *ctx, struct endpoint *ep,
		  uint32_t remote_qpn, const union ibv_gid *remote_gid)
{
	/* TODO 5: fill a struct ibv_qp_attr and call ibv_modify_qp().
	 * man ibv_modify_qp */
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = ctx->mtu,
		.dest_qp_num = remote_qpn,
		.rq_psn = START_PSN,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = COURSE_QP_MIN_RNR_TIMER,
		.ah_attr = {
			.is_global = 1,
			.grh = {
				.dgid = *remote_gid,
				.sgid_index = ctx->gid_index,
				.hop_limit = 1,
			},
			.port_num = ctx->ib_port,
		},
	};

	return ibv_modify_qp(ep->qp, &attr,
			     IBV_QP_STATE |
			     IBV_QP_AV |
			     IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN |
			     IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER);
	/* END TODO 5 */
}

/*
 * to_rts - move @ep's QP from RTR to RTS (ready to send):
 *   qp_state       IBV_QPS_RTS
 *   timeout        COURSE_QP_TIMEOUT (course.h: 17, ACK timeout
 *                  4.096 us * 2^17, about 0.54 s)
 *   retry_cnt      COURSE_QP_RETRY_CNT (6: rxe reads 7 as "forever")
 *   rnr_retry      COURSE_QP_RNR_RETRY (3)
 *   sq_psn         START_PSN (our first packet number)
 *   max_rd_atomic  1
 * with the matching attr_mask bits (IBV_QP_STATE, IBV_QP_TIMEOUT,
 * IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_SQ_PSN,
 * IBV_QP_MAX_QP_RD_ATOMIC).
 * Returns what ibv_modify_qp() returns: 0 or an errno value.
 */
static int to_rts(struct endpoint *ep)
{
	/* TODO 6: fill a struct ibv_qp_attr and call ibv_modify_qp().
	 * man ibv_modify_qp */
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTS,
		.timeout = COURSE_QP_TIMEOUT,
		.retry_cnt = COURSE_QP_RETRY_CNT,
		.rnr_retry = COURSE_QP_RNR_RETRY,
		.sq_psn = START_PSN,
		.max_rd_atomic = 1,
	};

	return ibv_modify_qp(ep->qp, &attr,
			     IBV_QP_STATE |
			     IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN |
			     IBV_QP_MAX_QP_RD_ATOMIC);
	/* END TODO 6 */
}

/* Report a refused ibv_modify_qp() (@err is its return value). */
static void report_modify(const struct endpoint *ep, const char *from,
			  const char *to, int err)
{
	fprintf(stderr, "ibv_modify_qp(%s: %s -> %s) failed: %s (%s)\n",
		ep->name, from, to, strerror(err),
		strerrorname_np(err) ? strerrorname_np(err) : "?");
}

/*
 * connect_ctx - both QPs through INIT, RTR and RTS, each pointed at the
 * other (same port, same GID: a loopback connection), printing both
 * states after every step.
 */
static int connect_ctx(struct qp_ctx *ctx)
{
	struct endpoint *a = &ctx->ep[0], *b = &ctx->ep[1];
	int i, err;

	for (i = 0; i < 2; i++) {
		err = to_init(ctx, &ctx->ep[i]);
		if (err) {
			report_modify(&ctx->ep[i], "RESET", "INIT", err);
			return -1;
		}
	}
	if (print_state(a) || print_state(b))
		return -1;

	err = to_rtr(ctx, a, b->qp->qp_num, &ctx->gid);
	if (err) {
		report_modify(a, "INIT", "RTR", err);
		return -1;
	}
	err = to_rtr(ctx, b, a->qp->qp_num, &ctx->gid);
	if (err) {
		report_modify(b, "INIT", "RTR", err);
		return -1;
	}
	if (print_state(a) || print_state(b))
		return -1;

	for (i = 0; i < 2; i++) {
		err = to_rts(&ctx->ep[i]);
		if (err) {
			report_modify(&ctx->ep[i], "RTR", "RTS", err);
			return -1;
		}
	}
	if (print_state(a) || print_state(b))
		return -1;
	return 0;
}

/*
 * skip_state - ask A's QP, still in RESET, to go straight to RTR. The
 * verbs state machine forbids it, so ibv_modify_qp() must refuse (EINVAL).
 * Returns 0 when it was refused, -1 when it was not.
 */
static int skip_state(struct qp_ctx *ctx)
{
	struct endpoint *a = &ctx->ep[0], *b = &ctx->ep[1];
	int err;

	err = to_rtr(ctx, a, b->qp->qp_num, &ctx->gid);
	if (!err) {
		fprintf(stderr,
			"ibv_modify_qp(A: RESET -> RTR) succeeded, but the state machine forbids it\n");
		return -1;
	}
	printf("A RESET -> RTR refused: %s (%s)\n", strerror(err),
	       strerrorname_np(err) ? strerrorname_np(err) : "?");
	return print_state(a);
}

/*
 * send_one - post a receive on B, send @msg from A, wait for both
 * completions and check what arrived. (Lessons 04 and 05 are about this
 * part; here it only proves that the QPs are connected.)
 */
static int send_one(struct qp_ctx *ctx, const char *msg)
{
	struct endpoint *a = &ctx->ep[0], *b = &ctx->ep[1];
	size_t len = strlen(msg);
	char *sbuf = ctx->buf, *rbuf = ctx->buf + MSG_MAX;
	struct ibv_sge rsge = {
		.addr = (uintptr_t)rbuf,
		.length = MSG_MAX,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_recv_wr rwr = {
		.wr_id = 2,
		.sg_list = &rsge,
		.num_sge = 1,
	}, *bad_rwr;
	struct ibv_sge ssge = {
		.addr = (uintptr_t)sbuf,
		.length = len,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_send_wr swr = {
		.wr_id = 1,
		.sg_list = &ssge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad_swr;
	struct ibv_wc wc;
	int err;

	memset(ctx->buf, 0, sizeof(ctx->buf));
	memcpy(sbuf, msg, len);

	err = ibv_post_recv(b->qp, &rwr, &bad_rwr);
	if (err) {
		fprintf(stderr, "ibv_post_recv(B) failed: %s\n",
			strerror(err));
		return -1;
	}
	err = ibv_post_send(a->qp, &swr, &bad_swr);
	if (err) {
		fprintf(stderr, "ibv_post_send(A) failed: %s\n",
			strerror(err));
		return -1;
	}

	if (course_poll_one(a->cq, &wc, ctx->timeout, "A send"))
		return -1;
	if (wc.status != IBV_WC_SUCCESS) {
		course_report_wc("A send", &wc);
		return -1;
	}
	printf("A sent %zu bytes\n", len);

	if (course_poll_one(b->cq, &wc, ctx->timeout, "B receive"))
		return -1;
	if (wc.status != IBV_WC_SUCCESS) {
		course_report_wc("B receive", &wc);
		return -1;
	}
	if (wc.byte_len != len || memcmp(rbuf, msg, len)) {
		fprintf(stderr,
			"B received %u bytes '%.*s', expected %zu bytes '%s'\n",
			wc.byte_len, (int)wc.byte_len, rbuf, len, msg);
		return -1;
	}
	printf("B received %u bytes: %.*s\n", wc.byte_len, (int)wc.byte_len,
	       rbuf);
	return 0;
}

/*
 * init_ctx - on the open ctx->context: pick the GID, allocate the PD,
 * register the message buffer, create both endpoints.
 */
static int init_ctx(struct qp_ctx *ctx)
{
	struct ibv_port_attr pattr;
	char gid[40];
	int err;

	err = ibv_query_port(ctx->context, ctx->ib_port, &pattr);
	if (err) {
		fprintf(stderr, "ibv_query_port(%d) failed: %s\n",
			ctx->ib_port, strerror(err));
		return -1;
	}
	ctx->mtu = pattr.active_mtu;
	ctx->gid_index = course_pick_gid(ctx->context, ctx->ib_port,
					 ctx->gid_index);
	if (ctx->gid_index < 0)
		return -1;
	err = ibv_query_gid(ctx->context, ctx->ib_port, ctx->gid_index,
			    &ctx->gid);
	if (err) {
		fprintf(stderr, "ibv_query_gid(%d) failed: %s\n",
			ctx->gid_index, strerror(errno));
		return -1;
	}
	course_gid_str(&ctx->gid, gid, sizeof(gid));
	printf("device %s port %d gid_index %d gid %s\n",
	       ibv_get_device_name(ctx->context->device), ctx->ib_port,
	       ctx->gid_index, gid);

	ctx->pd = ibv_alloc_pd(ctx->context);
	if (!ctx->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n",
			strerror(errno));
		return -1;
	}
	ctx->mr = ibv_reg_mr(ctx->pd, ctx->buf, sizeof(ctx->buf),
			     IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n",
			strerror(errno));
		goto out_dealloc_pd;
	}
	if (init_endpoint(ctx, &ctx->ep[0]))
		goto out_dereg_mr;
	if (init_endpoint(ctx, &ctx->ep[1]))
		goto out_destroy_a;
	return 0;

out_destroy_a:
	ibv_destroy_qp(ctx->ep[0].qp);
	ibv_destroy_cq(ctx->ep[0].cq);
out_dereg_mr:
	ibv_dereg_mr(ctx->mr);
out_dealloc_pd:
	ibv_dealloc_pd(ctx->pd);
	return -1;
}

/* close_ctx - undo init_ctx(), in reverse order. */
static void close_ctx(struct qp_ctx *ctx)
{
	int i;

	for (i = 1; i >= 0; i--) {
		ibv_destroy_qp(ctx->ep[i].qp);
		ibv_destroy_cq(ctx->ep[i].cq);
	}
	ibv_dereg_mr(ctx->mr);
	ibv_dealloc_pd(ctx->pd);
}

int main(int argc, char **argv)
{
	struct course_opts opts;
	struct qp_ctx ctx = {
		.ep = { { .name = "A" }, { .name = "B" } },
	};
	const char *msg, *skip;
	int ret = 1;

	msg = course_take_opt(&argc, argv, "--msg", 1, usage);
	skip = course_take_opt(&argc, argv, "--skip-state", 0, usage);
	course_default_opts(&opts);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_TIMEOUT,
			  usage, &opts);
	if (!msg)
		msg = "hello";
	if (!*msg || strlen(msg) >= MSG_MAX) {
		fprintf(stderr, "%s: --msg must have 1 to %d characters\n",
			argv[0], MSG_MAX - 1);
		course_usage_exit(argv[0], usage);
	}
	ctx.ib_port = opts.ib_port;
	ctx.gid_index = opts.gid_index;
	ctx.timeout = opts.timeout;

	ctx.context = course_open_device(opts.device);
	if (!ctx.context)
		return 1;
	if (init_ctx(&ctx))
		goto out_close_device;

	if (print_state(&ctx.ep[0]) || print_state(&ctx.ep[1]))
		goto out_close_ctx;
	if (skip) {
		if (!skip_state(&ctx))
			ret = 0;
		goto out_close_ctx;
	}
	if (connect_ctx(&ctx) || send_one(&ctx, msg))
		goto out_close_ctx;
	ret = 0;

out_close_ctx:
	close_ctx(&ctx);
out_close_device:
	ibv_close_device(ctx.context);
	return ret;
}
