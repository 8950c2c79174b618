/* SPDX-License-Identifier: MIT */
/*
 * answers.h - lesson 18: the README's questions, answered by your code in
 * answers.c from the summary lines of a run: `seq --answers FILE` reads
 * FILE's summary lines and prints "QUESTION: ANSWER", one a line.
 */
#ifndef SEQ_ANSWERS_H
#define SEQ_ANSWERS_H

#include <stddef.h>

/* One summary line of a seq client, as it printed it:
 *   MODE: C clients x N numbers in T s: R Mops/s, p50 A us, p99 B us */
struct seq_run {
	char mode[8];	/* "faa", "rc" or "ud" */
	int clients;	/* C */
	long numbers;	/* N, per client */
	double seconds; /* T */
	double mops;	/* R, as printed (4 decimals) */
	double p50_us, p99_us;
};

/* The questions, in the README's order; ends with NULL. */
extern const char *const questions[];

/*
 * Answer @question about the @n runs @runs (n >= 1, in the file's order):
 * write the answer into @out (@len bytes), "?" for a question not answered
 * yet.
 */
void answer(const char *question, const struct seq_run *runs, size_t n,
	    char *out, size_t len);

#endif
