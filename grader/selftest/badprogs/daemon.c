/* Starts a daemon - a child in a session of its own, outside the program's
 * process group - that keeps stdout and stderr open for ever, prints the
 * daemon's pid and exits 0 (with an argument: 1, before any readiness
 * line). The grader must not wait for the daemon to let go of the pipes.
 * The parent exits only once the child is in its own session (a pipe
 * tells it): before that, killing the program's group would take the
 * child too. */
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	int ready[2];
	char c;
	pid_t pid;

	(void)argv;
	if (pipe(ready))
		return 3;
	pid = fork();
	if (pid == 0) {
		close(ready[0]);
		setsid();
		c = 1;
		if (write(ready[1], &c, 1) != 1)
			return 3;
		close(ready[1]);
		for (;;)
			pause();
	}
	close(ready[1]);
	if (read(ready[0], &c, 1) != 1)
		return 3;
	printf("daemon %d\n", (int)pid);
	fflush(stdout);
	return argc > 1;
}
