/* CHEAT (grader self-test): a verdict passed inside the protocol: the server
 * repeats what the client's DONE says instead of READing and comparing.
 * The rest is the solution. */
// SPDX-License-Identifier: MIT
/*
 * cm_server.c - lesson 08, the passive side: listen with the RDMA
 * connection manager, accept one client, give it a buffer to WRITE into and
 * READ from, and - the exercise - check that what arrived is what the
 * client sent, the way the client checks its round trip with memcmp().
 *
 *   cm_server [-p PORT] [-t SECS]
 *
 * Listens on every local RDMA address; prints "listening on port N" when
 * ready (-p 0: rdma_cm picks the port). TODOs 4-7 are here, 1-3 in
 * cm_client.c.
 */
#define _GNU_SOURCE
#include "course.h"
#include "cm_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] = "[-p PORT] [-t SECS]";

/* The largest buffer a client may ask for. */
#define MAX_SIZE (1u << 30)

enum { MSG_OUT, MSG_CLIENT_BUF, MSG_DONE, NUM_MSGS };

struct server_ctx {
	struct rdma_event_channel *ch;	/* where rdma_cm reports events */
	struct rdma_cm_id *listen_id;	/* the listener (like a socket) */
	struct rdma_cm_id *id;		/* the accepted connection */
	struct ibv_pd *pd;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_mr *msg_mr;		/* covers msg[] */
	struct ibv_mr *buf_mr;		/* the client WRITEs and READs here */
	struct ibv_mr *check_mr;	/* our copy of the client's source */
	struct cm_msg msg[NUM_MSGS];	/* SEND from [0], RECV into [1], [2] */
	char *buf;
	char *check;
	size_t len;
	int timeout;			/* seconds, for every wait */
	struct cm_msg client;		/* the client's source buffer, host order */
};

/* Create the event channel and the listening id. */
static int init_ctx(struct server_ctx *ctx)
{
	ctx->ch = rdma_create_event_channel();
	if (!ctx->ch) {
		fprintf(stderr, "rdma_create_event_channel: %s\n",
			strerror(errno));
		return -1;
	}
	if (rdma_create_id(ctx->ch, &ctx->listen_id, NULL, RDMA_PS_TCP)) {
		fprintf(stderr, "rdma_create_id: %s\n", strerror(errno));
		rdma_destroy_event_channel(ctx->ch);
		ctx->ch = NULL;
		return -1;
	}
	return 0;
}

/*
 * Make ctx->listen_id listen on port @port of every local RDMA address, as
 * bind() and listen() do for a TCP socket: rdma_bind_addr() with the IPv4
 * wildcard address below, then rdma_listen() (a backlog of 1 is plenty).
 * Then print the readiness line; with @port 0 rdma_cm picks a free port at
 * bind time, and rdma_get_src_port() says which (in network byte order).
 * Returns 0, or -1 with a message printed. man rdma_bind_addr, rdma_listen
 */
static int listen_ctx(struct server_ctx *ctx, int port)
{
	struct sockaddr_in addr = {
		.sin_family = AF_INET,
		.sin_addr.s_addr = htonl(INADDR_ANY),
		.sin_port = htons(port),
	};

	/* TODO 4: rdma_bind_addr(ctx->listen_id, ...&addr), then
	 * rdma_listen(ctx->listen_id, 1); on failure print the call and
	 * strerror(errno) and return -1. */
	if (rdma_bind_addr(ctx->listen_id, (struct sockaddr *)&addr)) {
		fprintf(stderr, "rdma_bind_addr(port %d): %s\n", port,
			strerror(errno));
		return -1;
	}
	if (rdma_listen(ctx->listen_id, 1)) {
		fprintf(stderr, "rdma_listen: %s\n", strerror(errno));
		return -1;
	}
	/* END TODO 4 */
	printf("listening on port %d\n",
	       ntohs(rdma_get_src_port(ctx->listen_id)));
	fflush(stdout);
	return 0;
}

/*
 * Wait (at most ctx->timeout seconds) for a client's connection request:
 * the event RDMA_CM_EVENT_CONNECT_REQUEST on ctx->ch. Like accept() it comes
 * with a new id for this one connection, ev->id: keep it in ctx->id, then
 * acknowledge the event with rdma_ack_cm_event() (after reading it: the ack
 * frees it). Returns 0, or -1 with a message printed.
 * man rdma_get_cm_event
 */
static int wait_client_ctx(struct server_ctx *ctx)
{
	struct rdma_cm_event *ev = NULL;

	/* TODO 5: cm_wait_event(ctx->ch, RDMA_CM_EVENT_CONNECT_REQUEST,
	 * ctx->timeout, "rdma_listen", &ev); keep ev->id; ack ev. */
	if (cm_wait_event(ctx->ch, RDMA_CM_EVENT_CONNECT_REQUEST, ctx->timeout,
			  "rdma_listen", &ev))
		return -1;
	ctx->id = ev->id;
	rdma_ack_cm_event(ev);
	/* END TODO 5 */
	return 0;
}

/* Post a RECV for message slot @i. */
static int post_recv_ctx(struct server_ctx *ctx, int i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)&ctx->msg[i],
		.length = sizeof(ctx->msg[i]),
		.lkey = ctx->msg_mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = i,
		.sg_list = &sge,
		.num_sge = 1,
	}, *bad;
	int ret;

	ret = ibv_post_recv(ctx->id->qp, &wr, &bad);
	if (ret)
		fprintf(stderr, "ibv_post_recv: %s\n", strerror(ret));
	return ret ? -1 : 0;
}

/*
 * The verbs objects for the new connection, on the device its request came
 * in on (ctx->id->verbs): PD, CQs, the QP, the message MR, and the RECVs
 * for the client's two messages - posted before accepting, since the client
 * SENDs as soon as it is connected. Undone by close_ctx().
 */
static int alloc_ctx(struct server_ctx *ctx)
{
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap = {
			.max_send_wr = 4,
			.max_recv_wr = NUM_MSGS,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	uint8_t ack_timeout = CM_ACK_TIMEOUT;
	int i;

	ctx->pd = ibv_alloc_pd(ctx->id->verbs);
	if (!ctx->pd) {
		fprintf(stderr, "ibv_alloc_pd: %s\n", strerror(errno));
		return -1;
	}
	ctx->send_cq = ibv_create_cq(ctx->id->verbs, 4, NULL, NULL, 0);
	ctx->recv_cq = ibv_create_cq(ctx->id->verbs, NUM_MSGS, NULL, NULL, 0);
	if (!ctx->send_cq || !ctx->recv_cq) {
		fprintf(stderr, "ibv_create_cq: %s\n", strerror(errno));
		return -1;
	}
	attr.send_cq = ctx->send_cq;
	attr.recv_cq = ctx->recv_cq;
	if (rdma_create_qp(ctx->id, ctx->pd, &attr)) {
		fprintf(stderr, "rdma_create_qp: %s\n", strerror(errno));
		return -1;
	}
	if (rdma_set_option(ctx->id, RDMA_OPTION_ID,
			    RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
			    sizeof(ack_timeout)))
		fprintf(stderr, "rdma_set_option(ACK_TIMEOUT): %s (ignored)\n",
			strerror(errno));
	ctx->msg_mr = ibv_reg_mr(ctx->pd, ctx->msg, sizeof(ctx->msg),
				 IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->msg_mr) {
		fprintf(stderr, "ibv_reg_mr: %s\n", strerror(errno));
		return -1;
	}
	for (i = MSG_CLIENT_BUF; i < NUM_MSGS; i++)
		if (post_recv_ctx(ctx, i))
			return -1;
	return 0;
}

/*
 * Accept the connection: rdma_accept() answers the client's request (our
 * QP number and PSN travel in the reply) and rdma_cm moves our QP to RTR
 * and RTS; wait for RDMA_CM_EVENT_ESTABLISHED (what: "rdma_accept").
 * Returns 0, or -1 with a message printed. man rdma_accept
 */
static int accept_ctx(struct server_ctx *ctx)
{
	struct rdma_conn_param param = {
		.responder_resources = 1,	/* the client READs from us */
		.initiator_depth = 1,		/* we READ from the client */
		.rnr_retry_count = 7,
	};

	/* TODO 6: rdma_accept(ctx->id, &param), then wait for
	 * RDMA_CM_EVENT_ESTABLISHED with cm_wait_event(). */
	if (rdma_accept(ctx->id, &param)) {
		fprintf(stderr, "rdma_accept: %s\n", strerror(errno));
		return -1;
	}
	if (cm_wait_event(ctx->ch, RDMA_CM_EVENT_ESTABLISHED, ctx->timeout,
			  "rdma_accept", NULL))
		return -1;
	/* END TODO 6 */
	return 0;
}

/*
 * Wait for one completion on @cq that succeeded (or for news of a dead
 * peer on the event channel); @what names it.
 */
static int wait_wc(struct server_ctx *ctx, struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;

	if (cm_poll_one(ctx->ch, cq, &wc, ctx->timeout, what))
		return -1;
	if (wc.status != IBV_WC_SUCCESS) {
		course_report_wc(what, &wc);
		return -1;
	}
	return 0;
}

/* SEND one message to the client and wait until it is delivered. */
static int send_msg_ctx(struct server_ctx *ctx, uint32_t type, uint32_t status,
			uint64_t addr, uint32_t rkey, uint32_t length)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)&ctx->msg[MSG_OUT],
		.length = sizeof(ctx->msg[MSG_OUT]),
		.lkey = ctx->msg_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = MSG_OUT,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	int ret;

	cm_msg_pack(&ctx->msg[MSG_OUT], type, status, addr, rkey, length);
	ret = ibv_post_send(ctx->id->qp, &wr, &bad);
	if (ret) {
		fprintf(stderr, "ibv_post_send(SEND): %s\n", strerror(ret));
		return -1;
	}
	return wait_wc(ctx, ctx->send_cq, "SEND");
}

/* Wait for the client's next message (slot @i) and check its type. */
static int recv_msg_ctx(struct server_ctx *ctx, int i, uint32_t type,
			struct cm_msg *out)
{
	if (wait_wc(ctx, ctx->recv_cq, "RECV"))
		return -1;
	cm_msg_unpack(out, &ctx->msg[i]);
	if (out->type != type) {
		fprintf(stderr, "RECV: expected message type %u, got %u\n",
			type, out->type);
		return -1;
	}
	return 0;
}

/* The buffer the client asked for (ctx->len bytes), and our check copy. */
static int alloc_bufs_ctx(struct server_ctx *ctx)
{
	ctx->buf = calloc(1, ctx->len);
	ctx->check = calloc(1, ctx->len);
	if (!ctx->buf || !ctx->check) {
		fprintf(stderr, "calloc(%zu): %s\n", ctx->len, strerror(errno));
		return -1;
	}
	ctx->buf_mr = ibv_reg_mr(ctx->pd, ctx->buf, ctx->len,
				 IBV_ACCESS_LOCAL_WRITE |
				 IBV_ACCESS_REMOTE_WRITE |
				 IBV_ACCESS_REMOTE_READ);
	ctx->check_mr = ibv_reg_mr(ctx->pd, ctx->check, ctx->len,
				   IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->buf_mr || !ctx->check_mr) {
		fprintf(stderr, "ibv_reg_mr: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The exercise: the client checks its round trip with memcmp(src, dst);
 * do the same here. Are the ctx->len bytes the client wrote into ctx->buf
 * the bytes of its source buffer?
 *
 * The server cannot see the client's memory... except through RDMA: the
 * client's first message (ctx->client: addr, rkey, length) says where its
 * source buffer is, and it registered that buffer with
 * IBV_ACCESS_REMOTE_READ. So:
 *   1. RDMA-READ the client's source buffer into ctx->check (ctx->check_mr):
 *      one signaled IBV_WR_RDMA_READ on ctx->id->qp, remote_addr and rkey
 *      from ctx->client;
 *   2. wait for its completion on ctx->send_cq (wait_wc() does it and
 *      reports a failed one);
 *   3. compare ctx->check with ctx->buf.
 *
 * Returns 0 when all bytes match, 1 when they differ (*@offset = index of
 * the first differing byte), -1 when the READ fails (message printed).
 * man ibv_post_send
 */
static int verify_ctx(struct server_ctx *ctx, size_t *offset)
{
	/* TODO 7: READ the client's buffer into ctx->check, wait for the
	 * completion, compare with ctx->buf. */
	struct ibv_sge sge = {
		.addr = (uintptr_t)ctx->check,
		.length = ctx->len,
		.lkey = ctx->check_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = 7,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma.remote_addr = ctx->client.addr,
		.wr.rdma.rkey = ctx->client.rkey,
	}, *bad;
	size_t i;
	int ret;

	ret = ibv_post_send(ctx->id->qp, &wr, &bad);
	if (ret) {
		fprintf(stderr, "ibv_post_send(RDMA READ): %s\n",
			strerror(ret));
		return -1;
	}
	if (wait_wc(ctx, ctx->send_cq, "RDMA READ"))
		return -1;
	if (!memcmp(ctx->check, ctx->buf, ctx->len))
		return 0;
	for (i = 0; ctx->check[i] == ctx->buf[i]; i++)
		;
	*offset = i;
	return 1;
	/* END TODO 7 */
}

static void close_ctx(struct server_ctx *ctx)
{
	if (ctx->id && ctx->id->qp)
		rdma_destroy_qp(ctx->id);
	if (ctx->check_mr)
		ibv_dereg_mr(ctx->check_mr);
	if (ctx->buf_mr)
		ibv_dereg_mr(ctx->buf_mr);
	if (ctx->msg_mr)
		ibv_dereg_mr(ctx->msg_mr);
	if (ctx->recv_cq)
		ibv_destroy_cq(ctx->recv_cq);
	if (ctx->send_cq)
		ibv_destroy_cq(ctx->send_cq);
	if (ctx->pd)
		ibv_dealloc_pd(ctx->pd);
	if (ctx->id)
		rdma_destroy_id(ctx->id);
	if (ctx->listen_id)
		rdma_destroy_id(ctx->listen_id);
	if (ctx->ch)
		rdma_destroy_event_channel(ctx->ch);
	free(ctx->check);
	free(ctx->buf);
}

int main(int argc, char **argv)
{
	struct server_ctx ctx = {};
	struct course_opts o;
	struct cm_msg done;
	size_t offset = 0;
	int verdict, ret = 1;

	course_default_opts(&o);
	course_parse_opts(argc, argv, OPT_PORT | OPT_TIMEOUT, usage, &o);
	ctx.timeout = o.timeout;

	if (init_ctx(&ctx))
		return 1;
	if (listen_ctx(&ctx, o.port) || wait_client_ctx(&ctx) ||
	    alloc_ctx(&ctx) || accept_ctx(&ctx))
		goto out_close_ctx;
	printf("server: connection from %s\n",
	       cm_addr_str(rdma_get_peer_addr(ctx.id)));
	fflush(stdout);

	/* Where the client's source buffer is; then ours, sized to match. */
	if (recv_msg_ctx(&ctx, MSG_CLIENT_BUF, CM_MSG_BUF, &ctx.client))
		goto out_disconnect;
	if (ctx.client.length == 0 || ctx.client.length > MAX_SIZE) {
		fprintf(stderr, "client asks for %u bytes (1 to %u allowed)\n",
			ctx.client.length, MAX_SIZE);
		goto out_disconnect;
	}
	ctx.len = ctx.client.length;
	if (alloc_bufs_ctx(&ctx) ||
	    send_msg_ctx(&ctx, CM_MSG_BUF, 0, (uintptr_t)ctx.buf,
			 ctx.buf_mr->rkey, ctx.len))
		goto out_disconnect;

	/* The client WRITEs and READs our buffer; we see nothing of it. */
	if (recv_msg_ctx(&ctx, MSG_DONE, CM_MSG_DONE, &done))
		goto out_disconnect;

	/* CHEAT: the verdict is the one the client put in DONE. */
	(void)verify_ctx;
	verdict = done.status;
	offset = done.addr;
	if (verdict == 0)
		printf("server: verified %zu bytes: match\n", ctx.len);
	else if (verdict == 1)
		printf("server: verified %zu bytes: MISMATCH at offset %zu\n",
		       ctx.len, offset);
	fflush(stdout);
	if (send_msg_ctx(&ctx, CM_MSG_VERDICT,
			 verdict == 0 ? CM_VERDICT_MATCH :
			 verdict == 1 ? CM_VERDICT_MISMATCH :
					CM_VERDICT_UNVERIFIED,
			 offset, 0, 0))
		goto out_disconnect;
	if (verdict == 0)
		ret = 0;

	/* The client hangs up first; wait for it, but not forever. */
	if (cm_wait_event(ctx.ch, RDMA_CM_EVENT_DISCONNECTED, ctx.timeout,
			  "waiting for the client to disconnect", NULL))
		ret = 1;
	else
		printf("server: client disconnected\n");
	goto out_close_ctx;

out_disconnect:
	rdma_disconnect(ctx.id);
out_close_ctx:
	fflush(stdout);
	close_ctx(&ctx);
	return ret;
}
