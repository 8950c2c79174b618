// SPDX-License-Identifier: MIT
/*
 * rc_check.c - what your rc.c makes of the choices a later lesson passes
 * it (struct rc_params, rc.h), read back from the device.
 *
 *   rc_check [-d DEV] [-i IB_PORT] [-g GID_INDEX]
 *
 * Opens two QPs with different rc_params (A as lesson 12's atomics do: the
 * peer may WRITE, READ and do atomics, 4 READs deep, rnr_retry 2; B as
 * lesson 05 does: nothing remote, 1 deep, rnr_retry left 0, the default),
 * connects them to each other with rc_connect_pair() and prints, per QP,
 * what ibv_query_qp() says it is:
 *
 *   A qpn 0xQPN state RTS access 0xA max_rd_atomic N max_dest_rd_atomic N
 *     rnr_retry N timeout N retry_cnt N min_rnr_timer N path_mtu N
 *     dest_qpn 0xQPN sq_psn 0xPSN rq_psn 0xPSN
 *
 * (one line each). Lessons 06, 07 and 09-12 connect with your rc.c: this is
 * how the grader checks that it gives them the QPs they ask for. This file
 * is provided by the lesson; it links your rc.c.
 */
#include "rc.h"

#include <stdio.h>
#include <string.h>

static const char usage[] = "[-d DEV] [-i IB_PORT] [-g GID_INDEX]";

static const struct rc_params params[2] = {
	{
		.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_REMOTE_ATOMIC,
		.max_rd_atomic = 4,
		.max_dest_rd_atomic = 4,
		.max_send_wr = 4,
		.max_recv_wr = 2,
		.rnr_retry = RC_RNR_RETRY(2),
	},
	{
		.access = 0,
		.max_rd_atomic = 1,
		.max_dest_rd_atomic = 1,
		.max_send_wr = 2,
		.max_recv_wr = 4,
	},
};

/* Print @rc's QP as the device sees it. 0 or -1 (message printed). */
static int show(const char *name, struct rc_ctx *rc)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr a;
	int ret;

	/* clang-format off */
	ret = ibv_query_qp(rc->qp, &a,
			   IBV_QP_STATE |
			   IBV_QP_ACCESS_FLAGS |
			   IBV_QP_MAX_QP_RD_ATOMIC |
			   IBV_QP_MAX_DEST_RD_ATOMIC |
			   IBV_QP_RNR_RETRY |
			   IBV_QP_TIMEOUT |
			   IBV_QP_RETRY_CNT |
			   IBV_QP_MIN_RNR_TIMER |
			   IBV_QP_PATH_MTU |
			   IBV_QP_DEST_QPN |
			   IBV_QP_SQ_PSN |
			   IBV_QP_RQ_PSN,
			   &init);
	/* clang-format on */
	if (ret) {
		fprintf(stderr, "ibv_query_qp(%s) failed: %s\n", name,
			strerror(ret));
		return -1;
	}
	printf("%s qpn 0x%06x state %s access 0x%x max_rd_atomic %u "
	       "max_dest_rd_atomic %u rnr_retry %u timeout %u retry_cnt %u "
	       "min_rnr_timer %u path_mtu %d dest_qpn 0x%06x sq_psn 0x%06x "
	       "rq_psn 0x%06x\n",
	       name, rc->qp->qp_num,
	       a.qp_state == IBV_QPS_RTS ? "RTS" : "not-RTS",
	       a.qp_access_flags, a.max_rd_atomic, a.max_dest_rd_atomic,
	       a.rnr_retry, a.timeout, a.retry_cnt, a.min_rnr_timer,
	       a.path_mtu, a.dest_qp_num, a.sq_psn, a.rq_psn);
	return 0;
}

int main(int argc, char **argv)
{
	struct course_opts o;
	struct rc_ctx *a, *b;
	int ret = 1;

	course_default_opts(&o);
	course_parse_opts(argc, argv, OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX,
			  usage, &o);

	a = rc_open(&o, &params[0]);
	if (!a)
		return 1;
	b = rc_open(&o, &params[1]);
	if (!b)
		goto out_close_a;
	if (rc_connect_pair(a, b))
		goto out_close_b;
	if (show("A", a) || show("B", b))
		goto out_close_b;
	ret = 0;

out_close_b:
	if (rc_close(b))
		ret = 1;
out_close_a:
	if (rc_close(a))
		ret = 1;
	return ret;
}
