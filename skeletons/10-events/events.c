// SPDX-License-Identifier: MIT
/*
 * events.c - lesson 10: completion channels instead of spinning, and the
 * device's asynchronous events.
 *
 *   server:  events [OPTIONS] [--mode poll|event]
 *   client:  events [OPTIONS] [--mode poll|event] HOST
 *
 * Lesson 05's ping-pong (its protocol, byte for byte: the same messages,
 * the same qp_info and syncs), on the RC layer (rc.h), with two ways to
 * wait for a completion:
 *
 *   poll   ibv_poll_cq() in a loop: the answer as soon as it exists, and a
 *          CPU burnt at 100 % while waiting;
 *   event  the CQ is created on a completion channel; when ibv_poll_cq()
 *          finds nothing, the program arms the CQ (ibv_req_notify_cq()),
 *          polls once more, and sleeps in poll() on the channel's file
 *          descriptor until the device signals a completion
 *          (ibv_get_cq_event(), ibv_ack_cq_events()).
 *
 * A thread reads the device's asynchronous events (ibv_get_async_event())
 * and prints each; a fatal one (the port going down, a QP or CQ error) ends
 * the ping-pong: the program exits 1.
 *
 * Both sides print the CPU time they used (getrusage()):
 *   cpu: 0.012 s user, 0.034 s system in 0.456 s (mode event)
 */
#define _GNU_SOURCE
#include "rc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-n ITERS] "
	"[-s SIZE] [-t SECS] [--mode poll|event] [HOST]";

#define SLICE_MS 100 /* the longest sleep between checks of ctx->fatal */
/*
 * After a completion error, how long the async thread still waits for an
 * event that may explain it: a port that goes down fails the QP's work at
 * once, and the device's IBV_EVENT_PORT_ERR can follow it by some time,
 * more on a loaded machine. A failure is when the event matters most.
 */
#define ASYNC_LINGER_MS 3000

enum {
	WRID_RECV = 1,
	WRID_SEND = 2,
};

enum {
	FROM_CLIENT = 'c',
	FROM_SERVER = 's',
};

struct ev_ctx {
	struct rc_ctx *rc; /* device, PD, channel, CQ, QP, TCP (rc.h) */
	struct ibv_mr *mr;
	uint8_t *buf; /* 2 * size bytes: receive slot, then send slot */
	size_t size;
	int event_mode;
	long sends_done, recvs_done;
	long cq_events; /* completion events received (and acknowledged) */
	pthread_t async_thread;
	int async_running;
	atomic_int stop;   /* main -> async thread: finish */
	atomic_int failed; /* main -> async thread: a completion failed */
	atomic_int fatal;  /* async thread -> main: give up */
};

/* ---- asynchronous events --------------------------------------------------- */

/* Does this event end the ping-pong? */
static int is_fatal(enum ibv_event_type type)
{
	switch (type) {
	case IBV_EVENT_CQ_ERR:
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		return 1;
	default:
		return 0;
	}
}

/*
 * read_async_event - wait at most @ms milliseconds (poll() on @pfd, the
 * context's async_fd, which main() made non-blocking) for an asynchronous
 * event; read it with ibv_get_async_event(), print it to stderr as
 *   async event: IBV_EVENT_NAME (ibv_event_type_str)
 * (course_event_name() has the names), set ctx->fatal when is_fatal() says
 * so, and acknowledge it with ibv_ack_async_event() - an event not
 * acknowledged keeps ibv_destroy_qp() and the like waiting for ever.
 * Returns 1 when it read one, 0 when none came, -1 when it cannot work.
 */
static int read_async_event(struct ev_ctx *ctx, struct pollfd *pfd, int ms)
{
	struct ibv_async_event ev;

	/* TODO 5: as the comment above says. */
	(void)ctx;
	(void)pfd;
	(void)ms;
	(void)ev;
	(void)is_fatal;
	course_todo(5, "read the async events");
	return -1;
	/* END TODO 5 */
}

/*
 * The async event thread: events until close_ctx() sets ctx->stop (it
 * looks every SLICE_MS), then those still queued, before close_ctx()
 * destroys what they name. After a completion error, if no event came
 * yet, it first waits up to ASYNC_LINGER_MS for one: the error a port
 * going down causes can reach the main thread before the device reports
 * IBV_EVENT_PORT_ERR, and the event says why the run failed.
 */
static void *async_loop(void *arg)
{
	struct ev_ctx *ctx = arg;
	struct pollfd pfd = {
		.fd = ctx->rc->context->async_fd,
		.events = POLLIN,
	};
	int seen = 0, n;

	while (!atomic_load(&ctx->stop)) {
		n = read_async_event(ctx, &pfd, SLICE_MS);
		if (n < 0)
			return NULL;
		seen += n;
	}
	if (atomic_load(&ctx->failed) && !seen &&
	    read_async_event(ctx, &pfd, ASYNC_LINGER_MS) < 0)
		return NULL;
	while (read_async_event(ctx, &pfd, 0) > 0)
		;
	return NULL;
}

/* ---- waiting for one completion ---------------------------------------------- */

/* Has the async thread told us to give up? Then say so (once per wait). */
static int gave_up(struct ev_ctx *ctx, const char *what)
{
	if (!atomic_load(&ctx->fatal))
		return 0;
	fprintf(stderr, "%s: stopped: the device reported a fatal event\n",
		what);
	return 1;
}

/*
 * Poll mode: ibv_poll_cq() until it returns a completion, the deadline
 * passes or the async thread reports a fatal event. 1 with *wc filled, 0
 * at the deadline, -1 on failure (message printed).
 */
static int wait_poll(struct ev_ctx *ctx, struct ibv_wc *wc, uint64_t deadline,
		     const char *what)
{
	int n;

	for (;;) {
		n = ibv_poll_cq(ctx->rc->cq, 1, wc);
		if (n < 0) {
			fprintf(stderr, "%s: ibv_poll_cq failed\n", what);
			return -1;
		}
		if (n)
			return 1;
		if (gave_up(ctx, what))
			return -1;
		if (course_now_ns() >= deadline)
			return 0;
	}
}

/*
 * Event mode: the same contract as wait_poll(), but asleep while nothing
 * happens. The order of the steps is the whole lesson:
 *
 *   1. poll the CQ: a completion may be there already;
 *   2. arm it (ibv_req_notify_cq(), every completion): the *next* one raises
 *      an event on the channel;
 *   3. poll the CQ again: a completion that arrived between 1 and 2 raised
 *      no event (the CQ was not armed) and will never raise one - without
 *      this poll the program would sleep for ever (the lost wakeup);
 *   4. sleep in poll() on the channel's fd (at most SLICE_MS at a time:
 *      check ctx->fatal and the deadline in between), then take the event
 *      with ibv_get_cq_event() and acknowledge it, ibv_ack_cq_events(cq,
 *      1), counting it in ctx->cq_events; back to 1.
 */
static int wait_event(struct ev_ctx *ctx, struct ibv_wc *wc, uint64_t deadline,
		      const char *what)
{
	struct ibv_cq *cq = ctx->rc->cq;
	struct ibv_comp_channel *channel = ctx->rc->channel;
	struct pollfd pfd = { .fd = channel->fd, .events = POLLIN };
	struct ibv_cq *ev_cq;
	void *ev_cq_ctx;
	int n, ret;

	for (;;) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n)
			break;

		/* TODO 1: arm the CQ for its next completion; set ret to
		 * what ibv_req_notify_cq() returns (man ibv_req_notify_cq). */
		ret = course_todo(1, "arm the CQ with ibv_req_notify_cq()");
		/* END TODO 1 */
		if (ret) {
			fprintf(stderr, "%s: ibv_req_notify_cq failed: %s\n",
				what, strerror(ret));
			return -1;
		}

		/* TODO 2: poll the CQ once more into wc (set n); break out
		 * of the loop when it returned something. */
		(void)0;
		/* END TODO 2 */

		/* TODO 3: sleep in poll() on pfd for at most SLICE_MS; while
		 * it times out, return -1 if gave_up(), 0 if the deadline
		 * has passed, else poll() again. */
		(void)pfd;
		(void)deadline;
		course_todo(3, "sleep in poll() on the channel's fd");
		return -1;
		/* END TODO 3 */

		/* TODO 4: take the event off the channel with
		 * ibv_get_cq_event() (it must name our cq), acknowledge it
		 * with ibv_ack_cq_events(cq, 1), and count it. */
		(void)ev_cq;
		(void)ev_cq_ctx;
		course_todo(4, "take and acknowledge the completion event");
		return -1;
		/* END TODO 4 */
	}
	if (n < 0) {
		fprintf(stderr, "%s: ibv_poll_cq failed\n", what);
		return -1;
	}
	return 1;
}

/*
 * One successful completion, in the mode of ctx. Returns 0 with *wc
 * filled, or -1 (message printed: no completion within the timeout, a
 * completion error as course_report_wc() prints it, a fatal event).
 */
static int wait_wc(struct ev_ctx *ctx, struct ibv_wc *wc, const char *what)
{
	uint64_t deadline =
		course_now_ns() + ctx->rc->timeout * 1000000000ull;
	int n;

	n = ctx->event_mode ? wait_event(ctx, wc, deadline, what) :
			      wait_poll(ctx, wc, deadline, what);
	if (n < 0)
		return -1;
	if (n == 0) {
		fprintf(stderr, "%s: no completion within %d s\n", what,
			ctx->rc->timeout);
		return -1;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		course_report_wc(what, wc);
		/* The event that may explain it: see async_loop(). */
		atomic_store(&ctx->failed, 1);
		return -1;
	}
	return 0;
}

/* ---- the ping-pong (lesson 05's) ------------------------------------------- */

static uint8_t msg_byte(long seq, int from, size_t i)
{
	return (uint8_t)(1 + (i + (size_t)seq * 7 + (size_t)from) % 251);
}

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

static int post_recv(struct ev_ctx *ctx)
{
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
	struct ibv_recv_wr *bad;
	int ret = ibv_post_recv(ctx->rc->qp, &wr, &bad);

	if (ret)
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
	return ret ? -1 : 0;
}

static int post_send(struct ev_ctx *ctx, long seq, int from)
{
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
	struct ibv_send_wr *bad;
	int ret;

	course_fill_pattern(ctx->buf + ctx->size, ctx->size,
			    (size_t)seq * 7 + (size_t)from);
	ret = ibv_post_send(ctx->rc->qp, &wr, &bad);
	if (ret)
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
	return ret ? -1 : 0;
}

/* Wait until @sends SENDs and @recvs receives have completed in all. */
static int wait_for(struct ev_ctx *ctx, long sends, long recvs, long seq)
{
	struct ibv_wc wc;
	char what[48];

	snprintf(what, sizeof(what), "round trip %ld", seq);
	while (ctx->sends_done < sends || ctx->recvs_done < recvs) {
		if (wait_wc(ctx, &wc, what))
			return -1;
		if (wc.wr_id == WRID_SEND) {
			ctx->sends_done++;
		} else if (wc.byte_len != ctx->size) {
			fprintf(stderr, "%s: received %u bytes, expected %zu\n",
				what, wc.byte_len, ctx->size);
			return -1;
		} else {
			ctx->recvs_done++;
		}
	}
	return 0;
}

static int run_client(struct ev_ctx *ctx, long iters)
{
	uint64_t start = course_now_ns();
	long i;

	for (i = 0; i < iters; i++) {
		if (post_send(ctx, i, FROM_CLIENT) ||
		    wait_for(ctx, i + 1, i + 1, i) ||
		    check_msg(ctx->buf, ctx->size, i, FROM_SERVER) ||
		    (i + 1 < iters && post_recv(ctx)))
			return -1;
	}
	printf("verified %ld messages of %zu bytes\n", iters, ctx->size);
	printf("average rtt: %.2f us (%ld round trips of %zu bytes)\n",
	       (course_now_ns() - start) / 1e3 / iters, iters, ctx->size);
	return 0;
}

static int run_server(struct ev_ctx *ctx, long iters)
{
	long i;

	for (i = 0; i < iters; i++) {
		if (wait_for(ctx, i, i + 1, i) ||
		    check_msg(ctx->buf, ctx->size, i, FROM_CLIENT) ||
		    (i + 1 < iters && post_recv(ctx)) ||
		    post_send(ctx, i, FROM_SERVER))
			return -1;
	}
	if (wait_for(ctx, iters, iters, iters - 1))
		return -1;
	printf("verified %ld messages of %zu bytes\n", iters, ctx->size);
	return 0;
}

/*
 * Print the CPU time this process has used so far, from getrusage()
 * (RUSAGE_SELF: all its threads), user and system apart, and the wall time
 * since @start_ns:
 *   cpu: U.UUU s user, S.SSS s system in W.WWW s (mode MODE)
 */
static void report_cpu(const struct ev_ctx *ctx, uint64_t start_ns)
{
	double user = 0, sys = 0;

	/* TODO 6: fill user and sys (seconds) from getrusage(RUSAGE_SELF)'s
	 * ru_utime and ru_stime (man getrusage). */
	course_todo(6, "measure the CPU time with getrusage()");
	/* END TODO 6 */
	printf("cpu: %.3f s user, %.3f s system in %.3f s (mode %s)\n", user,
	       sys, (course_now_ns() - start_ns) / 1e9,
	       ctx->event_mode ? "event" : "poll");
}

/* ---- setup and teardown -------------------------------------------------- */

static int start_async_thread(struct ev_ctx *ctx)
{
	int fd = ctx->rc->context->async_fd;
	int flags = fcntl(fd, F_GETFL), ret;

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		fprintf(stderr, "fcntl(async_fd) failed: %s\n", strerror(errno));
		return -1;
	}
	ret = pthread_create(&ctx->async_thread, NULL, async_loop, ctx);
	if (ret) {
		fprintf(stderr, "pthread_create failed: %s\n", strerror(ret));
		return -1;
	}
	ctx->async_running = 1;
	return 0;
}

static int close_ctx(struct ev_ctx *ctx)
{
	int ret = 0;

	if (ctx->async_running) {
		atomic_store(&ctx->stop, 1);
		pthread_join(ctx->async_thread, NULL);
	}
	if (ctx->mr && ibv_dereg_mr(ctx->mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	free(ctx->buf);
	if (ctx->rc && rc_close(ctx->rc))
		ret = -1;
	return ret;
}

int main(int argc, char **argv)
{
	struct rc_params params = {
		.access = 0,
		.max_rd_atomic = 1,
		.max_dest_rd_atomic = 1,
		.max_send_wr = 2,
		.max_recv_wr = 2,
		.comp_channel = 1,
	};
	uint64_t start = course_now_ns();
	struct ev_ctx ctx = {};
	struct qp_info mine = {}, theirs = {};
	struct course_opts o;
	const char *mode;
	int ret = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	mode = course_take_opt(&argc, argv, "--mode", 1, usage);
	course_default_opts(&o);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_ITERS | OPT_SIZE | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	if (mode && strcmp(mode, "poll") && strcmp(mode, "event")) {
		fprintf(stderr, "%s: --mode must be poll or event, not '%s'\n",
			argv[0], mode);
		course_usage_exit(argv[0], usage);
	}
	ctx.event_mode = !mode || !strcmp(mode, "event");
	ctx.size = o.size;

	ctx.rc = rc_open(&o, &params);
	if (!ctx.rc)
		return 1;
	ctx.buf = course_alloc(2 * ctx.size);
	if (!ctx.buf)
		goto out_close;
	ctx.mr = ibv_reg_mr(ctx.rc->pd, ctx.buf, 2 * ctx.size,
			    IBV_ACCESS_LOCAL_WRITE);
	if (!ctx.mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_close;
	}
	if (start_async_thread(&ctx))
		goto out_close;

	/* The first receive before the peer learns our address (lesson 05). */
	if (post_recv(&ctx))
		goto out_close;
	mine.length = ctx.size;
	if (rc_connect(ctx.rc, &o, &mine, &theirs))
		goto out_close;
	if (theirs.length != ctx.size) {
		fprintf(stderr,
			"message size mismatch: %zu bytes here, %u on the peer (give both the same --size)\n",
			ctx.size, theirs.length);
		goto out_close;
	}

	if (o.host ? run_client(&ctx, o.iters) : run_server(&ctx, o.iters))
		goto out_close;
	if (course_oob_sync(ctx.rc->oob_fd, 'D', o.timeout))
		goto out_close;
	if (ctx.event_mode)
		printf("completion events: %ld\n", ctx.cq_events);
	report_cpu(&ctx, start);
	ret = 0;

out_close:
	if (close_ctx(&ctx))
		ret = 1;
	return ret;
}
