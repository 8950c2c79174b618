// SPDX-License-Identifier: MIT
/*
 * srq.c - lesson 14: a server for many clients on one shared receive queue.
 *
 *   server:  srq [OPTIONS] [-c CLIENTS] [--srq-size W] [--limit L]
 *   client:  srq [OPTIONS] [-n REQUESTS] HOST
 *
 * The server has one CQ and one SRQ (ibv_create_srq) of W receives of
 * SIZE bytes for all its clients; each client gets an RC QP of its own,
 * created on that SRQ, so the QPs have no receive queues: every request,
 * whoever sent it, lands in the next receive of the SRQ. The server
 * refills the SRQ only when it runs low: it arms the SRQ's limit L
 * (ibv_modify_srq) and, when the device reports
 * IBV_EVENT_SRQ_LIMIT_REACHED on the async event channel, posts every free
 * buffer back in one chain and arms the limit again. A request's reply is
 * the request with its bytes in reverse order, sent from the very buffer
 * the request landed in, on the QP the request came from (wc.qp_num); the
 * buffer goes back to the free list when the reply's SEND completes.
 *
 * The protocol: a client connects (lessons/common/rc.h, one TCP
 * connection each), and once all CLIENTS have, the server lets them go
 * ('G'); each sends REQUESTS requests of SIZE bytes, one at a time, and
 * checks every reply; then 'D'. The server serves until every client has
 * said 'D', then prints what it served.
 */
#include "rc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-n REQUESTS] "
	"[-s SIZE] [-t SECS] [-c CLIENTS] [--srq-size W] [--limit L] [HOST]";

#define MAX_CLIENTS 16
#define MAX_SRQ	    4096
#define SRV_POLL    16 /* completions per ibv_poll_cq() */
#define SRV_SEND_WR 4  /* replies in flight per client, at most */

/* The QP attributes rc_connect_fd() takes from struct rc_params. */
static const struct rc_params qp_params = {
	.max_rd_atomic = 1,
	.max_dest_rd_atomic = 1,
	.max_send_wr = SRV_SEND_WR,
};

struct client {
	struct rc_ctx rc;  /* its QP, connected by rc_connect_fd() */
	uint32_t peer_qpn; /* the client's own QP number */
	long served;
	int done; /* it said 'D' */
};

struct srv_ctx {
	struct ibv_context *context;
	struct ibv_pd *pd;
	struct ibv_cq *cq; /* one CQ: every QP's sends and receives */
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	uint8_t *buf; /* W slots of SIZE bytes */
	size_t size;
	unsigned int srq_size; /* W: --srq-size, receives posted at first */
	unsigned int granted;  /* the SRQ's max_wr, as created */
	unsigned int limit;    /* L: --limit */
	unsigned int *free;    /* slots neither in the SRQ nor in flight */
	unsigned int nfree;
	struct ibv_recv_wr *wr; /* post_free()'s chain: one per slot */
	struct ibv_sge *sge;
	struct client clients[MAX_CLIENTS];
	int want;     /* CLIENTS (-c) */
	int nclients; /* connected so far */
	int ib_port, gid_index, timeout;
	long served, events, reposted;
};

/* ---- the server's resources ------------------------------------------------
 */

/*
 * Open the device, a PD, the CQ, the SRQ and the buffers; make the async
 * event channel non-blocking (check_events() must not wait). 0 or -1.
 */
static int srv_open(struct srv_ctx *srv, const struct course_opts *o)
{
	struct ibv_srq_init_attr init = {
		.attr = {
			.max_wr = srv->srq_size,
			.max_sge = 1,
		},
	};
	unsigned int i;
	int ret;

	srv->context = course_open_device(o->device);
	if (!srv->context)
		return -1;
	srv->gid_index =
		course_pick_gid(srv->context, o->ib_port, o->gid_index);
	if (srv->gid_index < 0)
		return -1;
	if (fcntl(srv->context->async_fd, F_SETFL,
		  fcntl(srv->context->async_fd, F_GETFL) | O_NONBLOCK)) {
		fprintf(stderr, "fcntl(async_fd) failed: %s\n",
			strerror(errno));
		return -1;
	}
	srv->pd = ibv_alloc_pd(srv->context);
	if (!srv->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n", strerror(errno));
		return -1;
	}
	srv->cq = ibv_create_cq(srv->context,
				srv->srq_size + SRV_SEND_WR * srv->want, NULL,
				NULL, 0);
	if (!srv->cq) {
		fprintf(stderr, "ibv_create_cq failed: %s\n", strerror(errno));
		return -1;
	}
	/* TODO 1: create the shared receive queue on the PD, for
	 * srv->srq_size receives of one sge each (man ibv_create_srq; init
	 * above). */
	srv->srq = ibv_create_srq(srv->pd, &init);
	/* END TODO 1 */
	if (!srv->srq) {
		fprintf(stderr, "ibv_create_srq failed: %s\n", strerror(errno));
		return -1;
	}
	/* What the device made: rxe rounds max_wr up (and leaves init.attr
	 * as it was asked). */
	ret = ibv_query_srq(srv->srq, &init.attr);
	if (ret) {
		fprintf(stderr, "ibv_query_srq failed: %s\n", strerror(ret));
		return -1;
	}
	srv->granted = init.attr.max_wr;
	srv->buf = course_alloc((size_t)srv->srq_size * srv->size);
	srv->free = calloc(srv->srq_size, sizeof(*srv->free));
	srv->wr = calloc(srv->srq_size, sizeof(*srv->wr));
	srv->sge = calloc(srv->srq_size, sizeof(*srv->sge));
	if (!srv->buf || !srv->free || !srv->wr || !srv->sge) {
		fprintf(stderr, "cannot allocate %u slots\n", srv->srq_size);
		return -1;
	}
	srv->mr =
		ibv_reg_mr(srv->pd, srv->buf, (size_t)srv->srq_size * srv->size,
			   IBV_ACCESS_LOCAL_WRITE);
	if (!srv->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	for (i = 0; i < srv->srq_size; i++)
		srv->free[srv->nfree++] = i;
	return 0;
}

/*
 * Post every free slot (srv->free[0 .. nfree-1]) to the SRQ, in one chain
 * of receives (wr_id: the slot, SIZE bytes at slot x SIZE); the free list
 * is empty afterwards. Counts them in srv->reposted. 0 or -1.
 */
static int post_free(struct srv_ctx *srv)
{
	struct ibv_recv_wr *wr = srv->wr, *bad_wr;
	struct ibv_sge *sge = srv->sge;
	unsigned int j;
	int ret;

	if (!srv->nfree)
		return 0;
	for (j = 0; j < srv->nfree; j++) {
		sge[j] = (struct ibv_sge){
			.addr = (uintptr_t)srv->buf +
				(size_t)srv->free[j] * srv->size,
			.length = srv->size,
			.lkey = srv->mr->lkey,
		};
		wr[j] = (struct ibv_recv_wr){
			.wr_id = srv->free[j],
			.sg_list = &sge[j],
			.num_sge = 1,
		};
	}
	/* TODO 2: link the nfree receives into one list and post it to the
	 * SRQ with a single call (man ibv_post_srq_recv; ret: what it
	 * returns). */
	for (j = 0; j + 1 < srv->nfree; j++)
		wr[j].next = &wr[j + 1];
	ret = ibv_post_srq_recv(srv->srq, wr, &bad_wr);
	/* END TODO 2 */
	if (ret) {
		fprintf(stderr, "ibv_post_srq_recv failed: %s\n",
			strerror(ret));
		return -1;
	}
	srv->reposted += srv->nfree;
	srv->nfree = 0;
	return 0;
}

/*
 * Arm the SRQ's limit: the device raises IBV_EVENT_SRQ_LIMIT_REACHED once
 * fewer than srv->limit receives are left in it, and then disarms it.
 * 0 or -1.
 */
static int arm_limit(struct srv_ctx *srv)
{
	struct ibv_srq_attr attr = {
		.srq_limit = srv->limit,
	};
	int ret;

	/* TODO 3: set the limit with ibv_modify_srq() (man ibv_modify_srq:
	 * which attribute mask says "the limit"; ret: what it returns). */
	ret = ibv_modify_srq(srv->srq, &attr, IBV_SRQ_LIMIT);
	/* END TODO 3 */
	if (ret) {
		fprintf(stderr, "ibv_modify_srq(srq_limit %u) failed: %s\n",
			srv->limit, strerror(ret));
		return -1;
	}
	return 0;
}

/* ---- the clients' connections -----------------------------------------------
 */

/*
 * Accept client @k on the listening socket @lfd and connect a QP for it:
 * an RC QP of its own on the server's PD, CQ and SRQ, moved to INIT, then
 * rc_connect_fd() (lessons/common/rc.h) for the rest: the exchange of
 * qp_info, RTR, RTS and the 'R' barrier. 0 or -1.
 */
static int accept_client(struct srv_ctx *srv, int lfd, int k)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.send_cq = srv->cq,
		.recv_cq = srv->cq,
		.cap = {
			.max_send_wr = SRV_SEND_WR,
			.max_send_sge = 1,
		},
	};
	struct client *c = &srv->clients[k];
	struct qp_info mine = { .length = srv->size }, theirs;
	struct ibv_qp_attr attr = {};
	struct ibv_qp *qp;
	int fd, ret;

	fd = course_oob_accept_on(lfd, srv->timeout);
	if (fd < 0)
		return -1;
	/* TODO 4: the client's QP takes its receives from the SRQ and its
	 * completions to the server's one CQ (init above; man
	 * ibv_create_qp: which field names the SRQ): create it on the PD. */
	init.srq = srv->srq;
	qp = ibv_create_qp(srv->pd, &init);
	/* END TODO 4 */
	if (!qp) {
		fprintf(stderr, "ibv_create_qp failed: %s\n", strerror(errno));
		close(fd);
		return -1;
	}
	/* TODO 5: move the QP to INIT (lesson 03: the attributes INIT takes
	 * into attr, one mask bit each; the clients only SEND, so no remote
	 * access; man ibv_modify_qp). ret: what ibv_modify_qp() returns. */
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = srv->ib_port;
	attr.qp_access_flags = 0;
	/* clang-format off */
	ret = ibv_modify_qp(qp, &attr,
			    IBV_QP_STATE |
			    IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	/* clang-format on */
	/* END TODO 5 */
	c->rc = (struct rc_ctx){
		.context = srv->context,
		.pd = srv->pd,
		.cq = srv->cq,
		.qp = qp,
		.params = qp_params,
		.ib_port = srv->ib_port,
		.gid_index = srv->gid_index,
		.timeout = srv->timeout,
		.oob_fd = -1,
	};
	srv->nclients = k + 1; /* from here on, closed with the others */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(INIT) failed: %s\n",
			strerror(ret));
		close(fd);
		return -1;
	}
	if (rc_connect_fd(&c->rc, fd, &mine, &theirs))
		return -1;
	c->peer_qpn = theirs.qpn;
	return 0;
}

/* ---- serving ---------------------------------------------------------------
 */

/* The reply: the request's @len bytes at @p, in reverse order. */
static void reverse(uint8_t *p, uint32_t len)
{
	uint32_t i;
	uint8_t t;

	for (i = 0; i < len / 2; i++) {
		t = p[i];
		p[i] = p[len - 1 - i];
		p[len - 1 - i] = t;
	}
}

/*
 * A request arrived (@wc: a receive completion of the SRQ, wr_id its
 * slot): find the client it came from, turn the request into its reply in
 * place and SEND the reply from that slot, signaled (wr_id: the slot, so
 * that the SEND's completion frees it), on that client's QP. 0 or -1.
 */
static int serve(struct srv_ctx *srv, const struct ibv_wc *wc)
{
	uint8_t *slot = srv->buf + wc->wr_id * srv->size;
	struct ibv_sge sge = {
		.addr = (uintptr_t)slot,
		.length = wc->byte_len,
		.lkey = srv->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = wc->wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad_wr;
	struct client *c = NULL;
	int k, ret;

	reverse(slot, wc->byte_len);
	/* TODO 6: which client sent it? The completion names the QP the
	 * request arrived on (man ibv_poll_cq, struct ibv_wc); c: the
	 * client whose QP that is (srv->clients[0 .. nclients-1]). Post the
	 * reply on c's QP (ret: what ibv_post_send() returns) and count it
	 * in c->served and srv->served. */
	for (k = 0; k < srv->nclients; k++)
		if (srv->clients[k].rc.qp->qp_num == wc->qp_num)
			c = &srv->clients[k];
	ret = c ? ibv_post_send(c->rc.qp, &wr, &bad_wr) : ENOENT;
	if (!ret) {
		c->served++;
		srv->served++;
	}
	/* END TODO 6 */
	if (!c) {
		fprintf(stderr,
			"a request on QP 0x%06x, which is no client's\n",
			wc->qp_num);
		return -1;
	}
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Take every async event that is waiting (the channel is non-blocking:
 * none waiting is EAGAIN, not an error). IBV_EVENT_SRQ_LIMIT_REACHED:
 * count it in srv->events, post the free slots back (post_free()) and arm
 * the limit again (arm_limit()) - the device disarmed it. Any other event
 * is printed ("async event: NAME") and ends the server only when it is a
 * QP's or the device's fatal error. Every event is acknowledged. 0 or -1.
 */
static int check_events(struct srv_ctx *srv)
{
	struct ibv_async_event ev;
	int ret = 0;

	for (;;) {
		if (ibv_get_async_event(srv->context, &ev)) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return ret;
			fprintf(stderr, "ibv_get_async_event failed: %s\n",
				strerror(errno));
			return -1;
		}
		/* TODO 7: the low-water mark (ev.event_type; man
		 * ibv_get_async_event): on IBV_EVENT_SRQ_LIMIT_REACHED count
		 * the event, refill the SRQ and arm its limit again, as the
		 * comment above says (ret = -1 if either fails). */
		if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
			srv->events++;
			if (post_free(srv) || arm_limit(srv))
				ret = -1;
		}
		/* END TODO 7 */
		if (ev.event_type != IBV_EVENT_SRQ_LIMIT_REACHED) {
			printf("async event: %s\n",
			       course_event_name(ev.event_type));
			if (ev.event_type == IBV_EVENT_QP_FATAL ||
			    ev.event_type == IBV_EVENT_DEVICE_FATAL)
				ret = -1;
		}
		ibv_ack_async_event(&ev);
	}
}

/*
 * The clients' TCP connections: a client that sent 'D' is done (it gets
 * its 'D' back); one that closed its connection failed. Returns the
 * number still active, or -1.
 */
static int check_clients(struct srv_ctx *srv)
{
	struct pollfd fds[MAX_CLIENTS];
	int k, n, active = 0;
	char c;

	for (k = 0; k < srv->nclients; k++)
		fds[k] = (struct pollfd){
			.fd = srv->clients[k].done ? -1
						   : srv->clients[k].rc.oob_fd,
			.events = POLLIN,
		};
	if (poll(fds, srv->nclients, 0) < 0) {
		fprintf(stderr, "poll failed: %s\n", strerror(errno));
		return -1;
	}
	for (k = 0; k < srv->nclients; k++) {
		struct client *cl = &srv->clients[k];

		if (cl->done)
			continue;
		if (fds[k].revents) {
			n = recv(cl->rc.oob_fd, &c, 1, MSG_PEEK);
			if (n <= 0) {
				fprintf(stderr,
					"client 0x%06x: the peer closed the out-of-band connection: it has exited\n",
					cl->peer_qpn);
				return -1;
			}
			if (course_oob_sync(cl->rc.oob_fd, 'D', srv->timeout))
				return -1;
			cl->done = 1;
			continue;
		}
		active++;
	}
	return active;
}

/*
 * Serve until every client is done: completions (requests: serve();
 * replies sent: the slot is free again), then the async events, then the
 * clients' connections. A wait of --timeout seconds without any of them
 * fails:
 *   serve: nothing from any client within T s
 * 0 or -1.
 */
static int serve_all(struct srv_ctx *srv)
{
	uint64_t idle = course_now_ns();
	struct ibv_wc wc[SRV_POLL];
	int n, k, active;

	for (;;) {
		n = ibv_poll_cq(srv->cq, SRV_POLL, wc);
		if (n < 0) {
			fprintf(stderr, "ibv_poll_cq failed\n");
			return -1;
		}
		for (k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS) {
				course_report_wc(wc[k].opcode == IBV_WC_SEND
							 ? "reply"
							 : "request",
						 &wc[k]);
				return -1;
			}
			if (wc[k].opcode == IBV_WC_RECV) {
				if (serve(srv, &wc[k]))
					return -1;
			} else {
				srv->free[srv->nfree++] = wc[k].wr_id;
			}
		}
		if (check_events(srv))
			return -1;
		active = check_clients(srv);
		if (active <= 0)
			return active;
		if (n)
			idle = course_now_ns();
		else if (course_now_ns() - idle >
			 srv->timeout * 1000000000ull) {
			fprintf(stderr,
				"serve: nothing from any client within %d s\n",
				srv->timeout);
			return -1;
		}
		if (!n) /* idle for 1 ms: nap between polls (course.h) */
			course_poll_pause(idle, course_now_ns());
	}
}

static void print_memory(const struct srv_ctx *srv)
{
	double one = (double)srv->srq_size * srv->size / 1024;

	printf("srq: %u receives of %zu bytes (max_wr %u granted), limit %u\n",
	       srv->srq_size, srv->size, srv->granted, srv->limit);
	printf("memory: 1 SRQ x %u x %zu B = %.1f KiB for %d clients; %d receive queues of %u would be %.1f KiB\n",
	       srv->srq_size, srv->size, one, srv->want, srv->want,
	       srv->srq_size, srv->want * one);
}

static int run_server(struct srv_ctx *srv, const struct course_opts *o)
{
	int lfd, k, ret = -1;

	if (srv_open(srv, o) || post_free(srv) || arm_limit(srv))
		return -1;
	srv->reposted = 0; /* from here on: refills */
	print_memory(srv);
	lfd = course_oob_listen(o->port);
	if (lfd < 0)
		return -1;
	for (k = 0; k < srv->want; k++)
		if (accept_client(srv, lfd, k))
			goto out_close_listener;
	/* Everyone is connected: let them go. */
	for (k = 0; k < srv->want; k++)
		if (course_oob_sync(srv->clients[k].rc.oob_fd, 'G', o->timeout))
			goto out_close_listener;
	if (serve_all(srv))
		goto out_close_listener;
	for (k = 0; k < srv->want; k++)
		printf("client 0x%06x: %ld requests\n",
		       srv->clients[k].peer_qpn, srv->clients[k].served);
	printf("served %ld requests from %d clients: %ld limit events, %ld receives reposted\n",
	       srv->served, srv->want, srv->events, srv->reposted);
	ret = 0;

out_close_listener:
	close(lfd);
	return ret;
}

/* Undo srv_open() and the clients' QPs, in reverse order. 0 or 1. */
static int srv_close(struct srv_ctx *srv)
{
	int k, ret = 0;

	for (k = srv->nclients - 1; k >= 0; k--) {
		if (srv->clients[k].rc.oob_fd >= 0)
			close(srv->clients[k].rc.oob_fd);
		if (ibv_destroy_qp(srv->clients[k].rc.qp)) {
			fprintf(stderr, "ibv_destroy_qp failed\n");
			ret = 1;
		}
	}
	if (srv->mr && ibv_dereg_mr(srv->mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = 1;
	}
	if (srv->srq && ibv_destroy_srq(srv->srq)) {
		fprintf(stderr, "ibv_destroy_srq failed\n");
		ret = 1;
	}
	if (srv->cq && ibv_destroy_cq(srv->cq)) {
		fprintf(stderr, "ibv_destroy_cq failed\n");
		ret = 1;
	}
	if (srv->pd && ibv_dealloc_pd(srv->pd)) {
		fprintf(stderr, "ibv_dealloc_pd failed\n");
		ret = 1;
	}
	if (srv->context && ibv_close_device(srv->context)) {
		fprintf(stderr, "ibv_close_device failed\n");
		ret = 1;
	}
	free(srv->wr);
	free(srv->sge);
	free(srv->free);
	free(srv->buf);
	return ret;
}

/* ---- the client -------------------------------------------------------------
 */

/*
 * Client: -n requests of SIZE bytes, one at a time: request i is the
 * course's pattern shifted by our QP number and i; each reply must be the
 * request reversed. Prints
 *   client: N requests, every reply checked
 * or, on stderr,
 *   request I: the reply is not our request reversed (byte K: got 0xGG,
 * expected 0xEE) 0 or -1.
 */
static int run_client(const struct course_opts *o)
{
	struct rc_params p = {
		.max_rd_atomic = 1,
		.max_dest_rd_atomic = 1,
		.max_send_wr = 2,
		.max_recv_wr = 2,
	};
	struct qp_info mine = { .length = o->size }, theirs;
	struct ibv_mr *mr = NULL;
	struct rc_ctx *rc;
	uint8_t *buf = NULL;
	int ret = -1;
	long i;

	rc = rc_open(o, &p);
	if (!rc)
		return -1;
	buf = course_alloc(3 * o->size); /* request | reply | expected */
	if (!buf)
		goto out_close;
	mr = ibv_reg_mr(rc->pd, buf, 2 * o->size, IBV_ACCESS_LOCAL_WRITE);
	if (!mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_close;
	}
	if (rc_connect(rc, o, &mine, &theirs) ||
	    course_oob_sync(rc->oob_fd, 'G', o->timeout))
		goto out_dereg;
	for (i = 0; i < o->iters; i++) {
		struct ibv_sge ssge = {
			.addr = (uintptr_t)buf,
			.length = o->size,
			.lkey = mr->lkey,
		};
		struct ibv_sge rsge = {
			.addr = (uintptr_t)buf + o->size,
			.length = o->size,
			.lkey = mr->lkey,
		};
		struct ibv_send_wr swr = {
			.sg_list = &ssge,
			.num_sge = 1,
			.opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED,
		};
		struct ibv_recv_wr rwr = {
			.wr_id = 1,
			.sg_list = &rsge,
			.num_sge = 1,
		};
		struct ibv_send_wr *bad_swr;
		struct ibv_recv_wr *bad_rwr;
		struct ibv_wc wc;
		uint8_t *want = buf + 2 * o->size;
		char what[48];
		size_t k;
		int n, err;

		course_fill_pattern(buf, o->size, rc->qp->qp_num + 7 * i);
		memcpy(want, buf, o->size);
		reverse(want, o->size);
		err = ibv_post_recv(rc->qp, &rwr, &bad_rwr);
		if (err) {
			fprintf(stderr, "ibv_post_recv failed: %s\n",
				strerror(err));
			goto out_dereg;
		}
		err = ibv_post_send(rc->qp, &swr, &bad_swr);
		if (err) {
			fprintf(stderr, "ibv_post_send failed: %s\n",
				strerror(err));
			goto out_dereg;
		}
		snprintf(what, sizeof(what), "request %ld", i);
		for (n = 0; n < 2; n++)
			if (rc_wait_wc(rc, &wc, what))
				goto out_dereg;
		k = course_first_diff(buf + o->size, want, o->size);
		if (k < o->size) {
			fprintf(stderr,
				"request %ld: the reply is not our request reversed (byte %zu: got 0x%02x, expected 0x%02x)\n",
				i, k, buf[o->size + k], want[k]);
			goto out_dereg;
		}
	}
	if (course_oob_sync(rc->oob_fd, 'D', o->timeout))
		goto out_dereg;
	printf("client: %ld requests, every reply checked\n", o->iters);
	ret = 0;

out_dereg:
	if (ibv_dereg_mr(mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
out_close:
	if (rc_close(rc))
		ret = -1;
	free(buf);
	return ret;
}

/* ---- main
 * ---------------------------------------------------------------------
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
			"srq: %s expects a number from 1 to %u, got '%s'\n",
			flag, max, s);
		course_usage_exit("srq", usage);
	}
	return v;
}

int main(int argc, char **argv)
{
	const char *clients, *srq_size, *limit;
	struct srv_ctx srv = { .srq_size = 64, .limit = 16, .want = 4 };
	struct course_opts o;
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	o.size = 64;
	o.iters = 100;
	clients = course_take_opt(&argc, argv, "--clients", 1, usage);
	if (!clients)
		clients = course_take_opt(&argc, argv, "-c", 1, usage);
	srq_size = course_take_opt(&argc, argv, "--srq-size", 1, usage);
	limit = course_take_opt(&argc, argv, "--limit", 1, usage);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_ITERS | OPT_SIZE | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	if (o.host && (clients || srq_size || limit)) {
		fprintf(stderr,
			"srq: -c, --srq-size and --limit are the server's\n");
		course_usage_exit("srq", usage);
	}
	if (clients)
		srv.want = parse_count("-c", clients, MAX_CLIENTS);
	if (srq_size)
		srv.srq_size = parse_count("--srq-size", srq_size, MAX_SRQ);
	if (limit)
		srv.limit = parse_count("--limit", limit, MAX_SRQ);
	if (srv.limit >= srv.srq_size) {
		fprintf(stderr, "srq: --limit must be below --srq-size\n");
		course_usage_exit("srq", usage);
	}
	if (o.size > (1 << 20)) {
		fprintf(stderr, "srq: -s is at most 1 MiB\n");
		course_usage_exit("srq", usage);
	}
	if (o.host)
		return run_client(&o) ? 1 : 0;

	srv.size = o.size;
	srv.ib_port = o.ib_port;
	srv.timeout = o.timeout;
	ret = run_server(&srv, &o) ? 1 : 0;
	if (srv_close(&srv))
		ret = 1;
	return ret;
}
