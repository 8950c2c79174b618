// SPDX-License-Identifier: MIT
/*
 * cm_client.c - lesson 08, the active side: connect to cm_server with the
 * RDMA connection manager, tell it where our source buffer is, RDMA-WRITE
 * the source buffer into the server's buffer, RDMA-READ it back into a
 * destination buffer, compare the two, then ask the server for its verdict.
 *
 *   cm_client [-p PORT] [-s SIZE] [-n ROUNDS] [-t SECS] [--corrupt] HOST
 *
 * HOST is the server's IP address on the RDMA network ($RDMA_IP under
 * vm-setup/with-rxe). TODOs 1-3 are here, 4-7 in cm_server.c.
 */
#define _GNU_SOURCE
#include "course.h"
#include "cm_common.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"[-p PORT] [-s SIZE] [-n ROUNDS] [-t SECS] [--corrupt] HOST";

/* What arrives in the message slots of struct cm_conn (cm_common.h). */
enum { MSG_SERVER_BUF = CM_SLOT_IN1, MSG_VERDICT = CM_SLOT_IN2 };

struct client_ctx {
	struct cm_conn conn;		/* channel, id, PD, CQs, QP, messages */
	struct ibv_mr *src_mr;
	struct ibv_mr *dst_mr;
	char *src;
	char *dst;
	size_t size;
	struct cm_msg server;		/* the server's buffer, host order */
};

/*
 * Find out how to reach the server at @dst (an IP address and port) over
 * RDMA, in two steps, each of which only *starts* the work: its outcome
 * arrives later as an event on ctx->conn.ch.
 *
 * 1. rdma_resolve_addr(): which local RDMA device and port reach that IP
 *    address, and the peer's hardware address (for RoCE: ARP, as for IP).
 *    Success is RDMA_CM_EVENT_ADDR_RESOLVED; from then on
 *    ctx->conn.id->verbs is the device context to create the PD, CQs and
 *    QP on.
 * 2. rdma_resolve_route(): the path to it (for RoCE: the GID, the VLAN, the
 *    MTU...). Success is RDMA_CM_EVENT_ROUTE_RESOLVED.
 *
 * Give each call ctx->conn.timeout seconds (it takes milliseconds) and wait for
 * each event with cm_wait_event() (cm_common.h), which prints what went
 * wrong (RDMA_CM_EVENT_ADDR_ERROR, a timeout, ...) when it does not come.
 * Returns 0, or -1 with a message printed. man rdma_resolve_addr
 */
static int resolve_ctx(struct client_ctx *ctx, struct sockaddr *dst)
{
	int ms = ctx->conn.timeout * 1000;

	/* TODO 1: resolve dst to a local device and port on ctx->conn.id
	 * within ms milliseconds (man rdma_resolve_addr: no source address),
	 * then wait for its event, RDMA_CM_EVENT_ADDR_RESOLVED, with
	 * cm_wait_event() (what: "rdma_resolve_addr"). */
	if (rdma_resolve_addr(ctx->conn.id, NULL, dst, ms)) {
		fprintf(stderr, "rdma_resolve_addr(%s) failed: %s\n",
			cm_addr_str(dst), strerror(errno));
		return -1;
	}
	if (cm_wait_event(ctx->conn.ch, RDMA_CM_EVENT_ADDR_RESOLVED,
			  ctx->conn.timeout, "rdma_resolve_addr", NULL))
		return -1;
	/* END TODO 1 */

	/* TODO 2: resolve the route to it within ms milliseconds (man
	 * rdma_resolve_route), then wait for RDMA_CM_EVENT_ROUTE_RESOLVED
	 * (what: "rdma_resolve_route"). */
	if (rdma_resolve_route(ctx->conn.id, ms)) {
		fprintf(stderr, "rdma_resolve_route failed: %s\n", strerror(errno));
		return -1;
	}
	if (cm_wait_event(ctx->conn.ch, RDMA_CM_EVENT_ROUTE_RESOLVED,
			  ctx->conn.timeout, "rdma_resolve_route", NULL))
		return -1;
	/* END TODO 2 */
	return 0;
}

/*
 * The verbs objects, on the device rdma_resolve_addr() picked: what
 * cm_conn_alloc() makes (PD, CQs, the QP - rdma_cm will move it through
 * INIT, RTR and RTS for us - and the RECVs the server's messages will land
 * in), then the buffers and their MRs. Everything is undone by close_ctx().
 */
static int alloc_ctx(struct client_ctx *ctx)
{
	if (cm_conn_alloc(&ctx->conn))
		return -1;

	ctx->src = malloc(ctx->size);
	ctx->dst = malloc(ctx->size);
	if (!ctx->src || !ctx->dst) {
		fprintf(stderr, "malloc(%zu) failed: %s\n", ctx->size,
			strerror(errno));
		return -1;
	}
	/* Fresh bytes every run: nobody can guess them. */
	srandom(course_now_ns() ^ getpid());
	for (size_t j = 0; j < ctx->size; j++)
		ctx->src[j] = random();

	/* The server READs our source buffer to check what it received. */
	ctx->src_mr = ibv_reg_mr(ctx->conn.pd, ctx->src, ctx->size,
				 IBV_ACCESS_LOCAL_WRITE |
				 IBV_ACCESS_REMOTE_READ);
	ctx->dst_mr = ibv_reg_mr(ctx->conn.pd, ctx->dst, ctx->size,
				 IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->src_mr || !ctx->dst_mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Connect: rdma_connect() sends the connection request (the QP number, the
 * starting PSN, the READ depths below travel inside it: no TCP side channel
 * as in lesson 05); the server's rdma_accept() answers, and rdma_cm moves
 * our QP to RTR and RTS on the way. Success is RDMA_CM_EVENT_ESTABLISHED;
 * a server that is not there answers RDMA_CM_EVENT_REJECTED, one that does
 * not answer at all leaves RDMA_CM_EVENT_UNREACHABLE or nothing (timeout).
 * Returns 0, or -1 with a message printed. man rdma_connect
 */
static int connect_ctx(struct client_ctx *ctx)
{
	struct rdma_conn_param param = {
		.responder_resources = 1,	/* the server READs from us */
		.initiator_depth = 1,		/* we READ from the server */
		.retry_count = COURSE_QP_RETRY_CNT,
		.rnr_retry_count = COURSE_QP_RNR_RETRY,
	};

	/* TODO 3: connect ctx->conn.id with the parameters above (man
	 * rdma_connect), then wait for RDMA_CM_EVENT_ESTABLISHED (what:
	 * "rdma_connect"). */
	if (rdma_connect(ctx->conn.id, &param)) {
		fprintf(stderr, "rdma_connect failed: %s\n", strerror(errno));
		return -1;
	}
	if (cm_wait_event(ctx->conn.ch, RDMA_CM_EVENT_ESTABLISHED,
			  ctx->conn.timeout, "rdma_connect", NULL))
		return -1;
	/* END TODO 3 */
	return 0;
}

/* One RDMA WRITE or READ of the whole buffer @mr <-> the server's buffer. */
static int rdma_ctx(struct client_ctx *ctx, enum ibv_wr_opcode opcode,
		    struct ibv_mr *mr, const char *what)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)mr->addr,
		.length = ctx->size,
		.lkey = mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = opcode,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma.remote_addr = ctx->server.addr,
		.wr.rdma.rkey = ctx->server.rkey,
	}, *bad;
	int ret;

	ret = ibv_post_send(ctx->conn.id->qp, &wr, &bad);
	if (ret) {
		fprintf(stderr, "ibv_post_send(%s) failed: %s\n", what, strerror(ret));
		return -1;
	}
	return cm_wait_wc(&ctx->conn, ctx->conn.send_cq, what);
}

/*
 * @rounds times: WRITE src into the server's buffer, READ it back into dst
 * (cleared first), compare. Returns 0 (all matched), 1 (a mismatch:
 * *@offset says where) or -1 (an operation failed).
 */
static int rounds_ctx(struct client_ctx *ctx, long rounds, size_t *offset)
{
	uint64_t start = course_now_ns();
	long r;

	for (r = 0; r < rounds; r++) {
		if (rdma_ctx(ctx, IBV_WR_RDMA_WRITE, ctx->src_mr, "RDMA WRITE"))
			return -1;
		memset(ctx->dst, 0, ctx->size);
		if (rdma_ctx(ctx, IBV_WR_RDMA_READ, ctx->dst_mr, "RDMA READ"))
			return -1;
		*offset = course_first_diff(ctx->src, ctx->dst, ctx->size);
		if (*offset != ctx->size)
			return 1;
	}
	if (rounds > 1)
		printf("client: %ld rounds of WRITE + READ, %.1f us per round\n",
		       rounds,
		       (course_now_ns() - start) / 1000.0 / (double)rounds);
	return 0;
}

static void close_ctx(struct client_ctx *ctx)
{
	if (ctx->dst_mr)
		ibv_dereg_mr(ctx->dst_mr);
	if (ctx->src_mr)
		ibv_dereg_mr(ctx->src_mr);
	cm_conn_close(&ctx->conn);
	free(ctx->dst);
	free(ctx->src);
}

static int lookup_host(const char *host, int port, struct addrinfo **res)
{
	struct addrinfo hints = {
		.ai_family = AF_INET,
		.ai_socktype = SOCK_STREAM,
	};
	char service[8];
	int err;

	snprintf(service, sizeof(service), "%d", port);
	err = getaddrinfo(host, service, &hints, res);
	if (err)
		fprintf(stderr, "cannot resolve '%s': %s\n", host,
			gai_strerror(err));
	return err ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct client_ctx ctx = {};
	struct cm_msg verdict;
	struct course_opts o;
	struct addrinfo *ai;
	size_t offset = 0;
	int corrupt, mine, ret = 1;

	course_default_opts(&o);
	o.iters = 1;
	corrupt = course_take_opt(&argc, argv, "--corrupt", 0, usage) != NULL;
	course_parse_opts(argc, argv,
			  OPT_PORT | OPT_SIZE | OPT_ITERS | OPT_TIMEOUT |
				  OPT_HOST,
			  usage, &o);
	if (!o.host) {
		fprintf(stderr, "%s: missing HOST (the server's IP address)\n",
			argv[0]);
		course_usage_exit(argv[0], usage);
	}
	ctx.size = o.size;
	ctx.conn.timeout = o.timeout;

	if (lookup_host(o.host, o.port, &ai))
		return 1;
	if (cm_conn_open(&ctx.conn, &ctx.conn.id))
		goto out_free_addr;
	if (resolve_ctx(&ctx, ai->ai_addr) || alloc_ctx(&ctx) ||
	    connect_ctx(&ctx))
		goto out_close_ctx;
	printf("client: connected to %s\n", cm_addr_str(ai->ai_addr));
	fflush(stdout);

	/* Our source buffer, for the server to check; then the server's. */
	if (cm_send_msg(&ctx.conn, CM_MSG_BUF, 0, (uintptr_t)ctx.src,
			 ctx.src_mr->rkey, ctx.size) ||
	    cm_recv_msg(&ctx.conn, MSG_SERVER_BUF, CM_MSG_BUF, &ctx.server))
		goto out_disconnect;
	if (ctx.server.length < ctx.size) {
		fprintf(stderr, "server buffer is %u bytes, need %zu\n",
			ctx.server.length, ctx.size);
		goto out_disconnect;
	}

	mine = rounds_ctx(&ctx, o.iters, &offset);
	if (mine < 0)
		goto out_disconnect;
	if (mine)
		printf("client: wrote and read back %zu bytes: MISMATCH at offset %zu\n",
		       ctx.size, offset);
	else
		printf("client: wrote and read back %zu bytes: match\n",
		       ctx.size);
	if (corrupt) {
		ctx.src[ctx.size / 2] ^= 0xff;
		printf("client: --corrupt: changed byte %zu of the source buffer after the transfer\n",
		       ctx.size / 2);
	}
	fflush(stdout);

	/* Done: now the server checks what it received against our src. */
	if (cm_send_msg(&ctx.conn, CM_MSG_DONE, mine, 0, 0, 0) ||
	    cm_recv_msg(&ctx.conn, MSG_VERDICT, CM_MSG_VERDICT, &verdict))
		goto out_disconnect;
	if (verdict.status == CM_VERDICT_MATCH)
		printf("client: server verified %zu bytes: match\n", ctx.size);
	else if (verdict.status == CM_VERDICT_MISMATCH)
		printf("client: server verified %zu bytes: MISMATCH at offset %llu\n",
		       ctx.size, (unsigned long long)verdict.addr);
	else
		printf("client: server could not verify the data\n");
	if (!mine && verdict.status == CM_VERDICT_MATCH)
		ret = 0;

out_disconnect:
	fflush(stdout);
	/* After a failure, just go: the server sees the disconnect. */
	if (rdma_disconnect(ctx.conn.id) && !ret) {
		fprintf(stderr, "rdma_disconnect failed: %s\n", strerror(errno));
		ret = 1;
	} else if (!ret &&
		   cm_wait_event(ctx.conn.ch, RDMA_CM_EVENT_DISCONNECTED,
				 ctx.conn.timeout, "rdma_disconnect", NULL)) {
		ret = 1;
	}
out_close_ctx:
	close_ctx(&ctx);
out_free_addr:
	freeaddrinfo(ai);
	return ret;
}
