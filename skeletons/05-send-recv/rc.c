// SPDX-License-Identifier: MIT
/*
 * rc.c - lesson 05: one RC connection, as a library (lessons/common/rc.h).
 *
 * pingpong.c connects with it, and so does every later lesson that is
 * about something else than the connection (06, 07, 09-12: their lesson.mk
 * links this file, the one in your tree): from lesson 06 on your programs
 * connect with the code you write here. rc_open() creates the verbs
 * objects and moves the QP to INIT (TODO 1), fill_qp_info() describes the
 * QP for the peer (TODO 2), rtr_rts() points it at the peer's QP and makes
 * it ready to send (TODOs 3 and 4). Everything else is written.
 *
 * What a lesson chooses about its QP is in struct rc_params (rc.h): the
 * TODOs use those fields where the comment says so, lesson 05's values
 * (course.h) everywhere else.
 */
#include "rc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rc_ctx *rc_open(const struct course_opts *o, const struct rc_params *p)
{
	struct ibv_qp_init_attr init_attr = {
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = {
			.max_send_wr = p->max_send_wr,
			.max_recv_wr = p->max_recv_wr,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = p->max_inline_data,
		},
	};
	struct rc_ctx *rc;
	int ret;

	rc = calloc(1, sizeof(*rc));
	if (!rc) {
		fprintf(stderr, "calloc failed: %s\n", strerror(errno));
		return NULL;
	}
	rc->params = *p;
	rc->ib_port = o->ib_port;
	rc->timeout = o->timeout;
	rc->oob_fd = -1;

	rc->context = course_open_device(o->device);
	if (!rc->context)
		goto out_free_rc;

	rc->gid_index = course_pick_gid(rc->context, o->ib_port, o->gid_index);
	if (rc->gid_index < 0)
		goto out_close_device;

	rc->pd = ibv_alloc_pd(rc->context);
	if (!rc->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n", strerror(errno));
		goto out_close_device;
	}

	if (p->comp_channel) {
		rc->channel = ibv_create_comp_channel(rc->context);
		if (!rc->channel) {
			fprintf(stderr, "ibv_create_comp_channel failed: %s\n",
				strerror(errno));
			goto out_dealloc_pd;
		}
	}

	rc->cq = ibv_create_cq(rc->context,
			       p->cq_size ? p->cq_size
					  : p->max_send_wr + p->max_recv_wr,
			       NULL, rc->channel, 0);
	if (!rc->cq) {
		fprintf(stderr, "ibv_create_cq failed: %s\n", strerror(errno));
		goto out_destroy_channel;
	}

	init_attr.send_cq = rc->cq;
	init_attr.recv_cq = rc->cq;
	rc->qp = ibv_create_qp(rc->pd, &init_attr);
	if (!rc->qp) {
		fprintf(stderr, "ibv_create_qp failed: %s\n", strerror(errno));
		goto out_destroy_cq;
	}

	/* TODO 1: move the QP from RESET to INIT, as in lesson 03: our port
	 * (rc->ib_port), P_Key index 0, and p->access as its access flags
	 * (what the peer may do to our memory through it); set ret to what
	 * ibv_modify_qp() returns. man ibv_modify_qp */
	ret = course_todo(1, "in lesson 05's rc.c: move the QP to INIT");
	/* END TODO 1 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(INIT) failed: %s\n",
			strerror(ret));
		goto out_destroy_qp;
	}
	return rc;

out_destroy_qp:
	ibv_destroy_qp(rc->qp);
out_destroy_cq:
	ibv_destroy_cq(rc->cq);
out_destroy_channel:
	if (rc->channel)
		ibv_destroy_comp_channel(rc->channel);
out_dealloc_pd:
	ibv_dealloc_pd(rc->pd);
out_close_device:
	ibv_close_device(rc->context);
out_free_rc:
	free(rc);
	return NULL;
}

/*
 * Describe our QP for the peer: the port's LID (0 on RoCE), the QP number,
 * a random 24-bit starting packet sequence number, and the GID at
 * rc->gid_index (on RoCE, the IP address packets are sent to). The buffer
 * fields (addr, rkey, length) are the caller's: leave them as they are.
 * Returns 0, or -1 (message printed).
 */
static int fill_qp_info(struct rc_ctx *rc, struct qp_info *info)
{
	int ret;

	/* TODO 2: fill info->lid (ibv_query_port), info->qpn (the QP's
	 * qp_num), info->psn (24 random bits: lrand48() and a mask) and
	 * info->gid (ibv_query_gid); set ret to 0, or on failure to the
	 * errno value: ibv_query_port returns it, ibv_query_gid returns -1
	 * and sets errno. */
	(void)rc;
	(void)info;
	ret = course_todo(2, "in lesson 05's rc.c: fill the QP's address "
			     "(LID, QPN, PSN, GID)");
	/* END TODO 2 */
	if (ret) {
		fprintf(stderr, "ibv_query_port/ibv_query_gid failed: %s\n",
			strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Connect our QP to the peer's (@theirs; @mine is what we told the peer).
 * RTR (ready to receive): the QP learns where the peer's QP is (GID, QPN)
 * and which PSN its first packet will carry. RTS (ready to send): our own
 * packets start at our PSN; a packet not acknowledged within the timeout
 * is resent retry_cnt times (rxe takes 7 to mean "forever", so a dead peer
 * would never be noticed: 6), and a peer without a posted receive (RNR) is
 * retried rnr_retry times. Returns 0, or -1 (message printed).
 */
static int rtr_rts(struct rc_ctx *rc, const struct qp_info *mine,
		   const struct qp_info *theirs)
{
	/* rc_params.rnr_retry: 0 is lesson 05's value, RC_RNR_RETRY(n) is n */
	uint8_t rnr_retry = rc->params.rnr_retry ? rc->params.rnr_retry & 7
						 : COURSE_QP_RNR_RETRY;
	int ret;

	/* TODO 3: move the QP to RTR: path_mtu IBV_MTU_1024, the peer's
	 * QPN and PSN, max_dest_rd_atomic rc->params.max_dest_rd_atomic,
	 * min_rnr_timer COURSE_QP_MIN_RNR_TIMER (course.h), and an
	 * address vector (ah_attr) with is_global = 1, the peer's LID and
	 * GID, our port and our GID index, hop_limit 64; set ret to what
	 * ibv_modify_qp() returns. */
	(void)theirs;
	ret = course_todo(3, "in lesson 05's rc.c: move the QP to RTR");
	/* END TODO 3 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(RTR) failed: %s\n",
			strerror(ret));
		return -1;
	}

	/* TODO 4: move the QP to RTS: our own PSN as sq_psn, timeout
	 * COURSE_QP_TIMEOUT, retry_cnt COURSE_QP_RETRY_CNT (course.h),
	 * rnr_retry the rnr_retry above, max_rd_atomic
	 * rc->params.max_rd_atomic; set ret to what ibv_modify_qp()
	 * returns. */
	(void)mine;
	(void)rnr_retry;
	ret = course_todo(4, "in lesson 05's rc.c: move the QP to RTS");
	/* END TODO 4 */
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(RTS) failed: %s\n",
			strerror(ret));
		return -1;
	}
	return 0;
}

int rc_connect(struct rc_ctx *rc, const struct course_opts *o,
	       struct qp_info *mine, struct qp_info *theirs)
{
	int fd;

	if (o->host)
		fd = course_oob_connect(o->host, o->port, rc->timeout);
	else
		fd = course_oob_accept(o->port, rc->timeout);
	if (fd < 0)
		return -1;
	return rc_connect_fd(rc, fd, mine, theirs);
}

int rc_connect_fd(struct rc_ctx *rc, int fd, struct qp_info *mine,
		  struct qp_info *theirs)
{
	rc->oob_fd = fd;
	srand48(getpid() ^ course_now_ns());
	if (fill_qp_info(rc, mine))
		return -1;
	if (course_oob_exchange(rc->oob_fd, mine, theirs, rc->timeout))
		return -1;
	course_print_qp_info("local", mine);
	course_print_qp_info("remote", theirs);

	if (rtr_rts(rc, mine, theirs))
		return -1;
	/* Neither side sends before both QPs can receive. */
	if (course_oob_sync(rc->oob_fd, 'R', rc->timeout))
		return -1;
	printf("connected\n");
	fflush(stdout);
	return 0;
}

int rc_connect_pair(struct rc_ctx *a, struct rc_ctx *b)
{
	struct qp_info ia = {}, ib = {};

	if (fill_qp_info(a, &ia) || fill_qp_info(b, &ib))
		return -1;
	if (rtr_rts(a, &ia, &ib) || rtr_rts(b, &ib, &ia))
		return -1;
	return 0;
}

int rc_wait_wc(struct rc_ctx *rc, struct ibv_wc *wc, const char *what)
{
	return course_wait_wc(rc->cq, wc, rc->timeout, rc->oob_fd, what);
}

int rc_close(struct rc_ctx *rc)
{
	int ret = 0;

	if (rc->oob_fd >= 0)
		close(rc->oob_fd);
	if (ibv_destroy_qp(rc->qp)) {
		fprintf(stderr, "ibv_destroy_qp failed\n");
		ret = -1;
	}
	if (ibv_destroy_cq(rc->cq)) {
		fprintf(stderr, "ibv_destroy_cq failed\n");
		ret = -1;
	}
	if (rc->channel && ibv_destroy_comp_channel(rc->channel)) {
		fprintf(stderr, "ibv_destroy_comp_channel failed\n");
		ret = -1;
	}
	if (ibv_dealloc_pd(rc->pd)) {
		fprintf(stderr, "ibv_dealloc_pd failed\n");
		ret = -1;
	}
	if (ibv_close_device(rc->context)) {
		fprintf(stderr, "ibv_close_device failed\n");
		ret = -1;
	}
	free(rc);
	return ret;
}
