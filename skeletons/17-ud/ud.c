// SPDX-License-Identifier: MIT
/*
 * ud.c - lesson 17: datagrams. One Unreliable Datagram (UD) QP serves many
 * clients; every reply goes to the address its request came from.
 *
 *   server:  ud [OPTIONS] [-q QKEY] [-s SIZE] [-c CLIENTS]
 *   client:  ud [OPTIONS] [-q QKEY] [-s SIZE] [-n REQUESTS] HOST
 *
 * A UD QP has no remote side: it goes RESET -> INIT (with its Q_Key) ->
 * RTR -> RTS alone, and every SEND names its destination in the work
 * request (wr.wr.ud: an address handle, the remote QP number, the remote
 * Q_Key). A message is one packet: at most the path MTU. A receive buffer
 * holds 40 bytes more than the largest message: the device writes the
 * Global Routing Header (GRH) in front of the data.
 *
 * The protocol: the server listens on TCP and sends each of CLIENTS
 * clients its qp_info (QP number and GID; the client's qp_info carries only
 * SIZE: the server learns a client's address from its requests). When all
 * have connected it lets them go ('G'). A client sends REQUESTS requests of
 * SIZE bytes, one at a time: 4 bytes of sequence number (big-endian), then
 * its payload. The reply has the same sequence number and the payload
 * reversed; it goes to the QP and GID the request came from (wc.src_qp,
 * the GRH). Nothing is acknowledged, nothing is sent again: a request or a
 * reply that is dropped (a wrong Q_Key, a message too large, a peer gone)
 * is noticed only by the client's timeout (-t), and the client counts it
 * lost. A client that is done says 'D' on TCP; the server ends when every
 * client has (or has gone).
 */
#include "course.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-q QKEY] [-s SIZE] "
	"[-n REQUESTS] [-t SECS] [-c CLIENTS] [HOST]";

#define UD_GRH	     40 /* the GRH in front of every receive */
#define UD_SEQ	     4	/* the sequence number in front of the payload */
#define DEFAULT_QKEY 0x11111111 /* ibv_ud_pingpong's */
#define MAX_CLIENTS  16
#define SRV_SLOTS    32 /* the server's receives (and replies) in flight */
#define SEND_FLAG    (1ull << 32) /* wr_id of a SEND: the slot | SEND_FLAG */

/* One peer the server has answered: its QP, its GID, the AH to reach it. */
struct peer {
	uint32_t qpn;
	union ibv_gid gid;
	struct ibv_ah *ah;
	long served;
};

/* Every verbs object of one side, server or client. */
struct ud_ctx {
	struct ibv_context *context;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf; /* nslots receive slots of UD_GRH + size, then sends */
	size_t size;  /* the largest message: SIZE */
	size_t slot;  /* one receive buffer: UD_GRH + size */
	int nslots;   /* receive slots (the client: 1, then its send buffer) */
	int ib_port, gid_index, mtu, timeout;
	uint16_t lid;
	uint32_t qkey;
	union ibv_gid gid;
	/* the server */
	struct peer peers[MAX_CLIENTS];
	int npeers;
	long served;
	int fds[MAX_CLIENTS]; /* the clients' TCP connections, -1: done */
	int nclients;
	/* the client */
	struct ibv_ah *ah; /* to the server */
};

static int mtu_bytes(enum ibv_mtu mtu)
{
	return 128 << mtu; /* IBV_MTU_256 is 1 */
}

/* ---- the UD QP
 * ----------------------------------------------------------------- */

/*
 * Create a UD QP on ctx's PD and CQ (sends and receives on the one CQ) for
 * @send_wr sends and @recv_wr receives of one sge each. 0 or -1.
 */
static int create_ud_qp(struct ud_ctx *ctx, uint32_t send_wr, uint32_t recv_wr)
{
	/* TODO 1: create the QP: an Unreliable Datagram one (man
	 * ibv_create_qp: qp_type), on ctx->pd, both queues on ctx->cq, caps
	 * @send_wr and @recv_wr with one sge each. */
	(void)send_wr;
	(void)recv_wr;
	ctx->qp = NULL;
	errno = course_todo(1, "create a UD QP with ibv_create_qp()");
	/* END TODO 1 */
	if (!ctx->qp) {
		fprintf(stderr, "ibv_create_qp failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * RESET -> INIT -> RTR -> RTS, with no remote side: a UD QP is told
 * nothing about a peer. INIT takes the P_Key index (0), the port and the
 * QP's own Q_Key (ctx->qkey: a datagram that arrives with another Q_Key is
 * dropped); RTS takes the first PSN of its sends (0). 0 or -1, the failing
 * transition named.
 */
static int ud_to_rts(struct ud_ctx *ctx)
{
	struct ibv_qp_attr attr = {};
	int ret;

	/* TODO 2: RESET -> INIT: attr.qp_state, pkey_index 0, port_num
	 * ctx->ib_port and qkey ctx->qkey, one mask bit each (man
	 * ibv_modify_qp: the UD column; no access flags: UD has no RDMA).
	 * ret: what ibv_modify_qp() returns. */
	(void)ctx;
	(void)attr;
	ret = course_todo(2, "move the UD QP to INIT, with its Q_Key");
	/* END TODO 2 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(INIT) failed: %s\n",
			strerror(ret));
		return -1;
	}
	memset(&attr, 0, sizeof(attr));
	/* TODO 3: INIT -> RTR: for UD the state alone (no path, no remote
	 * QP number, no PSN to expect). ret: what ibv_modify_qp() returns. */
	ret = course_todo(3, "move the UD QP to RTR");
	/* END TODO 3 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(RTR) failed: %s\n",
			strerror(ret));
		return -1;
	}
	memset(&attr, 0, sizeof(attr));
	/* TODO 4: RTR -> RTS: the state and sq_psn 0 (no timeout, no
	 * retries: nothing is acknowledged). ret: what ibv_modify_qp()
	 * returns. */
	ret = course_todo(4, "move the UD QP to RTS");
	/* END TODO 4 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(RTS) failed: %s\n",
			strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Open the device, check that SIZE fits in one packet (the port's active
 * MTU), then a PD, a CQ, the UD QP in RTS and the buffers: @nslots receive
 * slots of UD_GRH + SIZE bytes, then @nsend send buffers of SIZE. The
 * QP has room for a SEND from every one of them (the server replies from
 * its receive slots). 0 or -1.
 */
static int ud_open(struct ud_ctx *ctx, const struct course_opts *o, int nslots,
		   int nsend)
{
	struct ibv_port_attr pattr;
	size_t len;

	ctx->context = course_open_device(o->device);
	if (!ctx->context)
		return -1;
	ctx->ib_port = o->ib_port;
	ctx->timeout = o->timeout;
	ctx->gid_index =
		course_pick_gid(ctx->context, o->ib_port, o->gid_index);
	if (ctx->gid_index < 0)
		return -1;
	if (ibv_query_gid(ctx->context, o->ib_port, ctx->gid_index,
			  &ctx->gid)) {
		fprintf(stderr, "ibv_query_gid failed: %s\n", strerror(errno));
		return -1;
	}
	if (ibv_query_port(ctx->context, o->ib_port, &pattr)) {
		fprintf(stderr, "ibv_query_port failed: %s\n", strerror(errno));
		return -1;
	}
	ctx->mtu = mtu_bytes(pattr.active_mtu);
	ctx->lid = pattr.lid;
	if (ctx->size > (size_t)ctx->mtu) {
		fprintf(stderr,
			"ud: a message of %zu bytes does not fit the path MTU (%d bytes): a UD message is one packet\n",
			ctx->size, ctx->mtu);
		return -1;
	}
	ctx->pd = ibv_alloc_pd(ctx->context);
	if (!ctx->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n", strerror(errno));
		return -1;
	}
	ctx->cq =
		ibv_create_cq(ctx->context, 2 * nslots + nsend, NULL, NULL, 0);
	if (!ctx->cq) {
		fprintf(stderr, "ibv_create_cq failed: %s\n", strerror(errno));
		return -1;
	}
	if (create_ud_qp(ctx, nslots + nsend, nslots) || ud_to_rts(ctx))
		return -1;
	ctx->slot = UD_GRH + ctx->size;
	ctx->nslots = nslots;
	len = nslots * ctx->slot + nsend * ctx->size;
	ctx->buf = course_alloc(len);
	if (!ctx->buf)
		return -1;
	ctx->mr = ibv_reg_mr(ctx->pd, ctx->buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* Undo ud_open() (and the AHs), in reverse order. 0 or -1. */
static int ud_close(struct ud_ctx *ctx)
{
	int k, ret = 0;

	for (k = ctx->npeers - 1; k >= 0; k--)
		if (ibv_destroy_ah(ctx->peers[k].ah)) {
			fprintf(stderr, "ibv_destroy_ah failed\n");
			ret = -1;
		}
	if (ctx->ah && ibv_destroy_ah(ctx->ah)) {
		fprintf(stderr, "ibv_destroy_ah failed\n");
		ret = -1;
	}
	if (ctx->mr && ibv_dereg_mr(ctx->mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	if (ctx->qp && ibv_destroy_qp(ctx->qp)) {
		fprintf(stderr, "ibv_destroy_qp failed\n");
		ret = -1;
	}
	if (ctx->cq && ibv_destroy_cq(ctx->cq)) {
		fprintf(stderr, "ibv_destroy_cq failed\n");
		ret = -1;
	}
	if (ctx->pd && ibv_dealloc_pd(ctx->pd)) {
		fprintf(stderr, "ibv_dealloc_pd failed\n");
		ret = -1;
	}
	if (ctx->context && ibv_close_device(ctx->context)) {
		fprintf(stderr, "ibv_close_device failed\n");
		ret = -1;
	}
	free(ctx->buf);
	return ret;
}

/* ---- addresses
 * ----------------------------------------------------------------- */

/*
 * The address handle for the server's GID (@theirs): a global route (RoCE
 * has no LIDs) from our GID index, on our port. 0 or -1.
 */
static int make_server_ah(struct ud_ctx *ctx, const struct qp_info *theirs)
{
	/* TODO 5: describe the path to the server (man ibv_create_ah:
	 * is_global, grh.dgid, grh.sgid_index, grh.hop_limit, port_num, dlid)
	 * and create the AH on ctx->pd into ctx->ah. */
	(void)theirs;
	ctx->ah = NULL;
	errno = course_todo(5, "create the address handle to the server");
	/* END TODO 5 */
	if (!ctx->ah) {
		fprintf(stderr, "ibv_create_ah failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* ---- messages
 * ------------------------------------------------------------------ */

/* Receive slot @i: where the device writes the GRH, then the message. */
static uint8_t *slot_buf(const struct ud_ctx *ctx, int i)
{
	return ctx->buf + (size_t)i * ctx->slot;
}

/* The message in slot @i: after the GRH. */
static uint8_t *slot_msg(const struct ud_ctx *ctx, int i)
{
	return slot_buf(ctx, i) + UD_GRH;
}

/*
 * Post receive slot @i (wr_id @i): room for the GRH and the largest
 * message. 0 or -1.
 */
static int post_slot(struct ud_ctx *ctx, int i)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)slot_buf(ctx, i),
		.lkey = ctx->mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = i,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad_wr;
	int ret;

	/* TODO 6: how long is a receive buffer? The device writes 40 bytes
	 * of GRH first (even on RoCE, man ibv_post_recv), then the message,
	 * up to ctx->size bytes: sge.length. */
	sge.length = 0;
	course_todo(6, "make the receive buffer long enough");
	/* END TODO 6 */
	ret = ibv_post_recv(ctx->qp, &wr, &bad_wr);
	if (ret) {
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * SEND @len bytes at @msg (registered), signaled, wr_id @wr_id, to QP
 * @qpn at the address @ah, with Q_Key ctx->qkey. 0 or -1.
 */
static int post_ud_send(struct ud_ctx *ctx, struct ibv_ah *ah, uint32_t qpn,
			const uint8_t *msg, uint32_t len, uint64_t wr_id)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)msg,
		.length = len,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad_wr;
	int ret;

	/* TODO 7: a UD SEND says where it goes: the address handle, the
	 * remote QP number and the remote Q_Key (man ibv_post_send:
	 * wr.wr.ud). ret: what ibv_post_send() returns. */
	(void)ah;
	(void)qpn;
	(void)wr;
	(void)bad_wr;
	ret = course_todo(7, "address the UD SEND (wr.wr.ud)");
	/* END TODO 7 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/* The reply's payload: the request's @len bytes at @p, reversed. */
static void reverse(uint8_t *p, size_t len)
{
	size_t i;
	uint8_t t;

	for (i = 0; i < len / 2; i++) {
		t = p[i];
		p[i] = p[len - 1 - i];
		p[len - 1 - i] = t;
	}
}

/* ---- the server
 * ---------------------------------------------------------------- */

/*
 * The peer at QP @qpn, GID @gid: the one already answered, or a new one,
 * with an address handle made from @attr (made once per peer, not per
 * reply: creating an AH is a call into the kernel). NULL on failure.
 */
static struct peer *peer_of(struct ud_ctx *ctx, uint32_t qpn,
			    struct ibv_ah_attr *attr)
{
	struct peer *p;
	int k;

	for (k = 0; k < ctx->npeers; k++) {
		p = &ctx->peers[k];
		if (p->qpn == qpn &&
		    !memcmp(&p->gid, &attr->grh.dgid, sizeof(p->gid)))
			return p;
	}
	if (ctx->npeers == MAX_CLIENTS) {
		fprintf(stderr, "more than %d peers: request from 0x%06x\n",
			MAX_CLIENTS, qpn);
		return NULL;
	}
	p = &ctx->peers[ctx->npeers];
	p->ah = ibv_create_ah(ctx->pd, attr);
	if (!p->ah) {
		fprintf(stderr, "ibv_create_ah failed: %s\n", strerror(errno));
		return NULL;
	}
	p->qpn = qpn;
	p->gid = attr->grh.dgid;
	p->served = 0;
	ctx->npeers++;
	return p;
}

/*
 * A request arrived in slot wc->wr_id: turn it into its reply in place
 * (the sequence number stays, the payload is reversed) and SEND it from
 * there, wr_id slot | SEND_FLAG, to the QP and the GID it came from; the
 * slot is posted again when that SEND completes. 0 or -1.
 */
static int serve(struct ud_ctx *ctx, const struct ibv_wc *wc)
{
	int i = wc->wr_id;
	uint8_t *msg = slot_msg(ctx, i);
	uint32_t len = wc->byte_len - UD_GRH;
	struct ibv_ah_attr attr;
	struct peer *p;
	int ret;

	if (wc->byte_len < UD_GRH + UD_SEQ) {
		fprintf(stderr,
			"a request of %u bytes (with the GRH): too short\n",
			wc->byte_len);
		return post_slot(ctx, i);
	}
	reverse(msg + UD_SEQ, len - UD_SEQ);
	/* TODO 8: who sent it? The completion names the sender's QP
	 * (wc->src_qp); the GRH at the start of the slot has its GID.
	 * ibv_init_ah_from_wc() reads both into attr (on RoCE v2 the
	 * "GRH" is an IPv4 or IPv6 header: let it decode it); peer_of()
	 * finds the peer, or makes its AH. Reply to that QP with
	 * post_ud_send() (ret: 0 or -1; p->served and ctx->served count
	 * the reply). */
	(void)attr;
	(void)p;
	(void)len;
	(void)peer_of;
	course_todo(8, "reply to the address the request came from");
	ret = -1;
	/* END TODO 8 */
	return ret;
}

/*
 * The clients' TCP connections: 'D' (answered with 'D') or a closed
 * connection ends a client. Returns how many are still active, or -1.
 */
static int check_clients(struct ud_ctx *ctx)
{
	struct pollfd fds[MAX_CLIENTS];
	int k, n, active = 0;
	char c;

	for (k = 0; k < ctx->nclients; k++)
		fds[k] = (struct pollfd){ .fd = ctx->fds[k], .events = POLLIN };
	if (poll(fds, ctx->nclients, 0) < 0) {
		fprintf(stderr, "poll failed: %s\n", strerror(errno));
		return -1;
	}
	for (k = 0; k < ctx->nclients; k++) {
		if (ctx->fds[k] < 0)
			continue;
		if (!fds[k].revents) {
			active++;
			continue;
		}
		n = recv(ctx->fds[k], &c, 1, MSG_PEEK);
		if (n <= 0) {
			printf("client %d: gone (it closed its TCP connection)\n",
			       k + 1);
		} else if (course_oob_sync(ctx->fds[k], 'D', ctx->timeout)) {
			return -1;
		}
		close(ctx->fds[k]);
		ctx->fds[k] = -1;
	}
	return active;
}

/*
 * Serve until every client is done: requests (serve()), replies sent (the
 * slot is posted again), the clients' TCP connections. --timeout seconds
 * without a completion fail:
 *   serve: nothing from any client within T s
 * 0 or -1.
 */
static int serve_all(struct ud_ctx *ctx)
{
	uint64_t idle = course_now_ns();
	struct ibv_wc wc[16];
	int n, k, active;

	for (;;) {
		n = ibv_poll_cq(ctx->cq, 16, wc);
		if (n < 0) {
			fprintf(stderr, "ibv_poll_cq failed\n");
			return -1;
		}
		for (k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS) {
				/* (an error's opcode is undefined: wr_id) */
				course_report_wc(wc[k].wr_id & SEND_FLAG
							 ? "reply"
							 : "request",
						 &wc[k]);
				return -1;
			}
			if (wc[k].wr_id & SEND_FLAG) {
				if (post_slot(ctx, wc[k].wr_id & ~SEND_FLAG))
					return -1;
			} else if (serve(ctx, &wc[k])) {
				return -1;
			}
		}
		active = check_clients(ctx);
		if (active <= 0)
			return active;
		if (n)
			idle = course_now_ns();
		else if (course_now_ns() - idle >
			 ctx->timeout * 1000000000ull) {
			fprintf(stderr,
				"serve: nothing from any client within %d s\n",
				ctx->timeout);
			return -1;
		}
		if (!n) /* idle for 1 ms: nap between polls (course.h) */
			course_poll_pause(idle, course_now_ns());
	}
}

static int run_server(struct ud_ctx *ctx, const struct course_opts *o, int want)
{
	struct qp_info mine = { .length = ctx->size }, theirs;
	int lfd, k, i, ret = -1;

	for (k = 0; k < MAX_CLIENTS; k++)
		ctx->fds[k] = -1;
	if (ud_open(ctx, o, SRV_SLOTS, 0))
		return -1;
	for (i = 0; i < SRV_SLOTS; i++)
		if (post_slot(ctx, i))
			return -1;
	mine.qpn = ctx->qp->qp_num;
	mine.gid = ctx->gid;
	mine.lid = ctx->lid;
	printf("server: qpn 0x%06x qkey 0x%08x, %d receives of 40 + %zu bytes (path MTU %d)\n",
	       ctx->qp->qp_num, ctx->qkey, SRV_SLOTS, ctx->size, ctx->mtu);
	lfd = course_oob_listen(o->port);
	if (lfd < 0)
		return -1;
	for (k = 0; k < want; k++) {
		ctx->fds[k] = course_oob_accept_on(lfd, o->timeout);
		if (ctx->fds[k] < 0)
			goto out_close_listener;
		ctx->nclients = k + 1;
		if (course_oob_exchange(ctx->fds[k], &mine, &theirs,
					o->timeout))
			goto out_close_listener;
	}
	for (k = 0; k < want; k++)
		if (course_oob_sync(ctx->fds[k], 'G', o->timeout))
			goto out_close_listener;
	if (serve_all(ctx))
		goto out_close_listener;
	for (k = 0; k < ctx->npeers; k++)
		printf("client 0x%06x: %ld requests\n", ctx->peers[k].qpn,
		       ctx->peers[k].served);
	printf("served %ld requests from %d clients\n", ctx->served,
	       ctx->npeers);
	ret = 0;

out_close_listener:
	close(lfd);
	for (k = 0; k < ctx->nclients; k++)
		if (ctx->fds[k] >= 0)
			close(ctx->fds[k]);
	return ret;
}

/* ---- the client
 * ---------------------------------------------------------------- */

/*
 * Wait for request @i's reply, for --timeout seconds: completions of our
 * SEND (*sent) and receives. A reply with an older sequence number came
 * after its own timeout: counted in *late and dropped. Returns 1 (the
 * reply is in slot 0), 0 (none in time: lost) or -1 (an error).
 */
static int wait_reply(struct ud_ctx *ctx, uint32_t i, int *sent, long *late)
{
	uint64_t start = course_now_ns();
	uint64_t deadline = start + ctx->timeout * 1000000000ull;
	struct ibv_wc wc;
	uint32_t seq;
	int n;

	while (course_now_ns() < deadline || !*sent) {
		n = ibv_poll_cq(ctx->cq, 1, &wc);
		if (n < 0) {
			fprintf(stderr, "ibv_poll_cq failed\n");
			return -1;
		}
		if (!n) {
			if (course_now_ns() >= deadline + 10000000000ull) {
				fprintf(stderr,
					"request %u: its SEND never completed\n",
					i);
				return -1;
			}
			course_poll_pause(start, course_now_ns());
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			course_report_wc(wc.wr_id & SEND_FLAG ? "request"
							      : "reply",
					 &wc);
			return -1;
		}
		if (wc.wr_id & SEND_FLAG) {
			*sent = 1;
			continue;
		}
		if (wc.byte_len != UD_GRH + ctx->size) {
			fprintf(stderr,
				"request %u: a reply of %u bytes (with the GRH), expected 40 + %zu\n",
				i, wc.byte_len, ctx->size);
			return -1;
		}
		memcpy(&seq, slot_msg(ctx, 0), UD_SEQ);
		if (ntohl(seq) == i)
			return 1;
		(*late)++;
		if (post_slot(ctx, 0))
			return -1;
	}
	return 0;
}

/*
 * The client: -n requests of SIZE bytes, one at a time, each waited for
 * --timeout seconds; request i is its sequence number and the course's
 * pattern shifted by our QP number and i. Every reply must be the request
 * with its payload reversed. Prints
 *   client: N requests of S bytes, R replies checked, L lost
 * and, when L > 0, on stderr
 *   lost L of N requests: no reply within T s
 * (exit 1). A wrong reply ends it at once:
 *   request I: the reply is not our request reversed (byte K: got 0xGG,
 * expected 0xEE)
 */
static int run_client(struct ud_ctx *ctx, const struct course_opts *o)
{
	struct qp_info mine = { .length = ctx->size }, theirs;
	uint8_t *req, *want;
	long replies = 0, lost = 0, late = 0;
	int fd, sent, got, ret = -1;
	uint32_t i, seq;
	size_t k;

	if (ud_open(ctx, o, 1, 1))
		return -1;
	req = ctx->buf + ctx->slot;
	want = malloc(ctx->size);
	if (!want) {
		fprintf(stderr, "cannot allocate %zu bytes\n", ctx->size);
		return -1;
	}
	fd = course_oob_connect(o->host, o->port, o->timeout);
	if (fd < 0)
		goto out_free;
	if (course_oob_exchange(fd, &mine, &theirs, o->timeout) ||
	    make_server_ah(ctx, &theirs))
		goto out_close_fd;
	printf("client: qpn 0x%06x, server qpn 0x%06x, qkey 0x%08x\n",
	       ctx->qp->qp_num, theirs.qpn, ctx->qkey);
	if (post_slot(ctx, 0) || course_oob_sync(fd, 'G', o->timeout))
		goto out_close_fd;
	for (i = 0; i < o->iters; i++) {
		seq = htonl(i);
		memcpy(req, &seq, UD_SEQ);
		course_fill_pattern(req + UD_SEQ, ctx->size - UD_SEQ,
				    ctx->qp->qp_num + 7 * i);
		memcpy(want, req, ctx->size);
		reverse(want + UD_SEQ, ctx->size - UD_SEQ);
		if (post_ud_send(ctx, ctx->ah, theirs.qpn, req, ctx->size,
				 SEND_FLAG))
			goto out_close_fd;
		sent = 0;
		got = wait_reply(ctx, i, &sent, &late);
		if (got < 0)
			goto out_close_fd;
		if (!got) {
			fprintf(stderr, "request %u: no reply within %d s\n", i,
				o->timeout);
			lost++;
			continue;
		}
		k = course_first_diff(slot_msg(ctx, 0), want, ctx->size);
		if (k < ctx->size) {
			fprintf(stderr,
				"request %u: the reply is not our request reversed (byte %zu: got 0x%02x, expected 0x%02x)\n",
				i, k, slot_msg(ctx, 0)[k], want[k]);
			goto out_close_fd;
		}
		replies++;
		if (post_slot(ctx, 0))
			goto out_close_fd;
	}
	if (course_oob_sync(fd, 'D', o->timeout))
		goto out_close_fd;
	printf("client: %ld requests of %zu bytes, %ld replies checked, %ld lost\n",
	       o->iters, ctx->size, replies, lost);
	if (late)
		printf("client: %ld late replies dropped\n", late);
	if (lost)
		fprintf(stderr,
			"lost %ld of %ld requests: no reply within %d s\n",
			lost, o->iters, o->timeout);
	else
		ret = 0;

out_close_fd:
	close(fd);
out_free:
	free(want);
	return ret;
}

/* ---- main
 * ---------------------------------------------------------------------
 */

static long parse_num(const char *flag, const char *s, long min, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || !*s || *end || v < min || v > max) {
		fprintf(stderr,
			"ud: %s expects a number from %ld to %ld, got '%s'\n",
			flag, min, max, s);
		course_usage_exit("ud", usage);
	}
	return v;
}

int main(int argc, char **argv)
{
	const char *clients, *qkey;
	struct ud_ctx ctx = { .qkey = DEFAULT_QKEY };
	struct course_opts o;
	int want = 1, ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	o.size = 256;
	o.iters = 100;
	clients = course_take_opt(&argc, argv, "--clients", 1, usage);
	if (!clients)
		clients = course_take_opt(&argc, argv, "-c", 1, usage);
	qkey = course_take_opt(&argc, argv, "--qkey", 1, usage);
	if (!qkey)
		qkey = course_take_opt(&argc, argv, "-q", 1, usage);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_ITERS | OPT_SIZE | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	if (o.host && clients) {
		fprintf(stderr, "ud: -c is the server's\n");
		course_usage_exit("ud", usage);
	}
	if (clients)
		want = parse_num("-c", clients, 1, MAX_CLIENTS);
	if (qkey)
		ctx.qkey = parse_num("-q", qkey, 0, 0x7fffffff);
	if (o.size < UD_SEQ || o.size > 65536) {
		fprintf(stderr,
			"ud: -s is 4 bytes (the sequence number) to 64 KiB\n");
		course_usage_exit("ud", usage);
	}
	ctx.size = o.size;
	if (o.host)
		ret = run_client(&ctx, &o) ? 1 : 0;
	else
		ret = run_server(&ctx, &o, want) ? 1 : 0;
	if (ud_close(&ctx))
		ret = 1;
	return ret;
}
