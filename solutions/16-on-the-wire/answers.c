// SPDX-License-Identifier: MIT
/*
 * answers.c - lesson 16: the README's "Questions", answered from a
 * capture's packets. `roce_dump --answers FILE` calls answer() for each
 * question with FILE's packets; the grader runs it on captures it makes
 * for each grading and compares each answer with what tshark finds there.
 *
 * A count is a decimal number ("7"), an opcode or NAK code a name as
 * roce_dump prints it ("RC_SEND_ONLY", "INVALID_REQUEST"), a byte or a PSN
 * hexadecimal ("0x2c", "0x1a2b3c").
 */
#include "answers.h"

#include <stdio.h>
#include <string.h>

/* TODO 9: answer() - write each question's answer (README, "Questions")
 * from @pkts into @out; helpers of your own go here too. */
#define OP_ACK	      0x11
#define OP_ATOMIC_ACK 0x12

/* The opcode's low 5 bits, for an RC packet (opcode below 0x20); -1 else. */
static int rc_low(const struct roce_view *p)
{
	return p->opcode < 0x20 ? p->opcode : -1;
}

static int is_write(const struct roce_view *p)
{
	return rc_low(p) >= 0x06 && rc_low(p) <= 0x0b;
}

static int is_read_response(const struct roce_view *p)
{
	return rc_low(p) >= 0x0d && rc_low(p) <= 0x10;
}

/* The first packet for which @want() holds, or NULL. */
static const struct roce_view *first(const struct roce_view *pkts, size_t n,
				     int (*want)(const struct roce_view *))
{
	size_t i;

	for (i = 0; i < n; i++)
		if (want(&pkts[i]))
			return &pkts[i];
	return NULL;
}

static int is_write_reth(const struct roce_view *p)
{
	return is_write(p) && p->has_reth;
}

static int is_write_imm(const struct roce_view *p)
{
	return is_write(p) && p->has_immdt;
}

static int is_read_request(const struct roce_view *p)
{
	return rc_low(p) == 0x0c;
}

static int is_rnr_nak(const struct roce_view *p)
{
	return p->has_aeth && (p->syndrome >> 5) == 1;
}

static int is_nak(const struct roce_view *p)
{
	return p->has_aeth && (p->syndrome >> 5) == 3;
}

/* ACKNOWLEDGEs sent by @src (@from: 1) or by anyone else (@from: 0). */
static size_t acks(const struct roce_view *pkts, size_t n, const char *src,
		   int from)
{
	size_t i, count = 0;

	for (i = 0; i < n; i++)
		if (pkts[i].opcode == OP_ACK &&
		    (strcmp(pkts[i].src, src) == 0) == from)
			count++;
	return count;
}

void answer(const char *question, const struct roce_view *pkts, size_t n,
	    char *out, size_t len)
{
	const struct roce_view *p = NULL;
	size_t i, j, count = 0;

	snprintf(out, len, "?");
	if (!strcmp(question, "write-packets")) {
		for (i = 0; i < n; i++)
			count += is_write(&pkts[i]);
		snprintf(out, len, "%zu", count);
	} else if (!strcmp(question, "write-acks")) {
		p = first(pkts, n, is_write);
		if (p)
			snprintf(out, len, "%zu", acks(pkts, n, p->src, 0));
	} else if (!strcmp(question, "rkey-opcode")) {
		p = first(pkts, n, is_write_reth);
		if (p)
			snprintf(out, len, "%s", p->name);
	} else if (!strcmp(question, "imm-opcode")) {
		p = first(pkts, n, is_write_imm);
		if (p)
			snprintf(out, len, "%s", p->name);
	} else if (!strcmp(question, "read-responses")) {
		for (i = 0; i < n; i++)
			count += is_read_response(&pkts[i]);
		snprintf(out, len, "%zu", count);
	} else if (!strcmp(question, "read-acks")) {
		p = first(pkts, n, is_read_request);
		if (p)
			snprintf(out, len, "%zu", acks(pkts, n, p->src, 1));
	} else if (!strcmp(question, "rnr-syndrome")) {
		p = first(pkts, n, is_rnr_nak);
		if (p)
			snprintf(out, len, "0x%02x", p->syndrome);
	} else if (!strcmp(question, "rnr-resent-psn")) {
		p = first(pkts, n, is_rnr_nak);
		if (p)
			snprintf(out, len, "0x%06x", p->psn);
	} else if (!strcmp(question, "nak-code")) {
		p = first(pkts, n, is_nak);
		if (p && p->nak_code)
			snprintf(out, len, "%s", p->nak_code);
	} else if (!strcmp(question, "resent-psn")) {
		/* The first packet, acknowledgements aside, that the same side
		 * has sent before on the same QP with the same PSN. */
		for (i = 0; i < n && !p; i++) {
			if (pkts[i].opcode == OP_ACK ||
			    pkts[i].opcode == OP_ATOMIC_ACK)
				continue;
			for (j = 0; j < i; j++)
				if (pkts[j].psn == pkts[i].psn &&
				    pkts[j].destqp == pkts[i].destqp &&
				    pkts[j].opcode != OP_ACK &&
				    pkts[j].opcode != OP_ATOMIC_ACK &&
				    !strcmp(pkts[j].src, pkts[i].src)) {
					p = &pkts[i];
					break;
				}
		}
		if (p)
			snprintf(out, len, "0x%06x", p->psn);
	}
}
/* END TODO 9 */
