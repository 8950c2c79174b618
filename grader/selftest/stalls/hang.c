/* stall: hang - the program blocks for ever before main: no line, no exit. */
#include <unistd.h>

__attribute__((constructor)) static void stall_hang(void)
{
	for (;;)
		pause();
}
