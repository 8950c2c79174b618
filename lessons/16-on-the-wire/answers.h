/* SPDX-License-Identifier: MIT */
/*
 * answers.h - lesson 16: the README's questions, answered by your code in
 * answers.c from the packets of a capture: `roce_dump --answers FILE`
 * decodes FILE and prints "QUESTION: ANSWER", one a line.
 */
#ifndef ROCE_DUMP_ANSWERS_H
#define ROCE_DUMP_ANSWERS_H

#include <stddef.h>
#include <stdint.h>

/* One RoCE v2 packet of the capture (a malformed one is left out), as
 * roce_dump decoded it. */
struct roce_view {
	unsigned long frame;   /* its number in the file, from 1 */
	char src[16], dst[16]; /* dotted IPv4 */
	char name[40];	       /* "RC_RDMA_WRITE_FIRST", as roce_dump prints it */
	uint8_t opcode;	       /* the BTH's */
	uint32_t destqp, psn;
	int has_reth, has_immdt, has_aeth; /* the headers it carries */
	uint8_t syndrome;		   /* the AETH's, when it has one */
	const char *nak_code; /* a NAK's code ("PSN_SEQUENCE_ERROR"), or NULL */
};

/* The questions, in the README's order; ends with NULL. */
extern const char *const questions[];

/*
 * Answer @question about the @n packets @pkts of one capture (in the file's
 * order): write the answer into @out (@len bytes), "?" for a question not
 * answered yet.
 */
void answer(const char *question, const struct roce_view *pkts, size_t n,
	    char *out, size_t len);

#endif
