/* Prints an error and exits 1 at once, without a readiness line: a server
 * whose setup failed. */
#include <stdio.h>
int main(void)
{
	fprintf(stderr, "cannot listen on TCP port 1: Permission denied\n");
	return 1;
}
