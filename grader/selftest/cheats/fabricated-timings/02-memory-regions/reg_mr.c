// SPDX-License-Identifier: MIT
/*
 * reg_mr - register one buffer as a memory region and show what came back.
 *
 * usage: reg_mr [-d DEVICE] [-s SIZE] [--access LIST] [--hold SECS]
 *
 * LIST is a comma-separated list of local_write, remote_write, remote_read,
 * remote_atomic, or "none" (default: local_write). On success prints
 *
 *   mr addr 0xADDR length BYTES lkey 0xLKEY rkey 0xRKEY access LIST
 *
 * keeps the region registered for SECS seconds (--hold, default 0) and
 * exits 0. When ibv_reg_mr() refuses, prints one line
 *
 *   ibv_reg_mr(SIZE bytes, access LIST) failed: STRERROR (ERRNAME)[: HINT]
 *
 * and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "course.h"

static const char usage[] =
	"[-d DEVICE] [-s SIZE] [--access LIST] [--hold SECS]\n"
	"  LIST: comma-separated local_write,remote_write,remote_read,remote_atomic or none";

static const struct {
	const char *name;
	int flag;
} access_names[] = {
	{ "local_write", IBV_ACCESS_LOCAL_WRITE },
	{ "remote_write", IBV_ACCESS_REMOTE_WRITE },
	{ "remote_read", IBV_ACCESS_REMOTE_READ },
	{ "remote_atomic", IBV_ACCESS_REMOTE_ATOMIC },
};

#define NUM_ACCESS (sizeof(access_names) / sizeof(access_names[0]))

/* Everything this program allocates; close_ctx() releases it. */
struct reg_ctx {
	struct ibv_context *context;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	void *buf;
	size_t size;
	int access;
	char access_str[80];
};

/*
 * Turn "local_write,remote_read" into IBV_ACCESS_* flags in ctx->access and
 * the canonical spelling in ctx->access_str. Unknown names: usage, exit 2.
 */
static void parse_access(const char *prog, const char *list,
			 struct reg_ctx *ctx)
{
	char *copy = strdup(list), *save = NULL, *tok;
	size_t i;

	ctx->access = 0;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "none"))
			continue;
		for (i = 0; i < NUM_ACCESS; i++)
			if (!strcmp(tok, access_names[i].name))
				break;
		if (i == NUM_ACCESS) {
			fprintf(stderr, "%s: unknown access flag '%s'\n", prog,
				tok);
			free(copy);
			course_usage_exit(prog, usage);
		}
		ctx->access |= access_names[i].flag;
	}
	free(copy);

	ctx->access_str[0] = '\0';
	for (i = 0; i < NUM_ACCESS; i++) {
		if (!(ctx->access & access_names[i].flag))
			continue;
		if (ctx->access_str[0])
			strcat(ctx->access_str, ",");
		strcat(ctx->access_str, access_names[i].name);
	}
	if (!ctx->access_str[0])
		strcpy(ctx->access_str, "none");
}

/*
 * reg_error_hint - why did ibv_reg_mr() fail with @err, and what to do?
 * Two failures are common and deserve a sentence:
 *  - EINVAL when REMOTE_WRITE or REMOTE_ATOMIC is asked for without
 *    LOCAL_WRITE: the verbs spec requires local write access with them.
 *    The hint must name local_write.
 *  - ENOMEM (or EPERM) when the region is larger than what this process
 *    may lock in memory (RLIMIT_MEMLOCK, which root's CAP_IPC_LOCK
 *    ignores): registering pins every page. The hint must give the limit
 *    (getrlimit(RLIMIT_MEMLOCK), in KiB, or "unlimited") and the command
 *    that raises it: ulimit -l.
 * Writes the hint into @buf and returns it, or returns NULL (no hint).
 */
static const char *reg_error_hint(int err, const struct reg_ctx *ctx,
				  char *buf, size_t len)
{
	/* TODO 3: return a hint for the two cases above (NULL otherwise).
	 * man ibv_reg_mr, man getrlimit */
	struct rlimit rl;

	if (err == EINVAL && (ctx->access & (IBV_ACCESS_REMOTE_WRITE |
					     IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(ctx->access & IBV_ACCESS_LOCAL_WRITE)) {
		snprintf(buf, len,
			 "remote_write and remote_atomic need local_write as well");
		return buf;
	}
	if (err == ENOMEM || err == EPERM) {
		if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY)
			snprintf(buf, len,
				 "registering pins %zu bytes; is the locked-memory limit too low? (see ulimit -l)",
				 ctx->size);
		else
			snprintf(buf, len,
				 "registering pins %zu bytes but the locked-memory limit is %llu KiB; raise it with ulimit -l",
				 ctx->size,
				 (unsigned long long)rl.rlim_cur / 1024);
		return buf;
	}
	return NULL;
	/* END TODO 3 */
}

/*
 * init_ctx - allocate a protection domain on ctx->context, a page-aligned
 * buffer of ctx->size bytes, and register the buffer in that PD with
 * ctx->access. On failure prints one line naming the call (for
 * ibv_reg_mr: the format in the header comment, with reg_error_hint())
 * and returns -1 with everything released again; 0 on success.
 */
static int init_ctx(struct reg_ctx *ctx)
{
	const char *hint;
	char hint_buf[160];
	int err;

	/* TODO 4: allocate the protection domain ctx->pd with ibv_alloc_pd()
	 * (NULL and errno on failure). man ibv_alloc_pd */
	ctx->pd = ibv_alloc_pd(ctx->context);
	/* END TODO 4 */
	if (!ctx->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n",
			strerror(errno));
		return -1;
	}

	if (posix_memalign(&ctx->buf, sysconf(_SC_PAGESIZE), ctx->size)) {
		fprintf(stderr, "cannot allocate %zu bytes\n",
			ctx->size);
		goto out_dealloc_pd;
	}
	memset(ctx->buf, 0, ctx->size);

	/* TODO 5: register ctx->buf (ctx->size bytes, access ctx->access)
	 * in ctx->pd with ibv_reg_mr() into ctx->mr (NULL and errno on
	 * failure). man ibv_reg_mr */
	ctx->mr = ibv_reg_mr(ctx->pd, ctx->buf, ctx->size, ctx->access);
	/* END TODO 5 */
	if (!ctx->mr) {
		err = errno;
		hint = reg_error_hint(err, ctx, hint_buf, sizeof(hint_buf));
		fprintf(stderr,
			"ibv_reg_mr(%zu bytes, access %s) failed: %s (%s)%s%s\n",
			ctx->size, ctx->access_str, strerror(err),
			strerrorname_np(err) ? strerrorname_np(err) : "?",
			hint ? ": " : "", hint ? hint : "");
		goto out_free_buf;
	}
	return 0;

out_free_buf:
	free(ctx->buf);
out_dealloc_pd:
	ibv_dealloc_pd(ctx->pd);
	return -1;
}

/*
 * close_ctx - release what init_ctx() created, in reverse order: the memory
 * region (ibv_dereg_mr), then the buffer, then the protection domain
 * (ibv_dealloc_pd). A PD that still has an MR in it cannot be freed.
 * Returns 0, or -1 after printing a line naming the call that failed.
 */
static int close_ctx(struct reg_ctx *ctx)
{
	int ret = 0, err;

	/* TODO 6: deregister ctx->mr with ibv_dereg_mr() (0 or an errno
	 * value); print "ibv_dereg_mr failed: STRERROR" and set ret
	 * to -1 if it fails. man ibv_dereg_mr */
	err = ibv_dereg_mr(ctx->mr);
	if (err) {
		fprintf(stderr, "ibv_dereg_mr failed: %s\n",
			strerror(err));
		ret = -1;
	}
	/* END TODO 6 */
	free(ctx->buf);
	/* TODO 7: free the protection domain with ibv_dealloc_pd() (0 or an
	 * errno value); on failure print "ibv_dealloc_pd failed:
	 * STRERROR" and set ret to -1. man ibv_alloc_pd */
	err = ibv_dealloc_pd(ctx->pd);
	if (err) {
		fprintf(stderr, "ibv_dealloc_pd failed: %s\n",
			strerror(err));
		ret = -1;
	}
	/* END TODO 7 */
	return ret;
}

int main(int argc, char **argv)
{
	struct course_opts opts;
	struct reg_ctx ctx = {};
	const char *access, *hold;
	int ret = 1, hold_secs = 0;
	char *end;

	access = course_take_opt(&argc, argv, "--access", 1, usage);
	hold = course_take_opt(&argc, argv, "--hold", 1, usage);
	course_default_opts(&opts);
	course_parse_opts(argc, argv, OPT_DEVICE | OPT_SIZE, usage, &opts);
	parse_access(argv[0], access ? access : "local_write", &ctx);
	if (hold) {
		hold_secs = strtol(hold, &end, 10);
		if (*end || end == hold || hold_secs < 0 || hold_secs > 3600) {
			fprintf(stderr,
				"%s: --hold expects seconds from 0 to 3600, got '%s'\n",
				argv[0], hold);
			course_usage_exit(argv[0], usage);
		}
	}
	ctx.size = opts.size;

	ctx.context = course_open_device(opts.device);
	if (!ctx.context)
		return 1;
	if (init_ctx(&ctx))
		goto out_close_device;

	printf("mr addr 0x%016llx length %zu lkey 0x%08x rkey 0x%08x access %s\n",
	       (unsigned long long)(uintptr_t)ctx.mr->addr, ctx.mr->length,
	       ctx.mr->lkey, ctx.mr->rkey, ctx.access_str);
	fflush(stdout);
	if (hold_secs)
		sleep(hold_secs);

	ret = close_ctx(&ctx) ? 1 : 0;

out_close_device:
	ibv_close_device(ctx.context);
	return ret;
}
