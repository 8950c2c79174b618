/* SPDX-License-Identifier: MIT */
/*
 * rc.h - one RC connection as a library: lesson 05 writes it (rc.c, in
 * skeletons/05-send-recv/), the later RC lessons connect with it.
 *
 * rc.c opens the device, creates a PD, a CQ and an RC QP and moves the QP
 * to INIT; swaps QP addresses over TCP, moves it to RTR and RTS, and meets
 * the peer at the 'R' barrier; waits for completions; tears it all down.
 * Lessons 06, 07 and 09-12 link it (their lesson.mk: $(RC)) and keep only
 * their own subject: the memory region and its access, the work request,
 * the memcmp().
 *
 * Like pyverbs' RCResources: what a lesson varies is in struct rc_params;
 * everything else is lesson 05's (course.h). Lesson 05's rc_check reads
 * the QPs back to see that rc.c honours both.
 */
#ifndef RDMA_COURSE_RC_H
#define RDMA_COURSE_RC_H

#include "course.h"

/*
 * What a lesson chooses about its QP:
 *   access              qp_access_flags (INIT): what the peer may do
 *   max_rd_atomic       (RTS) READs this QP may have outstanding
 *   max_dest_rd_atomic  (RTR) READs from the peer it serves at once
 *   max_send_wr         send queue depth (the CQ holds both queues)
 *   max_recv_wr         receive queue depth
 * and, left 0, what every lesson has (lessons 09-11 vary them):
 *   cq_size             CQ entries; 0: max_send_wr + max_recv_wr
 *   rnr_retry           (RTS) resends after an RNR NAK; 0:
 *                       COURSE_QP_RNR_RETRY, RC_RNR_RETRY(n): n (0-7)
 *   comp_channel        1: create a completion channel (rc->channel) and
 *                       the CQ on it, for ibv_req_notify_cq()
 *   max_inline_data     bytes a SEND may carry inline (IBV_SEND_INLINE);
 *                       0 (the default): none
 */
#define RC_RNR_RETRY(n) (0x100 | (n))

struct rc_params {
	unsigned int access;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t cq_size;
	int rnr_retry;
	int comp_channel;
	uint32_t max_inline_data;
};

/* One RC connection: every verbs object and the TCP side channel. */
struct rc_ctx {
	struct ibv_context *context;
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel; /* NULL unless params.comp_channel */
	struct ibv_cq *cq;		  /* for both queues */
	struct ibv_qp *qp;
	struct rc_params params;
	int ib_port;
	int gid_index;
	int timeout; /* seconds any one wait may take */
	int oob_fd;  /* the TCP connection to the peer, -1 before */
};

/*
 * Open the device of @o, pick its GID, create a PD, a CQ and an RC QP with
 * @p's queue depths, and move the QP to INIT with @p->access. Returns NULL
 * (message printed) on failure. Undone by rc_close().
 */
struct rc_ctx *rc_open(const struct course_opts *o, const struct rc_params *p);

/*
 * Connect to the peer: fill the QP part of @mine (LID, QPN, a random PSN,
 * GID; the buffer fields are the caller's), connect to HOST (o->host) or
 * accept a client (printing "listening on port N"), exchange @mine for
 * @theirs, print both ("local: ..." / "remote: ..."), move the QP to RTR and
 * RTS, wait for the peer at the 'R' barrier and print "connected".
 * Returns 0, or -1 (message printed).
 */
int rc_connect(struct rc_ctx *rc, const struct course_opts *o,
	       struct qp_info *mine, struct qp_info *theirs);

/*
 * Connect two QPs of one process to each other (lessons 03 and 09 do this
 * with one device and port): fill both QPs' addresses, move each to RTR
 * towards the other and to RTS, as rc_connect() does, but without TCP and
 * without printing. Returns 0, or -1 (message printed).
 */
int rc_connect_pair(struct rc_ctx *a, struct rc_ctx *b);

/*
 * rc_connect() on a TCP connection the caller made (a server of several
 * clients accepts each with course_oob_accept_on()): from the exchange on,
 * the same steps. @fd belongs to @rc from then on (rc_close() closes it).
 */
int rc_connect_fd(struct rc_ctx *rc, int fd, struct qp_info *mine,
		  struct qp_info *theirs);

/*
 * Wait for one successful completion (course_wait_wc() with the peer-gone
 * report). Returns 0 with *wc filled, or -1 (message printed).
 */
int rc_wait_wc(struct rc_ctx *rc, struct ibv_wc *wc, const char *what);

/*
 * Destroy what rc_open() created (the completion channel too) and close
 * the TCP connection. 0 or -1.
 */
int rc_close(struct rc_ctx *rc);

#endif /* RDMA_COURSE_RC_H */
