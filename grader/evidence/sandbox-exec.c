// SPDX-License-Identifier: MIT
/*
 * sandbox-exec - start one of the student's programs inside the grader's
 * sandbox (see grader/evidence/sandbox.py):
 *
 *   sandbox-exec [--rlimit NAME=VALUE]... [--empty-dir PATH]...
 *                CGROUP NSFILE DIR UID GID -- CMD [ARG...]
 *
 * Moves itself into the cgroup directory CGROUP (the test's: killed whole
 * when the test ends), enters the mount namespace bound at NSFILE (the
 * course tree hidden), and with --empty-dir a private copy of it in which
 * an empty read-only tmpfs covers PATH (lesson 01 hides the verbs
 * providers in /etc/libibverbs.d); changes to DIR, sets each --rlimit
 * (soft and hard: memlock in bytes, nproc, ... as prlimit(1) names them),
 * drops every group and privilege to UID:GID, forbids new privileges
 * (setuid programs stay unprivileged), and executes CMD in its own place:
 * the PID the grader sees is CMD's.
 *
 * It is nsenter + setpriv in one static program: under the micro-VM's CPU
 * emulation those two dynamic programs cost about 0.8 s per start, this
 * one a few milliseconds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_OPTS 16

static void die(const char *what, const char *arg)
{
	fprintf(stderr, "sandbox-exec: %s%s%s: %s\n", what, arg ? " " : "",
		arg ? arg : "", strerror(errno));
	exit(127);
}

static void usage(void)
{
	fprintf(stderr, "usage: sandbox-exec [--rlimit NAME=VALUE]... "
			"[--empty-dir PATH]... CGROUP NSFILE DIR UID GID "
			"-- CMD [ARG...]\n");
	exit(2);
}

static long number(const char *s, long min, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min) {
		errno = EINVAL;
		die(what, s);
	}
	return v;
}

static const struct {
	const char *name;
	int resource;
} rlimit_names[] = {
	{ "as", RLIMIT_AS },	     { "core", RLIMIT_CORE },
	{ "cpu", RLIMIT_CPU },	     { "data", RLIMIT_DATA },
	{ "fsize", RLIMIT_FSIZE },   { "memlock", RLIMIT_MEMLOCK },
	{ "nofile", RLIMIT_NOFILE }, { "nproc", RLIMIT_NPROC },
	{ "stack", RLIMIT_STACK },
};

struct rlimit_opt {
	int resource;
	rlim_t value;
};

static struct rlimit_opt parse_rlimit(const char *arg)
{
	const char *eq = strchr(arg, '=');
	size_t i;

	for (i = 0; eq && i < sizeof(rlimit_names) / sizeof(rlimit_names[0]);
	     i++) {
		if (strlen(rlimit_names[i].name) == (size_t)(eq - arg) &&
		    !strncmp(arg, rlimit_names[i].name, eq - arg))
			return (struct rlimit_opt){
				.resource = rlimit_names[i].resource,
				.value = (rlim_t)number(eq + 1, 0,
							"not a limit:"),
			};
	}
	errno = EINVAL;
	die("not a limit (NAME=VALUE, NAME one of as core cpu data fsize "
	    "memlock nofile nproc stack):",
	    arg);
	return (struct rlimit_opt){ 0 };
}

static void set_rlimit(const struct rlimit_opt *o, const char *arg)
{
	struct rlimit r = { .rlim_cur = o->value, .rlim_max = o->value };

	if (setrlimit(o->resource, &r))
		die("setrlimit", arg);
}

int main(int argc, char **argv)
{
	struct rlimit_opt limits[MAX_OPTS];
	const char *limit_args[MAX_OPTS], *empty[MAX_OPTS];
	int nlimits = 0, nempty = 0, nproc = -1, i, fd;
	char procs[4096], **cmd;
	uid_t uid;
	gid_t gid;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--rlimit")) {
			if (nlimits == MAX_OPTS)
				usage();
			limit_args[nlimits] = argv[i + 1];
			limits[nlimits++] = parse_rlimit(argv[i + 1]);
		} else if (!strcmp(argv[i], "--empty-dir")) {
			if (nempty == MAX_OPTS)
				usage();
			empty[nempty++] = argv[i + 1];
		} else {
			break;
		}
	}
	argv += i - 1;
	argc -= i - 1;
	if (argc < 8 || strcmp(argv[6], "--"))
		usage();
	uid = (uid_t)number(argv[4], 1, "not a user or group id:");
	gid = (gid_t)number(argv[5], 1, "not a user or group id:");
	cmd = argv + 7;

	/* "0" moves the writer: nothing of CMD runs outside the cgroup. */
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", argv[1]);
	fd = open(procs, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "0", 1) != 1)
		die("cannot join the cgroup", argv[1]);
	close(fd);
	fd = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("cannot open the namespace", argv[2]);
	if (setns(fd, CLONE_NEWNS))
		die("setns", argv[2]);
	close(fd);
	if (nempty) {
		/* A copy of the session's namespace for this program alone
		 * (its mounts are private: nothing propagates back). */
		if (unshare(CLONE_NEWNS))
			die("unshare(CLONE_NEWNS)", NULL);
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
			die("cannot make the mounts private", NULL);
		for (i = 0; i < nempty; i++)
			if (mount("none", empty[i], "tmpfs",
				  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
				  "size=4k,mode=0555"))
				die("cannot cover", empty[i]);
	}
	if (chdir(argv[3]))
		die("cannot change to", argv[3]);
	/* Limits are set while privileged (a raise needs it), except nproc:
	 * setuid() to a user already over that limit marks the process, and
	 * its next execve() fails (EAGAIN). It is set after the drop. */
	for (i = 0; i < nlimits; i++) {
		if (limits[i].resource == RLIMIT_NPROC)
			nproc = i;
		else
			set_rlimit(&limits[i], limit_args[i]);
	}
	if (setgroups(0, NULL))
		die("setgroups", NULL);
	if (setgid(gid))
		die("setgid", argv[5]);
	if (setuid(uid))
		die("setuid", argv[4]);
	if (nproc >= 0)
		set_rlimit(&limits[nproc], limit_args[nproc]);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		die("prctl(PR_SET_NO_NEW_PRIVS)", NULL);

	execvp(cmd[0], cmd);
	die("cannot run", cmd[0]);
	return 127;
}
