// SPDX-License-Identifier: MIT
/*
 * atomics.c - lesson 12: a shared counter and a spinlock in remote memory.
 *
 *   server:  atomics [OPTIONS] [-c CLIENTS] [--start VALUE]
 *   client:  atomics [OPTIONS] [--offset BYTES] [--rmw] HOST
 *
 * The server registers one region that its clients may update with RDMA
 * atomics (and READ and WRITE):
 *
 *   offset  0  counter  (uint64_t, host order, starts at --start)
 *   offset  8  lock     (0: free, else the holder's QP number)
 *   offset 16  tail     (how many log entries are in use)
 *   offset 24  log[]    (CLIENTS x ITERS entries of uint64_t)
 *
 * and accepts -c clients, one RC connection each (05-send-recv/rc.c).
 * When all have connected it lets them go ('G'); each client does --iters
 * times: one IBV_WR_ATOMIC_FETCH_AND_ADD of 1 on the counter, then takes
 * the lock (IBV_WR_ATOMIC_CMP_AND_SWP 0 -> its QPN, until it gets it),
 * appends its QPN to the log (READ tail, WRITE log[tail], WRITE tail + 1)
 * and releases the lock (CMP_AND_SWP its QPN -> 0). When every client has
 * said it is done ('D'), the server checks its own memory: the counter
 * must be --start + CLIENTS x ITERS and the log must hold every client's
 * QPN exactly ITERS times.
 */
#include "rc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-n ITERS] [-t SECS] "
	"[-c CLIENTS] [--start VALUE] [--offset BYTES] [--rmw] [HOST]";

#define MAX_CLIENTS 16

/* The shared region (server) and where each field is. */
enum {
	OFF_COUNTER = 0,
	OFF_LOCK = 8,
	OFF_TAIL = 16,
	OFF_LOG = 24,
};

/* The client's local buffer: where each result lands, what it writes. */
enum {
	LOC_OLD = 0,	/* an atomic's old value, written by the NIC */
	LOC_TAIL = 8,	/* the tail, READ */
	LOC_ENTRY = 16, /* the log entry to WRITE (our QPN) */
	LOC_NEXT = 24,	/* tail + 1, to WRITE */
	LOC_SIZE = 32,
};

struct at_ctx {
	/* client: one connection; server: one per client */
	struct rc_ctx *rc[MAX_CLIENTS];
	struct ibv_mr *mr[MAX_CLIENTS];
	int nrc;
	uint64_t *buf; /* server: the shared region; client: LOC_* slots */
	size_t size;
	long iters;
	struct qp_info theirs;	/* client: the server's region */
	uint64_t remote_offset; /* client: --offset, added to the counter */
	long spins; /* client: CMP_AND_SWP that found the lock taken */
};

/* The QP: what the peer may do with it, and the queue depths. */
static const struct rc_params params = {
	/* TODO 1: let the peer do atomics (and READ and WRITE) on this QP. */
	.access = 0,
	/* END TODO 1 */
	/* TODO 2: how many READs/atomics this QP may have outstanding as
	 * the initiator (RTS), and serve at once as the target (RTR). */
	.max_rd_atomic = 0,
	.max_dest_rd_atomic = 0,
	/* END TODO 2 */
	.max_send_wr = 4,
	.max_recv_wr = 1,
};

static const char *atomic_cap_str(enum ibv_atomic_cap cap)
{
	switch (cap) {
	case IBV_ATOMIC_NONE:
		return "ATOMIC_NONE";
	case IBV_ATOMIC_HCA:
		return "ATOMIC_HCA";
	case IBV_ATOMIC_GLOB:
		return "ATOMIC_GLOB";
	}
	return "unknown";
}

/* Print the device's atomic_cap; -1 when it has no atomics. */
static int check_atomic_cap(struct rc_ctx *rc)
{
	struct ibv_device_attr attr;
	int ret;

	ret = ibv_query_device(rc->context, &attr);
	if (ret) {
		fprintf(stderr, "ibv_query_device failed: %s\n", strerror(ret));
		return -1;
	}
	printf("atomic_cap: %s (%d)\n", atomic_cap_str(attr.atomic_cap),
	       attr.atomic_cap);
	if (attr.atomic_cap == IBV_ATOMIC_NONE) {
		fprintf(stderr, "the device does not support atomics\n");
		return -1;
	}
	return 0;
}

/*
 * Server: register the shared region in client @k's PD, for the peer's
 * atomics, READs and WRITEs. Returns 0, or -1 (message printed).
 */
static int register_shared(struct at_ctx *ctx, int k)
{
	/* TODO 3: register ctx->buf (ctx->size bytes) in ctx->rc[k]->pd
	 * with ibv_reg_mr(): the client's NIC updates it with atomics,
	 * READs the tail and WRITEs the log (man ibv_reg_mr). */
	ctx->mr[k] = NULL;
	errno = course_todo(3, "register the shared region with ibv_reg_mr()");
	/* END TODO 3 */
	if (!ctx->mr[k]) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Client: one atomic on the 8 bytes at the server's region + @off:
 * @opcode is IBV_WR_ATOMIC_FETCH_AND_ADD (adds @compare_add) or
 * IBV_WR_ATOMIC_CMP_AND_SWP (writes @swap if the value equals
 * @compare_add). The old value lands in the local buffer at LOC_OLD;
 * waits for the completion and stores it in *old. 0 or -1.
 */
static int post_atomic(struct at_ctx *ctx, enum ibv_wr_opcode opcode,
		       uint64_t off, uint64_t compare_add, uint64_t swap,
		       uint64_t *old)
{
	struct ibv_wc wc;
	int ret;

	/* TODO 4: post one signaled atomic work request: an sge of 8
	 * bytes at LOC_OLD of ctx->buf (lkey of ctx->mr[0]), and
	 * .wr.atomic = { remote_addr (the region's addr + off),
	 * compare_add, swap, rkey } (man ibv_post_send); set ret to what
	 * ibv_post_send() returns. */
	(void)off;
	(void)compare_add;
	(void)swap;
	ret = course_todo(4, "post the atomic work request");
	/* END TODO 4 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	if (rc_wait_wc(ctx->rc[0], &wc,
		       opcode == IBV_WR_ATOMIC_FETCH_AND_ADD
			       ? "fetch and add"
			       : "compare and swap"))
		return -1;
	*old = ctx->buf[LOC_OLD / 8];
	return 0;
}

/*
 * Client: an RDMA READ or WRITE of @len bytes between the local buffer at
 * @loc and the server's region at @off; waits for it. 0 or -1.
 */
static int post_rdma(struct at_ctx *ctx, enum ibv_wr_opcode opcode,
		     uint64_t off, uint64_t loc, uint32_t len)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)ctx->buf + loc,
		.length = len,
		.lkey = ctx->mr[0]->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = opcode,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {
			.remote_addr = ctx->theirs.addr + off,
			.rkey = ctx->theirs.rkey,
		},
	};
	struct ibv_send_wr *bad_wr;
	struct ibv_wc wc;
	int ret;

	ret = ibv_post_send(ctx->rc[0]->qp, &wr, &bad_wr);
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	return rc_wait_wc(ctx->rc[0], &wc,
			  opcode == IBV_WR_RDMA_READ ? "rdma read"
						     : "rdma write");
}

/*
 * Client: take the lock: compare-and-swap 0 -> @me until the old value
 * says it was free; count the attempts that found it taken in ctx->spins.
 * 0 or -1.
 */
static int lock(struct at_ctx *ctx, uint64_t me)
{
	uint64_t old;

	/* TODO 5: loop: IBV_WR_ATOMIC_CMP_AND_SWP on OFF_LOCK, compare 0,
	 * swap @me (post_atomic()); stop when the old value is 0 (it was
	 * free: now it is ours), else ctx->spins++ and try again. */
	(void)ctx;
	(void)me;
	(void)old;
	course_todo(5, "take the lock with compare-and-swap");
	return -1;
	/* END TODO 5 */
}

/*
 * Client: release the lock: compare-and-swap @me -> 0. The old value must
 * be @me (we held it); otherwise print
 *   lock: held by 0xOLD, not by us (0xME)
 * and return -1.
 */
static int unlock(struct at_ctx *ctx, uint64_t me)
{
	uint64_t old = me;

	/* TODO 6: IBV_WR_ATOMIC_CMP_AND_SWP on OFF_LOCK, compare @me, swap
	 * 0, the old value into old. */
	(void)ctx;
	if (course_todo(6, "release the lock with compare-and-swap"))
		return -1;
	/* END TODO 6 */
	if (old != me) {
		fprintf(stderr,
			"lock: held by 0x%" PRIx64 ", not by us (0x%" PRIx64
			")\n",
			old, me);
		return -1;
	}
	return 0;
}

/* Client, inside the lock: append @me to the log. 0 or -1. */
static int append(struct at_ctx *ctx, uint64_t me)
{
	uint64_t tail;

	if (post_rdma(ctx, IBV_WR_RDMA_READ, OFF_TAIL, LOC_TAIL, 8))
		return -1;
	tail = ctx->buf[LOC_TAIL / 8];
	if (OFF_LOG + (tail + 1) * 8 > ctx->theirs.length) {
		fprintf(stderr, "log: full (tail %" PRIu64 ")\n", tail);
		return -1;
	}
	ctx->buf[LOC_ENTRY / 8] = me;
	ctx->buf[LOC_NEXT / 8] = tail + 1;
	if (post_rdma(ctx, IBV_WR_RDMA_WRITE, OFF_LOG + tail * 8, LOC_ENTRY, 8))
		return -1;
	return post_rdma(ctx, IBV_WR_RDMA_WRITE, OFF_TAIL, LOC_NEXT, 8);
}

/*
 * Client, --rmw: the counter incremented the wrong way, READ then WRITE:
 * another client's update between the two is lost. 0 or -1.
 */
static int rmw_increment(struct at_ctx *ctx, uint64_t *old)
{
	if (post_rdma(ctx, IBV_WR_RDMA_READ, OFF_COUNTER, LOC_OLD, 8))
		return -1;
	*old = ctx->buf[LOC_OLD / 8];
	ctx->buf[LOC_NEXT / 8] = *old + 1;
	return post_rdma(ctx, IBV_WR_RDMA_WRITE, OFF_COUNTER, LOC_NEXT, 8);
}

static int run_client(struct at_ctx *ctx, int rmw)
{
	uint64_t me = ctx->rc[0]->qp->qp_num, old, first = 0, last = 0;
	long i;

	for (i = 0; i < ctx->iters; i++) {
		if (rmw ? rmw_increment(ctx, &old)
			: post_atomic(ctx, IBV_WR_ATOMIC_FETCH_AND_ADD,
				      OFF_COUNTER + ctx->remote_offset, 1, 0,
				      &old))
			return -1;
		if (i == 0)
			first = old;
		last = old;
		if (lock(ctx, me) || append(ctx, me) || unlock(ctx, me))
			return -1;
	}
	printf("%s: %ld increments, old values %" PRIu64 " .. %" PRIu64 "\n",
	       rmw ? "read-modify-write" : "fetch_and_add", ctx->iters, first,
	       last);
	printf("lock: %ld appends as 0x%06" PRIx64
	       ", %ld attempts found it taken\n",
	       ctx->iters, me, ctx->spins);
	return 0;
}

/*
 * Server: check the shared region after every client is done. The counter
 * must be @start + clients x iters; the log's tail must be clients x iters
 * and each client's QPN (@qpns) must be in it exactly iters times. Prints
 *   counter: X (expected X)
 *   log: C clients x N entries
 * on success (return 0), else one line on stderr per problem (return 1):
 *   counter: got X, expected Y (D updates lost)
 *   log: tail is T, expected E
 *   log: client 0xQPN has K entries, expected N
 */
static int check_region(const struct at_ctx *ctx, uint64_t start,
			const uint32_t *qpns)
{
	uint64_t want = start + (uint64_t)ctx->nrc * ctx->iters;
	int bad = 0;

	/* TODO 7: compare ctx->buf[OFF_COUNTER / 8] with want; then the
	 * tail (ctx->buf[OFF_TAIL / 8]) with nrc x iters; then count each
	 * client's entries in the log (ctx->buf + OFF_LOG / 8). Print the
	 * lines above; set bad when anything is wrong. */
	(void)want;
	(void)qpns;
	course_todo(7, "check the counter and the log");
	bad = 1;
	/* END TODO 7 */
	return bad;
}

static int run_server(struct at_ctx *ctx, const struct course_opts *o,
		      uint64_t start)
{
	uint32_t qpns[MAX_CLIENTS];
	struct qp_info mine, theirs;
	int lfd, k, ret = -1;

	ctx->size = OFF_LOG + (size_t)ctx->nrc * ctx->iters * 8;
	ctx->buf = course_alloc(ctx->size);
	if (!ctx->buf)
		return -1;
	ctx->buf[OFF_COUNTER / 8] = start;

	/* Everything is ready before the readiness line: a client that
	 * connects is served at once. */
	for (k = 0; k < ctx->nrc; k++) {
		ctx->rc[k] = rc_open(o, &params);
		if (!ctx->rc[k])
			return -1;
		if (k == 0 && check_atomic_cap(ctx->rc[0]))
			return -1;
		if (register_shared(ctx, k))
			return -1;
	}
	lfd = course_oob_listen(o->port);
	if (lfd < 0)
		return -1;
	for (k = 0; k < ctx->nrc; k++) {
		int fd;

		mine = (struct qp_info){
			.addr = (uintptr_t)ctx->buf,
			.rkey = ctx->mr[k]->rkey,
			.length = ctx->size,
		};
		fd = course_oob_accept_on(lfd, o->timeout);
		if (fd < 0)
			goto out_close_listener;
		if (rc_connect_fd(ctx->rc[k], fd, &mine, &theirs))
			goto out_close_listener;
		qpns[k] = theirs.qpn;
	}
	/* Everyone is connected: let them go at (nearly) the same time. */
	for (k = 0; k < ctx->nrc; k++)
		if (course_oob_sync(ctx->rc[k]->oob_fd, 'G', o->timeout))
			goto out_close_listener;
	for (k = 0; k < ctx->nrc; k++)
		if (course_oob_sync(ctx->rc[k]->oob_fd, 'D', o->timeout))
			goto out_close_listener;
	ret = check_region(ctx, start, qpns);

out_close_listener:
	close(lfd);
	return ret;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 0);
	return errno || !*s || *end;
}

int main(int argc, char **argv)
{
	const char *clients, *start_s, *offset_s, *rmw;
	struct course_opts o;
	struct at_ctx ctx = { .nrc = 1 };
	uint64_t start = 0, v;
	int ret = 1, result = -1, k;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	o.iters = 100;
	clients = course_take_opt(&argc, argv, "--clients", 1, usage);
	if (!clients)
		clients = course_take_opt(&argc, argv, "-c", 1, usage);
	start_s = course_take_opt(&argc, argv, "--start", 1, usage);
	offset_s = course_take_opt(&argc, argv, "--offset", 1, usage);
	rmw = course_take_opt(&argc, argv, "--rmw", 0, usage);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_ITERS | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	ctx.iters = o.iters;
	if (clients) {
		if (parse_u64(clients, &v) || v < 1 || v > MAX_CLIENTS) {
			fprintf(stderr, "atomics: -c must be 1 to %d\n",
				MAX_CLIENTS);
			course_usage_exit("atomics", usage);
		}
		ctx.nrc = v;
	}
	if (start_s && parse_u64(start_s, &start)) {
		fprintf(stderr, "atomics: bad --start '%s'\n", start_s);
		course_usage_exit("atomics", usage);
	}
	if (offset_s && parse_u64(offset_s, &ctx.remote_offset)) {
		fprintf(stderr, "atomics: bad --offset '%s'\n", offset_s);
		course_usage_exit("atomics", usage);
	}
	if (o.host && (clients || start_s)) {
		fprintf(stderr, "atomics: -c and --start are the server's\n");
		course_usage_exit("atomics", usage);
	}
	if (!o.host && (offset_s || rmw)) {
		fprintf(stderr,
			"atomics: --offset and --rmw are the client's\n");
		course_usage_exit("atomics", usage);
	}

	if (!o.host) {
		result = run_server(&ctx, &o, start);
		goto out_close;
	}

	ctx.rc[0] = rc_open(&o, &params);
	if (!ctx.rc[0])
		return 1;
	if (check_atomic_cap(ctx.rc[0]))
		goto out_close;
	ctx.size = LOC_SIZE;
	ctx.buf = course_alloc(ctx.size);
	if (!ctx.buf)
		goto out_close;
	ctx.mr[0] = ibv_reg_mr(ctx.rc[0]->pd, ctx.buf, ctx.size,
			       IBV_ACCESS_LOCAL_WRITE);
	if (!ctx.mr[0]) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_close;
	}
	{
		struct qp_info mine = {};

		if (rc_connect(ctx.rc[0], &o, &mine, &ctx.theirs))
			goto out_close;
	}
	if (!ctx.theirs.addr || ctx.theirs.length < OFF_LOG) {
		fprintf(stderr,
			"the server advertised no region (addr 0x%" PRIx64
			" length %u)\n",
			ctx.theirs.addr, ctx.theirs.length);
		goto out_close;
	}
	if (course_oob_sync(ctx.rc[0]->oob_fd, 'G', o.timeout))
		goto out_close;
	result = run_client(&ctx, !!rmw);
	if (result)
		goto out_close;
	if (course_oob_sync(ctx.rc[0]->oob_fd, 'D', o.timeout))
		result = -1;

out_close:
	if (result >= 0)
		ret = result;
	for (k = 0; k < ctx.nrc; k++) {
		if (ctx.mr[k] && ibv_dereg_mr(ctx.mr[k])) {
			fprintf(stderr, "ibv_dereg_mr failed\n");
			ret = 1;
		}
		if (ctx.rc[k] && rc_close(ctx.rc[k]))
			ret = 1;
	}
	free(ctx.buf);
	return ret;
}
