/* A well-behaved server: readiness line after a delay given in ms, then
 * waits for one line on stdin and echoes it, exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	char buf[256];

	usleep(1000 * (argc > 1 ? atoi(argv[1]) : 0));
	printf("listening on port 5555\n");
	fflush(stdout);
	if (fgets(buf, sizeof(buf), stdin))
		printf("echo %s", buf);
	return 0;
}
