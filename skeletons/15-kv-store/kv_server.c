// SPDX-License-Identifier: MIT
/*
 * kv_server.c - lesson 15: the server of a key-value store whose GETs are
 * one-sided.
 *
 *   kv_server [OPTIONS] [-c CLIENTS] [--buckets N]
 *
 * The table (kv.h: --buckets buckets of KV_SLOTS slots of 128 bytes) lives
 * in one buffer, registered for remote READ in each client's protection
 * domain and advertised with the QP's address: a client READs a key's
 * bucket itself, the server's CPU takes no part in a GET. PUT, DELETE (and
 * a GET by request) come as SENDs of struct kv_msg; the server applies
 * them to the table in the order that lets a reader notice a write in
 * progress (write_slot) and answers each with a SEND on the connection it
 * came from. It serves -c clients: it accepts them all, lets them go
 * ('G'), sleeps on the completion channels of their CQs, and ends when
 * every client has said BYE.
 *
 * The connections are lesson 05's work, your 05-send-recv/rc.c
 * (rc_open(), rc_connect_fd(), rc_close(); see rc.h).
 */
#include "rc.h"
#include "kv.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-t SECS] "
	"[-c CLIENTS] [--buckets N]";

#define MAX_CLIENTS 16
#define RECVS	    4 /* receives posted per client (and as many reply buffers) */

enum {
	WRID_SEND = 0,
	WRID_RECV = 1, /* + the receive buffer's index */
};

/* One client: its connection, and the table as its PD knows it. */
struct kv_conn {
	struct rc_ctx *rc;	 /* device, PD, CQ, QP, TCP (rc.h) */
	struct ibv_mr *table_mr; /* the table, registered in rc->pd */
	struct ibv_mr *msg_mr;	 /* msgs[] */
	struct kv_msg *msgs;	 /* RECVS receive buffers, RECVS replies */
	uint32_t qpn;		 /* the client's QP number */
	int sending;		 /* replies posted, not completed */
	int done;		 /* it said BYE */
};

struct kv_server {
	struct kv_conn conn[MAX_CLIENTS];
	int nconn;
	struct kv_slot *table;
	size_t size;
	uint32_t nbuckets;
	int timeout;
	long requests, puts, dels, gets, bad;
};

/* The QPs: the clients READ the table through them; requests and replies
 * are SENDs. One READ at a time from each client. */
static const struct rc_params params = {
	.access = IBV_ACCESS_REMOTE_READ,
	.max_rd_atomic = 1,
	.max_dest_rd_atomic = 1,
	.max_send_wr = 2 * RECVS,
	.max_recv_wr = RECVS,
	.cq_size = 3 * RECVS,
	.comp_channel = 1,
};

/* Post one signaled work request of @len bytes at @buf (lkey @lkey):
 * a SEND, or a READ/WRITE of @raddr/@rkey. ibv_post_send()'s result. */
static int post_wr(struct rc_ctx *rc, enum ibv_wr_opcode opcode, uint64_t wr_id,
		   void *buf, uint32_t len, uint32_t lkey, uint64_t raddr,
		   uint32_t rkey)
{
	struct ibv_sge sge = {
		.lkey = lkey,
		.addr = (uintptr_t)buf,
		.length = len,
	};
	struct ibv_send_wr wr = {
		.opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED,
		.wr_id = wr_id,
		.num_sge = 1,
		.sg_list = &sge,
		.wr.rdma.remote_addr = raddr,
		.wr.rdma.rkey = rkey,
	};
	struct ibv_send_wr *bad_wr;

	return ibv_post_send(rc->qp, &wr, &bad_wr);
}

/* Post receive buffer @i of @conn. 0 or -1 (message printed). */
static int post_request_recv(struct kv_conn *conn, int i)
{
	struct ibv_sge sge = {
		.lkey = conn->msg_mr->lkey,
		.addr = (uintptr_t)&conn->msgs[i],
		.length = KV_MSG_SIZE,
	};
	struct ibv_recv_wr wr = {
		.wr_id = WRID_RECV + i,
		.num_sge = 1,
		.sg_list = &sge,
	};
	struct ibv_recv_wr *bad_wr;
	int ret;

	ret = ibv_post_recv(conn->rc->qp, &wr, &bad_wr);
	if (ret) {
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Open client @k's connection (not connected yet): its QP, the table
 * registered in its PD, its message buffers with every receive posted.
 * 0 or -1 (message printed); close_conn() undoes what was done.
 */
static int open_conn(struct kv_server *srv, const struct course_opts *o, int k)
{
	struct kv_conn *conn = &srv->conn[k];
	int i;

	conn->rc = rc_open(o, &params);
	if (!conn->rc)
		return -1;

	/* TODO 3: register the table (srv->table, srv->size bytes) in this
	 * client's PD, conn->rc->pd, so that its NIC may READ it and do
	 * nothing else (man ibv_reg_mr). */
	conn->table_mr = NULL;
	errno = course_todo(3, "register the table in this client's PD");
	/* END TODO 3 */
	if (!conn->table_mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	conn->msgs = course_alloc(2 * RECVS * sizeof(*conn->msgs));
	if (!conn->msgs)
		return -1;
	conn->msg_mr = ibv_reg_mr(conn->rc->pd, conn->msgs,
				  2 * RECVS * sizeof(*conn->msgs),
				  IBV_ACCESS_LOCAL_WRITE);
	if (!conn->msg_mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		return -1;
	}
	for (i = 0; i < RECVS; i++)
		if (post_request_recv(conn, i))
			return -1;
	return 0;
}

/* Undo open_conn() (and the connection). 0 or -1. */
static int close_conn(struct kv_conn *conn)
{
	int ret = 0;

	if (conn->msg_mr && ibv_dereg_mr(conn->msg_mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	if (conn->table_mr && ibv_dereg_mr(conn->table_mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	free(conn->msgs);
	if (conn->rc && rc_close(conn->rc))
		ret = -1;
	return ret;
}

/*
 * Accept client @k on the listening socket @lfd and connect its QP,
 * advertising the table in @mine. 0 or -1 (message printed).
 */
static int accept_conn(struct kv_server *srv, int lfd, int k)
{
	struct kv_conn *conn = &srv->conn[k];
	struct qp_info mine = {}, theirs;
	int fd;

	/* TODO 4: advertise the table to this client: its address, the
	 * rkey under which this client's NIC may READ it (the registration
	 * in this client's PD), its length in bytes. */
	(void)srv;
	(void)conn;
	course_todo(4, "advertise the table to the client");
	/* END TODO 4 */
	fd = course_oob_accept_on(lfd, srv->timeout);
	if (fd < 0)
		return -1;
	if (rc_connect_fd(conn->rc, fd, &mine, &theirs))
		return -1;
	conn->qpn = theirs.qpn;
	return 0;
}

/*
 * Write key @key (@klen bytes, 0: free the slot) and value @val (@vlen
 * bytes) into the table's slot @s, so that a client READing it at any
 * moment either finds a complete write - the old one or the new one - or
 * can tell that it caught the slot in the middle (kv_slot_consistent()).
 * The new version is the old one + 2.
 */
static void write_slot(struct kv_slot *s, const uint8_t *key, uint8_t klen,
		       const uint8_t *val, uint8_t vlen)
{
	/* TODO 5: prepare the new slot in a local struct kv_slot (version,
	 * lengths, key, value, and its CRC: kv_slot_crc()); then, in this
	 * order: the slot's version odd (old + 1); a release fence
	 * (__atomic_thread_fence); the new crc, lengths, key and value;
	 * another fence; the new, even version. Store the version with
	 * __atomic_store_n() so that it is written in one piece. */
	(void)s;
	(void)key;
	(void)klen;
	(void)val;
	(void)vlen;
	course_todo(5, "write the slot: version odd, the bytes, version even");
	/* END TODO 5 */
}

/* Is @req one the server can read? */
static int request_ok(const struct kv_msg *req, uint32_t len)
{
	if (len != KV_MSG_SIZE || req->key_len < 1 || req->key_len > KV_KEY_MAX)
		return req->op == KV_BYE && len == KV_MSG_SIZE;
	switch (req->op) {
	case KV_PUT:
		return req->val_len >= 1 && req->val_len <= KV_VAL_MAX;
	case KV_GET:
	case KV_DEL:
	case KV_BYE:
		return 1;
	}
	return 0;
}

/*
 * Apply request @req (@len bytes arrived) to the table; fill the reply's
 * status, slot, version (and a GET's value) in @rep.
 */
static void apply(struct kv_server *srv, struct kv_conn *conn,
		  const struct kv_msg *req, uint32_t len, struct kv_msg *rep)
{
	struct kv_slot *bucket;
	uint32_t b;
	int i;

	rep->status = KV_OK;
	if (!request_ok(req, len)) {
		fprintf(stderr,
			"client 0x%06x: a request the server cannot "
			"read (%u bytes, op 0x%02x, key_len %u, val_len %u)\n",
			conn->qpn, len, req->op, req->key_len, req->val_len);
		srv->bad++;
		rep->status = KV_BAD;
		return;
	}
	if (req->op == KV_BYE) {
		conn->done = 1;
		return;
	}
	b = kv_bucket(req->key, req->key_len, srv->nbuckets);
	bucket = srv->table + (size_t)b * KV_SLOTS;
	i = kv_bucket_find(bucket, req->key, req->key_len);
	switch (req->op) {
	case KV_GET:
		srv->gets++;
		if (i < 0)
			break;
		rep->val_len = bucket[i].val_len;
		memcpy(rep->value, bucket[i].value, bucket[i].val_len);
		break;
	case KV_PUT:
		srv->puts++;
		for (int j = 0; i < 0 && j < KV_SLOTS; j++)
			if (!bucket[j].key_len)
				i = j;
		if (i < 0) {
			rep->status = KV_FULL;
			return;
		}
		write_slot(&bucket[i], req->key, req->key_len, req->value,
			   req->val_len);
		break;
	case KV_DEL:
		srv->dels++;
		if (i >= 0)
			write_slot(&bucket[i], (const uint8_t *)"", 0,
				   (const uint8_t *)"", 0);
		break;
	}
	if (i < 0) {
		rep->status = KV_ABSENT;
		return;
	}
	rep->slot = b * KV_SLOTS + i;
	rep->version = bucket[i].version;
}

/*
 * Answer request @req of client @k with @rep (its status, slot, version
 * and a GET's value filled by apply()): a SEND on the connection the
 * request came from. 0 or -1 (message printed).
 */
static int answer(struct kv_server *srv, int k, const struct kv_msg *req,
		  struct kv_msg *rep)
{
	struct kv_conn *conn = &srv->conn[k];
	int ret;

	/* TODO 6: the reply carries the request's op, seq and client, so
	 * that the client can tell it is the answer to that request (the
	 * rest of it, apply() filled). */
	(void)req;
	(void)rep;
	course_todo(6, "the reply's op, seq and client");
	return -1;
	/* END TODO 6 */
	ret = post_wr(conn->rc, IBV_WR_SEND, WRID_SEND, rep, KV_MSG_SIZE,
		      conn->msg_mr->lkey, 0, 0);
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	conn->sending++;
	return 0;
}

/* One completion of client @k: a reply sent, or a request to serve. */
static int handle_wc(struct kv_server *srv, int k, const struct ibv_wc *wc)
{
	struct kv_conn *conn = &srv->conn[k];
	struct kv_msg *req, *rep;
	int i;

	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "client 0x%06x: ", conn->qpn);
		course_report_wc(wc->wr_id == WRID_SEND ? "reply" : "request",
				 wc);
		return -1;
	}
	if (wc->wr_id == WRID_SEND) {
		conn->sending--;
		return 0;
	}
	i = wc->wr_id - WRID_RECV;
	req = &conn->msgs[i];
	rep = &conn->msgs[RECVS + i];
	memset(rep, 0, sizeof(*rep));
	srv->requests++;
	apply(srv, conn, req, wc->byte_len, rep);
	/* The client may send its next request as soon as it has the
	 * reply: the receive is posted again first. req stays intact until
	 * this buffer receives again, which is after the reply. */
	if (post_request_recv(conn, i))
		return -1;
	return answer(srv, k, req, rep);
}

/* Take every completion @k's CQ holds now. 0 or -1. */
static int drain(struct kv_server *srv, int k)
{
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(srv->conn[k].rc->cq, 1, &wc)) > 0)
		if (handle_wc(srv, k, &wc))
			return -1;
	if (n < 0) {
		fprintf(stderr, "ibv_poll_cq failed\n");
		return -1;
	}
	return 0;
}

/*
 * Client @k's TCP connection is readable: it must have ended (the client
 * exits after its BYE), and its BYE must be in. 0, or -1 (message printed)
 * when the client left without BYE or sent bytes on TCP.
 */
static int left_early(struct kv_server *srv, int k)
{
	struct kv_conn *conn = &srv->conn[k];
	ssize_t n;
	char c;

	n = recv(conn->rc->oob_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) {
		fprintf(stderr,
			"client 0x%06x sent bytes on its TCP "
			"connection after 'G'\n",
			conn->qpn);
		return -1;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (drain(srv, k))
		return -1;
	if (!conn->done) {
		fprintf(stderr,
			"client 0x%06x closed its connection without "
			"BYE\n",
			conn->qpn);
		return -1;
	}
	return 0;
}

/*
 * Serve until every client has said BYE and its replies have gone out.
 * Sleeps in poll() on the clients' completion channels and TCP
 * connections (lesson 10): a client that leaves without BYE ends the
 * server at once, one that says nothing for --timeout seconds too.
 */
static int serve(struct kv_server *srv)
{
	struct pollfd pfd[2 * MAX_CLIENTS];
	struct ibv_cq *cq;
	void *cq_ctx;
	int k, n, left, ret;

	for (k = 0; k < srv->nconn; k++) {
		ret = ibv_req_notify_cq(srv->conn[k].rc->cq, 0);
		if (ret) {
			fprintf(stderr, "ibv_req_notify_cq failed: %s\n",
				strerror(ret));
			return -1;
		}
	}
	for (;;) {
		/* Armed first, then drained: nothing is missed. */
		for (left = 0, k = 0; k < srv->nconn; k++) {
			if (drain(srv, k))
				return -1;
			left += !srv->conn[k].done || srv->conn[k].sending;
		}
		if (!left)
			return 0;
		for (n = 0, k = 0; k < srv->nconn; k++) {
			pfd[n++] = (struct pollfd){
				.fd = srv->conn[k].rc->channel->fd,
				.events = POLLIN,
			};
			pfd[n++] = (struct pollfd){
				.fd = srv->conn[k].done
					      ? -1
					      : srv->conn[k].rc->oob_fd,
				.events = POLLIN,
			};
		}
		ret = poll(pfd, n, srv->timeout * 1000);
		if (ret < 0) {
			fprintf(stderr, "poll failed: %s\n", strerror(errno));
			return -1;
		}
		if (ret == 0) {
			fprintf(stderr,
				"no request from any client within "
				"%d s\n",
				srv->timeout);
			return -1;
		}
		for (k = 0; k < srv->nconn; k++) {
			struct kv_conn *conn = &srv->conn[k];

			if (pfd[2 * k].revents & POLLIN) {
				if (ibv_get_cq_event(conn->rc->channel, &cq,
						     &cq_ctx)) {
					fprintf(stderr,
						"ibv_get_cq_event failed\n");
					return -1;
				}
				ibv_ack_cq_events(cq, 1);
				ret = ibv_req_notify_cq(cq, 0);
				if (ret) {
					fprintf(stderr,
						"ibv_req_notify_cq failed: %s\n",
						strerror(ret));
					return -1;
				}
			}
			if (pfd[2 * k + 1].revents && left_early(srv, k))
				return -1;
		}
	}
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
	char *end;

	errno = 0;
	*v = strtol(s, &end, 0);
	return errno || !*s || *end || *v < lo || *v > hi;
}

int main(int argc, char **argv)
{
	const char *clients, *buckets;
	struct kv_server srv = { .nconn = 1, .nbuckets = 256 };
	struct course_opts o;
	int ret = 1, lfd = -1, k;
	long v;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	clients = course_take_opt(&argc, argv, "--clients", 1, usage);
	if (!clients)
		clients = course_take_opt(&argc, argv, "-c", 1, usage);
	buckets = course_take_opt(&argc, argv, "--buckets", 1, usage);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_TIMEOUT,
			  usage, &o);
	if (clients) {
		if (parse_long(clients, 1, MAX_CLIENTS, &v)) {
			fprintf(stderr, "kv_server: -c must be 1 to %d\n",
				MAX_CLIENTS);
			course_usage_exit("kv_server", usage);
		}
		srv.nconn = v;
	}
	if (buckets) {
		if (parse_long(buckets, 1, 1 << 20, &v)) {
			fprintf(stderr,
				"kv_server: --buckets must be 1 to 1048576\n");
			course_usage_exit("kv_server", usage);
		}
		srv.nbuckets = v;
	}
	srv.timeout = o.timeout;
	srv.size = (size_t)srv.nbuckets * KV_BUCKET_SIZE;
	srv.table = course_alloc(srv.size);
	if (!srv.table)
		return 1;

	/* Everything is ready before the readiness line. */
	for (k = 0; k < srv.nconn; k++)
		if (open_conn(&srv, &o, k))
			goto out_close_conns;
	printf("table: %u buckets x %d slots x %d bytes = %zu bytes at "
	       "0x%016llx\n",
	       srv.nbuckets, KV_SLOTS, KV_SLOT_SIZE, srv.size,
	       (unsigned long long)(uintptr_t)srv.table);
	lfd = course_oob_listen(o.port);
	if (lfd < 0)
		goto out_close_conns;
	for (k = 0; k < srv.nconn; k++)
		if (accept_conn(&srv, lfd, k))
			goto out_close_listener;
	/* Everyone is connected: let them go. */
	for (k = 0; k < srv.nconn; k++)
		if (course_oob_sync(srv.conn[k].rc->oob_fd, 'G', o.timeout))
			goto out_close_listener;
	if (serve(&srv))
		goto out_close_listener;
	printf("served: %ld requests (%ld puts, %ld deletes, %ld gets, %ld "
	       "bad) from %d clients\n",
	       srv.requests, srv.puts, srv.dels, srv.gets, srv.bad, srv.nconn);
	ret = 0;

out_close_listener:
	close(lfd);
out_close_conns:
	for (k = 0; k < srv.nconn; k++)
		if (close_conn(&srv.conn[k]))
			ret = 1;
	free(srv.table);
	return ret;
}
