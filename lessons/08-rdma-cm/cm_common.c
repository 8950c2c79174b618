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
	uint64_t deadline = course_now_ns() + (uint64_t)timeout * 1000000000ull;
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	uint64_t now, next_look = 0;
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
			if (pending) {
				/* Still no completion a poll after the event. */
				fprintf(stderr,
					"%s: the connection is gone (%s) while waiting for a completion\n",
					what, rdma_event_str(pending->event));
				rdma_ack_cm_event(pending);
				pending = NULL;
				return -1;
			}
			/* Keep it aside and poll the CQ once more: the
			 * completion may have arrived just before the event. */
			if (poll(&pfd, 1, 0) > 0 && !rdma_get_cm_event(ch, &ev))
				pending = ev;
		}
		if (now >= deadline) {
			fprintf(stderr, "%s: no completion within %d s\n", what,
				timeout);
			return -1;
		}
	}
}

int cm_todo(int n, const char *what)
{
	fprintf(stderr, "%s: TODO %d is not done yet: %s\n",
		program_invocation_short_name, n, what);
	errno = ENOSYS;
	return -1;
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
