// SPDX-License-Identifier: MIT
/*
 * answers.c - lesson 16: your answers to the README's "Questions", each
 * read from a capture in lessons/16-on-the-wire/captures/ with your
 * roce_dump. `roce_dump --answers` prints them; the grader compares each
 * with what tshark finds in the same capture.
 *
 * A count is a decimal number ("7"), an opcode or NAK code a name as
 * roce_dump prints it ("RC_SEND_ONLY", "INVALID_REQUEST"), a byte or a PSN
 * hexadecimal ("0x2c", "0x1a2b3c").
 */
#include "answers.h"

#include <stddef.h>

const struct answer answers[] = {
	/* TODO 9: replace each "?" with what the capture shows. */
	{ "write-packets", "10" },
	{ "write-acks", "1" },
	{ "rkey-opcode", "RC_RDMA_WRITE_FIRST" },
	{ "imm-opcode", "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE" },
	{ "read-responses", "10" },
	{ "read-acks", "0" },
	{ "rnr-syndrome", "0x2c" },
	{ "rnr-resent-psn", "0x9e8f78" },
	{ "nak-code", "PSN_SEQUENCE_ERROR" },
	{ "resent-psn", "0x680746" },
	/* END TODO 9 */
	{ NULL, NULL },
};
