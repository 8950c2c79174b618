// SPDX-License-Identifier: MIT
/*
 * failures.c - lesson 09: the failure lab. Predict, provoke, observe.
 *
 *   failures [OPTIONS] EXPERIMENT     run one experiment
 *   failures --list                   the experiments, one a line
 *   failures --predictions            your predictions (predictions.c)
 *
 * Every experiment builds the same working lab - two RC queue pairs of this
 * process, A and B, connected to each other on one port by the RC layer
 * (rc_open(), rc_connect_pair()), each with a registered buffer - breaks
 * exactly one thing, and prints what it observed on one line:
 *
 *   EXPERIMENT: succeeded
 *   EXPERIMENT: CALL failed: ERRNAME (strerror)
 *   EXPERIMENT: completion on A|B: IBV_WC_NAME (ibv_wc_status_str, status N, vendor_err 0xV)
 *   EXPERIMENT: async event: IBV_EVENT_NAME (ibv_event_type_str)
 *   EXPERIMENT: peer read: old contents|new contents|other contents
 *   EXPERIMENT: no completion on A|B within N s
 *
 * With --hold the program stops itself (SIGSTOP) after that line, before it
 * cleans up, so that the kernel's view can be read (rdma resource show qp);
 * `kill -CONT PID` lets it finish.
 */
#define _GNU_SOURCE
#include "rc.h"
#include "predictions.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-t SECS] [--hold] "
	"(--list | --predictions | EXPERIMENT)";

#define A_SIZE 8192 /* A's buffer: twice B's, for write-past-end */
#define B_SIZE 4096
#define MSG 64	    /* bytes of an ordinary SEND or WRITE */

enum {
	WRID_SEND = 1,
	WRID_RECV = 2,
	WRID_WRITE = 3,
	WRID_READ = 4,
};

/* The lab: two connected QPs of this process and their buffers. */
struct lab {
	const char *name; /* the experiment's, for its line */
	struct rc_ctx *a, *b;
	struct ibv_mr *mr_a, *mr_b;
	uint8_t *buf_a, *buf_b;
	int timeout;
};

/* What every experiment's QPs allow and hold (rc.h). */
static const struct rc_params base_params = {
	.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		  IBV_ACCESS_REMOTE_READ,
	.max_rd_atomic = 1,
	.max_dest_rd_atomic = 1,
	.max_send_wr = 8,
	.max_recv_wr = 8,
};

/* ---- reporting: the one line ------------------------------------------- */

/*
 * wc_status_name - the enumerator's name of @status, exactly as
 * <infiniband/verbs.h> spells it ("IBV_WC_REM_ACCESS_ERR"), or
 * "IBV_WC_?" for a value the header does not have. Read the names and
 * their order from the header (enum ibv_wc_status), not from a slide:
 * the numbers are the positions in that enum.
 */
static const char *wc_status_name(enum ibv_wc_status status)
{
	/* TODO 2: return the name of each status of enum ibv_wc_status in
	 * /usr/include/infiniband/verbs.h (a switch, or an array indexed by
	 * the number). */
	(void)status;
	return "IBV_WC_?";
	/* END TODO 2 */
}

/* "EXP: CALL failed: ERRNAME (strerror)"; @err is an errno value. */
static void report_call(const struct lab *lab, const char *call, int err)
{
	printf("%s: %s failed: %s (%s)\n", lab->name, call,
	       strerrorname_np(err) ? strerrorname_np(err) : "E?",
	       strerror(err));
}

/* "EXP: completion on SIDE: NAME (words, status N, vendor_err 0xV)" */
static void report_wc(const struct lab *lab, const char *side,
		      const struct ibv_wc *wc)
{
	printf("%s: completion on %s: %s (%s, status %d, vendor_err 0x%x)\n",
	       lab->name, side, wc_status_name(wc->status),
	       ibv_wc_status_str(wc->status), wc->status, wc->vendor_err);
}

static void report_event(const struct lab *lab,
			 const struct ibv_async_event *ev)
{
	printf("%s: async event: %s (%s)\n", lab->name,
	       course_event_name(ev->event_type),
	       ibv_event_type_str(ev->event_type));
}

static void report_ok(const struct lab *lab)
{
	printf("%s: succeeded\n", lab->name);
}

/* ---- observing -------------------------------------------------------------- */

/*
 * Wait up to @ms milliseconds for an asynchronous event on @ctx; read and
 * acknowledge it into *ev. 1 when there was one, 0 when not, -1 on error.
 */
static int get_async_event(struct ibv_context *ctx,
			   struct ibv_async_event *ev, int ms)
{
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	int flags = fcntl(ctx->async_fd, F_GETFL);

	if (flags < 0 ||
	    fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		fprintf(stderr, "fcntl(async_fd) failed: %s\n",
			strerror(errno));
		return -1;
	}
	if (poll(&pfd, 1, ms) < 0) {
		fprintf(stderr, "poll(async_fd) failed: %s\n", strerror(errno));
		return -1;
	}
	if (!(pfd.revents & POLLIN))
		return 0;
	if (ibv_get_async_event(ctx, ev)) {
		if (errno == EAGAIN)
			return 0;
		fprintf(stderr, "ibv_get_async_event failed: %s\n",
			strerror(errno));
		return -1;
	}
	ibv_ack_async_event(ev);
	return 1;
}

/*
 * Poll @cq for one completion for up to lab->timeout seconds. 1 with *wc
 * filled, 0 when none came (the line "no completion on SIDE within N s"
 * is printed), -1 when ibv_poll_cq() failed.
 */
static int wait_wc(struct lab *lab, struct ibv_cq *cq, const char *side,
		   struct ibv_wc *wc)
{
	uint64_t start = course_now_ns(), now;
	uint64_t deadline = start + lab->timeout * 1000000000ull;
	int n;

	do {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0) {
			fprintf(stderr, "ibv_poll_cq(%s) failed\n", side);
			return -1;
		}
		if (n)
			return 1;
		now = course_now_ns();
		course_poll_pause(start, now);
	} while (now < deadline);
	printf("%s: no completion on %s within %d s\n", lab->name, side,
	       lab->timeout);
	return 0;
}

/*
 * The outcome of what A posted: A's completion; if that succeeded and
 * @recv_on_b, B's receive completion too. Prints the line.
 */
static int observe(struct lab *lab, int recv_on_b)
{
	struct ibv_wc wc;
	int n;

	n = wait_wc(lab, lab->a->cq, "A", &wc);
	if (n <= 0)
		return n;
	if (wc.status != IBV_WC_SUCCESS) {
		report_wc(lab, "A", &wc);
		return 0;
	}
	if (recv_on_b) {
		n = wait_wc(lab, lab->b->cq, "B", &wc);
		if (n <= 0)
			return n;
		if (wc.status != IBV_WC_SUCCESS) {
			report_wc(lab, "B", &wc);
			return 0;
		}
	}
	report_ok(lab);
	return 0;
}

/* ---- posting ------------------------------------------------------------ */

/* Post one receive of B_SIZE bytes into B's buffer. */
static int post_recv_b(struct lab *lab)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)lab->buf_b,
		.length = B_SIZE,
		.lkey = lab->mr_b->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = WRID_RECV,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_recv_wr *bad;
	int ret;

	ret = ibv_post_recv(lab->b->qp, &wr, &bad);
	if (ret)
		fprintf(stderr, "ibv_post_recv(B) failed: %s\n", strerror(ret));
	return ret;
}

/*
 * Post one signaled work request on A's QP: @opcode, @num_sge entries of
 * @sge; for a WRITE or READ, to @raddr with @rkey. Returns what
 * ibv_post_send() returns.
 */
static int post_a(struct lab *lab, enum ibv_wr_opcode opcode,
		  struct ibv_sge *sge, int num_sge, uint64_t raddr,
		  uint32_t rkey)
{
	struct ibv_send_wr wr = {
		.wr_id = opcode == IBV_WR_SEND ? WRID_SEND : WRID_WRITE,
		.sg_list = sge,
		.num_sge = num_sge,
		.opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma.remote_addr = raddr,
		.wr.rdma.rkey = rkey,
	};
	struct ibv_send_wr *bad;

	return ibv_post_send(lab->a->qp, &wr, &bad);
}

/* The first MSG bytes of A's buffer, as A's MR describes them. */
static struct ibv_sge sge_a(const struct lab *lab, size_t len)
{
	return (struct ibv_sge){
		.addr = (uintptr_t)lab->buf_a,
		.length = len,
		.lkey = lab->mr_a->lkey,
	};
}

/* Post, or report the refusal as the outcome. */
static int post_or_report(struct lab *lab, int ret)
{
	if (ret)
		report_call(lab, "ibv_post_send", ret);
	return ret;
}

/* ---- the experiments -------------------------------------------------------- */

/* A SENDs from its buffer after deregistering the buffer's MR. */
static int exp_dereg_mr(struct lab *lab)
{
	struct ibv_sge sge = sge_a(lab, MSG);
	int ret;

	if (post_recv_b(lab))
		return -1;
	/* TODO 3: deregister A's MR (lab->mr_a) and set lab->mr_a to NULL,
	 * so that sge.lkey names a region that no longer exists. Set ret
	 * to what ibv_dereg_mr() returns. */
	ret = course_todo(3, "deregister A's MR");
	/* END TODO 3 */
	if (ret) {
		report_call(lab, "ibv_dereg_mr", ret);
		return 0;
	}
	if (post_or_report(lab, post_a(lab, IBV_WR_SEND, &sge, 1, 0, 0)))
		return 0;
	return observe(lab, 1);
}

/* A SENDs MSG bytes that run past the end of its MR. */
static int exp_sge_past_mr(struct lab *lab)
{
	struct ibv_sge sge = sge_a(lab, MSG);

	if (post_recv_b(lab))
		return -1;
	/* TODO 4: make sge start MSG / 2 bytes before the end of A's MR
	 * (A_SIZE bytes at lab->buf_a), so that its last MSG / 2 bytes lie
	 * outside the region. */
	course_todo(4, "make the sge run past the end of A's MR");
	/* END TODO 4 */
	if (post_or_report(lab, post_a(lab, IBV_WR_SEND, &sge, 1, 0, 0)))
		return 0;
	return observe(lab, 1);
}

/* A WRITEs into B's buffer with an rkey that is not B's MR's. */
static int exp_wrong_rkey(struct lab *lab)
{
	struct ibv_sge sge = sge_a(lab, MSG);
	uint32_t rkey = lab->mr_b->rkey;

	/* TODO 5: spoil the rkey: flip its lowest bit. */
	course_todo(5, "spoil the rkey");
	/* END TODO 5 */
	if (post_or_report(lab, post_a(lab, IBV_WR_RDMA_WRITE, &sge, 1,
				       (uintptr_t)lab->buf_b, rkey)))
		return 0;
	return observe(lab, 0);
}

/* A WRITEs into B's buffer, registered again without REMOTE_WRITE. */
static int exp_no_remote_write(struct lab *lab)
{
	struct ibv_sge sge = sge_a(lab, MSG);
	int ret;

	ret = ibv_dereg_mr(lab->mr_b);
	if (ret) {
		fprintf(stderr, "ibv_dereg_mr(B) failed: %s\n", strerror(ret));
		return -1;
	}
	/* TODO 6: register lab->buf_b (B_SIZE bytes) again in B's PD
	 * (lab->b->pd), with IBV_ACCESS_LOCAL_WRITE only. */
	lab->mr_b = NULL;
	errno = course_todo(6, "register B's buffer without REMOTE_WRITE");
	/* END TODO 6 */
	if (!lab->mr_b) {
		report_call(lab, "ibv_reg_mr", errno);
		return 0;
	}
	if (post_or_report(lab,
			   post_a(lab, IBV_WR_RDMA_WRITE, &sge, 1,
				  (uintptr_t)lab->buf_b, lab->mr_b->rkey)))
		return 0;
	return observe(lab, 0);
}

/* A WRITEs A_SIZE bytes into B's B_SIZE-byte MR. */
static int exp_write_past_end(struct lab *lab)
{
	struct ibv_sge sge = sge_a(lab, MSG);

	/* TODO 7: make the WRITE as long as A's whole buffer (A_SIZE). */
	course_todo(7, "make the WRITE A_SIZE bytes long");
	/* END TODO 7 */
	if (post_or_report(lab,
			   post_a(lab, IBV_WR_RDMA_WRITE, &sge, 1,
				  (uintptr_t)lab->buf_b, lab->mr_b->rkey)))
		return 0;
	return observe(lab, 0);
}

/*
 * A SENDs, and B has no receive posted (rnr-retry-0, rnr-retry-2: A's QP
 * has rnr_retry 0 or 2, the experiments' table says).
 */
static int exp_no_recv(struct lab *lab)
{
	struct ibv_sge sge = sge_a(lab, MSG);
	int ret;

	/* TODO 8: post A's SEND (post_a(), IBV_WR_SEND, one sge) without
	 * posting a receive on B first; set ret to what post_a() returns. */
	(void)sge;
	ret = course_todo(8, "post the SEND with no receive on B");
	/* END TODO 8 */
	if (post_or_report(lab, ret))
		return 0;
	return observe(lab, 0);
}

/* A posts a SEND while its QP is in INIT (the lab is not connected). */
static int exp_post_before_rts(struct lab *lab)
{
	struct ibv_sge sge = sge_a(lab, MSG);
	int ret;

	if (post_recv_b(lab))
		return -1;
	/* TODO 9: post A's SEND (post_a(), IBV_WR_SEND, one sge) on the QP
	 * that never left INIT; set ret to what post_a() returns. */
	(void)sge;
	ret = course_todo(9, "post the SEND on a QP in INIT");
	/* END TODO 9 */
	if (post_or_report(lab, ret))
		return 0;
	return observe(lab, 1);
}

/* A SENDs with two scatter/gather entries; its QP allows one. */
static int exp_num_sge(struct lab *lab)
{
	struct ibv_sge sge[2] = { sge_a(lab, MSG / 2), sge_a(lab, MSG / 2) };
	int ret;

	sge[1].addr += MSG / 2;
	if (post_recv_b(lab))
		return -1;
	/* TODO 10: post A's SEND with both entries of sge (num_sge 2);
	 * rc_open() created the QP with max_send_sge 1. */
	ret = course_todo(10, "post a SEND with num_sge 2");
	/* END TODO 10 */
	if (post_or_report(lab, ret))
		return 0;
	return observe(lab, 1);
}

/*
 * A posts four signaled WRITEs on a CQ with room for one completion, and
 * does not poll it until the device has had time to complete them all.
 */
static int exp_cq_overrun(struct lab *lab)
{
	struct ibv_sge sge = sge_a(lab, MSG);
	struct ibv_async_event ev;
	int i, n, ret = 0;

	/* TODO 11: post four signaled WRITEs of sge to B's buffer
	 * (post_a(), IBV_WR_RDMA_WRITE, lab->buf_b, lab->mr_b->rkey) one
	 * after the other, without polling; stop at the first that fails,
	 * with ret set to what post_a() returned. */
	(void)sge;
	for (i = 0; i < 4 && !ret; i++)
		ret = course_todo(11, "post four signaled WRITEs");
	/* END TODO 11 */
	if (post_or_report(lab, ret))
		return 0;
	n = get_async_event(lab->a->context, &ev, lab->timeout * 1000);
	if (n < 0)
		return -1;
	if (n) {
		report_event(lab, &ev);
		return 0;
	}
	return observe(lab, 0);
}

/* A SENDs from a region that starts and ends at odd addresses. */
static int exp_unaligned(struct lab *lab)
{
	uint8_t *odd = lab->buf_a + 1;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	int ret;

	course_fill_pattern(odd, MSG - 1, 9);
	/* TODO 12: register MSG - 1 bytes at odd (one byte past a page
	 * boundary) in A's PD with IBV_ACCESS_LOCAL_WRITE. */
	mr = NULL;
	errno = course_todo(12, "register the unaligned region");
	/* END TODO 12 */
	if (!mr) {
		report_call(lab, "ibv_reg_mr", errno);
		return 0;
	}
	sge = (struct ibv_sge){
		.addr = (uintptr_t)odd,
		.length = MSG - 1,
		.lkey = mr->lkey,
	};
	ret = post_recv_b(lab);
	if (!ret && !post_or_report(lab, post_a(lab, IBV_WR_SEND, &sge, 1,
						0, 0)))
		ret = observe(lab, 1);
	if (ibv_dereg_mr(mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	return ret;
}

/*
 * Drop CAP_IPC_LOCK from this process's effective capabilities: root (a
 * shell in the micro-VM) has it and may pin without limit; an ordinary
 * user has not. Then the memlock limit applies to both alike.
 */
static int drop_ipc_lock(void)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data))
		return -1;
	data[0].effective &= ~(1u << CAP_IPC_LOCK);
	return syscall(SYS_capset, &hdr, data) ? -1 : 0;
}

/* A registers 1 MiB with RLIMIT_MEMLOCK lowered to 64 KiB. */
static int exp_memlock(struct lab *lab)
{
	const size_t big = 1 << 20;
	struct rlimit lim;
	struct ibv_mr *mr;
	uint8_t *buf;

	if (drop_ipc_lock()) {
		fprintf(stderr, "capset failed: %s\n", strerror(errno));
		return -1;
	}
	if (getrlimit(RLIMIT_MEMLOCK, &lim)) {
		fprintf(stderr, "getrlimit failed: %s\n", strerror(errno));
		return -1;
	}
	/* TODO 13: lower the soft limit, lim.rlim_cur, to 64 KiB and set
	 * it with setrlimit() (what `ulimit -l 64` does in a shell). */
	course_todo(13, "lower RLIMIT_MEMLOCK to 64 KiB");
	/* END TODO 13 */
	buf = course_alloc(big);
	if (!buf)
		return -1;
	mr = ibv_reg_mr(lab->a->pd, buf, big, IBV_ACCESS_LOCAL_WRITE);
	if (mr) {
		report_ok(lab);
		ibv_dereg_mr(mr);
	} else {
		report_call(lab, "ibv_reg_mr", errno);
	}
	free(buf);
	return 0;
}

/*
 * A registers a page of its own mmap()ed memory holding pattern 1; then
 * the page is unmapped and a new one mapped at the same address, holding
 * pattern 2. B READs A's region through the MR: what does it get?
 */
static int exp_munmap_remap(struct lab *lab)
{
	const size_t len = 4096;
	uint8_t *old, *page;
	struct ibv_mr *mr;
	struct ibv_sge sge = {
		.addr = (uintptr_t)lab->buf_b,
		.length = len,
		.lkey = lab->mr_b->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID_READ,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	int ret = -1, n;

	old = course_alloc(len);
	if (!old)
		return -1;
	course_fill_pattern(old, len, 1);
	page = mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED) {
		fprintf(stderr, "mmap failed: %s\n", strerror(errno));
		goto out_free_old;
	}
	memcpy(page, old, len);
	mr = ibv_reg_mr(lab->a->pd, page, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_unmap;
	}

	/* TODO 14: munmap() the page, then mmap() a new anonymous page at
	 * the same address (MAP_FIXED; assign it to page) and fill it with
	 * the second pattern (course_fill_pattern(), seed 2). On failure
	 * print the call's line and goto out_dereg_mr. */
	course_todo(14, "unmap the page and map a new one in its place");
	goto out_dereg_mr;
	/* END TODO 14 */

	wr.wr.rdma.remote_addr = (uintptr_t)mr->addr;
	wr.wr.rdma.rkey = mr->rkey;
	ret = ibv_post_send(lab->b->qp, &wr, &bad);
	if (ret) {
		report_call(lab, "ibv_post_send", ret);
		ret = 0;
		goto out_dereg_mr;
	}
	n = wait_wc(lab, lab->b->cq, "B", &wc);
	ret = n < 0 ? -1 : 0;
	if (n <= 0)
		goto out_dereg_mr;
	if (wc.status != IBV_WC_SUCCESS) {
		report_wc(lab, "B", &wc);
		goto out_dereg_mr;
	}
	printf("%s: peer read: %s\n", lab->name,
	       !memcmp(lab->buf_b, old, len)  ? "old contents" :
	       !memcmp(lab->buf_b, page, len) ? "new contents" :
						"other contents");

out_dereg_mr:
	if (ibv_dereg_mr(mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
out_unmap:
	if (page != MAP_FAILED)
		munmap(page, len);
out_free_old:
	free(old);
	return ret;
}

/* ---- the table ------------------------------------------------------------- */

struct experiment {
	const char *name;
	const char *what;
	int (*run)(struct lab *lab);
	int connect;	   /* 0: both QPs stay in INIT */
	int rnr_retry;	   /* A's rc_params.rnr_retry */
	uint32_t cq_size;  /* A's rc_params.cq_size */
};

static const struct experiment experiments[] = {
	{ "dereg-mr", "A SENDs from a buffer whose MR it deregistered",
	  exp_dereg_mr, 1, 0, 0 },
	{ "sge-past-mr", "A SENDs bytes that run past the end of its MR",
	  exp_sge_past_mr, 1, 0, 0 },
	{ "wrong-rkey", "A WRITEs into B with an rkey that is not B's MR's",
	  exp_wrong_rkey, 1, 0, 0 },
	{ "no-remote-write", "A WRITEs into an MR registered without REMOTE_WRITE",
	  exp_no_remote_write, 1, 0, 0 },
	{ "write-past-end", "A WRITEs 8192 bytes into B's 4096-byte MR",
	  exp_write_past_end, 1, 0, 0 },
	{ "rnr-retry-0", "A SENDs, B posted no receive; rnr_retry 0",
	  exp_no_recv, 1, RC_RNR_RETRY(0), 0 },
	{ "rnr-retry-2", "A SENDs, B posted no receive; rnr_retry 2",
	  exp_no_recv, 1, RC_RNR_RETRY(2), 0 },
	{ "post-before-rts", "A posts a SEND while its QP is in INIT",
	  exp_post_before_rts, 0, 0, 0 },
	{ "num-sge", "A SENDs with num_sge 2 on a QP with max_send_sge 1",
	  exp_num_sge, 1, 0, 0 },
	{ "cq-overrun", "4 signaled WRITEs on a 1-entry CQ, not polled",
	  exp_cq_overrun, 1, 0, 1 },
	{ "unaligned", "A registers and SENDs 63 bytes at an odd address",
	  exp_unaligned, 1, 0, 0 },
	{ "memlock", "A registers 1 MiB under a 64 KiB RLIMIT_MEMLOCK",
	  exp_memlock, 1, 0, 0 },
	{ "munmap-remap", "B READs a page A unmapped and mapped anew",
	  exp_munmap_remap, 1, 0, 0 },
};

#define N_EXPERIMENTS (sizeof(experiments) / sizeof(experiments[0]))

/* ---- the lab -------------------------------------------------------------- */

/*
 * Read and acknowledge the async events left on @side's context, before
 * destroying what they name; each is noted on stderr.
 */
static void drain_async_events(struct ibv_context *ctx, const char *side)
{
	struct ibv_async_event ev;

	while (get_async_event(ctx, &ev, 0) > 0)
		fprintf(stderr, "note: async event on %s: %s (%s)\n", side,
			course_event_name(ev.event_type),
			ibv_event_type_str(ev.event_type));
}

static int close_lab(struct lab *lab)
{
	int ret = 0;

	if (lab->mr_b && ibv_dereg_mr(lab->mr_b))
		ret = -1;
	if (lab->mr_a && ibv_dereg_mr(lab->mr_a))
		ret = -1;
	if (lab->b) {
		drain_async_events(lab->b->context, "B");
		if (rc_close(lab->b))
			ret = -1;
	}
	if (lab->a) {
		drain_async_events(lab->a->context, "A");
		if (rc_close(lab->a))
			ret = -1;
	}
	free(lab->buf_b);
	free(lab->buf_a);
	if (ret)
		fprintf(stderr, "closing the lab failed\n");
	return ret;
}

/* Open A and B (rc_open()), register their buffers, connect them. */
static int open_lab(struct lab *lab, const struct course_opts *o,
		    const struct experiment *e)
{
	struct rc_params pa = base_params;
	unsigned int access = IBV_ACCESS_LOCAL_WRITE |
			      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

	pa.rnr_retry = e->rnr_retry;
	pa.cq_size = e->cq_size;
	lab->a = rc_open(o, &pa);
	if (!lab->a)
		goto out_close;
	lab->b = rc_open(o, &base_params);
	if (!lab->b)
		goto out_close;
	lab->buf_a = course_alloc(A_SIZE);
	lab->buf_b = course_alloc(B_SIZE);
	if (!lab->buf_a || !lab->buf_b)
		goto out_close;
	course_fill_pattern(lab->buf_a, A_SIZE, 0);
	lab->mr_a = ibv_reg_mr(lab->a->pd, lab->buf_a, A_SIZE, access);
	lab->mr_b = ibv_reg_mr(lab->b->pd, lab->buf_b, B_SIZE, access);
	if (!lab->mr_a || !lab->mr_b) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_close;
	}
	if (e->connect && rc_connect_pair(lab->a, lab->b))
		goto out_close;
	return 0;

out_close:
	close_lab(lab);
	return -1;
}

int main(int argc, char **argv)
{
	const struct experiment *e = NULL;
	struct course_opts opts;
	struct lab lab = {};
	const char *hold, *list, *predict;
	size_t i;
	int ret;

	hold = course_take_opt(&argc, argv, "--hold", 0, usage);
	list = course_take_opt(&argc, argv, "--list", 0, usage);
	predict = course_take_opt(&argc, argv, "--predictions", 0, usage);
	course_default_opts(&opts);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX |
				  OPT_TIMEOUT | OPT_HOST,
			  usage, &opts);
	if (list || predict) {
		for (i = 0; i < N_EXPERIMENTS; i++) {
			if (list)
				printf("%-16s %s\n", experiments[i].name,
				       experiments[i].what);
			else
				printf("%s: %s\n", experiments[i].name,
				       prediction(experiments[i].name));
		}
		return 0;
	}
	for (i = 0; opts.host && i < N_EXPERIMENTS; i++)
		if (!strcmp(opts.host, experiments[i].name))
			e = &experiments[i];
	if (!e) {
		if (opts.host)
			fprintf(stderr,
				"%s: no experiment '%s' (failures --list)\n",
				argv[0], opts.host);
		else
			fprintf(stderr, "%s: which experiment?\n", argv[0]);
		course_usage_exit(argv[0], usage);
	}

	lab.name = e->name;
	lab.timeout = opts.timeout;
	if (open_lab(&lab, &opts, e))
		return 1;
	ret = e->run(&lab);
	fflush(stdout);
	if (!ret && hold)
		raise(SIGSTOP);
	if (close_lab(&lab))
		ret = -1;
	return ret ? 1 : 0;
}
