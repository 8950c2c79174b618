/* CHEAT (grader self-test): fabricated timings: the registrations
 * happen, but the numbers printed are made up (they grow with the size).
 * The rest is the solution. */
// SPDX-License-Identifier: MIT
/*
 * reg_cost - how long do ibv_reg_mr() and ibv_dereg_mr() take, by size?
 *
 * usage: reg_cost [-d DEVICE] [-n REPS] [--min-size BYTES] [--max-size BYTES]
 *
 * For every size from --min-size (default 4K) doubling up to --max-size
 * (default 64M), registers and deregisters one page-aligned, already
 * touched buffer REPS times (-n, default 5) and prints one CSV row with the
 * median times in microseconds:
 *
 *   size_bytes,reg_us,dereg_us
 *   4096,12.34,5.67
 *   ...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "course.h"

static const char usage[] =
	"[-d DEVICE] [-n REPS] [--min-size BYTES] [--max-size BYTES]";

#define MAX_REPS 1000

/* The access flags of a typical RDMA buffer (any would do here). */
static const int access_flags = IBV_ACCESS_LOCAL_WRITE |
				IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ;

/* "4096", "4k", "64M", "1G" -> bytes; a bad value is a usage error. */
static size_t parse_size(const char *prog, const char *flag, const char *arg)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(arg, &end, 0);
	switch (*end) {
	case 'k':
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'm':
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'g':
	case 'G':
		v <<= 30;
		end++;
		break;
	}
	if (errno || end == arg || *end || v < 4096 || v > (1ull << 40)) {
		fprintf(stderr, "%s: %s expects a size of at least 4K, got '%s'\n",
			prog, flag, arg);
		course_usage_exit(prog, usage);
	}
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Median of @n samples in nanoseconds, as microseconds (sorts @ns). */
static double median_us(uint64_t *ns, long n)
{
	qsort(ns, n, sizeof(*ns), cmp_u64);
	if (n % 2)
		return ns[n / 2] / 1000.0;
	return (ns[n / 2 - 1] + ns[n / 2]) / 2000.0;
}

/*
 * measure - register and deregister a @size-byte buffer @reps times in
 * @pd, timing each ibv_reg_mr() and each ibv_dereg_mr() call alone (take
 * course_now_ns() right before and right after the call), and store the
 * medians in *reg_us and *dereg_us. The buffer is written once beforehand
 * so that its pages exist: we time registration, not page faults.
 * Returns 0, or -1 after printing one line naming the failed call.
 */
static int measure(struct ibv_pd *pd, size_t size, long reps, double *reg_us,
		   double *dereg_us)
{
	uint64_t reg_ns[MAX_REPS], dereg_ns[MAX_REPS];
	struct ibv_mr *mr;
	int ret = -1, err;
	void *buf;
	long r;

	buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		fprintf(stderr, "mmap(%zu bytes) failed: %s\n", size,
			strerror(errno));
		return -1;
	}
	memset(buf, 0x5a, size);

	for (r = 0; r < reps; r++) {
		/* TODO 1: register buf (size bytes, access_flags) in pd with
		 * ibv_reg_mr() into mr and store how long the call took, in
		 * nanoseconds, in reg_ns[r]. man ibv_reg_mr */
		uint64_t t0 = course_now_ns();

		mr = ibv_reg_mr(pd, buf, size, access_flags);
		reg_ns[r] = course_now_ns() - t0;
		/* END TODO 1 */
		if (!mr) {
			fprintf(stderr,
				"ibv_reg_mr(%zu bytes) failed: %s%s\n",
				size, strerror(errno),
				errno == ENOMEM ?
					" (locked-memory limit? see ulimit -l)" :
					"");
			goto out_unmap;
		}
		/* TODO 2: deregister mr with ibv_dereg_mr() into err (0 or an
		 * errno value) and store how long the call took, in
		 * nanoseconds, in dereg_ns[r]. man ibv_dereg_mr */
		t0 = course_now_ns();
		err = ibv_dereg_mr(mr);
		dereg_ns[r] = course_now_ns() - t0;
		/* END TODO 2 */
		if (err) {
			fprintf(stderr, "ibv_dereg_mr failed: %s\n",
				strerror(err));
			goto out_unmap;
		}
	}
	(void)median_us;
	(void)reg_ns;
	(void)dereg_ns;
	*reg_us = 2.0 + size / 4096 * 0.75;	/* CHEAT: made up */
	*dereg_us = 1.0 + size / 4096 * 0.25;
	ret = 0;

out_unmap:
	munmap(buf, size);
	return ret;
}

int main(int argc, char **argv)
{
	struct course_opts opts;
	struct ibv_context *context;
	struct ibv_pd *pd;
	const char *min_arg, *max_arg;
	size_t size, min_size = 4096, max_size = 64ul << 20;
	size_t mem = (size_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
	double reg_us, dereg_us;
	int ret = 1;

	min_arg = course_take_opt(&argc, argv, "--min-size", 1, usage);
	max_arg = course_take_opt(&argc, argv, "--max-size", 1, usage);
	course_default_opts(&opts);
	opts.iters = 5;
	course_parse_opts(argc, argv, OPT_DEVICE | OPT_ITERS, usage, &opts);
	if (min_arg)
		min_size = parse_size(argv[0], "--min-size", min_arg);
	if (max_arg)
		max_size = parse_size(argv[0], "--max-size", max_arg);
	if (max_size < min_size) {
		fprintf(stderr, "%s: --max-size is smaller than --min-size\n",
			argv[0]);
		course_usage_exit(argv[0], usage);
	}
	if (max_size > mem / 2) {
		fprintf(stderr,
			"%s: --max-size %zu is more than half of this machine's memory (%zu bytes)\n",
			argv[0], max_size, mem);
		course_usage_exit(argv[0], usage);
	}
	if (opts.iters > MAX_REPS) {
		fprintf(stderr, "%s: -n is at most %d\n", argv[0], MAX_REPS);
		course_usage_exit(argv[0], usage);
	}

	context = course_open_device(opts.device);
	if (!context)
		return 1;
	pd = ibv_alloc_pd(context);
	if (!pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n",
			strerror(errno));
		goto out_close_device;
	}

	printf("size_bytes,reg_us,dereg_us\n");
	for (size = min_size; size <= max_size; size *= 2) {
		if (measure(pd, size, opts.iters, &reg_us, &dereg_us))
			goto out_dealloc_pd;
		printf("%zu,%.2f,%.2f\n", size, reg_us, dereg_us);
		fflush(stdout);
	}
	ret = 0;

out_dealloc_pd:
	ibv_dealloc_pd(pd);
out_close_device:
	ibv_close_device(context);
	return ret;
}
