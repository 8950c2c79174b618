// SPDX-License-Identifier: MIT
/*
 * bw.c - lesson 13: throughput. Many work requests in flight, completions
 * asked for only now and then, chains of work requests posted at once,
 * small payloads carried inline.
 *
 *   server:  bw [OPTIONS] [--send] [--slots M]
 *   client:  bw [OPTIONS] [--send] [--depth D] [--signal N] [--batch B]
 *               [--inline] [--csv FILE] HOST
 *
 * The server registers M slots of SIZE bytes and advertises them (addr,
 * rkey, length M x SIZE); with --send it also posts one receive per slot,
 * in slot order, and reposts each one as it completes. The client streams
 * ITERS messages: message i leaves local slot i % D and, as an RDMA WRITE,
 * lands in remote slot i % M (--send: a SEND, which lands in the receive
 * posted for it: slot i % M as well). Every message is the pattern of
 * --seed with its first and last 8 bytes replaced by i (little-endian).
 * At most D work requests are outstanding; one in every N is signaled (and
 * the last); they are posted B at a time, as one chain; with --inline and a
 * SIZE the QP can take inline, the payload travels in the work request.
 *
 * The client prints one summary line (and, with --csv FILE, appends one CSV
 * row); after the client's DONE ('D') the server checks its slots: each
 * must hold the last message that was aimed at it.
 */
#include "rc.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-n ITERS] [-s SIZE] "
	"[-t SECS] [--send] [--depth D] [--signal N] [--batch B] [--inline] "
	"[--seed S] [--slots M] [--csv FILE] [HOST]";

#define BW_MAX_INLINE 256 /* inline room the client asks for (--inline) */
#define BW_POLL	      16  /* completions taken per ibv_poll_cq() */
#define BW_MAX_DEPTH  4096
#define BW_MAX_SLOTS  1024
#define BW_MIN_SIZE   16 /* two 8-byte message numbers */

struct bw_ctx {
	struct rc_ctx *rc;
	struct ibv_mr *mr;
	uint8_t *buf; /* client: D local slots; server: M slots */
	size_t size;
	long iters;
	int send; /* --send: SEND/RECV, else RDMA WRITE */
	unsigned int depth, signal, batch, slots;
	int inline_asked, inline_ok;
	uint32_t max_inline; /* what the QP granted (--inline) */
	size_t seed;
	struct qp_info theirs;	 /* client: the server's slots */
	unsigned int rslots;	 /* client: M, from the advertised length */
	long posted, done;	 /* WRs posted; WRs known to be complete */
	struct ibv_send_wr *wrs; /* one chain: --batch work requests */
	struct ibv_sge *sges;
};

/* ---- the messages ---------------------------------------------------------
 */

/* Message @i's number in the first and the last 8 bytes of @slot. */
static void stamp(uint8_t *slot, size_t size, uint64_t i)
{
	uint64_t le = htole64(i);

	memcpy(slot, &le, sizeof(le));
	memcpy(slot + size - sizeof(le), &le, sizeof(le));
}

static uint64_t stamp_of(const uint8_t *p)
{
	uint64_t le;

	memcpy(&le, p, sizeof(le));
	return le64toh(le);
}

/* ---- the client -----------------------------------------------------------
 */

/*
 * Open the client's connection: a send queue that holds --depth work
 * requests, room for BW_MAX_INLINE bytes of inline data when --inline was
 * given, and --depth local slots registered for the device to read.
 * 0 or -1.
 */
static int client_open(struct bw_ctx *ctx, const struct course_opts *o)
{
	struct rc_params p = {
		.access = 0,
		.max_rd_atomic = 1,
		.max_dest_rd_atomic = 1,
		/* TODO 1: the QP's send queue must have room for --depth
		 * outstanding WRs, and with --inline (ctx->inline_asked) the
		 * QP must be asked for BW_MAX_INLINE bytes of inline data
		 * (struct rc_params in rc.h; man ibv_create_qp, cap). */
		.max_send_wr = 1,
		.max_inline_data = 0,
		/* END TODO 1 */
		.max_recv_wr = 1,
		/* a SEND that finds no receive waits for one (RNR NAK):
		 * retry for as long as it takes (7: for ever) */
		.rnr_retry = RC_RNR_RETRY(7),
	};
	size_t i;

	ctx->rc = rc_open(o, &p);
	if (!ctx->rc)
		return -1;
	ctx->buf = course_alloc(ctx->depth * ctx->size);
	if (!ctx->buf)
		return -1;
	for (i = 0; i < ctx->depth; i++)
		course_fill_pattern(ctx->buf + i * ctx->size, ctx->size,
				    ctx->seed);
	ctx->mr = ibv_reg_mr(ctx->rc->pd, ctx->buf, ctx->depth * ctx->size,
			     IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	ctx->wrs = calloc(ctx->batch, sizeof(*ctx->wrs));
	ctx->sges = calloc(ctx->batch, sizeof(*ctx->sges));
	if (!ctx->wrs || !ctx->sges) {
		fprintf(stderr, "cannot allocate %u work requests\n",
			ctx->batch);
		return -1;
	}
	return 0;
}

/*
 * --inline: how much inline data did the QP really get? Read the QP's
 * capabilities back, keep max_inline_data in ctx->max_inline and send
 * inline (ctx->inline_ok) only when a message fits. Prints
 *   inline: up to N bytes (max_inline_data)
 * or, when SIZE is more than that,
 *   inline: SIZE bytes is more than max_inline_data (N): not inline
 * 0 or -1.
 */
static int query_inline(struct bw_ctx *ctx)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr attr;
	int ret;

	/* TODO 2: ask the QP for its capabilities (man ibv_query_qp,
	 * IBV_QP_CAP; ret: what it returns): keep the inline data it was
	 * granted in ctx->max_inline, and set ctx->inline_ok only when a
	 * message of ctx->size bytes fits in it. */
	(void)init;
	(void)attr;
	ret = course_todo(2, "read the granted max_inline_data with ibv_query_qp()");
	/* END TODO 2 */
	if (ret) {
		fprintf(stderr, "ibv_query_qp failed: %s\n", strerror(ret));
		return -1;
	}
	if (ctx->inline_ok)
		printf("inline: up to %u bytes (max_inline_data)\n",
		       ctx->max_inline);
	else
		printf("inline: %zu bytes is more than max_inline_data (%u): not inline\n",
		       ctx->size, ctx->max_inline);
	return 0;
}

/*
 * Fill @wr and @sge for message @i: its local slot, stamped with i; an RDMA
 * WRITE to remote slot i % M, or a SEND; wr_id = i; its flags.
 */
static void prepare(struct bw_ctx *ctx, long i, struct ibv_send_wr *wr,
		    struct ibv_sge *sge)
{
	unsigned int flags = 0;
	uint8_t *slot;

	/* TODO 3: message i's local slot. The device may read a WR's buffer
	 * until the WR is known complete, and stamp() is about to change
	 * it: use one of the --depth slots (ctx->buf, ctx->size bytes each)
	 * that no outstanding WR is using - with at most --depth
	 * outstanding, taking them in turn is enough. */
	slot = ctx->buf;
	/* END TODO 3 */
	/* TODO 4: the flags (man ibv_post_send, send_flags): selective
	 * signaling asks for a completion (IBV_SEND_SIGNALED) on the
	 * --signal'th message, the 2 x --signal'th, ... (ctx->signal) and on
	 * the last one, which nothing after it would complete; the payload
	 * travels inside the WR (IBV_SEND_INLINE) when ctx->inline_ok. */
	(void)flags;
	/* END TODO 4 */
	stamp(slot, ctx->size, i);
	*sge = (struct ibv_sge){
		.addr = (uintptr_t)slot,
		.length = ctx->size,
		.lkey = ctx->mr->lkey,
	};
	*wr = (struct ibv_send_wr){
		.wr_id = i,
		.sg_list = sge,
		.num_sge = 1,
		.opcode = ctx->send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE,
		.send_flags = flags,
	};
	if (!ctx->send) {
		wr->wr.rdma.remote_addr =
			ctx->theirs.addr +
			(uint64_t)(i % ctx->rslots) * ctx->size;
		wr->wr.rdma.rkey = ctx->theirs.rkey;
	}
}

/*
 * Post the next @k messages (ctx->posted onwards) as one chain: @k work
 * requests linked by their next pointers, one ibv_post_send() call (one
 * doorbell). Counts them in ctx->posted. 0 or -1.
 */
static int post_chain(struct bw_ctx *ctx, unsigned int k)
{
	struct ibv_send_wr *bad_wr = NULL;
	unsigned int j;
	int ret;

	for (j = 0; j < k; j++)
		prepare(ctx, ctx->posted + j, &ctx->wrs[j], &ctx->sges[j]);
	/* TODO 5: make ctx->wrs[0 .. k-1] one list (struct ibv_send_wr's
	 * next) and hand all of it to the device in a single
	 * ibv_post_send() (ret: what it returns); count the k messages in
	 * ctx->posted once it worked. */
	(void)bad_wr;
	ret = course_todo(5, "post the chain with one ibv_post_send()");
	/* END TODO 5 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s (message %ld)\n",
			strerror(ret), ctx->posted);
		return -1;
	}
	return 0;
}

/*
 * Take the completions that are there (up to BW_POLL at once) and move
 * ctx->done: a completion of message i means that i and every message
 * posted before it are complete (one RC QP completes in order), so
 * ctx->done becomes i + 1. Returns 0 (also when there was none), -1 on a
 * poll error or a completion that failed:
 *   message I: completion error: STATUS (status N, vendor_err 0x..)
 */
static int reap(struct bw_ctx *ctx)
{
	struct ibv_wc wc[BW_POLL];
	char what[48];
	int n, k;

	/* TODO 6: take up to BW_POLL completions in one ibv_poll_cq() (n:
	 * what it returns; man ibv_poll_cq). One that failed is reported
	 * with course_report_wc(), naming "message I" (I: its wr_id), and
	 * ends it (-1); one that succeeded moves ctx->done as the comment
	 * above says. */
	(void)ctx;
	(void)wc;
	(void)what;
	(void)k;
	n = course_todo(6, "poll the completions and move ctx->done") ? -1 : 0;
	/* END TODO 6 */
	if (n < 0) {
		fprintf(stderr, "ibv_poll_cq failed\n");
		return -1;
	}
	return 0;
}

/*
 * Stream ctx->iters messages: post whole chains of --batch messages (the
 * last one shorter) while the send queue has room for one - at most
 * --depth messages outstanding, posted but not known complete - then
 * reap(); until every message is known complete. After a turn that
 * completed nothing, course_poll_pause() (a stream that stalls naps, as
 * course_poll_one() does). A wait of more than --timeout seconds without a
 * completion fails:
 *   stream: no completion within T s (P messages posted, C known complete)
 * 0 or -1.
 */
static int stream(struct bw_ctx *ctx, int timeout)
{
	uint64_t since = course_now_ns(), now;
	uint64_t deadline = since + timeout * 1000000000ull;
	long last_done = -1;

	while (ctx->done < ctx->iters) {
		/* TODO 7: post_chain() as long as messages are left and
		 * the next chain (--batch messages, fewer at the end) fits
		 * in the room the queue has left (--depth minus the
		 * outstanding messages); then reap(). Either failing ends
		 * the stream (-1). */
		(void)post_chain;
		(void)reap;
		if (course_todo(7, "post chains while the queue has room, then reap()"))
			return -1;
		/* END TODO 7 */
		now = course_now_ns();
		if (ctx->done != last_done) {
			last_done = ctx->done;
			since = now;
			deadline = now + timeout * 1000000000ull;
		} else if (now > deadline) {
			fprintf(stderr,
				"stream: no completion within %d s (%ld messages posted, %ld known complete)\n",
				timeout, ctx->posted, ctx->done);
			return -1;
		} else {
			/* nothing completed: the course's spin, then naps */
			course_poll_pause(since, now);
		}
	}
	return 0;
}

static double cpu_seconds(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* --csv FILE: one row per run, appended (the header when FILE is new). */
static int append_csv(const struct bw_ctx *ctx, const char *path, double secs,
		      double mmsgs, double mbs, double cpu)
{
	FILE *f = fopen(path, "a");

	if (!f) {
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (ftell(f) == 0)
		fprintf(f, "transport,size,depth,signal,batch,inline,msgs,"
			   "seconds,mmsg_per_s,mb_per_s,cpu_s\n");
	fprintf(f, "%s,%zu,%u,%u,%u,%d,%ld,%.6f,%.6f,%.3f,%.3f\n",
		ctx->send ? "send" : "write", ctx->size, ctx->depth,
		ctx->signal, ctx->batch, ctx->inline_ok, ctx->iters, secs,
		mmsgs, mbs, cpu);
	if (fclose(f)) {
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Client: stream, timed, and print
 *   bw TRANSPORT SIZE bytes depth D: N msgs in T s = M Mmsg/s, G MB/s, cpu C s
 * where T is the stream's duration (CLOCK_MONOTONIC), M = N / T / 10^6,
 * G = N x SIZE / T / 2^20 (MB as perftest counts it: 2^20 bytes) and C
 * the CPU time (user + system) the stream took. 0 or -1.
 */
static int run_client(struct bw_ctx *ctx, const struct course_opts *o,
		      const char *csv)
{
	double secs, mmsgs, mbs, cpu;
	uint64_t t0, t1;
	double c0;

	/* TODO 8: run stream(ctx, o->timeout) (return -1 if it fails),
	 * timed with course_now_ns() (man clock_gettime) and its CPU time
	 * with cpu_seconds(); then secs, mmsgs, mbs and cpu as the comment
	 * above defines them. */
	(void)t0;
	(void)t1;
	(void)c0;
	(void)cpu_seconds;
	if (stream(ctx, o->timeout))
		return -1;
	secs = mmsgs = mbs = cpu = 0;
	course_todo(8, "time the stream and compute its rates");
	return -1;
	/* END TODO 8 */
	printf("bw %s %zu bytes depth %u: %ld msgs in %.6f s = %.6f Mmsg/s, %.3f MB/s, cpu %.3f s\n",
	       ctx->send ? "send" : "write", ctx->size, ctx->depth, ctx->iters,
	       secs, mmsgs, mbs, cpu);
	if (csv && append_csv(ctx, csv, secs, mmsgs, mbs, cpu))
		return -1;
	return 0;
}

/* ---- the server -----------------------------------------------------------
 */

/* --send: a receive of one slot (@slot), at the tail of the receive
 * queue. 0 or -1. */
static int post_slot(struct bw_ctx *ctx, unsigned int slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)ctx->buf + (size_t)slot * ctx->size,
		.length = ctx->size,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = slot,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad_wr;
	int ret;

	ret = ibv_post_recv(ctx->rc->qp, &wr, &bad_wr);
	if (ret) {
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * --send: wait for the next receive's completion (message @i). The client
 * streams without waiting for the server, so a client that died is noticed
 * at once, by its closed TCP connection, not after -t seconds:
 *   message I: the peer closed the out-of-band connection: it has exited
 *   message I: no message within T s
 * 0 or -1.
 */
static int wait_receive(struct bw_ctx *ctx, struct ibv_wc *wc, long i,
			int timeout)
{
	uint64_t start = course_now_ns(), now;
	uint64_t deadline = start + timeout * 1000000000ull;
	unsigned long spins = 0;
	char what[48], c;
	int n;

	snprintf(what, sizeof(what), "message %ld", i);
	for (;;) {
		n = ibv_poll_cq(ctx->rc->cq, 1, wc);
		if (n < 0) {
			fprintf(stderr, "%s: ibv_poll_cq failed\n", what);
			return -1;
		}
		if (n && wc->status != IBV_WC_SUCCESS) {
			course_report_wc(what, wc);
			return -1;
		}
		if (n)
			return 0;
		/* the peer and the clock: every 1024 polls while it spins,
		 * before each of course_poll_pause()'s naps after that */
		now = course_now_ns();
		if (++spins % 1024 && now - start < COURSE_POLL_SPIN_NS)
			continue;
		if (recv(ctx->rc->oob_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) ==
		    0) {
			fprintf(stderr,
				"%s: the peer closed the out-of-band connection: it has exited\n",
				what);
			return -1;
		}
		if (now > deadline) {
			fprintf(stderr, "%s: no message within %d s\n", what,
				timeout);
			return -1;
		}
		course_poll_pause(start, now);
	}
}

/*
 * After the client's DONE: every slot must hold the last message aimed at
 * it (slot j: the largest i < ITERS with i % M = j), the pattern of --seed
 * stamped with i. Prints
 *   verified M slots: messages A to B
 * or one line on stderr for the first slot that is wrong:
 *   slot J: holds message X, expected message I
 *   slot J, byte K: got 0xGG, expected 0xEE (message I)
 * 0 or 1.
 */
static int check_slots(const struct bw_ctx *ctx)
{
	unsigned int used = ctx->iters < ctx->slots ? ctx->iters : ctx->slots;
	uint8_t *want = course_alloc(ctx->size);
	unsigned int j;
	int bad = 0;

	if (!want)
		return 1;
	course_fill_pattern(want, ctx->size, ctx->seed);
	for (j = 0; j < used && !bad; j++) {
		const uint8_t *got = ctx->buf + (size_t)j * ctx->size;
		uint64_t i = j + (uint64_t)(ctx->iters - 1 - j) / ctx->slots *
					 ctx->slots;
		size_t k;

		if (stamp_of(got) != i) {
			fprintf(stderr,
				"slot %u: holds message %" PRIu64
				", expected message %" PRIu64 "\n",
				j, stamp_of(got), i);
			bad = 1;
			break;
		}
		stamp(want, ctx->size, i);
		k = course_first_diff(got, want, ctx->size);
		if (k < ctx->size) {
			fprintf(stderr,
				"slot %u, byte %zu: got 0x%02x, expected 0x%02x (message %" PRIu64
				")\n",
				j, k, got[k], want[k], i);
			bad = 1;
		}
	}
	if (!bad)
		printf("verified %u slots: messages %ld to %ld\n", used,
		       ctx->iters - used, ctx->iters - 1);
	free(want);
	return bad;
}

/*
 * Server: register M slots, advertise them, (--send) keep a receive posted
 * per slot until ITERS messages came, wait for DONE, check the slots.
 * 0, 1 (a slot is wrong) or -1.
 */
static int run_server(struct bw_ctx *ctx, const struct course_opts *o)
{
	struct rc_params p = {
		.access = IBV_ACCESS_REMOTE_WRITE,
		.max_rd_atomic = 1,
		.max_dest_rd_atomic = 1,
		.max_send_wr = 1,
		.max_recv_wr = ctx->slots,
	};
	struct qp_info mine, theirs;
	struct ibv_wc wc;
	unsigned int j;
	long i;

	ctx->rc = rc_open(o, &p);
	if (!ctx->rc)
		return -1;
	ctx->buf = course_alloc((size_t)ctx->slots * ctx->size);
	if (!ctx->buf)
		return -1;
	ctx->mr = ibv_reg_mr(ctx->rc->pd, ctx->buf,
			     (size_t)ctx->slots * ctx->size,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	for (j = 0; ctx->send && j < ctx->slots; j++)
		if (post_slot(ctx, j))
			return -1;
	mine = (struct qp_info){
		.addr = (uintptr_t)ctx->buf,
		.rkey = ctx->mr->rkey,
		.length = ctx->slots * ctx->size,
	};
	if (rc_connect(ctx->rc, o, &mine, &theirs))
		return -1;
	for (i = 0; ctx->send && i < ctx->iters; i++) {
		if (wait_receive(ctx, &wc, i, o->timeout))
			return -1;
		if (wc.byte_len != ctx->size) {
			fprintf(stderr,
				"message %ld: %u bytes arrived, expected %zu\n",
				i, wc.byte_len, ctx->size);
			return -1;
		}
		if (i + ctx->slots < ctx->iters && post_slot(ctx, wc.wr_id))
			return -1;
	}
	if (course_oob_sync(ctx->rc->oob_fd, 'D', o->timeout))
		return -1;
	return check_slots(ctx);
}

/* ---- main -----------------------------------------------------------------
 */

static unsigned int parse_count(const char *flag, const char *s,
				unsigned int max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || !*s || *end || v < 1 || v > max) {
		fprintf(stderr,
			"bw: %s expects a number from 1 to %u, got '%s'\n",
			flag, max, s);
		course_usage_exit("bw", usage);
	}
	return v;
}

int main(int argc, char **argv)
{
	const char *send, *depth, *signal, *batch, *inl, *seed, *slots, *csv;
	struct bw_ctx ctx = {
		.depth = 16, .signal = 1, .batch = 1, .slots = 16, .seed = 1
	};
	struct course_opts o;
	int ret = 1, result = -1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	o.size = 65536;
	send = course_take_opt(&argc, argv, "--send", 0, usage);
	depth = course_take_opt(&argc, argv, "--depth", 1, usage);
	signal = course_take_opt(&argc, argv, "--signal", 1, usage);
	batch = course_take_opt(&argc, argv, "--batch", 1, usage);
	inl = course_take_opt(&argc, argv, "--inline", 0, usage);
	seed = course_take_opt(&argc, argv, "--seed", 1, usage);
	slots = course_take_opt(&argc, argv, "--slots", 1, usage);
	csv = course_take_opt(&argc, argv, "--csv", 1, usage);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_ITERS | OPT_SIZE | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	if (depth)
		ctx.depth = parse_count("--depth", depth, BW_MAX_DEPTH);
	if (signal)
		ctx.signal = parse_count("--signal", signal, BW_MAX_DEPTH);
	if (batch)
		ctx.batch = parse_count("--batch", batch, BW_MAX_DEPTH);
	if (slots)
		ctx.slots = parse_count("--slots", slots, BW_MAX_SLOTS);
	if (seed)
		ctx.seed = parse_count("--seed", seed, 1u << 31);
	if (o.host && slots) {
		fprintf(stderr,
			"bw: --slots is the server's (the client takes the server's)\n");
		course_usage_exit("bw", usage);
	}
	if (!o.host && (depth || signal || batch || inl || csv)) {
		fprintf(stderr,
			"bw: --depth, --signal, --batch, --inline and --csv are the client's\n");
		course_usage_exit("bw", usage);
	}
	if (ctx.signal > ctx.depth || ctx.batch > ctx.depth ||
	    ctx.depth % ctx.batch ||
	    (ctx.signal % ctx.batch && ctx.batch % ctx.signal)) {
		fprintf(stderr,
			"bw: --signal and --batch may not exceed --depth, --depth must be a multiple of --batch, and --signal a multiple or a divisor of --batch\n");
		course_usage_exit("bw", usage);
	}
	if (o.size < BW_MIN_SIZE || o.size * ctx.depth > (1ul << 30) ||
	    o.size * ctx.slots > (1ul << 30)) {
		fprintf(stderr,
			"bw: -s must be at least %d, and -s x --depth (--slots) at most 1 GiB\n",
			BW_MIN_SIZE);
		course_usage_exit("bw", usage);
	}
	ctx.size = o.size;
	ctx.iters = o.iters;
	ctx.send = !!send;
	ctx.inline_asked = !!inl;

	if (!o.host) {
		result = run_server(&ctx, &o);
		goto out_close;
	}
	if (client_open(&ctx, &o))
		goto out_close;
	if (ctx.inline_asked && query_inline(&ctx))
		goto out_close;
	{
		struct qp_info mine = {};

		if (rc_connect(ctx.rc, &o, &mine, &ctx.theirs))
			goto out_close;
	}
	ctx.rslots = ctx.theirs.length / ctx.size;
	if (!ctx.send && (!ctx.theirs.addr || !ctx.rslots)) {
		fprintf(stderr,
			"the server advertised no room for a message (addr 0x%" PRIx64
			" length %u, messages of %zu bytes)\n",
			ctx.theirs.addr, ctx.theirs.length, ctx.size);
		goto out_close;
	}
	result = run_client(&ctx, &o, csv);
	if (!result && course_oob_sync(ctx.rc->oob_fd, 'D', o.timeout))
		result = -1;

out_close:
	if (result >= 0)
		ret = result;
	if (ctx.mr && ibv_dereg_mr(ctx.mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = 1;
	}
	if (ctx.rc && rc_close(ctx.rc))
		ret = 1;
	free(ctx.wrs);
	free(ctx.sges);
	free(ctx.buf);
	return ret;
}
