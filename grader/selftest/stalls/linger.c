/* stall: linger - the program does all its work and prints everything, then
 * never exits: at exit (after the program's own atexit handlers, which were
 * registered after this one) it flushes its output and blocks for ever. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void stall_linger(void)
{
	fflush(NULL);
	for (;;)
		pause();
}

__attribute__((constructor)) static void stall_linger_at_exit(void)
{
	atexit(stall_linger);
}
