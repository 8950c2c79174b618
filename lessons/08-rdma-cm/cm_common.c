// SPDX-License-Identifier: MIT
/*
 * cm_common.c - lesson 08's shared helpers. See cm_common.h.
 */
#define _GNU_SOURCE
#include "cm_common.h"
#include "course.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

void cm_msg_pack(struct cm_msg *wire, uint32_t type, uint32_t status,
		 uint64_t addr, uint32_t rkey, uint32_t length)
{
	*wire = (struct cm_msg){
		.type = htobe32(type),
		.status = htobe32(status),
		.addr = htobe64(addr),
		.rkey = htobe32(rkey),
		.length = htobe32(length),
	};
}

void cm_msg_unpack(struct cm_msg *host, const struct cm_msg *wire)
{
	*host = (struct cm_msg){
		.type = be32toh(wire->type),
		.status = be32toh(wire->status),
		.addr = be64toh(wire->addr),
		.rkey = be32toh(wire->rkey),
		.length = be32toh(wire->length),
	};
}

/* What the status of an unexpected event means, in words. */
static void describe_status(const struct rdma_cm_event *ev, char *buf,
			    size_t len)
{
	int st = ev->status;

	switch (ev->event) {
	case RDMA_CM_EVENT_REJECTED:
		/* InfiniBand CM reject reasons (RoCE uses the same CM). */
		if (st == 8)
			snprintf(buf, len,
				 "invalid service ID: nobody listens on that port");
		else if (st == 28)
			snprintf(buf, len, "the server rejected the connection");
		else
			snprintf(buf, len, "reject reason %d", st);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		snprintf(buf, len, "status %d: %s", st,
			 strerror(st < 0 ? -st : st));
		break;
	default:
		snprintf(buf, len, "status %d", st);
	}
}

/*
 * An event cm_poll_one() took off the channel just as a completion arrived:
 * cm_wait_event() hands it out first.
 */
static struct rdma_cm_event *pending;

/*
 * How long cm_poll_one() keeps polling the CQ after a DISCONNECTED: the
 * peer may have had the last message and its ACK, and hung up, before the
 * device turned that ACK into our completion. The two come by different
 * kernel paths; on a loaded machine the event came first by more than a
 * millisecond (a SEND's completion lost to the peer's disconnect, seen
 * beside a second make test).
 */
#define CM_GONE_GRACE_NS 1000000000ull

int cm_wait_event(struct rdma_event_channel *ch,
		  enum rdma_cm_event_type expected, int timeout,
		  const char *what, struct rdma_cm_event **evp)
{
	uint64_t deadline = course_now_ns() + (uint64_t)timeout * 1000000000ull;
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	char why[128];
	int64_t left_ms;
	int flags;

	/* Non-blocking, so that rdma_get_cm_event() never sleeps forever. */
	flags = fcntl(ch->fd, F_GETFL);
	if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		fprintf(stderr, "%s: fcntl on the event channel: %s\n", what,
			strerror(errno));
		return -1;
	}
	ev = pending;
	pending = NULL;
	while (!ev && rdma_get_cm_event(ch, &ev)) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			fprintf(stderr, "%s: rdma_get_cm_event: %s\n", what,
				strerror(errno));
			return -1;
		}
		left_ms = ((int64_t)deadline - (int64_t)course_now_ns()) /
			  1000000;
		if (left_ms <= 0) {
			fprintf(stderr, "%s: no %s within %d s\n", what,
				rdma_event_str(expected), timeout);
			return -1;
		}
		if (poll(&pfd, 1, (int)left_ms) < 0 && errno != EINTR) {
			fprintf(stderr, "%s: poll on the event channel: %s\n",
				what, strerror(errno));
			return -1;
		}
	}
	if (ev->event != expected) {
		describe_status(ev, why, sizeof(why));
		fprintf(stderr, "%s: got %s (%s) while waiting for %s\n", what,
			rdma_event_str(ev->event), why,
			rdma_event_str(expected));
		rdma_ack_cm_event(ev);
		return -1;
	}
	if (evp)
		*evp = ev;
	else
		rdma_ack_cm_event(ev);
	return 0;
}

int cm_poll_one(struct rdma_event_channel *ch, struct ibv_cq *cq,
		struct ibv_wc *wc, int timeout, const char *what)
{
	uint64_t start = course_now_ns(), now, next_look = 0, gone_at = 0;
	uint64_t deadline = start + (uint64_t)timeout * 1000000000ull;
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int n;

	for (;;) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0) {
			fprintf(stderr, "%s: ibv_poll_cq failed\n", what);
			return -1;
		}
		if (n == 1)
			return 0;
		now = course_now_ns();
		/* A look at the event channel costs a system call: 1 per ms. */
		if (now >= next_look) {
			next_look = now + 1000000;
			if (pending && !gone_at) {
				gone_at = now;
			} else if (pending && now - gone_at >= CM_GONE_GRACE_NS) {
				/* Still no completion a second after the event. */
				fprintf(stderr,
					"%s: the connection is gone (%s) while waiting for a completion\n",
					what, rdma_event_str(pending->event));
				rdma_ack_cm_event(pending);
				pending = NULL;
				return -1;
			}
			/* Keep it aside and poll the CQ on: the completion
			 * may be on its way still (CM_GONE_GRACE_NS). */
			if (!pending && poll(&pfd, 1, 0) > 0 &&
			    !rdma_get_cm_event(ch, &ev))
				pending = ev;
		}
		if (now >= deadline) {
			fprintf(stderr, "%s: no completion within %d s\n", what,
				timeout);
			return -1;
		}
		course_poll_pause(start, now);
	}
}

const char *cm_addr_str(const struct sockaddr *sa)
{
	static char buf[INET6_ADDRSTRLEN + 16];
	char ip[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		port = ntohs(in6->sin6_port);
	}
	snprintf(buf, sizeof(buf), "%s port %d", ip, port);
	return buf;
}

/* ---- one connection ---------------------------------------------------- */

int cm_conn_open(struct cm_conn *c, struct rdma_cm_id **id)
{
	c->ch = rdma_create_event_channel();
	if (!c->ch) {
		fprintf(stderr, "rdma_create_event_channel failed: %s\n",
			strerror(errno));
		return -1;
	}
	if (rdma_create_id(c->ch, id, NULL, RDMA_PS_TCP)) {
		fprintf(stderr, "rdma_create_id failed: %s\n", strerror(errno));
		rdma_destroy_event_channel(c->ch);
		c->ch = NULL;
		return -1;
	}
	return 0;
}

/* Post a RECV for message slot @i. */
static int post_recv(struct cm_conn *c, int i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)&c->msg[i],
		.length = sizeof(c->msg[i]),
		.lkey = c->msg_mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = i,
		.sg_list = &sge,
		.num_sge = 1,
	}, *bad;
	int ret;

	ret = ibv_post_recv(c->id->qp, &wr, &bad);
	if (ret)
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
	return ret ? -1 : 0;
}

int cm_conn_alloc(struct cm_conn *c)
{
	struct ibv_qp_init_attr attr = {
		.qp_type = IBV_QPT_RC,
		.cap = {
			.max_send_wr = 4,
			.max_recv_wr = CM_NUM_SLOTS,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	uint8_t ack_timeout = CM_ACK_TIMEOUT;

	c->pd = ibv_alloc_pd(c->id->verbs);
	if (!c->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n", strerror(errno));
		return -1;
	}
	c->send_cq = ibv_create_cq(c->id->verbs, 4, NULL, NULL, 0);
	c->recv_cq = ibv_create_cq(c->id->verbs, CM_NUM_SLOTS, NULL, NULL, 0);
	if (!c->send_cq || !c->recv_cq) {
		fprintf(stderr, "ibv_create_cq failed: %s\n", strerror(errno));
		return -1;
	}
	attr.send_cq = c->send_cq;
	attr.recv_cq = c->recv_cq;
	if (rdma_create_qp(c->id, c->pd, &attr)) {
		fprintf(stderr, "rdma_create_qp failed: %s\n", strerror(errno));
		return -1;
	}
	/* A dead peer shows as retries running out: make that quick. */
	if (rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			    &ack_timeout, sizeof(ack_timeout)))
		fprintf(stderr,
			"rdma_set_option(ACK_TIMEOUT) failed: %s (ignored)\n",
			strerror(errno));
	c->msg_mr = ibv_reg_mr(c->pd, c->msg, sizeof(c->msg),
			       IBV_ACCESS_LOCAL_WRITE);
	if (!c->msg_mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	/* Posted before connecting: the peer SENDs as soon as it can. */
	if (post_recv(c, CM_SLOT_IN1) || post_recv(c, CM_SLOT_IN2))
		return -1;
	return 0;
}

int cm_wait_wc(struct cm_conn *c, struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;

	if (cm_poll_one(c->ch, cq, &wc, c->timeout, what))
		return -1;
	if (wc.status != IBV_WC_SUCCESS) {
		course_report_wc(what, &wc);
		return -1;
	}
	return 0;
}

int cm_send_msg(struct cm_conn *c, uint32_t type, uint32_t status,
		uint64_t addr, uint32_t rkey, uint32_t length)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)&c->msg[CM_SLOT_OUT],
		.length = sizeof(c->msg[CM_SLOT_OUT]),
		.lkey = c->msg_mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = CM_SLOT_OUT,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	int ret;

	cm_msg_pack(&c->msg[CM_SLOT_OUT], type, status, addr, rkey, length);
	ret = ibv_post_send(c->id->qp, &wr, &bad);
	if (ret) {
		fprintf(stderr, "ibv_post_send(SEND) failed: %s\n",
			strerror(ret));
		return -1;
	}
	return cm_wait_wc(c, c->send_cq, "SEND");
}

int cm_recv_msg(struct cm_conn *c, int slot, uint32_t type,
		struct cm_msg *out)
{
	if (cm_wait_wc(c, c->recv_cq, "RECV"))
		return -1;
	cm_msg_unpack(out, &c->msg[slot]);
	if (out->type != type) {
		fprintf(stderr, "RECV: expected message type %u, got %u\n",
			type, out->type);
		return -1;
	}
	return 0;
}

void cm_conn_close(struct cm_conn *c)
{
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->msg_mr)
		ibv_dereg_mr(c->msg_mr);
	if (c->recv_cq)
		ibv_destroy_cq(c->recv_cq);
	if (c->send_cq)
		ibv_destroy_cq(c->send_cq);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->listen_id)
		rdma_destroy_id(c->listen_id);
	if (c->ch)
		rdma_destroy_event_channel(c->ch);
}
