// SPDX-License-Identifier: MIT
/*
 * latency.c - lesson 11: round-trip latency distributions, UDP vs RDMA.
 *
 *   server:  latency [--udp | --rdma] [OPTIONS]
 *   client:  latency [--udp | --rdma] [OPTIONS] [--csv FILE] HOST
 *
 * The client sends a --size byte message, the server sends it back, and
 * the client times each round trip with CLOCK_MONOTONIC: --warmup round
 * trips first (not kept), then --iters kept in memory. At the end the
 * client prints one summary line (min, p50, p90, p99, max; nearest-rank
 * percentiles) and, with --csv, writes every kept sample.
 *
 * --udp: one datagram each way on a UDP socket (the server listens on
 * --port). --rdma (the default): a SEND each way on an RC queue pair,
 * connected by lesson 05's rc.c; each side keeps one receive posted
 * and busy-polls its CQ, as perftest's ib_send_lat does, and a round trip
 * ends when the pong's receive completes (the SEND's own completion, the
 * ACK, is collected whenever it comes).
 */
#include "rc.h"

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static const char usage[] =
	"[--udp | --rdma] [-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] "
	"[-n ITERS] [-s SIZE] [-t SECS] [--warmup N] [--csv FILE] [HOST]";

#define MAX_UDP_SIZE 65507 /* the largest UDP payload over IPv4 */

enum {
	WRID_SEND = 1,
	WRID_RECV = 2,
};

struct lat_ctx {
	int sends_out;	   /* RDMA: SENDs posted, not completed yet */
	int udp;	   /* --udp, else RDMA SEND/RECV */
	size_t size;	   /* message size */
	int timeout;	   /* seconds any one wait may take */
	uint8_t *buf;	   /* RDMA: [send half | receive half]; UDP: one */
	int fd;		   /* UDP socket */
	struct rc_ctx *rc; /* RDMA connection (rc.h) */
	struct ibv_mr *mr;
};

/*
 * The QP: nothing remote; a few SENDs may wait for their ACK; messages of up
 * to 64 bytes go inline (IBV_SEND_INLINE: copied into the work request when
 * it is posted, no lkey to look up; on rxe it took about 4 us off the
 * minimum round trip, measured).
 */
static const struct rc_params params = {
	.access = 0,
	.max_rd_atomic = 1,
	.max_dest_rd_atomic = 1,
	.max_send_wr = 4,
	.max_recv_wr = 2,
	.max_inline_data = 64,
};

/* ---- UDP ------------------------------------------------------------------
 */

/* A UDP socket: the server's bound to --port (printing the readiness
 * line), the client's connected to HOST:PORT. Receives time out after
 * --timeout s. 0 or -1. */
static int udp_open(struct lat_ctx *ctx, const struct course_opts *o)
{
	struct timeval tv = { .tv_sec = o->timeout };
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_DGRAM,
	};
	struct addrinfo *ai;
	char port[16];
	int ret;

	if (!o->host) {
		struct sockaddr_in6 addr = {
			.sin6_family = AF_INET6,
			.sin6_addr = IN6ADDR_ANY_INIT,
			.sin6_port = htons(o->port),
		};
		socklen_t alen = sizeof(addr);
		int zero = 0;

		ctx->fd = socket(AF_INET6, SOCK_DGRAM, 0);
		if (ctx->fd < 0) {
			fprintf(stderr, "socket failed: %s\n", strerror(errno));
			return -1;
		}
		setsockopt(ctx->fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
			   sizeof(zero));
		if (bind(ctx->fd, (struct sockaddr *)&addr, sizeof(addr)) ||
		    getsockname(ctx->fd, (struct sockaddr *)&addr, &alen)) {
			fprintf(stderr, "cannot bind UDP port %d: %s\n",
				o->port, strerror(errno));
			return -1;
		}
		printf("listening on port %d\n", ntohs(addr.sin6_port));
		fflush(stdout);
	} else {
		snprintf(port, sizeof(port), "%d", o->port);
		ret = getaddrinfo(o->host, port, &hints, &ai);
		if (ret) {
			fprintf(stderr, "cannot resolve %s: %s\n", o->host,
				gai_strerror(ret));
			return -1;
		}
		ctx->fd =
			socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
		if (ctx->fd < 0 ||
		    connect(ctx->fd, ai->ai_addr, ai->ai_addrlen)) {
			fprintf(stderr, "cannot reach %s:%d over UDP: %s\n",
				o->host, o->port, strerror(errno));
			freeaddrinfo(ai);
			return -1;
		}
		freeaddrinfo(ai);
	}
	setsockopt(ctx->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return 0;
}

/*
 * Client: one UDP round trip: send ctx->size bytes from ctx->buf on the
 * connected socket, receive the echo into ctx->buf. Returns 0, or -1 with
 *   round trip I: send failed: STRERROR
 *   round trip I: no reply within T s
 *   round trip I: reply of N bytes, expected SIZE
 */
static int udp_round_trip(struct lat_ctx *ctx, long i)
{
	ssize_t n;

	/* TODO 1: send() ctx->size bytes of ctx->buf, then recv() the reply
	 * into ctx->buf (up to ctx->size + 1 bytes, so that a longer reply
	 * shows); set n to what recv() returns (man send, man recv). */
	if (send(ctx->fd, ctx->buf, ctx->size, 0) < 0) {
		fprintf(stderr, "round trip %ld: send failed: %s\n", i,
			strerror(errno));
		return -1;
	}
	n = recv(ctx->fd, ctx->buf, ctx->size + 1, 0);
	/* END TODO 1 */
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		fprintf(stderr, "round trip %ld: no reply within %d s\n", i,
			ctx->timeout);
		return -1;
	}
	if (n < 0) {
		fprintf(stderr, "round trip %ld: recv failed: %s\n", i,
			strerror(errno));
		return -1;
	}
	if ((size_t)n != ctx->size) {
		fprintf(stderr,
			"round trip %ld: reply of %zd bytes, expected %zu\n", i,
			n, ctx->size);
		return -1;
	}
	return 0;
}

/*
 * Server: receive one datagram and send it back to whoever sent it.
 * Returns 0, or -1 with "round trip I: no message within T s" (or the
 * call that failed).
 */
static int udp_serve(struct lat_ctx *ctx, long i)
{
	struct sockaddr_storage from;
	socklen_t flen = sizeof(from);
	ssize_t n;

	/* TODO 2: recvfrom() into ctx->buf (up to ctx->size bytes), noting
	 * the sender in from/flen; then sendto() the n bytes back to it.
	 * Leave n < 0 when recvfrom() fails (errno tells why). */
	n = recvfrom(ctx->fd, ctx->buf, ctx->size, 0, (struct sockaddr *)&from,
		     &flen);
	if (n >= 0 && sendto(ctx->fd, ctx->buf, n, 0, (struct sockaddr *)&from,
			     flen) < 0) {
		fprintf(stderr, "round trip %ld: sendto failed: %s\n", i,
			strerror(errno));
		return -1;
	}
	/* END TODO 2 */
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		fprintf(stderr, "round trip %ld: no message within %d s\n", i,
			ctx->timeout);
		return -1;
	}
	if (n < 0) {
		fprintf(stderr, "round trip %ld: recvfrom failed: %s\n", i,
			strerror(errno));
		return -1;
	}
	return 0;
}

/* ---- RDMA SEND/RECV -------------------------------------------------------
 */

/* Post the receive for the next message into the receive half. 0 or -1. */
static int post_recv(struct lat_ctx *ctx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)ctx->buf + ctx->size,
		.length = ctx->size,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = WRID_RECV,
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

/* Post one signaled SEND of the send half. 0 or -1. */
static int post_send(struct lat_ctx *ctx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)ctx->buf,
		.length = ctx->size,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID_SEND,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags =
			IBV_SEND_SIGNALED |
			(ctx->size <= params.max_inline_data ? IBV_SEND_INLINE
							     : 0),
	};
	struct ibv_send_wr *bad_wr;
	int ret;

	ret = ibv_post_send(ctx->rc->qp, &wr, &bad_wr);
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Wait for the next receive (the peer's message) and check its length.
 * SEND completions that come first, of this round trip or an earlier one,
 * are counted off ctx->sends_out: a SEND completes when the peer's ACK
 * comes back, and nothing in a round trip needs to wait for that. 0 or -1.
 */
static int wait_recv(struct lat_ctx *ctx, const char *what)
{
	struct ibv_wc wc;

	for (;;) {
		if (rc_wait_wc(ctx->rc, &wc, what))
			return -1;
		if (wc.wr_id == WRID_SEND) {
			ctx->sends_out--;
			continue;
		}
		if (wc.byte_len != ctx->size) {
			fprintf(stderr, "%s: %u bytes arrived, expected %zu\n",
				what, wc.byte_len, ctx->size);
			return -1;
		}
		return 0;
	}
}

/*
 * Wait for SEND completions until fewer than @most SENDs are outstanding:
 * before a SEND (@most = max_send_wr: room in the send queue) and before
 * closing (@most = 1: all of them done). 0 or -1.
 */
static int reap_sends(struct lat_ctx *ctx, int most, const char *what)
{
	struct ibv_wc wc;

	while (ctx->sends_out >= most) {
		if (rc_wait_wc(ctx->rc, &wc, what))
			return -1;
		if (wc.wr_id != WRID_SEND) {
			fprintf(stderr, "%s: a message arrived out of turn\n",
				what);
			return -1;
		}
		ctx->sends_out--;
	}
	return 0;
}

/*
 * Client: one RDMA round trip: SEND the ping (after reap_sends() made
 * room), count it in ctx->sends_out, wait_recv() for the pong, post the
 * receive for the next pong. 0 or -1.
 */
static int rdma_round_trip(struct lat_ctx *ctx, long i)
{
	char what[48];
	int ret = -1;

	snprintf(what, sizeof(what), "round trip %ld", i);
	/* TODO 3: make room for the SEND (reap_sends(), with the send
	 * queue's depth), post_send() and count it in ctx->sends_out, wait
	 * for the pong (wait_recv()), repost with post_recv(); set ret to 0
	 * when all of it worked. */
	if (!reap_sends(ctx, params.max_send_wr, what) && !post_send(ctx)) {
		ctx->sends_out++;
		if (!wait_recv(ctx, what) && !post_recv(ctx))
			ret = 0;
	}
	/* END TODO 3 */
	return ret;
}

/*
 * Server: wait_recv() for the ping, post the receive for the next ping
 * (before the pong: the client may send again as soon as the pong is
 * there), then SEND the pong as the client sends its ping. 0 or -1.
 */
static int rdma_serve(struct lat_ctx *ctx, long i)
{
	char what[48];
	int ret = -1;

	snprintf(what, sizeof(what), "round trip %ld", i);
	/* TODO 4: wait_recv(), post_recv(), then make room for the pong
	 * (reap_sends(), with the send queue's depth), post_send() and
	 * count it in ctx->sends_out; set ret to 0 when all of it worked. */
	if (!wait_recv(ctx, what) && !post_recv(ctx) &&
	    !reap_sends(ctx, params.max_send_wr, what) && !post_send(ctx)) {
		ctx->sends_out++;
		ret = 0;
	}
	/* END TODO 4 */
	return ret;
}

/* RDMA: open the connection (rc.h), register both halves, post the first
 * receive before the peer can send, connect. 0 or -1. */
static int rdma_open(struct lat_ctx *ctx, const struct course_opts *o)
{
	struct qp_info mine = {}, theirs;

	ctx->rc = rc_open(o, &params);
	if (!ctx->rc)
		return -1;
	ctx->mr = ibv_reg_mr(ctx->rc->pd, ctx->buf, 2 * ctx->size,
			     IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	if (post_recv(ctx))
		return -1;
	mine.length = ctx->size;
	if (rc_connect(ctx->rc, o, &mine, &theirs))
		return -1;
	if (theirs.length != ctx->size) {
		fprintf(stderr,
			"the peer's messages are %u bytes, ours %zu (give both the same -s)\n",
			theirs.length, ctx->size);
		return -1;
	}
	return 0;
}

/* ---- the measurement ---------------------------------------------------- */

/*
 * The @p-th percentile (0 < p <= 100) of the @n sorted samples, by the
 * nearest-rank method: the smallest sample such that at least p % of the
 * samples are less than or equal to it, i.e. sorted[ceil(p / 100 * n) - 1].
 */
static uint64_t percentile(const uint64_t *sorted, long n, double p)
{
	long rank;

	/* TODO 6: the nearest rank (man ceil), clamped to 1..n. */
	rank = (long)ceil(p / 100.0 * n);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	/* END TODO 6 */
	return sorted[rank - 1];
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* One line: rtt TRANSPORT SIZE bytes: min A p50 B p90 C p99 D max E us (N round
 * trips) */
static void summarise(const char *transport, size_t size, uint64_t *ns, long n)
{
	qsort(ns, n, sizeof(*ns), cmp_u64);
	printf("rtt %s %zu bytes: min %.2f p50 %.2f p90 %.2f p99 %.2f max %.2f us (%ld round trips)\n",
	       transport, size, ns[0] / 1e3, percentile(ns, n, 50) / 1e3,
	       percentile(ns, n, 90) / 1e3, percentile(ns, n, 99) / 1e3,
	       ns[n - 1] / 1e3, n);
}

static int write_csv(const char *path, const uint64_t *ns, long n)
{
	FILE *f = fopen(path, "w");
	long i;

	if (!f) {
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "round_trip,rtt_ns\n");
	for (i = 0; i < n; i++)
		fprintf(f, "%ld,%llu\n", i, (unsigned long long)ns[i]);
	if (fclose(f)) {
		fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Client: @warmup round trips, then @iters timed ones, each sample the
 * round trip's duration in ns in @ns[i]. 0 or -1.
 */
static int measure(struct lat_ctx *ctx, long warmup, long iters, uint64_t *ns)
{
	int (*round_trip)(struct lat_ctx *, long) =
		ctx->udp ? udp_round_trip : rdma_round_trip;
	uint64_t t0, t1;
	long i;

	for (i = 0; i < warmup; i++)
		if (round_trip(ctx, i))
			return -1;
	for (i = 0; i < iters; i++) {
		/* TODO 5: time round trip warmup + i (round_trip()) with
		 * course_now_ns() (CLOCK_MONOTONIC, man clock_gettime) and
		 * keep the duration in ns[i]; return -1 if it fails. */
		t0 = course_now_ns();
		if (round_trip(ctx, warmup + i))
			return -1;
		t1 = course_now_ns();
		ns[i] = t1 - t0;
		/* END TODO 5 */
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *udp, *rdma, *warmup_s, *csv;
	struct course_opts o;
	struct lat_ctx ctx = { .fd = -1 };
	uint64_t *ns = NULL;
	long warmup = 100, i;
	int ret = 1;
	char *end;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	o.size = 2;
	udp = course_take_opt(&argc, argv, "--udp", 0, usage);
	rdma = course_take_opt(&argc, argv, "--rdma", 0, usage);
	warmup_s = course_take_opt(&argc, argv, "--warmup", 1, usage);
	csv = course_take_opt(&argc, argv, "--csv", 1, usage);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_ITERS | OPT_SIZE | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	if (udp && rdma) {
		fprintf(stderr,
			"latency: --udp and --rdma exclude each other\n");
		course_usage_exit("latency", usage);
	}
	if (warmup_s) {
		errno = 0;
		warmup = strtol(warmup_s, &end, 10);
		if (errno || !*warmup_s || *end || warmup < 0) {
			fprintf(stderr, "latency: bad --warmup '%s'\n",
				warmup_s);
			course_usage_exit("latency", usage);
		}
	}
	if (o.iters < 1 || o.size < 1 || (udp && o.size > MAX_UDP_SIZE)) {
		fprintf(stderr, "latency: -n must be >= 1, -s from 1 to %s\n",
			udp ? "65507 (UDP)" : "the device's limit");
		course_usage_exit("latency", usage);
	}
	if (csv && !o.host) {
		fprintf(stderr, "latency: --csv is the client's\n");
		course_usage_exit("latency", usage);
	}
	ctx.udp = !!udp;
	ctx.size = o.size;
	ctx.timeout = o.timeout;
	ctx.buf = course_alloc(2 * ctx.size);
	ns = calloc(o.iters, sizeof(*ns));
	if (!ctx.buf || !ns) {
		fprintf(stderr, "cannot allocate the buffers\n");
		goto out_free;
	}
	course_fill_pattern(ctx.buf, ctx.size, 0);

	if (ctx.udp ? udp_open(&ctx, &o) : rdma_open(&ctx, &o))
		goto out_close;

	if (o.host) {
		if (measure(&ctx, warmup, o.iters, ns))
			goto out_close;
		/* The CSV first: summarise() sorts the samples in place, and
		 * the CSV keeps them in the order measured. */
		if (csv && write_csv(csv, ns, o.iters))
			goto out_close;
		summarise(ctx.udp ? "udp" : "rdma", ctx.size, ns, o.iters);
	} else {
		int (*serve)(struct lat_ctx *, long) =
			ctx.udp ? udp_serve : rdma_serve;

		for (i = 0; i < warmup + o.iters; i++)
			if (serve(&ctx, i))
				goto out_close;
		printf("served %ld round trips (%ld warm-up)\n",
		       warmup + o.iters, warmup);
	}
	/* RDMA: every SEND acknowledged, and neither side tears its QP down
	 * while the other still uses it. */
	if (!ctx.udp && (reap_sends(&ctx, 1, "the last SEND") ||
			 course_oob_sync(ctx.rc->oob_fd, 'D', o.timeout)))
		goto out_close;
	ret = 0;

out_close:
	if (ctx.mr && ibv_dereg_mr(ctx.mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = 1;
	}
	if (ctx.rc && rc_close(ctx.rc))
		ret = 1;
	if (ctx.fd >= 0)
		close(ctx.fd);
out_free:
	free(ns);
	free(ctx.buf);
	return ret;
}
