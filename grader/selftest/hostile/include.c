/* lesson: 04-work-requests */
/* Replaces worksheet.c: the reference solution, reached by an absolute path
 * the test substitutes for COURSE. */
#include "COURSE/solutions/04-work-requests/worksheet.c"
