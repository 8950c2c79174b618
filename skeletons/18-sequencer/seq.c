// SPDX-License-Identifier: MIT
/*
 * seq.c - lesson 18: a sequencer (increasing 64-bit numbers handed out to
 * C clients at once), built three ways.
 *
 *   server:  seq --mode faa|rc|ud [OPTIONS] [-c CLIENTS] [-n NUMBERS]
 *                [--start VALUE]
 *   client:  seq --mode faa|rc|ud [OPTIONS] [-c CLIENTS] [-n NUMBERS]
 *                [--csv] HOST
 *   answers: seq --answers FILE
 *
 * The server holds the counter (starting at --start) and serves -c
 * clients; the client program runs -c client threads, each with its own
 * TCP connection and QP, and each takes -n numbers, one request at a time:
 *
 *   faa  each client's RC QP does IBV_WR_ATOMIC_FETCH_AND_ADD of 1 on the
 *        server's counter (lesson 12): the old value is the number. The
 *        server's CPU does nothing until the end.
 *   rc   RPC over RC SEND/RECV: the client SENDs a request (8 bytes: its
 *        id, little-endian), the server's CPU takes the number
 *        (counter++) and SENDs a reply (16 bytes: the id, the number).
 *   ud   the same RPC over UD: one server QP for every client; the
 *        server learns where to reply from the request's completion
 *        (wc.src_qp, and its GRH for the address handle).
 *
 * Out of band, per client (course.h): the client connects, both exchange
 * qp_info (faa: the server advertises the counter's addr/rkey, 8 bytes;
 * ud: the QPN is the UD QP's, the qkey is SEQ_QKEY), rc and faa meet at
 * 'R' (rc.c); once all -c clients are connected the server sends 'G' to
 * each; each client says 'D' when it has its -n numbers. Then the server
 * checks its counter: it must be --start + CLIENTS x NUMBERS.
 */
#define _GNU_SOURCE /* sched_setaffinity(), CPU_SET() */
#include "answers.h"
#include "rc.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char usage[] =
	"--mode faa|rc|ud [-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] "
	"[-n NUMBERS] [-t SECS] [-c CLIENTS] [--start VALUE] [--csv] [HOST] "
	"| --answers FILE";

#define MAX_CLIENTS 16
#define SEQ_QKEY    0x11111111
#define GRH_SIZE    40 /* a UD receive starts with the 40-byte GRH */
#define REQ_SIZE    8  /* request: le64 id */
#define REP_SIZE    16 /* reply: le64 id, le64 number */
#define SLOT	    64 /* one message's room in a buffer */

enum mode { MODE_FAA, MODE_RC, MODE_UD };
static const char *const mode_names[] = { "faa", "rc", "ud" };

/* One UD QP and what it needs (the RC side is lesson 05's rc.c). */
struct ud_ctx {
	struct ibv_context *context;
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel; /* client: its CQs' (wait_wc()) */
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_qp *qp;
	struct ibv_ah *ah; /* client: to the server */
	int ib_port;
	int gid_index;
	int timeout;
	int oob_fd;
};

/* One client thread (client), or what the server keeps per client. */
struct seq_client {
	struct seq_ctx *ctx;
	int k;
	struct rc_ctx *rc; /* faa, rc */
	struct ud_ctx ud;  /* ud (client) */
	struct ibv_mr *mr;
	uint8_t *buf;
	struct qp_info theirs;
	uint64_t *numbers; /* client: what it got, in order */
	uint64_t *lat_ns;  /* client: each request's round trip */
	uint64_t t_start, t_end;
	int sends_out; /* server, rc: replies not yet completed */
	long served;   /* server: its requests answered */
	int ret;
};

struct seq_ctx {
	enum mode mode;
	const struct course_opts *o;
	int nclients;
	long n; /* numbers per client */
	struct seq_client cl[MAX_CLIENTS];
	uint64_t spin_ns; /* client: how long wait_wc() polls, then sleeps */
	/* server */
	uint64_t *counter; /* faa: the registered counter */
	uint64_t next;	   /* rc, ud: the server's own counter */
	struct ud_ctx ud;  /* ud: the one server QP */
	struct ibv_mr *ud_mr;
	uint8_t *ud_buf; /* recv slots, then send slots */
	int ud_depth;	 /* receives posted, and send slots */
	int ud_sends_out;
	struct {
		union ibv_gid gid;
		struct ibv_ah *ah;
	} ahs[MAX_CLIENTS];
	int nahs;
};

static const struct rc_params faa_params = {
	.access = IBV_ACCESS_REMOTE_ATOMIC,
	.max_rd_atomic = 1,
	.max_dest_rd_atomic = 1,
	.max_send_wr = 4,
	.max_recv_wr = 1,
};

#define RC_DEPTH 16
static const struct rc_params rpc_params = {
	.access = 0,
	.max_rd_atomic = 0,
	.max_dest_rd_atomic = 0,
	.max_send_wr = RC_DEPTH,
	.max_recv_wr = 4,
};

/* ---- UD: a QP of its own ------------------------------------------------- */

/*
 * Open the device, create a PD, a send and a receive CQ (@channel: both on
 * a completion channel) and a UD QP of @depth receives and sends, and bring
 * it to RTS. 0, or -1 (message printed; ud_close() undoes what was made).
 */
static int ud_open(struct ud_ctx *ud, const struct course_opts *o, int depth,
		   int channel)
{
	int ret;

	ud->ib_port = o->ib_port;
	ud->timeout = o->timeout;
	ud->oob_fd = -1;
	ud->context = course_open_device(o->device);
	if (!ud->context)
		return -1;
	ud->gid_index = course_pick_gid(ud->context, o->ib_port, o->gid_index);
	if (ud->gid_index < 0)
		return -1;
	ud->pd = ibv_alloc_pd(ud->context);
	if (!ud->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n", strerror(errno));
		return -1;
	}
	if (channel) {
		ud->channel = ibv_create_comp_channel(ud->context);
		if (!ud->channel) {
			fprintf(stderr, "ibv_create_comp_channel failed: %s\n",
				strerror(errno));
			return -1;
		}
	}
	ud->send_cq = ibv_create_cq(ud->context, depth, NULL, ud->channel, 0);
	ud->recv_cq = ud->send_cq ? ibv_create_cq(ud->context, depth, NULL,
						  ud->channel, 0)
				  : NULL;
	if (!ud->recv_cq) {
		fprintf(stderr, "ibv_create_cq failed: %s\n", strerror(errno));
		return -1;
	}

	/* TODO 1: create a UD QP (IBV_QPT_UD) on ud->pd with ud->send_cq
	 * and ud->recv_cq, @depth sends and receives of one sge each, and
	 * bring it to RTS: INIT (pkey_index 0, our port, qkey SEQ_QKEY),
	 * RTR (the state alone: a UD QP has no peer), RTS (sq_psn 0).
	 * man ibv_create_qp, ibv_modify_qp. Set ret to the first failure's
	 * return value (ud->qp NULL: ibv_create_qp failed). */
	ret = course_todo(1, "create the UD QP and bring it to RTS");
	/* END TODO 1 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

static int ud_close(struct ud_ctx *ud)
{
	int ret = 0;

	if (ud->oob_fd >= 0)
		close(ud->oob_fd);
	if (ud->ah && ibv_destroy_ah(ud->ah)) {
		fprintf(stderr, "ibv_destroy_ah failed\n");
		ret = -1;
	}
	if (ud->qp && ibv_destroy_qp(ud->qp)) {
		fprintf(stderr, "ibv_destroy_qp failed\n");
		ret = -1;
	}
	if (ud->recv_cq && ibv_destroy_cq(ud->recv_cq)) {
		fprintf(stderr, "ibv_destroy_cq failed\n");
		ret = -1;
	}
	if (ud->send_cq && ibv_destroy_cq(ud->send_cq)) {
		fprintf(stderr, "ibv_destroy_cq failed\n");
		ret = -1;
	}
	if (ud->channel && ibv_destroy_comp_channel(ud->channel)) {
		fprintf(stderr, "ibv_destroy_comp_channel failed\n");
		ret = -1;
	}
	if (ud->pd && ibv_dealloc_pd(ud->pd)) {
		fprintf(stderr, "ibv_dealloc_pd failed\n");
		ret = -1;
	}
	if (ud->context && ibv_close_device(ud->context)) {
		fprintf(stderr, "ibv_close_device failed\n");
		ret = -1;
	}
	return ret;
}

/* Our UD QP's address for the peer: LID, QPN, GID (no buffer). */
static int ud_info(struct ud_ctx *ud, struct qp_info *info)
{
	struct ibv_port_attr port;
	int ret;

	ret = ibv_query_port(ud->context, ud->ib_port, &port);
	if (!ret)
		ret = ibv_query_gid(ud->context, ud->ib_port, ud->gid_index,
				    &info->gid);
	if (ret) {
		fprintf(stderr, "ibv_query_port/ibv_query_gid failed: %s\n",
			strerror(ret));
		return -1;
	}
	info->lid = port.lid;
	info->qpn = ud->qp->qp_num;
	info->psn = 0;
	return 0;
}

static int post_recv_buf(struct ibv_qp *qp, struct ibv_mr *mr, void *addr,
			 uint32_t len, uint64_t wr_id)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)addr,
		.length = len,
		.lkey = mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad_wr;
	int ret = ibv_post_recv(qp, &wr, &bad_wr);

	if (ret)
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
	return ret ? -1 : 0;
}

/* ---- the client -------------------------------------------------------- */

/*
 * Client: sleep until @channel has an event, for at most @ns; take it and
 * acknowledge it (whichever CQ it is for: the caller polls again). 0 or -1
 * (message printed).
 */
static int sleep_on(struct ibv_comp_channel *channel, uint64_t ns,
		    const char *what)
{
	struct pollfd pfd = { .fd = channel->fd, .events = POLLIN };
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	int n = poll(&pfd, 1, (int)(ns / 1000000) + 1);

	if (n < 0 && errno != EINTR) {
		fprintf(stderr, "%s: poll failed: %s\n", what, strerror(errno));
		return -1;
	}
	if (n <= 0)
		return 0; /* the caller's deadline decides */
	if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx)) {
		fprintf(stderr, "%s: ibv_get_cq_event failed\n", what);
		return -1;
	}
	ibv_ack_cq_events(ev_cq, 1);
	return 0;
}

/*
 * Client: wait for one good completion on @cq, for at most @timeout
 * seconds: course_wait_wc(), but a wait longer than @spin_ns sleeps on the
 * CQ's completion @channel (lesson 10). Polling answers first; it costs a
 * CPU for the whole wait, and on an emulated, loaded rxe an RPC's wait is
 * milliseconds: more client threads polling than the CPUs left over keep
 * rxe's kernel work and the server off the CPUs they need to answer (even
 * with sched_yield() each turn). place_clients() chooses @spin_ns. 0 or
 * -1 (message printed).
 */
#define SPIN_NS 100000
static int wait_wc(struct ibv_cq *cq, struct ibv_comp_channel *channel,
		   uint64_t spin_ns, struct ibv_wc *wc, int timeout, int oob_fd,
		   const char *what)
{
	uint64_t start = course_now_ns(), now;
	uint64_t deadline = start + (uint64_t)timeout * 1000000000ull;
	int n, armed = 0;

	while (!(n = ibv_poll_cq(cq, 1, wc))) {
		now = course_now_ns();
		if (now >= deadline) {
			char ch;
			ssize_t got = oob_fd < 0
					      ? 1
					      : recv(oob_fd, &ch, 1,
						     MSG_PEEK | MSG_DONTWAIT);

			fprintf(stderr, "%s: no completion within %d s\n", what,
				timeout);
			if (got == 0 || (got < 0 && errno != EAGAIN))
				fprintf(stderr,
					"the peer closed the out-of-band connection: it has exited\n");
			return -1;
		}
		if (now - start < spin_ns) {
			sched_yield();
			continue;
		}
		if (!armed) {
			/* armed, then polled once more: a completion that
			 * came before the arm raises no event */
			if (ibv_req_notify_cq(cq, 0)) {
				fprintf(stderr,
					"%s: ibv_req_notify_cq failed\n", what);
				return -1;
			}
			armed = 1;
			continue;
		}
		if (sleep_on(channel, deadline - now, what))
			return -1;
		armed = 0;
	}
	if (n < 0) {
		fprintf(stderr, "%s: ibv_poll_cq failed\n", what);
		return -1;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		course_report_wc(what, wc);
		return -1;
	}
	return 0;
}

/* Client, faa: one fetch-and-add of 1 on the server's counter; the old
 * value (the number) into *number. 0 or -1. */
static int take_faa(struct seq_client *c, uint64_t *number)
{
	struct ibv_wc wc;
	int ret;

	/* TODO 2: post one signaled IBV_WR_ATOMIC_FETCH_AND_ADD that adds 1
	 * to the counter the server advertised (c->theirs.addr, .rkey); its
	 * old value lands in the first 8 bytes of c->buf (sge: c->mr's
	 * lkey). Set ret to what ibv_post_send() returns. man
	 * ibv_post_send */
	ret = course_todo(2, "post the fetch-and-add of 1 on the counter");
	/* END TODO 2 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	if (wait_wc(c->rc->cq, c->rc->channel, c->ctx->spin_ns, &wc,
		    c->ctx->o->timeout, c->rc->oob_fd, "fetch and add"))
		return -1;
	memcpy(number, c->buf, sizeof(*number));
	return 0;
}

/*
 * Client, rc or ud: SEND request @id and wait for its reply (16 bytes:
 * the id, the number). The request is at c->buf, the reply lands at
 * c->buf + SLOT (ud: after the GRH). 0 or -1.
 */
static int take_rpc(struct seq_client *c, uint64_t id, uint64_t *number)
{
	int ud = c->ctx->mode == MODE_UD;
	struct ibv_qp *qp = ud ? c->ud.qp : c->rc->qp;
	struct ibv_cq *scq = ud ? c->ud.send_cq : c->rc->cq;
	struct ibv_cq *rcq = ud ? c->ud.recv_cq : c->rc->cq;
	int fd = ud ? c->ud.oob_fd : c->rc->oob_fd;
	uint8_t *reply = c->buf + SLOT + (ud ? GRH_SIZE : 0);
	uint64_t le = htole64(id), got_id;
	struct ibv_send_wr *bad_wr;
	struct ibv_wc wc;
	int ret, done;

	if (post_recv_buf(qp, c->mr, c->buf + SLOT,
			  (ud ? GRH_SIZE : 0) + REP_SIZE, 2))
		return -1;
	memcpy(c->buf, &le, sizeof(le));

	struct ibv_sge sge = {
		.addr = (uintptr_t)c->buf,
		.length = REQ_SIZE,
		.lkey = c->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	if (ud) {
		/* TODO 3: a UD SEND names its destination in the work
		 * request: the address handle to the server (c->ud.ah), the
		 * server's QPN (c->theirs.qpn) and the qkey (SEQ_QKEY).
		 * man ibv_post_send, wr.ud */
		(void)course_todo(3, "address the UD request to the server");
		return -1;
		/* END TODO 3 */
	}
	ret = ibv_post_send(qp, &wr, &bad_wr);
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	/* the SEND's completion, and the reply's (on RC in either order) */
	for (done = 0; done != 3;) {
		if (wait_wc(ud && (done & 1) ? rcq : scq,
			    ud ? c->ud.channel : c->rc->channel,
			    c->ctx->spin_ns, &wc, c->ctx->o->timeout, fd,
			    done & 1 ? "reply" : "request"))
			return -1;
		if (wc.opcode == IBV_WC_SEND) {
			done |= 1;
			continue;
		}
		done |= 2;
		if (wc.byte_len != (ud ? GRH_SIZE : 0) + REP_SIZE) {
			fprintf(stderr, "reply: %u bytes, expected %d\n",
				wc.byte_len - (ud ? GRH_SIZE : 0), REP_SIZE);
			return -1;
		}
	}
	memcpy(&got_id, reply, sizeof(got_id));
	if (le64toh(got_id) != id) {
		fprintf(stderr, "reply: id %" PRIu64 ", expected %" PRIu64 "\n",
			le64toh(got_id), id);
		return -1;
	}
	memcpy(number, reply + 8, sizeof(*number));
	*number = le64toh(*number);
	return 0;
}

/* Client thread, ud: the QP, the exchange, the AH to the server. */
static int connect_ud(struct seq_client *c)
{
	const struct course_opts *o = c->ctx->o;
	struct qp_info mine = {};
	int ret;

	if (ud_open(&c->ud, o, 4, 1))
		return -1;
	c->mr = ibv_reg_mr(c->ud.pd, c->buf, 2 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	if (ud_info(&c->ud, &mine))
		return -1;
	c->ud.oob_fd = course_oob_connect(o->host, o->port, o->timeout);
	if (c->ud.oob_fd < 0)
		return -1;
	if (course_oob_exchange(c->ud.oob_fd, &mine, &c->theirs, o->timeout))
		return -1;

	/* TODO 4: an address handle to the server: its GID
	 * (c->theirs.gid) as a global route from our GID index, hop_limit
	 * 64, on our port (man ibv_create_ah). Set c->ud.ah; NULL: ret =
	 * errno. */
	ret = course_todo(4, "create the address handle to the server");
	/* END TODO 4 */
	if (ret) {
		fprintf(stderr, "ibv_create_ah failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/* Client thread, faa or rc: rc.c's QP and connection. */
static int connect_rc(struct seq_client *c)
{
	const struct course_opts *o = c->ctx->o;
	struct rc_params p = c->ctx->mode == MODE_FAA ? faa_params : rpc_params;
	struct qp_info mine = {};

	p.comp_channel = 1; /* wait_wc() sleeps on it */
	c->rc = rc_open(o, &p);
	if (!c->rc)
		return -1;
	c->mr = ibv_reg_mr(c->rc->pd, c->buf, 2 * SLOT, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	if (rc_connect(c->rc, o, &mine, &c->theirs))
		return -1;
	if (c->ctx->mode == MODE_FAA &&
	    (!c->theirs.addr || c->theirs.length < 8)) {
		fprintf(stderr,
			"the server advertised no counter (addr 0x%" PRIx64
			" length %u)\n",
			c->theirs.addr, c->theirs.length);
		return -1;
	}
	return 0;
}

static void *client_thread(void *arg)
{
	struct seq_client *c = arg;
	struct seq_ctx *ctx = c->ctx;
	int fd;
	long i;

	c->ret = -1;
	if (ctx->mode == MODE_UD ? connect_ud(c) : connect_rc(c))
		return NULL;
	fd = ctx->mode == MODE_UD ? c->ud.oob_fd : c->rc->oob_fd;
	if (course_oob_sync(fd, 'G', ctx->o->timeout))
		return NULL;
	c->t_start = course_now_ns();
	for (i = 0; i < ctx->n; i++) {
		uint64_t t0 = course_now_ns();

		if (ctx->mode == MODE_FAA ? take_faa(c, &c->numbers[i])
					  : take_rpc(c, i, &c->numbers[i]))
			return NULL;
		c->lat_ns[i] = course_now_ns() - t0;
	}
	c->t_end = course_now_ns();
	if (course_oob_sync(fd, 'D', ctx->o->timeout))
		return NULL;
	c->ret = 0;
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The nearest-rank percentile @p (0-100] of @n sorted samples. */
static uint64_t percentile(const uint64_t *sorted, size_t n, int p)
{
	size_t rank = (n * p + 99) / 100;

	return sorted[rank ? rank - 1 : 0];
}

/*
 * Client: print the samples (--csv) and the summary line
 *   MODE: C clients x N numbers in T s: R Mops/s, p50 A us, p99 B us
 * T from the first client's start (after 'G') to the last one's end.
 */
static int report(struct seq_ctx *ctx, int csv)
{
	size_t total = (size_t)ctx->nclients * ctx->n, j = 0;
	uint64_t first = UINT64_MAX, last = 0, *all;
	double secs;
	int k;
	long i;

	all = calloc(total ? total : 1, sizeof(*all));
	if (!all) {
		fprintf(stderr, "calloc failed: %s\n", strerror(errno));
		return -1;
	}
	if (csv)
		printf("client,number,latency_ns\n");
	for (k = 0; k < ctx->nclients; k++) {
		struct seq_client *c = &ctx->cl[k];

		if (c->t_start < first)
			first = c->t_start;
		if (c->t_end > last)
			last = c->t_end;
		for (i = 0; i < ctx->n; i++) {
			if (csv)
				printf("%d,%" PRIu64 ",%" PRIu64 "\n", k,
				       c->numbers[i], c->lat_ns[i]);
			all[j++] = c->lat_ns[i];
		}
	}
	qsort(all, total, sizeof(*all), cmp_u64);
	secs = (last - first) / 1e9;
	printf("%s: %d clients x %ld numbers in %.6f s: %.4f Mops/s, "
	       "p50 %.1f us, p99 %.1f us\n",
	       mode_names[ctx->mode], ctx->nclients, ctx->n, secs,
	       secs > 0 ? total / secs / 1e6 : 0.0,
	       percentile(all, total, 50) / 1e3,
	       percentile(all, total, 99) / 1e3);
	free(all);
	return 0;
}

/*
 * Client: where the client threads run and how long they poll (wait_wc()).
 * The server and rxe's kernel work need a CPU too. With a CPU for each
 * thread and one to spare, every thread polls through its waits. With
 * fewer, the threads share all the CPUs this process may use but one
 * (sched_setaffinity(); the threads created later inherit it) and poll
 * there, each giving the CPU to the next with sched_yield(): on rxe in
 * the micro-VM the reference client hands out 1.3 to 1.5 times as many
 * numbers per second as threads that sleep on their channel, whose every
 * wake-up takes a CPU from the server too. With one CPU, a wait polls
 * SPIN_NS and then sleeps. 0 or -1 (message printed).
 */
static int place_clients(struct seq_ctx *ctx)
{
	cpu_set_t cpus;
	int ncpus, k;

	if (sched_getaffinity(0, sizeof(cpus), &cpus)) {
		fprintf(stderr, "sched_getaffinity failed: %s\n",
			strerror(errno));
		return -1;
	}
	ncpus = CPU_COUNT(&cpus);
	ctx->spin_ns = ncpus < 2 ? SPIN_NS : UINT64_MAX;
	if (ncpus < 2 || ctx->nclients < ncpus)
		return 0;
	for (k = CPU_SETSIZE - 1; !CPU_ISSET(k, &cpus); k--)
		;
	CPU_CLR(k, &cpus); /* the spare one: the highest */
	if (sched_setaffinity(0, sizeof(cpus), &cpus)) {
		fprintf(stderr, "sched_setaffinity failed: %s\n",
			strerror(errno));
		return -1;
	}
	return 0;
}

static int run_client(struct seq_ctx *ctx, int csv)
{
	pthread_t tids[MAX_CLIENTS];
	int k, started = 0, ret = 0;

	if (place_clients(ctx))
		return -1;
	for (k = 0; k < ctx->nclients; k++) {
		struct seq_client *c = &ctx->cl[k];

		c->ctx = ctx;
		c->k = k;
		c->buf = course_alloc(2 * SLOT);
		c->numbers = calloc(ctx->n, sizeof(*c->numbers));
		c->lat_ns = calloc(ctx->n, sizeof(*c->lat_ns));
		if (!c->buf || !c->numbers || !c->lat_ns) {
			fprintf(stderr, "calloc failed: %s\n", strerror(errno));
			ret = -1;
			break;
		}
	}
	for (k = 0; !ret && k < ctx->nclients; k++) {
		ret = pthread_create(&tids[k], NULL, client_thread,
				     &ctx->cl[k]);
		if (ret) {
			fprintf(stderr, "pthread_create failed: %s\n",
				strerror(ret));
			ret = -1;
			break;
		}
		started++;
	}
	for (k = 0; k < started; k++) {
		pthread_join(tids[k], NULL);
		if (ctx->cl[k].ret)
			ret = -1;
	}
	if (!ret)
		ret = report(ctx, csv);
	return ret;
}

/* ---- the server -------------------------------------------------------- */

/*
 * Server, rc and ud: the number for one request. Returns it and moves the
 * counter on: every number once, in order, none skipped.
 */
static uint64_t next_number(struct seq_ctx *ctx)
{
	uint64_t number;

	/* TODO 5: the server's increment: the number is the counter's
	 * value now, and the counter moves on by one (one thread serves
	 * every request, so no lock is needed). */
	static int told;

	if (!told++)
		course_todo(5, "take the number and move the counter on");
	number = ctx->next;
	/* END TODO 5 */
	return number;
}

/* Server, rc: client @k's request arrived in @wc: reply, post the next
 * receive. 0 or -1. */
static int serve_rc(struct seq_ctx *ctx, int k, const struct ibv_wc *wc)
{
	struct seq_client *c = &ctx->cl[k];
	uint8_t *req = c->buf, *rep = c->buf + SLOT;
	uint64_t id, number;
	int ret;

	if (wc->byte_len != REQ_SIZE) {
		fprintf(stderr, "request: %u bytes, expected %d\n",
			wc->byte_len, REQ_SIZE);
		return -1;
	}
	memcpy(&id, req, sizeof(id));
	number = htole64(next_number(ctx));
	memcpy(rep, &id, sizeof(id));
	memcpy(rep + 8, &number, sizeof(number));

	/* TODO 6: reply on client @k's QP (c->rc->qp): one signaled
	 * IBV_WR_SEND of REP_SIZE bytes from rep (c->mr), and post the
	 * receive for its next request (REQ_SIZE bytes at req) with
	 * post_recv_buf(). Set ret to what ibv_post_send() returns (and
	 * return -1 when the receive fails). */
	ret = course_todo(6, "SEND the reply, post the next receive");
	/* END TODO 6 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	c->sends_out++;
	c->served++;
	return 0;
}

/* Server, ud: the address handle back to the sender of @wc, whose
 * receive buffer (and GRH) is @grh: one per sender GID, kept. */
static struct ibv_ah *reply_ah(struct seq_ctx *ctx, const struct ibv_wc *wc,
			       struct ibv_grh *grh)
{
	struct ibv_ah *ah;
	int i;

	for (i = 0; i < ctx->nahs; i++)
		if (!memcmp(&ctx->ahs[i].gid, &grh->sgid, sizeof(grh->sgid)))
			return ctx->ahs[i].ah;
	if (ctx->nahs == MAX_CLIENTS) {
		fprintf(stderr, "more than %d sender addresses\n", MAX_CLIENTS);
		return NULL;
	}
	ah = ibv_create_ah_from_wc(ctx->ud.pd, (struct ibv_wc *)wc, grh,
				   ctx->ud.ib_port);
	if (!ah) {
		fprintf(stderr, "ibv_create_ah_from_wc failed: %s\n",
			strerror(errno));
		return NULL;
	}
	ctx->ahs[ctx->nahs].gid = grh->sgid;
	ctx->ahs[ctx->nahs++].ah = ah;
	return ah;
}

/* Server, ud: wait until one of our replies completed. 0 or -1. */
static int ud_reap_send(struct seq_ctx *ctx)
{
	struct ibv_wc wc;

	if (course_wait_wc(ctx->ud.send_cq, &wc, ctx->o->timeout, -1, "reply"))
		return -1;
	ctx->ud_sends_out--;
	return 0;
}

/* Server, ud: the request in receive slot @wc->wr_id: reply to its
 * sender (from send slot @served mod depth), post the slot's receive
 * again. 0 or -1. */
static int serve_ud(struct seq_ctx *ctx, const struct ibv_wc *wc,
		    uint64_t served)
{
	int slot = wc->wr_id;
	uint8_t *rbuf = ctx->ud_buf + slot * SLOT;
	uint8_t *rep =
		ctx->ud_buf + (ctx->ud_depth + served % ctx->ud_depth) * SLOT;
	struct ibv_send_wr *bad_wr;
	uint64_t id, number;
	int k, ret;

	if (wc->byte_len != GRH_SIZE + REQ_SIZE) {
		fprintf(stderr, "request: %u bytes, expected %d\n",
			wc->byte_len - GRH_SIZE, REQ_SIZE);
		return -1;
	}
	while (ctx->ud_sends_out >= ctx->ud_depth)
		if (ud_reap_send(ctx))
			return -1;
	memcpy(&id, rbuf + GRH_SIZE, sizeof(id));
	number = htole64(next_number(ctx));
	memcpy(rep, &id, sizeof(id));
	memcpy(rep + 8, &number, sizeof(number));

	struct ibv_sge sge = {
		.addr = (uintptr_t)rep,
		.length = REP_SIZE,
		.lkey = ctx->ud_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};

	/* TODO 7: the reply goes back to whoever sent the
	 * request: an address handle made from its completion and GRH
	 * (reply_ah(), which uses ibv_create_ah_from_wc()), the sender's
	 * QPN from the completion, and SEQ_QKEY. man ibv_poll_cq (struct
	 * ibv_wc), ibv_create_ah_from_wc */
	(void)reply_ah;
	(void)course_todo(7, "address the reply to the request's sender");
	return -1;
	/* END TODO 7 */
	ret = ibv_post_send(ctx->ud.qp, &wr, &bad_wr);
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	ctx->ud_sends_out++;
	for (k = 0; k < ctx->nclients; k++)
		if (ctx->cl[k].theirs.qpn == wc->src_qp)
			ctx->cl[k].served++;
	return post_recv_buf(ctx->ud.qp, ctx->ud_mr, rbuf, GRH_SIZE + REQ_SIZE,
			     slot);
}

/* Server: has a client said something on TCP ('D', or closed it)
 * before it had its numbers? */
static int client_spoke(struct seq_ctx *ctx)
{
	struct pollfd fds[MAX_CLIENTS];
	int k, n = 0;

	for (k = 0; k < ctx->nclients; k++)
		if (ctx->cl[k].served < ctx->n)
			fds[n++] = (struct pollfd){
				.fd = ctx->mode == MODE_UD
					      ? ctx->cl[k].ud.oob_fd
					      : ctx->cl[k].rc->oob_fd,
				.events = POLLIN,
			};
	return poll(fds, n, 0) > 0;
}

/*
 * Server, rc and ud: serve requests until CLIENTS x NUMBERS are answered.
 * A wait of -t seconds with no request ends it, and so does a client
 * that says something on TCP before then:
 *   no request within T s (S of TOTAL served)
 *   a client is done (or gone) before its N numbers (S of TOTAL
 *   requests served)
 */
static int serve(struct seq_ctx *ctx)
{
	uint64_t total = (uint64_t)ctx->nclients * ctx->n, served = 0;
	uint64_t last = course_now_ns();
	struct ibv_wc wc;
	unsigned int idle = 0;
	int k, n;

	while (served < total) {
		int progress = 0;

		for (k = 0; k < (ctx->mode == MODE_UD ? 1 : ctx->nclients);
		     k++) {
			struct ibv_cq *cq = ctx->mode == MODE_UD
						    ? ctx->ud.recv_cq
						    : ctx->cl[k].rc->cq;

			n = ibv_poll_cq(cq, 1, &wc);
			if (n < 0) {
				fprintf(stderr, "ibv_poll_cq failed\n");
				return -1;
			}
			if (!n)
				continue;
			progress = 1;
			if (wc.status != IBV_WC_SUCCESS) {
				course_report_wc(wc.opcode == IBV_WC_SEND
							 ? "reply"
							 : "request",
						 &wc);
				return -1;
			}
			if (wc.opcode == IBV_WC_SEND) {
				ctx->cl[k].sends_out--;
				continue;
			}
			if (ctx->mode == MODE_UD ? serve_ud(ctx, &wc, served)
						 : serve_rc(ctx, k, &wc))
				return -1;
			served++;
		}
		if (ctx->mode == MODE_UD) {
			n = ibv_poll_cq(ctx->ud.send_cq, 1, &wc);
			if (n > 0 && wc.status != IBV_WC_SUCCESS) {
				course_report_wc("reply", &wc);
				return -1;
			}
			if (n > 0) {
				ctx->ud_sends_out--;
				progress = 1;
			}
		}
		for (k = 0; ctx->mode == MODE_RC && k < ctx->nclients; k++)
			while (ctx->cl[k].sends_out >= RC_DEPTH) {
				if (rc_wait_wc(ctx->cl[k].rc, &wc, "reply"))
					return -1;
				ctx->cl[k].sends_out--;
			}
		if (progress) {
			last = course_now_ns();
			continue;
		}
		sched_yield(); /* rxe's own kernel work needs a CPU too */
		if (++idle % 1024 == 0 && client_spoke(ctx)) {
			fprintf(stderr,
				"a client is done (or gone) before its %ld "
				"numbers (%" PRIu64 " of %" PRIu64
				" requests served)\n",
				ctx->n, served, total);
			return -1;
		}
		if (course_now_ns() - last >
		    (uint64_t)ctx->o->timeout * 1000000000ull) {
			fprintf(stderr,
				"no request within %d s (%" PRIu64
				" of %" PRIu64 " served)\n",
				ctx->o->timeout, served, total);
			return -1;
		}
	}
	printf("served: %" PRIu64 " requests\n", served);
	return 0;
}

/* Server: set up what client @k's connection needs, before listening. */
static int server_prepare(struct seq_ctx *ctx, int k)
{
	struct seq_client *c = &ctx->cl[k];

	c->ctx = ctx;
	c->rc = rc_open(ctx->o,
			ctx->mode == MODE_FAA ? &faa_params : &rpc_params);
	if (!c->rc)
		return -1;
	if (ctx->mode == MODE_FAA) {
		/* TODO 8: register the counter (8 bytes at ctx->counter) in
		 * this client's PD, so that its NIC may do atomics on it.
		 * man ibv_reg_mr */
		c->mr = NULL;
		errno = course_todo(8, "register the counter for atomics");
		/* END TODO 8 */
	} else {
		c->buf = course_alloc(2 * SLOT);
		if (!c->buf)
			return -1;
		c->mr = ibv_reg_mr(c->rc->pd, c->buf, 2 * SLOT,
				   IBV_ACCESS_LOCAL_WRITE);
	}
	if (!c->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	/* rc: the first request's receive, before the client can send */
	if (ctx->mode == MODE_RC &&
	    post_recv_buf(c->rc->qp, c->mr, c->buf, REQ_SIZE, 2))
		return -1;
	return 0;
}

/* Server, ud: the one QP, its buffer, a receive in every slot. */
static int server_prepare_ud(struct seq_ctx *ctx)
{
	int i;

	ctx->ud_depth = 2 * ctx->nclients + 2;
	if (ud_open(&ctx->ud, ctx->o, ctx->ud_depth, 0))
		return -1;
	ctx->ud_buf = course_alloc(2 * ctx->ud_depth * SLOT);
	if (!ctx->ud_buf)
		return -1;
	ctx->ud_mr =
		ibv_reg_mr(ctx->ud.pd, ctx->ud_buf, 2 * ctx->ud_depth * SLOT,
			   IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->ud_mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	for (i = 0; i < ctx->ud_depth; i++)
		if (post_recv_buf(ctx->ud.qp, ctx->ud_mr,
				  ctx->ud_buf + i * SLOT, GRH_SIZE + REQ_SIZE,
				  i))
			return -1;
	return 0;
}

/*
 * Server: check the counter after every client said 'D'. Prints
 *   counter: X (expected X)
 * (return 0), else on stderr (return 1)
 *   counter: got X, expected Y (D numbers missing)
 */
static int check_counter(struct seq_ctx *ctx, uint64_t start)
{
	uint64_t want = start + (uint64_t)ctx->nclients * ctx->n;
	uint64_t got = ctx->mode == MODE_FAA ? *ctx->counter : ctx->next;

	if (got != want) {
		fprintf(stderr,
			"counter: got %" PRIu64 ", expected %" PRIu64
			" (%" PRId64 " numbers missing)\n",
			got, want, (int64_t)(want - got));
		return 1;
	}
	printf("counter: %" PRIu64 " (expected %" PRIu64 ")\n", got, want);
	return 0;
}

static int run_server(struct seq_ctx *ctx, uint64_t start)
{
	const struct course_opts *o = ctx->o;
	int lfd, k, ret = -1;

	ctx->counter = course_alloc(sizeof(uint64_t));
	if (!ctx->counter)
		return -1;
	*ctx->counter = start;
	ctx->next = start;
	if (ctx->mode == MODE_UD) {
		if (server_prepare_ud(ctx))
			return -1;
	} else {
		for (k = 0; k < ctx->nclients; k++)
			if (server_prepare(ctx, k))
				return -1;
	}
	lfd = course_oob_listen(o->port);
	if (lfd < 0)
		return -1;
	for (k = 0; k < ctx->nclients; k++) {
		struct seq_client *c = &ctx->cl[k];
		struct qp_info mine = {};
		int fd;

		fd = course_oob_accept_on(lfd, o->timeout);
		if (fd < 0)
			goto out_close_listener;
		if (ctx->mode == MODE_UD) {
			c->ud.oob_fd = fd;
			if (ud_info(&ctx->ud, &mine) ||
			    course_oob_exchange(fd, &mine, &c->theirs,
						o->timeout))
				goto out_close_listener;
			continue;
		}
		if (ctx->mode == MODE_FAA)
			mine = (struct qp_info){
				.addr = (uintptr_t)ctx->counter,
				.rkey = c->mr->rkey,
				.length = sizeof(uint64_t),
			};
		if (rc_connect_fd(c->rc, fd, &mine, &c->theirs))
			goto out_close_listener;
	}
	for (k = 0; k < ctx->nclients; k++)
		if (course_oob_sync(ctx->mode == MODE_UD
					    ? ctx->cl[k].ud.oob_fd
					    : ctx->cl[k].rc->oob_fd,
				    'G', o->timeout))
			goto out_close_listener;
	if (ctx->mode != MODE_FAA && serve(ctx))
		goto out_close_listener;
	for (k = 0; k < ctx->nclients; k++)
		if (course_oob_sync(ctx->mode == MODE_UD
					    ? ctx->cl[k].ud.oob_fd
					    : ctx->cl[k].rc->oob_fd,
				    'D', o->timeout))
			goto out_close_listener;
	ret = check_counter(ctx, start);

out_close_listener:
	close(lfd);
	return ret;
}

/* ---- the questions (answers.c) ----------------------------------------- */

const char *const questions[] = { "fastest", "slowest", "times", NULL };

#define MAX_RUNS 64

/*
 * seq --answers FILE ("-": stdin): FILE's summary lines (any other line is
 * skipped), one struct seq_run each, then "QUESTION: ANSWER" for each
 * question, answer() of answers.c computing it. 0, or 1 (FILE unreadable or
 * without a summary line: one line on stderr).
 */
static int run_answers(const char *path)
{
	struct seq_run runs[MAX_RUNS];
	const char *const *q;
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	char line[512];
	size_t n = 0;

	if (!f) {
		fprintf(stderr, "seq: cannot read %s: %s\n", path,
			strerror(errno));
		return 1;
	}
	while (fgets(line, sizeof(line), f)) {
		struct seq_run r = {};

		if (sscanf(line,
			   "%7[a-z]: %d clients x %ld numbers in %lf s: %lf "
			   "Mops/s, p50 %lf us, p99 %lf us",
			   r.mode, &r.clients, &r.numbers, &r.seconds, &r.mops,
			   &r.p50_us, &r.p99_us) == 7 &&
		    n < MAX_RUNS)
			runs[n++] = r;
	}
	if (f != stdin)
		fclose(f);
	if (!n) {
		fprintf(stderr,
			"seq: %s: no summary line ('MODE: C clients x N "
			"numbers in T s: ...')\n",
			path);
		return 1;
	}
	for (q = questions; *q; q++) {
		char out[64] = "?";

		answer(*q, runs, n, out, sizeof(out));
		printf("%s: %s\n", *q, out);
	}
	return 0;
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
	const char *mode_s, *clients, *start_s, *csv, *answers;
	struct course_opts o;
	struct seq_ctx ctx = { .nclients = 1 };
	uint64_t start = 0, v;
	int ret = 1, result = -1, k;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	mode_s = course_take_opt(&argc, argv, "--mode", 1, usage);
	clients = course_take_opt(&argc, argv, "--clients", 1, usage);
	if (!clients)
		clients = course_take_opt(&argc, argv, "-c", 1, usage);
	start_s = course_take_opt(&argc, argv, "--start", 1, usage);
	csv = course_take_opt(&argc, argv, "--csv", 0, usage);
	answers = course_take_opt(&argc, argv, "--answers", 1, usage);
	if (answers) {
		if (argc > 1 || mode_s || clients || start_s || csv) {
			fprintf(stderr,
				"seq: --answers takes no other option\n");
			course_usage_exit("seq", usage);
		}
		return run_answers(answers);
	}
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_ITERS | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	ctx.o = &o;
	ctx.n = o.iters;
	if (!mode_s) {
		fprintf(stderr, "seq: --mode is required\n");
		course_usage_exit("seq", usage);
	}
	for (k = 0; k < 3 && strcmp(mode_s, mode_names[k]); k++)
		;
	if (k == 3) {
		fprintf(stderr, "seq: unknown --mode '%s' (faa, rc or ud)\n",
			mode_s);
		course_usage_exit("seq", usage);
	}
	ctx.mode = k;
	if (o.iters < 1) {
		fprintf(stderr, "seq: -n must be at least 1\n");
		course_usage_exit("seq", usage);
	}
	if (clients) {
		if (parse_u64(clients, &v) || v < 1 || v > MAX_CLIENTS) {
			fprintf(stderr, "seq: -c must be 1 to %d\n",
				MAX_CLIENTS);
			course_usage_exit("seq", usage);
		}
		ctx.nclients = v;
	}
	if (start_s && parse_u64(start_s, &start)) {
		fprintf(stderr, "seq: bad --start '%s'\n", start_s);
		course_usage_exit("seq", usage);
	}
	if (o.host && start_s) {
		fprintf(stderr, "seq: --start is the server's\n");
		course_usage_exit("seq", usage);
	}
	if (!o.host && csv) {
		fprintf(stderr, "seq: --csv is the client's\n");
		course_usage_exit("seq", usage);
	}

	result = o.host ? run_client(&ctx, !!csv) : run_server(&ctx, start);
	if (result >= 0)
		ret = result;
	for (k = 0; k < ctx.nclients; k++) {
		struct seq_client *c = &ctx.cl[k];

		if (c->mr && ibv_dereg_mr(c->mr)) {
			fprintf(stderr, "ibv_dereg_mr failed\n");
			ret = 1;
		}
		if (c->rc && rc_close(c->rc))
			ret = 1;
		if (c->ud.context && ud_close(&c->ud))
			ret = 1;
		if (!c->rc && !c->ud.context && c->ud.oob_fd > 0)
			close(c->ud.oob_fd);
		free(c->buf);
		free(c->numbers);
		free(c->lat_ns);
	}
	for (k = 0; k < ctx.nahs; k++)
		if (ibv_destroy_ah(ctx.ahs[k].ah)) {
			fprintf(stderr, "ibv_destroy_ah failed\n");
			ret = 1;
		}
	if (ctx.ud_mr && ibv_dereg_mr(ctx.ud_mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = 1;
	}
	if (ctx.ud.context && ud_close(&ctx.ud))
		ret = 1;
	free(ctx.ud_buf);
	free(ctx.counter);
	return ret;
}
