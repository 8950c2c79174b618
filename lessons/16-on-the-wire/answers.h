/* SPDX-License-Identifier: MIT */
/*
 * answers.h - lesson 16: your answers to the README's questions, in
 * answers.c; `roce_dump --answers` prints them, one "QUESTION: ANSWER" a line.
 */
#ifndef ROCE_DUMP_ANSWERS_H
#define ROCE_DUMP_ANSWERS_H

struct answer {
	const char *question; /* its name in the README: "write-packets" */
	const char *answer;   /* "?" until you answer it */
};

/* Ends with { NULL, NULL }. */
extern const struct answer answers[];

#endif
