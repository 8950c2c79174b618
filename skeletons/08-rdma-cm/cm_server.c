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

/* What arrives in the message slots of struct cm_conn (cm_common.h). */
enum { MSG_CLIENT_BUF = CM_SLOT_IN1, MSG_DONE = CM_SLOT_IN2 };

struct server_ctx {
	struct cm_conn conn;		/* channel, listener, id, PD, CQs, QP */
	struct ibv_mr *buf_mr;		/* the client WRITEs and READs here */
	struct ibv_mr *check_mr;	/* our copy of the client's source */
	char *buf;
	char *check;
	size_t len;
	struct cm_msg client;		/* the client's source buffer */
};

/*
 * Make ctx->conn.listen_id listen on port @port of every local RDMA
 * address, as bind() and listen() do for a TCP socket: rdma_bind_addr()
 * with the IPv4 wildcard address below, then rdma_listen() (a backlog of 1
 * is plenty).
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

	/* TODO 4: bind ctx->conn.listen_id to addr (man rdma_bind_addr),
	 * then listen on it with a backlog of one (man rdma_listen); on
	 * failure print the call and strerror(errno) and return -1. */
	(void)addr;
	course_todo(4, "rdma_bind_addr() and rdma_listen()");
	return -1;
	/* END TODO 4 */
	printf("listening on port %d\n",
	       ntohs(rdma_get_src_port(ctx->conn.listen_id)));
	fflush(stdout);
	return 0;
}

/*
 * Wait (at most ctx->conn.timeout seconds) for a client's connection
 * request: the event RDMA_CM_EVENT_CONNECT_REQUEST on ctx->conn.ch. Like
 * accept() it comes with a new id for this one connection, ev->id: keep it
 * in ctx->conn.id, then
 * acknowledge the event with rdma_ack_cm_event() (after reading it: the ack
 * frees it). Returns 0, or -1 with a message printed.
 * man rdma_get_cm_event
 */
static int wait_client_ctx(struct server_ctx *ctx)
{
	struct rdma_cm_event *ev = NULL;

	/* TODO 5: wait on the event channel (cm_wait_event(), what:
	 * "rdma_listen") for RDMA_CM_EVENT_CONNECT_REQUEST; keep the new
	 * connection's id (ev->id) in ctx->conn.id; acknowledge the event. */
	(void)ctx;
	(void)ev;
	course_todo(5, "wait for RDMA_CM_EVENT_CONNECT_REQUEST and keep ev->id");
	return -1;
	/* END TODO 5 */
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
		.rnr_retry_count = COURSE_QP_RNR_RETRY,
	};

	/* TODO 6: accept the connection with the parameters above (man
	 * rdma_accept), then wait for RDMA_CM_EVENT_ESTABLISHED with
	 * cm_wait_event(). */
	(void)ctx;
	(void)param;
	course_todo(6, "rdma_accept(), then wait for RDMA_CM_EVENT_ESTABLISHED");
	return -1;
	/* END TODO 6 */
	return 0;
}

/* The buffer the client asked for (ctx->len bytes), and our check copy. */
static int alloc_bufs_ctx(struct server_ctx *ctx)
{
	ctx->buf = calloc(1, ctx->len);
	ctx->check = calloc(1, ctx->len);
	if (!ctx->buf || !ctx->check) {
		fprintf(stderr, "calloc(%zu) failed: %s\n", ctx->len, strerror(errno));
		return -1;
	}
	ctx->buf_mr = ibv_reg_mr(ctx->conn.pd, ctx->buf, ctx->len,
				 IBV_ACCESS_LOCAL_WRITE |
				 IBV_ACCESS_REMOTE_WRITE |
				 IBV_ACCESS_REMOTE_READ);
	ctx->check_mr = ibv_reg_mr(ctx->conn.pd, ctx->check, ctx->len,
				   IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->buf_mr || !ctx->check_mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
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
 *      one signaled IBV_WR_RDMA_READ on ctx->conn.id->qp, remote_addr and rkey
 *      from ctx->client;
 *   2. wait for its completion on ctx->conn.send_cq (cm_wait_wc() does it and
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
	(void)ctx;
	(void)offset;
	course_todo(7, "RDMA-READ the client's buffer into ctx->check, compare with ctx->buf");
	return -1;
	/* END TODO 7 */
}

static void close_ctx(struct server_ctx *ctx)
{
	if (ctx->check_mr)
		ibv_dereg_mr(ctx->check_mr);
	if (ctx->buf_mr)
		ibv_dereg_mr(ctx->buf_mr);
	cm_conn_close(&ctx->conn);
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
	ctx.conn.timeout = o.timeout;

	if (cm_conn_open(&ctx.conn, &ctx.conn.listen_id))
		return 1;
	if (listen_ctx(&ctx, o.port) || wait_client_ctx(&ctx) ||
	    cm_conn_alloc(&ctx.conn) || accept_ctx(&ctx))
		goto out_close_ctx;
	printf("server: connection from %s\n",
	       cm_addr_str(rdma_get_peer_addr(ctx.conn.id)));
	fflush(stdout);

	/* Where the client's source buffer is; then ours, sized to match. */
	if (cm_recv_msg(&ctx.conn, MSG_CLIENT_BUF, CM_MSG_BUF, &ctx.client))
		goto out_disconnect;
	if (ctx.client.length == 0 || ctx.client.length > MAX_SIZE) {
		fprintf(stderr, "client asks for %u bytes (1 to %u allowed)\n",
			ctx.client.length, MAX_SIZE);
		goto out_disconnect;
	}
	ctx.len = ctx.client.length;
	if (alloc_bufs_ctx(&ctx) ||
	    cm_send_msg(&ctx.conn, CM_MSG_BUF, 0, (uintptr_t)ctx.buf,
			 ctx.buf_mr->rkey, ctx.len))
		goto out_disconnect;

	/* The client WRITEs and READs our buffer; we see nothing of it. */
	if (cm_recv_msg(&ctx.conn, MSG_DONE, CM_MSG_DONE, &done))
		goto out_disconnect;

	verdict = verify_ctx(&ctx, &offset);
	if (verdict == 0)
		printf("server: verified %zu bytes: match\n", ctx.len);
	else if (verdict == 1)
		printf("server: verified %zu bytes: MISMATCH at offset %zu\n",
		       ctx.len, offset);
	fflush(stdout);
	if (cm_send_msg(&ctx.conn, CM_MSG_VERDICT,
			 verdict == 0 ? CM_VERDICT_MATCH :
			 verdict == 1 ? CM_VERDICT_MISMATCH :
					CM_VERDICT_UNVERIFIED,
			 offset, 0, 0))
		goto out_disconnect;
	if (verdict == 0)
		ret = 0;

	/* The client hangs up first; wait for it, but not forever. */
	if (cm_wait_event(ctx.conn.ch, RDMA_CM_EVENT_DISCONNECTED,
			  ctx.conn.timeout,
			  "waiting for the client to disconnect", NULL))
		ret = 1;
	else
		printf("server: client disconnected\n");
	goto out_close_ctx;

out_disconnect:
	rdma_disconnect(ctx.conn.id);
out_close_ctx:
	fflush(stdout);
	close_ctx(&ctx);
	return ret;
}
