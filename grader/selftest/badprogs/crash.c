/* Prints a line, then dereferences NULL. */
#include <stdio.h>
int main(void)
{
	volatile int *p = NULL;

	printf("about to crash\n");
	fflush(stdout);
	return *p;
}
