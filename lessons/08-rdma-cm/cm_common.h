/* SPDX-License-Identifier: MIT */
/*
 * cm_common.h - what lesson 08's client and server share: the messages they
 * SEND each other, a bounded wait for connection-manager events, and the
 * verbs objects of one connection (struct cm_conn) with their chores.
 *
 * Provided by the lesson (lessons/08-rdma-cm/cm_common.c); the exercises are
 * in cm_client.c and cm_server.c.
 */
#ifndef CM_COMMON_H
#define CM_COMMON_H

#include <stdint.h>
#include <rdma/rdma_cma.h>

/*
 * The three messages of the protocol, each one SEND:
 *
 *   client -> server  CM_MSG_BUF      addr/rkey/length of the client's source
 *                                     buffer (the server may READ it)
 *   server -> client  CM_MSG_BUF      addr/rkey/length of the server's buffer
 *                                     (the client WRITEs and READs it)
 *   client -> server  CM_MSG_DONE     the client's rounds are over; status =
 *                                     its own verdict (0 match, 1 mismatch)
 *   server -> client  CM_MSG_VERDICT  status = the server's verdict: 0 match,
 *                                     1 mismatch (addr = first bad offset),
 *                                     2 could not verify
 */
enum cm_msg_type {
	CM_MSG_BUF = 1,
	CM_MSG_DONE = 2,
	CM_MSG_VERDICT = 3,
};

enum {
	CM_VERDICT_MATCH = 0,
	CM_VERDICT_MISMATCH = 1,
	CM_VERDICT_UNVERIFIED = 2,
};

/* On the wire every field is big-endian: use cm_msg_pack/cm_msg_unpack. */
struct cm_msg {
	uint32_t type;
	uint32_t status;
	uint64_t addr;
	uint32_t rkey;
	uint32_t length;
};

/* Fill the wire message @wire from host-order values. */
void cm_msg_pack(struct cm_msg *wire, uint32_t type, uint32_t status,
		 uint64_t addr, uint32_t rkey, uint32_t length);

/* Convert the received wire message @wire into host order in @host. */
void cm_msg_unpack(struct cm_msg *host, const struct cm_msg *wire);

/*
 * Wait at most @timeout seconds for the next event on @ch and check that it
 * is @expected (poll() on the channel's fd, then rdma_get_cm_event()).
 *
 * On success returns 0. When @ev is NULL the event has been acknowledged
 * already; otherwise *@ev is the event and the caller must pass it to
 * rdma_ack_cm_event() once it has read what it needs (for a
 * RDMA_CM_EVENT_CONNECT_REQUEST: ev->id, the new connection's id).
 *
 * Any other event, or none in time, prints one line to stderr naming @what
 * (the call that started the wait, e.g. "rdma_connect") and the event,
 *   rdma_connect: got RDMA_CM_EVENT_REJECTED (invalid service ID: nobody
 *   listens on that port) while waiting for RDMA_CM_EVENT_ESTABLISHED
 *   rdma_connect: no RDMA_CM_EVENT_ESTABLISHED within 3 s
 * acknowledges what it got, and returns -1.
 */
int cm_wait_event(struct rdma_event_channel *ch,
		  enum rdma_cm_event_type expected, int timeout,
		  const char *what, struct rdma_cm_event **ev);

/*
 * Poll @cq for one completion, like course_poll_one(), for at most
 * @timeout seconds - and keep an eye on @ch meanwhile: a peer that dies or
 * disconnects shows up there (RDMA_CM_EVENT_DISCONNECTED) long before any
 * timeout. Returns 0 with *@wc filled (check wc->status yourself), or -1
 * with one line printed:
 *   RECV: the connection is gone (RDMA_CM_EVENT_DISCONNECTED) while
 *   waiting for a completion
 *   RECV: no completion within 10 s
 */
int cm_poll_one(struct rdma_event_channel *ch, struct ibv_cq *cq,
		struct ibv_wc *wc, int timeout, const char *what);

/*
 * The ACK timeout this course asks rdma_cm for (RDMA_OPTION_ID_ACK_TIMEOUT,
 * 4.096 us * 2^16 = 268 ms); the retries are COURSE_QP_RETRY_CNT (course.h:
 * 6, as rxe takes 7 to mean "forever"). A peer that vanishes without a word
 * is noticed after about 7 x 268 ms: the work request completes with
 * IBV_WC_RETRY_EXC_ERR.
 */
#define CM_ACK_TIMEOUT 16

/* The message slots of struct cm_conn: one to SEND from, two to RECV into. */
enum {
	CM_SLOT_OUT = 0,
	CM_SLOT_IN1 = 1,
	CM_SLOT_IN2 = 2,
	CM_NUM_SLOTS = 3,
};

/* One side of a connection: what the client and the server both hold. */
struct cm_conn {
	struct rdma_event_channel *ch;	/* where rdma_cm reports events */
	struct rdma_cm_id *listen_id;	/* server: the listener, else NULL */
	struct rdma_cm_id *id;		/* the connection (like a socket) */
	struct ibv_pd *pd;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_mr *msg_mr;		/* covers msg[] */
	struct cm_msg msg[CM_NUM_SLOTS]; /* SEND from [0], RECV into [1], [2] */
	int timeout;			/* seconds, for every wait */
};

/*
 * Create the event channel and one id on it: @id is &c->id (client) or
 * &c->listen_id (server). Returns 0, or -1 with a message printed.
 */
int cm_conn_open(struct cm_conn *c, struct rdma_cm_id **id);

/*
 * The verbs objects of c->id, on its device (c->id->verbs): PD, two CQs,
 * the QP (rdma_create_qp: rdma_cm moves it through INIT, RTR and RTS), the
 * ACK timeout, the message MR, and a RECV posted in each of the two IN
 * slots. Returns 0, or -1 with a message printed; cm_conn_close() undoes
 * whatever was done.
 */
int cm_conn_alloc(struct cm_conn *c);

/*
 * Wait for one completion on @cq that succeeded, or for news of a dead peer
 * on the event channel (cm_poll_one()); @what names it. 0 or -1 (printed).
 */
int cm_wait_wc(struct cm_conn *c, struct ibv_cq *cq, const char *what);

/* SEND one message (packed from these values) and wait until it is
 * delivered. 0 or -1 (printed). */
int cm_send_msg(struct cm_conn *c, uint32_t type, uint32_t status,
		uint64_t addr, uint32_t rkey, uint32_t length);

/* Wait for the peer's next message, in slot @slot, and check its @type;
 * *@out holds it in host order. 0 or -1 (printed). */
int cm_recv_msg(struct cm_conn *c, int slot, uint32_t type,
		struct cm_msg *out);

/* Destroy what cm_conn_open() and cm_conn_alloc() made, in reverse order.
 * Deregister your own MRs first. */
void cm_conn_close(struct cm_conn *c);

/* "a.b.c.d port N" of a sockaddr, for messages (static buffer). */
const char *cm_addr_str(const struct sockaddr *sa);

#endif /* CM_COMMON_H */
