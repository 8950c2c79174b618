// SPDX-License-Identifier: MIT
/*
 * verbs_spy.so - what a program really asked of libibverbs, for the grader.
 *
 * Preloaded (LD_PRELOAD) into a student's program by the grader; never part
 * of a lesson. It wraps the exported entry points, calls the real ones
 * (dlsym(RTLD_NEXT)), and records each call and its result, one line each,
 * in the file named by $VERBS_SPY_LOG (written at exit; records are kept in
 * memory so that the timings the program takes are not disturbed):
 *
 *   reg_mr len=N access=0xA ns=T ok=1|0
 *   dereg_mr len=N ns=T rc=R
 *   query_device node_guid=0x... (the value handed to the program)
 *   get_device_guid node_guid=0x...
 *   post_send qpn=Q opcode=O len=N
 *   poll_cq wc opcode=O status=S len=N
 *   query_qp qpn=Q state=S
 *   req_notify_cq solicited=S rc=R
 *   get_cq_event rc=R
 *
 * $VERBS_SPY_PAYLOAD and $VERBS_SPY_STOP_AT_RTS: see post_send, query_qp.
 * $VERBS_SPY_NOTIFY_DELAY_US=N makes ibv_req_notify_cq() sleep N us before
 * it arms the CQ: a completion that arrives meanwhile raises no event, so
 * a program that does not poll again after arming waits for ever (the lost
 * wakeup of lesson 10).
 *
 * $VERBS_SPY_NODE_GUID=HEX makes ibv_get_device_guid() and
 * ibv_query_device() return that node GUID:
 * a program that prints the GUID from sysfs instead of asking the device
 * prints the wrong one. The data path's calls (ibv_post_send, ibv_poll_cq)
 * are inline functions that jump through the context's ops table, so
 * ibv_open_device() is wrapped to put our functions in that table.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#undef ibv_reg_mr /* the header makes it a macro: wrap the function */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_CAP (1 << 20)

static char log_buf[LOG_CAP];
static size_t log_len;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void record(const char *fmt, ...)
{
	va_list ap;
	int n;

	pthread_mutex_lock(&log_lock);
	if (log_len < LOG_CAP - 256) {
		va_start(ap, fmt);
		n = vsnprintf(log_buf + log_len, LOG_CAP - log_len, fmt, ap);
		va_end(ap);
		if (n > 0 && (size_t)n < LOG_CAP - log_len)
			log_len += n;
	}
	pthread_mutex_unlock(&log_lock);
}

__attribute__((destructor)) static void flush_log(void)
{
	const char *path = getenv("VERBS_SPY_LOG");
	size_t off = 0;
	ssize_t n;
	int fd;

	if (!path)
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0666);
	if (fd < 0)
		return;
	while (off < log_len) {
		n = write(fd, log_buf + off, log_len - off);
		if (n <= 0)
			break;
		off += n;
	}
	close(fd);
	log_len = 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

#define REAL(name) \
	static __typeof__(name) *real; \
	if (!real) \
		real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			  int access)
{
	struct ibv_mr *mr;
	uint64_t t0;

	REAL(ibv_reg_mr);
	t0 = now_ns();
	mr = real(pd, addr, length, access);
	record("reg_mr len=%zu access=0x%x ns=%llu ok=%d\n", length, access,
	       (unsigned long long)(now_ns() - t0), mr != NULL);
	return mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	struct ibv_mr *mr;
	uint64_t t0;

	REAL(ibv_reg_mr_iova2);
	t0 = now_ns();
	mr = real(pd, addr, length, iova, access);
	record("reg_mr len=%zu access=0x%x ns=%llu ok=%d\n", length,
	       access & 0xffff, (unsigned long long)(now_ns() - t0), mr != NULL);
	return mr;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	size_t len = mr ? mr->length : 0;
	uint64_t t0;
	int rc;

	REAL(ibv_dereg_mr);
	t0 = now_ns();
	rc = real(mr);
	record("dereg_mr len=%zu ns=%llu rc=%d\n", len,
	       (unsigned long long)(now_ns() - t0), rc);
	return rc;
}

int ibv_query_device(struct ibv_context *context,
		     struct ibv_device_attr *device_attr)
{
	const char *guid = getenv("VERBS_SPY_NODE_GUID");
	int rc;

	REAL(ibv_query_device);
	rc = real(context, device_attr);
	if (!rc && guid)
		device_attr->node_guid = htobe64(strtoull(guid, NULL, 16));
	if (!rc)
		record("query_device node_guid=0x%016llx\n",
		       (unsigned long long)be64toh(device_attr->node_guid));
	return rc;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	const char *guid = getenv("VERBS_SPY_NODE_GUID");
	__be64 v;

	REAL(ibv_get_device_guid);
	v = real(device);
	if (guid)
		v = htobe64(strtoull(guid, NULL, 16));
	record("get_device_guid node_guid=0x%016llx\n",
	       (unsigned long long)be64toh(v));
	return v;
}

/*
 * ibv_query_qp: the state the device really reported. With
 * $VERBS_SPY_STOP_AT_RTS=N the program stops itself (SIGSTOP) once N
 * different QPs have been queried in RTS, so that the grader can ask the
 * kernel about them (rdma resource show qp) while they exist; it continues
 * with SIGCONT.
 */
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	static uint32_t rts_qpns[16];
	static int n_rts, stopped;
	const char *stop = getenv("VERBS_SPY_STOP_AT_RTS");
	int rc, i;

	REAL(ibv_query_qp);
	rc = real(qp, attr, attr_mask, init_attr);
	if (rc || !(attr_mask & IBV_QP_STATE))
		return rc;
	record("query_qp qpn=%u state=%d\n", qp->qp_num, attr->qp_state);
	if (!stop || stopped || attr->qp_state != IBV_QPS_RTS)
		return rc;
	for (i = 0; i < n_rts && rts_qpns[i] != qp->qp_num; i++)
		;
	if (i == n_rts && n_rts < 16)
		rts_qpns[n_rts++] = qp->qp_num;
	if (n_rts >= atoi(stop)) {
		stopped = 1;
		record("stopped\n");
		raise(SIGSTOP);
	}
	return rc;
}

/* ---- the data path, through the context's ops table ---------------------- */

static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *,
			     struct ibv_send_wr **);
static int (*real_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);

static int spy_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			 struct ibv_send_wr **bad)
{
	struct ibv_send_wr *w;
	uint32_t len;
	int i;

	const char *payload = getenv("VERBS_SPY_PAYLOAD");
	size_t off;

	for (w = wr; w; w = w->next) {
		for (len = 0, i = 0; i < w->num_sge; i++)
			len += w->sg_list[i].length;
		record("post_send qpn=%u opcode=%d len=%u\n", qp->qp_num,
		       w->opcode, len);
		/* $VERBS_SPY_PAYLOAD replaces the bytes of a SEND of its
		 * length: the receiver must show the grader's bytes. */
		if (payload && strlen(payload) == len &&
		    (w->opcode == IBV_WR_SEND ||
		     w->opcode == IBV_WR_SEND_WITH_IMM)) {
			for (off = 0, i = 0; i < w->num_sge; i++) {
				memcpy((void *)(uintptr_t)w->sg_list[i].addr,
				       payload + off, w->sg_list[i].length);
				off += w->sg_list[i].length;
			}
			record("payload replaced\n");
		}
	}
	return real_post_send(qp, wr, bad);
}

static int spy_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = real_poll_cq(cq, n, wc), i;

	for (i = 0; i < got; i++)
		record("poll_cq wc opcode=%d status=%d len=%u qpn=%u\n",
		       wc[i].opcode, wc[i].status, wc[i].byte_len, wc[i].qp_num);
	return got;
}

static int (*real_req_notify_cq)(struct ibv_cq *, int);

static int spy_req_notify_cq(struct ibv_cq *cq, int solicited)
{
	const char *delay = getenv("VERBS_SPY_NOTIFY_DELAY_US");
	int rc;

	if (delay)
		usleep(atoi(delay));
	rc = real_req_notify_cq(cq, solicited);
	record("req_notify_cq solicited=%d rc=%d\n", solicited, rc);
	return rc;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
		     void **cq_context)
{
	int rc;

	REAL(ibv_get_cq_event);
	rc = real(channel, cq, cq_context);
	record("get_cq_event rc=%d\n", rc);
	return rc;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct ibv_context *ctx;

	REAL(ibv_open_device);
	ctx = real(device);
	if (ctx) {
		real_post_send = ctx->ops.post_send;
		real_poll_cq = ctx->ops.poll_cq;
		real_req_notify_cq = ctx->ops.req_notify_cq;
		ctx->ops.post_send = spy_post_send;
		ctx->ops.poll_cq = spy_poll_cq;
		ctx->ops.req_notify_cq = spy_req_notify_cq;
		record("open_device %s\n", ibv_get_device_name(device));
	}
	return ctx;
}
