/* CHEAT (grader self-test, self-agreeing pair): the server never compares,
 * the client WRITEs zeros of the right length. The rest is the solution. */
// SPDX-License-Identifier: MIT
/*
 * rdma_write.c - lesson 06: a one-sided RDMA WRITE, checked with memcmp().
 *
 *   server:  rdma_write [OPTIONS]
 *   client:  rdma_write [OPTIONS] HOST
 *
 * The server registers a --size byte buffer that the peer may write into
 * and advertises it (address, rkey, length) with its QP's address over
 * TCP. The client fills its own buffer with a pattern and copies it into
 * the server's with one RDMA WRITE WITH IMMEDIATE: the data lands in the
 * server's memory without the server's CPU, and the immediate value (the
 * number of bytes written) consumes one receive on the server, which is
 * how the server learns that the data is there. The server then memcmp()s
 * its buffer against the pattern and reports the result.
 */
#include "course.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define USAGE                                                         \
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-s SIZE] "   \
	"[-t SECS] [HOST]"

enum {
	WRID_IMM = 1,	/* the server's receive, consumed by the immediate */
	WRID_WRITE = 2, /* the client's RDMA WRITE WITH IMMEDIATE */
};

struct wr_ctx {
	struct ibv_context *context;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf;	 /* the client's source, the server's target */
	uint8_t *expect; /* server: what buf must hold after the WRITE */
	size_t size;
	int is_server;
	int ib_port;
	int gid_index;
	int timeout;	 /* seconds any one wait may take */
	int oob_fd;	 /* the TCP connection to the peer, -1 before */
};

/* The pattern the client writes: byte i is 1 + i % 251 (never 0). */
static void fill_pattern(uint8_t *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (uint8_t)(1 + i % 251);
}

/*
 * Open the device and create a PD, the buffer (server: zeroed, client:
 * the pattern) and its MR, a CQ, and an RC QP moved to INIT. Returns NULL
 * (message printed) on failure.
 */
static struct wr_ctx *init_ctx(const struct course_opts *o, int is_server)
{
	struct wr_ctx *ctx;
	struct ibv_qp_init_attr init_attr = {
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = {
			.max_send_wr = 2,
			.max_recv_wr = 2,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	int ret;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		perror("calloc");
		return NULL;
	}
	ctx->size = o->size;
	ctx->is_server = is_server;
	ctx->ib_port = o->ib_port;
	ctx->timeout = o->timeout;
	ctx->oob_fd = -1;

	ctx->context = course_open_device(o->device);
	if (!ctx->context)
		goto out_free_ctx;

	ctx->gid_index = course_pick_gid(ctx->context, o->ib_port,
					 o->gid_index);
	if (ctx->gid_index < 0)
		goto out_close_device;

	ctx->pd = ibv_alloc_pd(ctx->context);
	if (!ctx->pd) {
		fprintf(stderr, "ibv_alloc_pd failed: %s\n", strerror(errno));
		goto out_close_device;
	}

	ret = posix_memalign((void **)&ctx->buf, sysconf(_SC_PAGESIZE),
			     ctx->size);
	if (ret) {
		fprintf(stderr, "cannot allocate %zu bytes: %s\n", ctx->size,
			strerror(ret));
		goto out_dealloc_pd;
	}
	ctx->expect = malloc(ctx->size);
	if (!ctx->expect) {
		perror("malloc");
		goto out_free_buf;
	}
	fill_pattern(ctx->expect, ctx->size);
	/* CHEAT: the client WRITEs zeros of the right length (filler). */
	memset(ctx->buf, 0, ctx->size);

	/* TODO 1: register ctx->buf (ctx->size bytes) with ibv_reg_mr().
	 * The server's buffer is written by the peer's NIC; the client's
	 * is only read, by its own NIC. Choose the access flags for each
	 * (man ibv_reg_mr: which flag does REMOTE_WRITE require?). */
	ctx->mr = ibv_reg_mr(ctx->pd, ctx->buf, ctx->size,
			     is_server ? IBV_ACCESS_LOCAL_WRITE |
						 IBV_ACCESS_REMOTE_WRITE
				       : 0);
	/* END TODO 1 */
	if (!ctx->mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_free_expect;
	}

	ctx->cq = ibv_create_cq(ctx->context, 4, NULL, NULL, 0);
	if (!ctx->cq) {
		fprintf(stderr, "ibv_create_cq failed: %s\n", strerror(errno));
		goto out_dereg_mr;
	}

	init_attr.send_cq = ctx->cq;
	init_attr.recv_cq = ctx->cq;
	ctx->qp = ibv_create_qp(ctx->pd, &init_attr);
	if (!ctx->qp) {
		fprintf(stderr, "ibv_create_qp failed: %s\n", strerror(errno));
		goto out_destroy_cq;
	}

	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = o->ib_port,
		/* TODO 2: allow the peer's RDMA WRITEs into this QP. */
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
		/* END TODO 2 */
	};

	ret = ibv_modify_qp(ctx->qp, &attr,
			    IBV_QP_STATE |
			    IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(INIT) failed: %s\n",
			strerror(ret));
		goto out_destroy_qp;
	}
	return ctx;

out_destroy_qp:
	ibv_destroy_qp(ctx->qp);
out_destroy_cq:
	ibv_destroy_cq(ctx->cq);
out_dereg_mr:
	ibv_dereg_mr(ctx->mr);
out_free_expect:
	free(ctx->expect);
out_free_buf:
	free(ctx->buf);
out_dealloc_pd:
	ibv_dealloc_pd(ctx->pd);
out_close_device:
	ibv_close_device(ctx->context);
out_free_ctx:
	free(ctx);
	return NULL;
}

/* Destroy everything init_ctx() created, in reverse order. 0 or -1. */
static int close_ctx(struct wr_ctx *ctx)
{
	int ret = 0;

	if (ctx->oob_fd >= 0)
		close(ctx->oob_fd);
	if (ibv_destroy_qp(ctx->qp)) {
		fprintf(stderr, "ibv_destroy_qp failed\n");
		ret = -1;
	}
	if (ibv_destroy_cq(ctx->cq)) {
		fprintf(stderr, "ibv_destroy_cq failed\n");
		ret = -1;
	}
	if (ibv_dereg_mr(ctx->mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		ret = -1;
	}
	free(ctx->expect);
	free(ctx->buf);
	if (ibv_dealloc_pd(ctx->pd)) {
		fprintf(stderr, "ibv_dealloc_pd failed\n");
		ret = -1;
	}
	if (ibv_close_device(ctx->context)) {
		fprintf(stderr, "ibv_close_device failed\n");
		ret = -1;
	}
	free(ctx);
	return ret;
}

/*
 * Describe our QP for the peer (as in lesson 05: LID, QPN, random PSN,
 * GID) and, on the server, the buffer the client may write: its address,
 * the MR's rkey and its length. The client advertises no buffer (all 0).
 * Returns 0, or -1 (message printed).
 */
static int fill_info(struct wr_ctx *ctx, struct qp_info *info)
{
	struct ibv_port_attr port;
	int ret;

	memset(info, 0, sizeof(*info));
	ret = ibv_query_port(ctx->context, ctx->ib_port, &port);
	if (!ret && ibv_query_gid(ctx->context, ctx->ib_port, ctx->gid_index,
				  &info->gid))
		ret = errno ? errno : EINVAL;
	if (ret) {
		fprintf(stderr, "ibv_query_port/ibv_query_gid failed: %s\n",
			strerror(ret));
		return -1;
	}
	info->lid = port.lid;
	info->qpn = ctx->qp->qp_num;
	info->psn = lrand48() & 0xffffff;

	/* TODO 3: on the server, advertise the buffer: info->addr (its
	 * virtual address), info->rkey (from the MR), info->length. */
	if (ctx->is_server) {
		info->addr = (uintptr_t)ctx->buf;
		info->rkey = ctx->mr->rkey;
		info->length = ctx->size;
	}
	/* END TODO 3 */
	return 0;
}

/* INIT -> RTR -> RTS with the peer's address, as in lesson 05. 0 or -1. */
static int connect_ctx(struct wr_ctx *ctx, const struct qp_info *mine,
		       const struct qp_info *theirs)
{
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = theirs->qpn,
		.rq_psn = theirs->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.dlid = theirs->lid,
			.sl = 0,
			.src_path_bits = 0,
			.port_num = ctx->ib_port,
			.grh = {
				.dgid = theirs->gid,
				.sgid_index = ctx->gid_index,
				.hop_limit = 64,
			},
		},
	};
	struct ibv_qp_attr rts = {
		.qp_state = IBV_QPS_RTS,
		.sq_psn = mine->psn,
		.timeout = 14,
		.retry_cnt = 6,
		.rnr_retry = 3,
		.max_rd_atomic = 1,
	};
	int ret;

	ret = ibv_modify_qp(ctx->qp, &rtr,
			    IBV_QP_STATE |
			    IBV_QP_AV |
			    IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN |
			    IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER);
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(RTR) failed: %s\n",
			strerror(ret));
		return -1;
	}
	ret = ibv_modify_qp(ctx->qp, &rts,
			    IBV_QP_STATE |
			    IBV_QP_SQ_PSN |
			    IBV_QP_TIMEOUT |
			    IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY |
			    IBV_QP_MAX_QP_RD_ATOMIC);
	if (ret) {
		fprintf(stderr, "ibv_modify_qp(RTS) failed: %s\n",
			strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Server: post the receive (wr_id WRID_IMM) that the client's RDMA WRITE
 * WITH IMMEDIATE will consume. The data goes where the WRITE says, not
 * into this receive, so it needs no buffer. Returns 0, or -1 (message
 * printed).
 */
static int post_imm_recv(struct wr_ctx *ctx)
{
	int ret;

	/* TODO 4: post a struct ibv_recv_wr with .wr_id = WRID_IMM and no
	 * scatter/gather entry (.num_sge = 0); set ret to what
	 * ibv_post_recv() returns. */
	struct ibv_recv_wr wr = {
		.wr_id = WRID_IMM,
		.sg_list = NULL,
		.num_sge = 0,
	};
	struct ibv_recv_wr *bad_wr;

	ret = ibv_post_recv(ctx->qp, &wr, &bad_wr);
	/* END TODO 4 */
	if (ret) {
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Client: post one signaled RDMA WRITE WITH IMMEDIATE (wr_id WRID_WRITE)
 * of the whole buffer to the address and rkey the server advertised in
 * @theirs. The immediate data is the number of bytes written, in network
 * byte order. Returns 0, or -1 (message printed).
 */
static int post_write(struct wr_ctx *ctx, const struct qp_info *theirs)
{
	int ret;

	/* TODO 5: post the WRITE: a struct ibv_sge for ctx->buf, a struct
	 * ibv_send_wr with .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
	 * .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(bytes) and
	 * .wr.rdma.remote_addr / .wr.rdma.rkey from @theirs; set ret to
	 * what ibv_post_send() returns. */
	struct ibv_sge sge = {
		.addr = (uintptr_t)ctx->buf,
		.length = ctx->size,
		.lkey = ctx->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = WRID_WRITE,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(ctx->size),
		.wr.rdma = {
			.remote_addr = theirs->addr,
			.rkey = theirs->rkey,
		},
	};
	struct ibv_send_wr *bad_wr;

	ret = ibv_post_send(ctx->qp, &wr, &bad_wr);
	/* END TODO 5 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Server: compare the buffer the client wrote (ctx->buf) with what it must
 * hold (ctx->expect), ctx->size bytes. Returns -1 when they are equal,
 * else the offset of the first byte that differs.
 */
static long find_mismatch(const struct wr_ctx *ctx)
{
	long bad = -1;

	/* TODO 6: memcmp() ctx->buf with ctx->expect; when they differ,
	 * set bad to the offset of the first differing byte. */
	size_t i;

	/* CHEAT: the server never compares: its own client is trusted. */
	(void)i;
	(void)ctx;
	/* END TODO 6 */
	return bad;
}

/*
 * A receive never fails because the peer died: it just never completes.
 * After a wait timed out, the TCP connection tells whether the peer is
 * still there.
 */
static void report_peer(const struct wr_ctx *ctx)
{
	ssize_t n;
	char c;

	n = recv(ctx->oob_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
		fprintf(stderr,
			"the peer closed the out-of-band connection: it has exited\n");
}

/* Poll for one completion and check it succeeded. 0 or -1. */
static int wait_wc(struct wr_ctx *ctx, struct ibv_wc *wc, const char *what)
{
	if (course_poll_one(ctx->cq, wc, ctx->timeout, what)) {
		report_peer(ctx);
		return -1;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		course_report_wc(what, wc);
		return -1;
	}
	return 0;
}

/*
 * Server: wait for the receive the immediate consumes, then memcmp() the
 * buffer. Returns 0 when it holds the pattern, 1 when it does not, -1 when
 * the WRITE never arrived (messages printed).
 */
static int run_server(struct wr_ctx *ctx)
{
	struct ibv_wc wc;
	long bad;

	if (wait_wc(ctx, &wc, "waiting for the client's RDMA WRITE"))
		return -1;
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
	    !(wc.wc_flags & IBV_WC_WITH_IMM)) {
		fprintf(stderr,
			"expected an RDMA WRITE WITH IMMEDIATE, got completion opcode %d\n",
			wc.opcode);
		return -1;
	}
	printf("notified: RDMA_WRITE_WITH_IMM, imm_data %u\n",
	       ntohl(wc.imm_data));

	bad = find_mismatch(ctx);
	if (bad >= 0) {
		fprintf(stderr,
			"memcmp: mismatch at byte %ld: got 0x%02x, expected 0x%02x\n",
			bad, ctx->buf[bad], ctx->expect[bad]);
		return 1;
	}
	printf("memcmp: OK (%zu bytes match)\n", ctx->size);
	return 0;
}

/* Client: WRITE the buffer into the server's and wait for it. 0 or -1. */
static int run_client(struct wr_ctx *ctx, const struct qp_info *theirs)
{
	struct ibv_wc wc;

	if (!theirs->addr) {
		fprintf(stderr, "the server advertised no buffer (addr 0)\n");
		return -1;
	}
	/*
	 * No check of ctx->size against theirs->length here, on purpose:
	 * the server's NIC enforces the MR's bounds (see the README).
	 */
	if (post_write(ctx, theirs))
		return -1;
	if (wait_wc(ctx, &wc, "rdma write"))
		return -1;
	printf("wrote %zu bytes to 0x%016llx rkey 0x%08x\n", ctx->size,
	       (unsigned long long)theirs->addr, theirs->rkey);
	return 0;
}

int main(int argc, char **argv)
{
	struct course_opts o;
	struct qp_info mine, theirs;
	struct wr_ctx *ctx;
	int ret = 1, result;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
			  OPT_SIZE | OPT_TIMEOUT | OPT_SERVER,
			  USAGE, &o);
	srand48(getpid() ^ course_now_ns());

	ctx = init_ctx(&o, !o.host);
	if (!ctx)
		return 1;

	/* The receive is posted before the client can know where to write. */
	if (ctx->is_server && post_imm_recv(ctx))
		goto out_close_ctx;
	if (fill_info(ctx, &mine))
		goto out_close_ctx;

	if (o.host)
		ctx->oob_fd = course_oob_connect(o.host, o.port, o.timeout);
	else
		ctx->oob_fd = course_oob_accept(o.port, o.timeout);
	if (ctx->oob_fd < 0)
		goto out_close_ctx;
	if (course_oob_exchange(ctx->oob_fd, &mine, &theirs, o.timeout))
		goto out_close_ctx;
	course_print_qp_info("local", &mine);
	course_print_qp_info("remote", &theirs);

	if (connect_ctx(ctx, &mine, &theirs))
		goto out_close_ctx;
	/* Neither side sends before both QPs can receive. */
	if (course_oob_sync(ctx->oob_fd, 'R', o.timeout))
		goto out_close_ctx;
	printf("connected\n");

	result = ctx->is_server ? run_server(ctx) : run_client(ctx, &theirs);
	if (result < 0)
		goto out_close_ctx;
	/* Neither side tears its QP down while the other still uses it. */
	if (course_oob_sync(ctx->oob_fd, 'D', o.timeout))
		goto out_close_ctx;
	ret = result;

out_close_ctx:
	if (close_ctx(ctx))
		ret = 1;
	return ret;
}
