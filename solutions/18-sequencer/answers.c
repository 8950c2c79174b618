// SPDX-License-Identifier: MIT
/*
 * answers.c - lesson 18: the README's "Questions", answered from the
 * summary lines of a run. `seq --answers FILE` calls answer() for each
 * question with FILE's lines; the grader gives it the lines of runs it
 * makes for each grading and compares each answer with what the lines
 * show.
 *
 * A mode is its name ("faa", "rc", "ud"), a ratio a decimal number with
 * one decimal ("37.5").
 */
#include "answers.h"
#include "course.h"

#include <stdio.h>
#include <string.h>

/* TODO 9: answer() - write each question's answer (README, "Questions")
 * from @runs into @out; helpers of your own go here too. */

/* Numbers handed out per second: C x N / T (the printed Mops/s has too
 * few decimals for a slow mode). */
static double rate(const struct seq_run *r)
{
	return r->seconds > 0 ? r->clients * (double)r->numbers / r->seconds
			      : 0;
}

/* The run with the highest rate (@sign 1) or the lowest (-1). */
static const struct seq_run *extreme(const struct seq_run *runs, size_t n,
				     int sign)
{
	const struct seq_run *best = &runs[0];
	size_t i;

	for (i = 1; i < n; i++)
		if (sign * (rate(&runs[i]) - rate(best)) > 0)
			best = &runs[i];
	return best;
}

void answer(const char *question, const struct seq_run *runs, size_t n,
	    char *out, size_t len)
{
	const struct seq_run *fast = extreme(runs, n, 1);
	const struct seq_run *slow = extreme(runs, n, -1);

	if (!strcmp(question, "fastest"))
		snprintf(out, len, "%s", fast->mode);
	else if (!strcmp(question, "slowest"))
		snprintf(out, len, "%s", slow->mode);
	else if (!strcmp(question, "times") && rate(slow) > 0)
		snprintf(out, len, "%.1f", rate(fast) / rate(slow));
	else
		snprintf(out, len, "?");
}
/* END TODO 9 */
