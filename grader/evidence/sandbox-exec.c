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
 * That exec is the last one: a seccomp filter makes every later execve()
 * and execveat() of CMD and of anything it starts fail with EPERM. A
 * program that replaced itself with another one (an interpreter running a
 * reference server) would keep its PID, and the kernel would name it as
 * the owner of that other program's queue pairs: the grader's evidence of
 * "the program did X" is the kernel's word about a PID. No lesson's
 * program starts another program (libibverbs, librdmacm, libpcap and
 * glibc's calls the lessons make do not; LeakSanitizer reports without
 * its symbolizer). A program that forks keeps running its own code.
 *
 * It is nsenter + setpriv in one static program: under the micro-VM's CPU
 * emulation those two dynamic programs cost about 0.8 s per start, this
 * one a few milliseconds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "sandbox-exec: no seccomp filter for this architecture (x86_64, aarch64)"
#endif
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sandbox-exec: the filter reads a 64-bit argument as two little-endian words"
#endif

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

/* CMD as execvp() would find it, searched for once, as the sandbox's user
 * (a directory of PATH it may not enter is skipped): the exec that follows
 * uses exactly one pathname. */
static const char *resolve(const char *cmd)
{
	static char buf[PATH_MAX];
	const char *path = getenv("PATH"), *dir, *end;
	struct stat st;
	int err = ENOENT;

	if (strchr(cmd, '/'))
		return cmd;
	if (!path || !*path)
		path = "/bin:/usr/bin";
	for (dir = path; dir; dir = *end ? end + 1 : NULL) {
		end = strchrnul(dir, ':');
		if (snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(end - dir),
			     dir, end == dir ? "" : "/",
			     cmd) >= (int)sizeof(buf))
			continue;
		if (!access(buf, X_OK) && !stat(buf, &st) &&
		    S_ISREG(st.st_mode))
			return buf;
		if (errno == EACCES)
			err = EACCES;
	}
	errno = err;
	die("cannot run", cmd);
	return NULL;
}

/*
 * A copy of `len` bytes at a page of its own whose address is drawn at
 * random (getrandom) from the middle of the address space, at a random
 * 8-byte offset in that page.
 *
 * Why random: the filter below lets an execve() through only when its
 * pathname and argv pointers are these two numbers. After the exec the
 * new program has a new address space, and nothing at those addresses: to
 * run another program it would have to put a pathname and an argv at
 * exactly the addresses sandbox-exec used, which it cannot read anywhere
 * (a seccomp filter is not readable without CAP_SYS_ADMIN, nor is the old
 * address space). Fixed addresses (a static string, the stack's layout)
 * could be rebuilt by mmap(MAP_FIXED) in a few tries, and so could
 * guesses over the stack's 22 random bits (a few million execve() calls,
 * seconds). Here each pointer is one of about 2^44 (35 bits of page, 9 of
 * offset), and a guess costs a system call: the two together are 2^88,
 * beyond any program's lifetime. Should the random draw fail, the kernel's
 * own mmap randomisation (28 bits of page on x86_64) still gives 2^56.
 */
static void *random_copy(const void *src, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t size = (len + 512 * 8 + page - 1) & ~(size_t)(page - 1);
	uintptr_t top = (uintptr_t)&page & ~(((uintptr_t)1 << 32) - 1);
	uint64_t r[2];
	char *p = MAP_FAILED;
	int i;

	for (i = 0; i < 16 && p == MAP_FAILED; i++) {
		uintptr_t lo = (uintptr_t)1 << 32, span;

		if (getrandom(r, sizeof(r), 0) != sizeof(r) || top <= 2 * lo)
			break;
		/* [4 GiB, the stack's 4 GiB boundary - 4 GiB): user space on
		 * either architecture, whatever its size (the stack lies near
		 * its top). */
		span = (top - 2 * lo) / page;
		p = mmap((void *)(lo + (r[0] % span) * page), size,
			 PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
			 0);
		/* A kernel before 4.17 takes the address as a hint only. */
		if (p != MAP_FAILED &&
		    p != (void *)(lo + (r[0] % span) * page)) {
			munmap(p, size);
			p = MAP_FAILED;
		}
	}
	if (p == MAP_FAILED) {
		r[1] = 0; /* page-aligned, where the kernel chooses */
		p = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			die("mmap", NULL);
	}
	p += (r[1] % 512) * 8;
	memcpy(p, src, len);
	return p;
}

#define DENY	  (SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))
#define LOAD(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
/* The instructions "if (A != k) return EPERM" after a LOAD. */
#define UNLESS(k)                                                              \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(k), 1, 0),              \
		BPF_STMT(BPF_RET | BPF_K, DENY)
#define ARG_LO(i) offsetof(struct seccomp_data, args[i])
#define ARG_HI(i) (offsetof(struct seccomp_data, args[i]) + 4)

/*
 * From here on, execve() is allowed once: with the pathname and argv
 * pointers this program passes (see random_copy); every other execve(),
 * every execveat() (fexecve() included), every system call of another
 * architecture's table (x86_64's i386 int 0x80, x32) fails with EPERM.
 * Kept across the exec and inherited by every child: it binds the
 * program and everything it starts.
 */
static void forbid_exec(const void *path, char *const *argv)
{
	uint64_t p = (uintptr_t)path, a = (uintptr_t)argv;
	struct sock_filter insns[] = {
		LOAD(offsetof(struct seccomp_data, arch)),
		UNLESS(NATIVE_ARCH),
		LOAD(offsetof(struct seccomp_data, nr)),
#ifdef __x86_64__
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __X32_SYSCALL_BIT, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, DENY),
#endif
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execveat, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, DENY),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execve, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		LOAD(ARG_LO(0)),
		UNLESS(p),
		LOAD(ARG_HI(0)),
		UNLESS(p >> 32),
		LOAD(ARG_LO(1)),
		UNLESS(a),
		LOAD(ARG_HI(1)),
		UNLESS(a >> 32),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {
		.len = sizeof(insns) / sizeof(insns[0]),
		.filter = insns,
	};

	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0))
		die("prctl(PR_SET_SECCOMP)", NULL);
}

int main(int argc, char **argv)
{
	struct rlimit_opt limits[MAX_OPTS];
	const char *limit_args[MAX_OPTS], *empty[MAX_OPTS];
	int nlimits = 0, nempty = 0, nproc = -1, i, fd;
	char procs[4096], **cmd, **args;
	const char *path;
	size_t n;
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

	path = resolve(cmd[0]);
	path = random_copy(path, strlen(path) + 1);
	for (n = 0; cmd[n]; n++)
		;
	args = random_copy(cmd, (n + 1) * sizeof(*cmd));
	forbid_exec(path, args);
	execve(path, args, environ);
	die("cannot run", cmd[0]);
	return 127;
}
