/* SPDX-License-Identifier: MIT */
/*
 * predictions.h - lesson 09: what you expect each experiment to print.
 *
 * predictions.c holds the table; `failures --predictions` prints it, one
 * "EXPERIMENT: PREDICTION" line each. The grader reads it from
 * predictions.c and scores it against what the experiments really do on
 * rxe, apart from the experiments themselves, when you submit. A
 * prediction is the part of the experiment's line before the parenthesis,
 * in one of these forms (examples of the forms, not answers):
 *
 *   succeeded
 *   ibv_post_send failed: ENOMEM
 *   completion on A: IBV_WC_LOC_LEN_ERR
 *   async event: IBV_EVENT_QP_FATAL
 *   peer read: new contents
 *
 * ("?" while you have not decided). Write the table as it is: one
 * { "experiment", "prediction" } entry per experiment, string literals.
 */
#ifndef RDMA_COURSE_PREDICTIONS_H
#define RDMA_COURSE_PREDICTIONS_H

struct prediction {
	const char *experiment;
	const char *outcome;
};

/* The table, ended by { NULL, NULL } (predictions.c). */
extern const struct prediction predictions[];

/* The prediction for @experiment, or "?" when the table has none. */
static inline const char *prediction(const char *experiment)
{
	const struct prediction *p;

	for (p = predictions; p->experiment; p++)
		if (!__builtin_strcmp(p->experiment, experiment))
			return p->outcome ? p->outcome : "?";
	return "?";
}

#endif /* RDMA_COURSE_PREDICTIONS_H */
