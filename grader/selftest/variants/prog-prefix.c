/* VARIANT (grader self-test, grader/selftest/test_variants.py): every line
 * this program writes to stdout and stderr starts with "PROG: ", the way
 * err(3) and perror(argv[0]) write errors - a correct program written in
 * another style. Put in front of a solution's main file: a constructor
 * moves fd 1 and 2 onto pipes, a thread per stream copies each line back
 * with the prefix, and an exit handler drains them. VARIANT_STREAMS: 1 for
 * stdout, 2 for stderr, 3 for both (default). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef VARIANT_STREAMS
#define VARIANT_STREAMS 3
#endif

struct variant_stream {
	int fd;   /* 1 or 2: where the program writes */
	int pipe; /* the read end of its pipe */
	int out;  /* the original fd, where the lines go */
	pthread_t thread;
	int running;
};

static struct variant_stream variant_streams[2];

static void variant_write(int fd, const char *p, size_t len)
{
	ssize_t n;

	while (len) {
		n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		p += n;
		len -= (size_t)n;
	}
}

static void *variant_pump(void *arg)
{
	struct variant_stream *s = arg;
	const char *name = program_invocation_short_name;
	char buf[4096], *p, *nl;
	int at_start = 1;
	ssize_t n;

	for (;;) {
		n = read(s->pipe, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (p = buf; p < buf + n; p = nl) {
			if (at_start) {
				variant_write(s->out, name, strlen(name));
				variant_write(s->out, ": ", 2);
			}
			nl = memchr(p, '\n', (size_t)(buf + n - p));
			nl = nl ? nl + 1 : buf + n;
			variant_write(s->out, p, (size_t)(nl - p));
			at_start = nl[-1] == '\n';
		}
	}
	return NULL;
}

static void variant_prefix_stop(void)
{
	int i;

	fflush(stdout);
	fflush(stderr);
	for (i = 0; i < 2; i++) {
		struct variant_stream *s = &variant_streams[i];

		if (!s->running)
			continue;
		/* The last write end: the pump sees the end, then the stream
		 * goes back to where it was (for later writers, LSan's report). */
		close(s->fd);
		pthread_join(s->thread, NULL);
		dup2(s->out, s->fd);
		s->running = 0;
	}
}

__attribute__((constructor)) static void variant_prefix_start(void)
{
	int i, p[2];

	for (i = 0; i < 2; i++) {
		struct variant_stream *s = &variant_streams[i];

		s->fd = i + 1;
		if (!(VARIANT_STREAMS & s->fd) || pipe(p))
			continue;
		s->out = dup(s->fd);
		dup2(p[1], s->fd);
		close(p[1]);
		s->pipe = p[0];
		s->running = !pthread_create(&s->thread, NULL, variant_pump, s);
	}
	atexit(variant_prefix_stop);
}
/* END VARIANT */

