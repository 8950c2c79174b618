// SPDX-License-Identifier: MIT
/*
 * client - run a grading session on the warm grader when there is one, else
 * the cold way; what `make grade` runs where the device is:
 *
 *   client PYTHON -- PYTEST_ARG...
 *
 * With a warm grader listening (grader/session/server.py, in a warm
 * micro-VM) the session is forked there, with this process's stdin, stdout,
 * stderr, directory and environment, and this process exits with its
 * status; a SIGINT, SIGTERM or SIGHUP here ends it there (hanging up says
 * so). Otherwise (no warm grader, or one whose grader files are older than
 * the checkout's) this process becomes `PYTHON -m grader.session.shards --
 * PYTEST_ARG...`: the same session, without the warm imports.
 *
 * The request is one SOCK_SEQPACKET message, JSON {"argv": [...], "cwd":
 * DIR, "env": {...}}, with descriptors 0, 1 and 2 attached; the replies are
 * {"pid": N} (or {"stale": WHY} / {"error": WHY}: go cold), then
 * {"status": N} when the session ends (N < 0: killed by signal -N).
 *
 * A static C program, not Python: under the micro-VM's CPU emulation the
 * interpreter's start alone took 0.25 s of a one-test regrade.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Seconds to wait for a warm grader still warming up (server.py's
 * WARM_WAIT): as long as importing the same here would take on a loaded
 * machine. */
#define WARM_WAIT      300
#define DEFAULT_SOCKET "/run/rdma-course-grader/sock"
#define MAX_MESSAGE    65536

extern char **environ;

struct buf {
	char *data;
	size_t len, cap;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->data = realloc(b->data, b->cap);
		if (!b->data) {
			perror("grader: client");
			exit(125);
		}
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

/* A JSON string of the bytes of s: quotes, backslashes and control
 * characters escaped, the rest as it is (UTF-8; other bytes make the
 * request invalid, and the server's refusal sends this grading cold). */
static void put_json_string(struct buf *b, const char *s, size_t n)
{
	char esc[8];

	put(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			put(b, esc, 2);
		} else if (c < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			put(b, esc, 6);
		} else {
			put(b, (const char *)&c, 1);
		}
	}
	put(b, "\"", 1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static void nap(void)
{
	struct timespec ts = { .tv_nsec = 100 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

static void cold(char *python, char **args, int nargs, const char *why)
{
	char **argv = calloc(nargs + 5, sizeof(*argv));

	if (why)
		fprintf(stderr, "grader: %s: grading without the warm grader\n",
			why);
	if (!argv) {
		perror("grader: client");
		exit(125);
	}
	argv[0] = python;
	argv[1] = "-m";
	argv[2] = "grader.session.shards";
	argv[3] = "--";
	memcpy(argv + 4, args, nargs * sizeof(*argv));
	execv(python, argv);
	fprintf(stderr, "grader: cannot run %s: %s\n", python, strerror(errno));
	exit(127);
}

/* Where the value of "key" starts in the JSON object text (the server's
 * replies: one flat object), or NULL when it has none. */
static const char *json_value(const char *text, const char *key)
{
	char pattern[64];
	const char *p;

	snprintf(pattern, sizeof(pattern), "\"%s\"", key);
	p = strstr(text, pattern);
	if (!p)
		return NULL;
	p += strlen(pattern);
	while (*p == ' ' || *p == ':')
		p++;
	return p;
}

/* The string value of "key" in the JSON object text, unescaped into out
 * (\uXXXX beyond ASCII as '?'); 0 when it has none. */
static int json_string(const char *text, const char *key, char *out,
		       size_t size)
{
	const char *p = json_value(text, key);
	size_t n = 0;

	if (!p || *p++ != '"')
		return 0;
	while (*p && *p != '"' && n + 1 < size) {
		char c = *p++;

		if (c == '\\' && *p) {
			c = *p++;
			if (c == 'n')
				c = '\n';
			else if (c == 't')
				c = '\t';
			else if (c == 'u') {
				unsigned v = 0;

				if (sscanf(p, "%4x", &v) == 1 && strlen(p) >= 4)
					p += 4;
				c = v && v < 0x80 ? (char)v : '?';
			}
		}
		out[n++] = c;
	}
	out[n] = '\0';
	return 1;
}

/* The integer value of "key" in the JSON object text into *value; 0 when
 * it has none. */
static int json_int(const char *text, const char *key, long *value)
{
	const char *p = json_value(text, key);
	char *end;

	if (!p)
		return 0;
	*value = strtol(p, &end, 10);
	return end != p;
}

static void hang_up(int sig)
{
	_exit(128 + sig);
}

int main(int argc, char **argv)
{
	const char *path = getenv("GRADER_SERVER");
	char warming[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	char reply[MAX_MESSAGE + 1], why[512], cwd[4096], *slash;
	struct buf req = { 0 };
	char **args;
	int nargs, fd = -1;
	double deadline;

	if (argc < 3 || strcmp(argv[2], "--") != 0) {
		fprintf(stderr, "usage: client PYTHON -- PYTEST_ARG...\n");
		return 2;
	}
	args = argv + 3;
	nargs = argc - 3;
	if (!path)
		path = DEFAULT_SOCKET;
	if (strlen(path) >= sizeof(addr.sun_path))
		cold(argv[1], args, nargs,
		     "the warm grader's socket path is too long");
	strcpy(addr.sun_path, path);
	snprintf(warming, sizeof(warming), "%s", path);
	slash = strrchr(warming, '/');
	snprintf(slash ? slash + 1 : warming,
		 sizeof(warming) - (slash ? (size_t)(slash + 1 - warming) : 0),
		 "warming");

	/* A warm grader still importing: waiting for it costs no more than
	 * importing the same here. */
	deadline = now() + WARM_WAIT;
	while (fd < 0) {
		while (exists(warming) && !exists(path) && now() < deadline)
			nap();
		if (!exists(path))
			cold(argv[1], args, nargs,
			     exists(warming)
				     ? "the warm grader was still warming up after 300 s"
				     : NULL);
		fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fd < 0)
			cold(argv[1], args, nargs,
			     "no socket for the warm grader");
		if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
			break;
		/* It is warming up again (a grader file changed): wait. */
		int err = errno;

		close(fd);
		fd = -1;
		if ((err != ECONNREFUSED && err != ENOENT) ||
		    !exists(warming) || now() > deadline)
			cold(argv[1], args, nargs,
			     "the warm grader did not answer");
		nap();
	}

	if (!getcwd(cwd, sizeof(cwd)))
		cold(argv[1], args, nargs, "the current directory has no name");
	put(&req, "{\"argv\": [", 10);
	for (int i = 0; i < nargs; i++) {
		if (i)
			put(&req, ", ", 2);
		put_json_string(&req, args[i], strlen(args[i]));
	}
	put(&req, "], \"cwd\": ", 10);
	put_json_string(&req, cwd, strlen(cwd));
	put(&req, ", \"env\": {", 10);
	for (char **e = environ; *e; e++) {
		char *eq = strchr(*e, '=');

		if (!eq)
			continue;
		if (e != environ)
			put(&req, ", ", 2);
		put_json_string(&req, *e, eq - *e);
		put(&req, ": ", 2);
		put_json_string(&req, eq + 1, strlen(eq + 1));
	}
	put(&req, "}}", 2);

	{
		int fds[3] = { 0, 1, 2 };
		char control[CMSG_SPACE(sizeof(fds))] = { 0 };
		struct iovec iov = { .iov_base = req.data, .iov_len = req.len };
		struct msghdr msg = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = control,
			.msg_controllen = sizeof(control),
		};
		struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
		ssize_t n;

		cmsg->cmsg_level = SOL_SOCKET;
		cmsg->cmsg_type = SCM_RIGHTS;
		cmsg->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(cmsg), fds, sizeof(fds));
		if (sendmsg(fd, &msg, 0) < 0) {
			snprintf(why, sizeof(why),
				 "the warm grader did not answer (%s)",
				 strerror(errno));
			cold(argv[1], args, nargs, why);
		}
		n = recv(fd, reply, MAX_MESSAGE, 0);
		if (n <= 0) {
			snprintf(why, sizeof(why),
				 "the warm grader did not answer (%s)",
				 n < 0 ? strerror(errno) : "no reply");
			cold(argv[1], args, nargs, why);
		}
		reply[n] = '\0';
	}
	{
		long pid;

		if (!json_int(reply, "pid", &pid)) {
			close(fd);
			if (!json_string(reply, "stale", why, sizeof(why)) &&
			    !json_string(reply, "error", why, sizeof(why)))
				snprintf(why, sizeof(why),
					 "the warm grader refused");
			cold(argv[1], args, nargs, why);
		}
	}

	/* Ctrl-C or a kill ends the session there: hanging up says so. */
	signal(SIGINT, hang_up);
	signal(SIGTERM, hang_up);
	signal(SIGHUP, hang_up);
	for (;;) {
		ssize_t n = recv(fd, reply, MAX_MESSAGE, 0);
		long status;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr,
				"grader: the warm grader went away during the session\n");
			return 125;
		}
		reply[n] = '\0';
		if (json_int(reply, "status", &status))
			return status < 0 ? (int)(128 - status) : (int)status;
	}
}
