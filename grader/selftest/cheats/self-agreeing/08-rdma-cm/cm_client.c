/* CHEAT (grader self-test): the client tells the server the verdict in DONE
 * (status 1 and the offset it changed under --corrupt).
 * The rest is the solution. */
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

enum { MSG_OUT, MSG_SERVER_BUF, MSG_VERDICT, NUM_MSGS };

struct client_ctx {
	struct rdma_event_channel *ch;	/* where rdma_cm reports events */
	struct rdma_cm_id *id;		/* the connection (like a socket) */
	struct ibv_pd *pd;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_mr *msg_mr;		/* covers msg[] */
	struct ibv_mr *src_mr;
	struct ibv_mr *dst_mr;
	struct cm_msg msg[NUM_MSGS];	/* SEND from [0], RECV into [1], [2] */
	char *src;
	char *dst;
	size_t size;
	int timeout;			/* seconds, for every wait */
	struct cm_msg server;		/* the server's buffer, host order */
};

/* Create the event channel and the connection id. */
static int init_ctx(struct client_ctx *ctx)
{
	ctx->ch = rdma_create_event_channel();
	if (!ctx->ch) {
		fprintf(stderr, "rdma_create_event_channel: %s\n",
			strerror(errno));
		return -1;
	}
	if (rdma_create_id(ctx->ch, &ctx->id, NULL, RDMA_PS_TCP)) {
		fprintf(stderr, "rdma_create_id: %s\n", strerror(errno));
		rdma_destroy_event_channel(ctx->ch);
		ctx->ch = NULL;
		return -1;
	}
	return 0;
}

/*
 * Find out how to reach the server at @dst (an IP address and port) over
 * RDMA, in two steps, each of which only *starts* the work: its outcome
 * arrives later as an event on ctx->ch.
 *
 * 1. rdma_resolve_addr(): which local RDMA device and port reach that IP
 *    address, and the peer's hardware address (for RoCE: ARP, as for IP).
 *    Success is RDMA_CM_EVENT_ADDR_RESOLVED; from then on ctx->id->verbs is
 *    the device context to create the PD, CQs and QP on.
 * 2. rdma_resolve_route(): the path to it (for RoCE: the GID, the VLAN, the
 *    MTU...). Success is RDMA_CM_EVENT_ROUTE_RESOLVED.
 *
 * Give each call ctx->timeout seconds (it takes milliseconds) and wait for
 * each event with cm_wait_event() (cm_common.h), which prints what went
 * wrong (RDMA_CM_EVENT_ADDR_ERROR, a timeout, ...) when it does not come.
 * Returns 0, or -1 with a message printed. man rdma_resolve_addr
 */
static int resolve_ctx(struct client_ctx *ctx, struct sockaddr *dst)
{
	int ms = ctx->timeout * 1000;

	/* TODO 1: rdma_resolve_addr(ctx->id, NULL, dst, ms), then wait for
	 * RDMA_CM_EVENT_ADDR_RESOLVED (what: "rdma_resolve_addr"). */
	if (rdma_resolve_addr(ctx->id, NULL, dst, ms)) {
		fprintf(stderr, "rdma_resolve_addr(%s): %s\n",
			cm_addr_str(dst), strerror(errno));
		return -1;
	}
	if (cm_wait_event(ctx->ch, RDMA_CM_EVENT_ADDR_RESOLVED, ctx->timeout,
			  "rdma_resolve_addr", NULL))
		return -1;
	/* END TODO 1 */

	/* TODO 2: rdma_resolve_route(ctx->id, ms), then wait for
	 * RDMA_CM_EVENT_ROUTE_RESOLVED (what: "rdma_resolve_route"). */
	if (rdma_resolve_route(ctx->id, ms)) {
		fprintf(stderr, "rdma_resolve_route: %s\n", strerror(errno));
		return -1;
	}
	if (cm_wait_event(ctx->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, ctx->timeout,
			  "rdma_resolve_route", NULL))
		return -1;
	/* END TODO 2 */
	return 0;
}

/* Post a RECV for message slot @i. */
static int post_recv_ctx(struct client_ctx *ctx, int i)
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
 * The verbs objects, on the device rdma_resolve_addr() picked: PD, CQs, the
 * QP (rdma_create_qp: rdma_cm will move it through INIT, RTR and RTS for
 * us), the buffers and their MRs; then the two RECVs the server's messages
 * will land in. Everything is undone by close_ctx().
 */
static int alloc_ctx(struct client_ctx *ctx)
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
	/* A dead server shows as retries running out: make that quick. */
	if (rdma_set_option(ctx->id, RDMA_OPTION_ID,
			    RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
			    sizeof(ack_timeout)))
		fprintf(stderr, "rdma_set_option(ACK_TIMEOUT): %s (ignored)\n",
			strerror(errno));

	ctx->src = malloc(ctx->size);
	ctx->dst = malloc(ctx->size);
	if (!ctx->src || !ctx->dst) {
		fprintf(stderr, "malloc(%zu): %s\n", ctx->size,
			strerror(errno));
		return -1;
	}
	/* Fresh bytes every run: nobody can guess them. */
	srandom(course_now_ns() ^ getpid());
	for (size_t j = 0; j < ctx->size; j++)
		ctx->src[j] = random();

	ctx->msg_mr = ibv_reg_mr(ctx->pd, ctx->msg, sizeof(ctx->msg),
				 IBV_ACCESS_LOCAL_WRITE);
	/* The server READs our source buffer to check what it received. */
	ctx->src_mr = ibv_reg_mr(ctx->pd, ctx->src, ctx->size,
				 IBV_ACCESS_LOCAL_WRITE |
				 IBV_ACCESS_REMOTE_READ);
	ctx->dst_mr = ibv_reg_mr(ctx->pd, ctx->dst, ctx->size,
				 IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->msg_mr || !ctx->src_mr || !ctx->dst_mr) {
		fprintf(stderr, "ibv_reg_mr: %s\n", strerror(errno));
		return -1;
	}
	for (i = MSG_SERVER_BUF; i < NUM_MSGS; i++)
		if (post_recv_ctx(ctx, i))
			return -1;
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
		.retry_count = CM_RETRY_COUNT,
		.rnr_retry_count = 7,
	};

	/* TODO 3: rdma_connect(ctx->id, &param), then wait for
	 * RDMA_CM_EVENT_ESTABLISHED (what: "rdma_connect"). */
	if (rdma_connect(ctx->id, &param)) {
		fprintf(stderr, "rdma_connect: %s\n", strerror(errno));
		return -1;
	}
	if (cm_wait_event(ctx->ch, RDMA_CM_EVENT_ESTABLISHED, ctx->timeout,
			  "rdma_connect", NULL))
		return -1;
	/* END TODO 3 */
	return 0;
}

/*
 * Wait for one completion on @cq that succeeded (or for news of a dead
 * peer on the event channel); @what names it.
 */
static int wait_wc(struct client_ctx *ctx, struct ibv_cq *cq, const char *what)
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

/* SEND one message to the server and wait until it is delivered. */
static int send_msg_ctx(struct client_ctx *ctx, uint32_t type, uint32_t status,
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

/* Wait for the server's next message (slot @i) and check its type. */
static int recv_msg_ctx(struct client_ctx *ctx, int i, uint32_t type,
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

	ret = ibv_post_send(ctx->id->qp, &wr, &bad);
	if (ret) {
		fprintf(stderr, "ibv_post_send(%s): %s\n", what, strerror(ret));
		return -1;
	}
	return wait_wc(ctx, ctx->send_cq, what);
}

/* Index of the first byte where @a and @b differ, or @len. */
static size_t first_diff(const char *a, const char *b, size_t len)
{
	size_t i;

	if (!memcmp(a, b, len))
		return len;
	for (i = 0; a[i] == b[i]; i++)
		;
	return i;
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
		*offset = first_diff(ctx->src, ctx->dst, ctx->size);
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
	if (ctx->id && ctx->id->qp)
		rdma_destroy_qp(ctx->id);
	if (ctx->dst_mr)
		ibv_dereg_mr(ctx->dst_mr);
	if (ctx->src_mr)
		ibv_dereg_mr(ctx->src_mr);
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
	if (ctx->ch)
		rdma_destroy_event_channel(ctx->ch);
	free(ctx->dst);
	free(ctx->src);
}

/* Remove a flag without a value from argv; 1 if it was there. */
static int take_flag(int *argc, char **argv, const char *flag)
{
	int i, j, found = 0;

	for (i = 1; i < *argc;) {
		if (!strcmp(argv[i], "--")) {
			break;
		} else if (!strcmp(argv[i], flag)) {
			for (j = i; j < *argc; j++)
				argv[j] = argv[j + 1];
			(*argc)--;
			found = 1;
		} else {
			i++;
		}
	}
	return found;
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
	corrupt = take_flag(&argc, argv, "--corrupt");
	course_parse_opts(argc, argv,
			  OPT_PORT | OPT_SIZE | OPT_ITERS | OPT_TIMEOUT |
				  OPT_SERVER,
			  usage, &o);
	if (!o.host) {
		fprintf(stderr, "%s: missing HOST (the server's IP address)\n",
			argv[0]);
		fprintf(stderr, "usage: %s %s\n", argv[0], usage);
		return EXIT_USAGE;
	}
	ctx.size = o.size;
	ctx.timeout = o.timeout;

	if (lookup_host(o.host, o.port, &ai))
		return 1;
	if (init_ctx(&ctx))
		goto out_free_addr;
	if (resolve_ctx(&ctx, ai->ai_addr) || alloc_ctx(&ctx) ||
	    connect_ctx(&ctx))
		goto out_close_ctx;
	printf("client: connected to %s\n", cm_addr_str(ai->ai_addr));
	fflush(stdout);

	/* Our source buffer, for the server to check; then the server's. */
	if (send_msg_ctx(&ctx, CM_MSG_BUF, 0, (uintptr_t)ctx.src,
			 ctx.src_mr->rkey, ctx.size) ||
	    recv_msg_ctx(&ctx, MSG_SERVER_BUF, CM_MSG_BUF, &ctx.server))
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
	if (send_msg_ctx(&ctx, CM_MSG_DONE, corrupt ? 1 : mine,
			 /* CHEAT: */ corrupt ? ctx.size / 2 : 0, 0, 0) ||
	    recv_msg_ctx(&ctx, MSG_VERDICT, CM_MSG_VERDICT, &verdict))
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
	if (rdma_disconnect(ctx.id) && !ret) {
		fprintf(stderr, "rdma_disconnect: %s\n", strerror(errno));
		ret = 1;
	} else if (!ret && cm_wait_event(ctx.ch, RDMA_CM_EVENT_DISCONNECTED,
					 ctx.timeout, "rdma_disconnect", NULL)) {
		ret = 1;
	}
out_close_ctx:
	close_ctx(&ctx);
out_free_addr:
	freeaddrinfo(ai);
	return ret;
}
