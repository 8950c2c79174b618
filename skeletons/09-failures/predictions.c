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
	{ "dereg-mr", "?" },
	{ "sge-past-mr", "?" },
	{ "wrong-rkey", "?" },
	{ "no-remote-write", "?" },
	{ "write-past-end", "?" },
	{ "rnr-retry-0", "?" },
	{ "rnr-retry-2", "?" },
	{ "post-before-rts", "?" },
	{ "num-sge", "?" },
	{ "cq-overrun", "?" },
	{ "unaligned", "?" },
	{ "memlock", "?" },
	{ "munmap-remap", "?" },
	/* END TODO 1 */
	{ NULL, NULL },
};
