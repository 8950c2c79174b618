// SPDX-License-Identifier: MIT
/*
 * predictions.c - lesson 09: what each experiment will print, written
 * before you run it (lessons/09-failures/README.md, "Predict first").
 *
 * One entry per experiment of `failures --list`: the part of its line
 * before the parenthesis, as predictions.h shows.
 */
#include "predictions.h"

#include <stddef.h>

const struct prediction predictions[] = {
	/* TODO 1: replace each "?" with what you predict the experiment
	 * prints (before you implement it). */
	{ "dereg-mr", "completion on A: IBV_WC_LOC_QP_OP_ERR" },
	{ "sge-past-mr", "completion on A: IBV_WC_LOC_PROT_ERR" },
	{ "wrong-rkey", "completion on A: IBV_WC_REM_ACCESS_ERR" },
	{ "no-remote-write", "completion on A: IBV_WC_REM_ACCESS_ERR" },
	{ "write-past-end", "completion on A: IBV_WC_REM_ACCESS_ERR" },
	{ "rnr-retry-0", "completion on A: IBV_WC_RNR_RETRY_EXC_ERR" },
	{ "rnr-retry-2", "completion on A: IBV_WC_RNR_RETRY_EXC_ERR" },
	{ "post-before-rts", "ibv_post_send failed: EINVAL" },
	{ "num-sge", "ibv_post_send failed: EINVAL" },
	{ "cq-overrun", "async event: IBV_EVENT_CQ_ERR" },
	{ "unaligned", "succeeded" },
	{ "memlock", "ibv_reg_mr failed: ENOMEM" },
	{ "munmap-remap", "peer read: old contents" },
	/* END TODO 1 */
	{ NULL, NULL },
};
