/* Starts a daemon - a child in a session of its own, outside the program's
 * process group - that keeps stdout and stderr open for ever, prints the
 * daemon's pid and exits 0 (with an argument: 1, before any readiness
 * line). The grader must not wait for the daemon to let go of the pipes. */
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	pid_t pid = fork();

	(void)argv;
	if (pid == 0) {
		setsid();
		for (;;)
			pause();
	}
	printf("daemon %d\n", (int)pid);
	fflush(stdout);
	return argc > 1;
}
