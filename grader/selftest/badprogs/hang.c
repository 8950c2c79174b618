/* Never exits, prints nothing: a student program stuck in a poll loop. */
#include <unistd.h>
int main(void)
{
	for (;;)
		pause();
}
