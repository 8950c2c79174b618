/* Forks a child that outlives it (holding stdout open), prints the child's
 * pid, exits 0. The grader must not wait for the child, and must kill it. */
#include <stdio.h>
#include <unistd.h>
int main(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		for (;;)
			pause();
	}
	printf("child %d\n", (int)pid);
	fflush(stdout);
	return 0;
}
