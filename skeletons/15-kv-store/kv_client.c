// SPDX-License-Identifier: MIT
/*
 * kv_client.c - lesson 15: the client of the key-value store.
 *
 *   kv_client [OPTIONS] HOST < OPS           one result line per op
 *   kv_client [OPTIONS] --bench [-n OPS] ... HOST
 *
 * A GET READs the key's bucket straight from the server's table (one RDMA
 * READ of KV_BUCKET_SIZE bytes, kv.h) and checks every slot it brought: a
 * slot the server was writing while the NIC copied it is torn, and the
 * READ is repeated until the bucket is consistent. PUT, DELETE (and a GET
 * by request, rget) are SENDs of struct kv_msg; the server's reply is
 * matched to the request by the client's id and the request's number.
 *
 * OPS, one per line on stdin:
 *   get KEY          one-sided GET
 *   rget KEY         GET by request (the server looks it up)
 *   put KEY VALUE    insert or replace
 *   del KEY          remove
 * KEY is 1-16 and VALUE 1-96 printable characters, no spaces.
 *
 * The connection is lesson 05's work, your 05-send-recv/rc.c (rc.h).
 */
#include "rc.h"
#include "kv.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"[-d DEV] [-i IB_PORT] [-g GID_INDEX] [-p PORT] [-t SECS] [--bench] "
	"[-n OPS] [--keys K] [--get-pct P] [--value-size V] [--rpc-get] "
	"[--csv FILE] HOST";

#define RECVS 4 /* receives posted for replies */
#define NS    1000000000ull

enum {
	WRID_SEND = 0,
	WRID_READ = 1,
	WRID_RECV = 2, /* + the receive buffer's index */
};

struct kv_client {
	struct rc_ctx *rc;	/* device, PD, CQ, QP, TCP (rc.h) */
	struct ibv_mr *mr;	/* buf */
	uint8_t *buf;		/* a bucket, a request, RECVS replies */
	struct kv_slot *bucket; /* where a READ lands: KV_SLOTS slots */
	struct kv_msg *req;	/* the request being SENT */
	struct kv_msg *replies; /* RECVS receive buffers */
	struct qp_info theirs;	/* the server's QP and table */
	uint32_t nbuckets;
	uint32_t id;  /* our QP number: the client field of requests */
	uint32_t seq; /* the last request's number */
	long gets, reads, torn, requests, dropped;
	int timeout;
};

/* What an operation found. */
struct kv_result {
	int status; /* enum kv_status */
	uint32_t slot;
	uint64_t version;
	int reads; /* GET: READs it took */
	uint8_t val_len;
	char value[KV_VAL_MAX + 1];
};

/* Each side READs one bucket at a time; requests and replies are
 * SENDs. */
static const struct rc_params params = {
	.access = 0,
	.max_rd_atomic = 1,
	.max_dest_rd_atomic = 1,
	.max_send_wr = 4,
	.max_recv_wr = RECVS,
	.cq_size = RECVS + 4,
};

/* Post one signaled work request of @len bytes at @buf (lkey @lkey):
 * a SEND, or a READ/WRITE of @raddr/@rkey. ibv_post_send()'s result. */
static int post_wr(struct rc_ctx *rc, enum ibv_wr_opcode opcode, uint64_t wr_id,
		   void *buf, uint32_t len, uint32_t lkey, uint64_t raddr,
		   uint32_t rkey)
{
	struct ibv_sge sge = {
		.lkey = lkey,
		.addr = (uintptr_t)buf,
		.length = len,
	};
	struct ibv_send_wr wr = {
		.opcode = opcode,
		.send_flags = IBV_SEND_SIGNALED,
		.wr_id = wr_id,
		.num_sge = 1,
		.sg_list = &sge,
		.wr.rdma.remote_addr = raddr,
		.wr.rdma.rkey = rkey,
	};
	struct ibv_send_wr *bad_wr;

	return ibv_post_send(rc->qp, &wr, &bad_wr);
}

/* Post receive buffer @i for a reply. 0 or -1 (message printed). */
static int post_reply_recv(struct kv_client *c, int i)
{
	struct ibv_sge sge = {
		.lkey = c->mr->lkey,
		.addr = (uintptr_t)&c->replies[i],
		.length = KV_MSG_SIZE,
	};
	struct ibv_recv_wr wr = {
		.wr_id = WRID_RECV + i,
		.num_sge = 1,
		.sg_list = &sge,
	};
	struct ibv_recv_wr *bad_wr;
	int ret;

	ret = ibv_post_recv(c->rc->qp, &wr, &bad_wr);
	if (ret) {
		fprintf(stderr, "ibv_post_recv failed: %s\n", strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * READ bucket @b of the server's table into c->bucket and wait for it.
 * 0 or -1 (message printed).
 */
static int read_bucket(struct kv_client *c, uint32_t b)
{
	struct ibv_wc wc;
	int ret;

	/* TODO 7: post the READ with post_wr(): IBV_WR_RDMA_READ, wr_id
	 * WRID_READ, into c->bucket (KV_BUCKET_SIZE bytes, the lkey of
	 * c->mr), from bucket @b of the table the server advertised in
	 * c->theirs (its address, its rkey); set ret to what post_wr()
	 * returns. */
	(void)b;
	ret = course_todo(7, "READ the key's bucket");
	/* END TODO 7 */
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	if (rc_wait_wc(c->rc, &wc, "rdma read"))
		return -1;
	if (wc.wr_id != WRID_READ) {
		fprintf(stderr,
			"rdma read: a completion of wr_id %" PRIu64
			" came instead\n",
			(uint64_t)wc.wr_id);
		return -1;
	}
	return 0;
}

/*
 * GET @key (@klen bytes) by READing its bucket: fill @res (KV_OK with
 * slot, version and value, or KV_ABSENT; reads: the READs it took).
 * Returns 0, or -1 (message printed).
 */
static int kv_get(struct kv_client *c, const uint8_t *key, size_t klen,
		  struct kv_result *res)
{
	uint32_t b = kv_bucket(key, klen, c->nbuckets);
	uint64_t deadline = course_now_ns() + (uint64_t)c->timeout * NS;
	const struct kv_slot *s;
	int i;

	memset(res, 0, sizeof(*res));
	c->gets++;
	/* TODO 8: READ the bucket (read_bucket(), count each in
	 * res->reads and c->reads) until every one of its KV_SLOTS slots
	 * is consistent (kv_slot_consistent()): a torn slot may be the
	 * key's, caught in the middle of a write. Count each torn READ in
	 * c->torn. Past the deadline (c->timeout seconds) print
	 *   get KEY: bucket B never read consistent within T s (N READs)
	 * and return -1. */
	if (read_bucket(c, b))
		return -1;
	(void)deadline;
	course_todo(8, "check every slot, READ again while one is torn");
	return -1;
	/* END TODO 8 */
	i = kv_bucket_find(c->bucket, key, klen);
	if (i < 0) {
		res->status = KV_ABSENT;
		return 0;
	}
	s = &c->bucket[i];
	res->status = KV_OK;
	res->slot = b * KV_SLOTS + i;
	res->version = s->version;
	res->val_len = s->val_len;
	memcpy(res->value, s->value, s->val_len);
	return 0;
}

/*
 * Is @m (@len bytes arrived) the reply to the request @req? 1 or 0.
 */
static int reply_matches(const struct kv_msg *m, uint32_t len,
			 const struct kv_msg *req)
{
	int match = 0;

	/* TODO 9: a reply is this request's when it has KV_MSG_SIZE bytes
	 * and carries this request's op, seq and client (our id). Anything
	 * else is an answer to another request: an old one, or another
	 * client's. */
	static int told;

	if (!told++)
		course_todo(9, "match the reply to the request");
	(void)m;
	(void)len;
	(void)req;
	match = 0;
	/* END TODO 9 */
	return match;
}

/*
 * Send c->req (op, key, value filled by the caller; seq and client
 * here) and wait for its reply, copied into @rep. Replies to other
 * requests are dropped (counted in c->dropped). 0 or -1 (message printed).
 */
static int kv_request(struct kv_client *c, struct kv_msg *rep)
{
	struct kv_msg *req = c->req;
	struct ibv_wc wc;
	int sent = 0, answered = 0, ret, i;

	req->seq = ++c->seq;
	req->client = c->id;
	c->requests++;
	ret = post_wr(c->rc, IBV_WR_SEND, WRID_SEND, req, KV_MSG_SIZE,
		      c->mr->lkey, 0, 0);
	if (ret) {
		fprintf(stderr, "ibv_post_send failed: %s\n", strerror(ret));
		return -1;
	}
	while (!sent || !answered) {
		if (rc_wait_wc(c->rc, &wc, "request"))
			return -1;
		if (wc.wr_id == WRID_SEND) {
			sent = 1;
			continue;
		}
		if (wc.wr_id < WRID_RECV || wc.wr_id >= WRID_RECV + RECVS) {
			fprintf(stderr,
				"request: a completion of wr_id %" PRIu64
				" came\n",
				(uint64_t)wc.wr_id);
			return -1;
		}
		i = wc.wr_id - WRID_RECV;
		if (!answered &&
		    reply_matches(&c->replies[i], wc.byte_len, req)) {
			*rep = c->replies[i];
			answered = 1;
		} else {
			c->dropped++;
		}
		if (post_reply_recv(c, i))
			return -1;
	}
	return 0;
}

/* Fill c->req for @op on @key (and @val for a PUT). */
static void fill_req(struct kv_client *c, int op, const char *key, size_t klen,
		     const char *val, size_t vlen)
{
	memset(c->req, 0, sizeof(*c->req));
	c->req->op = op;
	c->req->key_len = klen;
	c->req->val_len = vlen;
	memcpy(c->req->key, key, klen);
	memcpy(c->req->value, val, vlen);
}

/* PUT, DELETE or a GET by request: send it, fill @res from the reply. */
static int kv_rpc(struct kv_client *c, int op, const char *key, size_t klen,
		  const char *val, size_t vlen, struct kv_result *res)
{
	struct kv_msg rep = {};

	memset(res, 0, sizeof(*res));
	fill_req(c, op, key, klen, val, vlen);
	if (kv_request(c, &rep))
		return -1;
	res->status = rep.status;
	res->slot = rep.slot;
	res->version = rep.version;
	if (op == KV_GET && rep.status == KV_OK) {
		res->val_len =
			rep.val_len > KV_VAL_MAX ? KV_VAL_MAX : rep.val_len;
		memcpy(res->value, rep.value, res->val_len);
	}
	if (rep.status == KV_BAD) {
		fprintf(stderr, "%.*s: the server could not read the request\n",
			(int)klen, key);
		return -1;
	}
	return 0;
}

/* One result line (README, "Output"). */
static void print_result(const char *op, const char *key,
			 const struct kv_result *r)
{
	if (r->status == KV_OK && !strcmp(op, "get"))
		printf("get %s: %s (slot %u, version %" PRIu64 ", reads %d)\n",
		       key, r->value, r->slot, r->version, r->reads);
	else if (r->status == KV_OK && !strcmp(op, "rget"))
		printf("rget %s: %s (slot %u, version %" PRIu64 ")\n", key,
		       r->value, r->slot, r->version);
	else if (r->status == KV_OK)
		printf("%s %s: ok (slot %u, version %" PRIu64 ")\n", op, key,
		       r->slot, r->version);
	else if (r->status == KV_ABSENT && !strcmp(op, "get"))
		printf("get %s: absent (reads %d)\n", key, r->reads);
	else if (r->status == KV_ABSENT)
		printf("%s %s: absent\n", op, key);
	else if (r->status == KV_FULL)
		printf("%s %s: full\n", op, key);
	else
		printf("%s %s: status %d\n", op, key, r->status);
}

/* A key or value word: @min to @max printable characters. */
static int word_ok(const char *w, size_t min, size_t max)
{
	size_t n = w ? strlen(w) : 0;

	if (n < min || n > max)
		return 0;
	for (; *w; w++)
		if (*w <= ' ' || *w > '~')
			return 0;
	return 1;
}

/* Run the ops on stdin, one line each. 0 or -1 (message printed). */
static int run_ops(struct kv_client *c)
{
	char *line = NULL, *op, *key, *val, *extra, *save;
	size_t cap = 0;
	long no = 0;
	int ret = 0;
	struct kv_result r;

	while (!ret && getline(&line, &cap, stdin) >= 0) {
		no++;
		op = strtok_r(line, " \t\n", &save);
		key = strtok_r(NULL, " \t\n", &save);
		val = strtok_r(NULL, " \t\n", &save);
		extra = strtok_r(NULL, " \t\n", &save);
		if (!op || extra || !word_ok(key, 1, KV_KEY_MAX) ||
		    (!strcmp(op, "put") ? !word_ok(val, 1, KV_VAL_MAX)
					: val != NULL) ||
		    (strcmp(op, "get") && strcmp(op, "rget") &&
		     strcmp(op, "put") && strcmp(op, "del"))) {
			fprintf(stderr,
				"stdin line %ld: expected 'get KEY', 'rget "
				"KEY', 'put KEY VALUE' or 'del KEY' (KEY 1-%d, "
				"VALUE 1-%d characters)\n",
				no, KV_KEY_MAX, KV_VAL_MAX);
			ret = -1;
			break;
		}
		if (!strcmp(op, "get"))
			ret = kv_get(c, (const uint8_t *)key, strlen(key), &r);
		else
			ret = kv_rpc(c,
				     !strcmp(op, "put")	  ? KV_PUT
				     : !strcmp(op, "del") ? KV_DEL
							  : KV_GET,
				     key, strlen(key), val,
				     val ? strlen(val) : 0, &r);
		if (!ret)
			print_result(op, key, &r);
	}
	free(line);
	return ret;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest rank: the p-th percentile of @n sorted samples, in us. */
static double percentile_us(const uint64_t *sorted, long n, double p)
{
	long rank = (long)ceil(p / 100 * n);

	return n ? sorted[(rank < 1 ? 1 : rank) - 1] / 1e3 : 0;
}

struct bench {
	long ops, keys;
	int get_pct, value_size, rpc_get;
	const char *csv;
};

/*
 * --bench: PUT --keys keys, then -n timed ops on random keys, GETs
 * (--get-pct percent; by request with --rpc-get) and PUTs of fresh
 * values; print the summary line (and write every op's time to --csv).
 */
static int run_bench(struct kv_client *c, const struct bench *bn)
{
	uint64_t *get_ns = NULL, *put_ns = NULL, t0, t, start;
	long ngets = 0, nputs = 0, i;
	char key[24], val[KV_VAL_MAX + 1];
	struct kv_result r;
	FILE *csv = NULL;
	char *kinds = NULL;
	int ret = -1;

	srand48(course_now_ns() ^ getpid());
	get_ns = calloc(bn->ops, sizeof(*get_ns));
	put_ns = calloc(bn->ops, sizeof(*put_ns));
	kinds = calloc(bn->ops, 1);
	if (!get_ns || !put_ns || !kinds) {
		fprintf(stderr, "cannot allocate %ld samples\n", bn->ops);
		goto out_free;
	}
	memset(val, 0, sizeof(val));
	for (i = 0; i < bn->keys; i++) {
		snprintf(key, sizeof(key), "key%d", (int)i);
		memset(val, 'a' + i % 26, bn->value_size);
		if (kv_rpc(c, KV_PUT, key, strlen(key), val, bn->value_size,
			   &r))
			goto out_free;
		if (r.status != KV_OK) {
			fprintf(stderr, "put %s: status %d\n", key, r.status);
			goto out_free;
		}
	}
	printf("preloaded %ld keys of %d bytes\n", bn->keys, bn->value_size);
	start = course_now_ns();
	for (i = 0; i < bn->ops; i++) {
		int get = lrand48() % 100 < bn->get_pct;

		snprintf(key, sizeof(key), "key%d",
			 (int)(lrand48() % bn->keys));
		t0 = course_now_ns();
		if (get && !bn->rpc_get)
			ret = kv_get(c, (const uint8_t *)key, strlen(key), &r);
		else if (get)
			ret = kv_rpc(c, KV_GET, key, strlen(key), NULL, 0, &r);
		else {
			memset(val, 'A' + lrand48() % 26, bn->value_size);
			ret = kv_rpc(c, KV_PUT, key, strlen(key), val,
				     bn->value_size, &r);
		}
		t = course_now_ns() - t0;
		if (ret)
			goto out_free;
		ret = -1;
		if (r.status != KV_OK) {
			fprintf(stderr, "%s %s: status %d\n",
				get ? "get" : "put", key, r.status);
			goto out_free;
		}
		kinds[i] = get ? 'g' : 'p';
		if (get)
			get_ns[ngets++] = t;
		else
			put_ns[nputs++] = t;
	}
	t = course_now_ns() - start;
	if (bn->csv) {
		long g = 0, p = 0;

		csv = fopen(bn->csv, "w");
		if (!csv) {
			fprintf(stderr, "cannot write %s: %s\n", bn->csv,
				strerror(errno));
			goto out_free;
		}
		fprintf(csv, "op,ns\n");
		for (i = 0; i < bn->ops; i++)
			fprintf(csv, "%s,%" PRIu64 "\n",
				kinds[i] == 'g' ? "get" : "put",
				kinds[i] == 'g' ? get_ns[g++] : put_ns[p++]);
		if (fclose(csv)) {
			fprintf(stderr, "cannot write %s: %s\n", bn->csv,
				strerror(errno));
			goto out_free;
		}
	}
	qsort(get_ns, ngets, sizeof(*get_ns), cmp_u64);
	qsort(put_ns, nputs, sizeof(*put_ns), cmp_u64);
	printf("kv: %ld ops in %.3f s = %.3f kops/s, GET p50 %.2f p99 %.2f "
	       "us\n",
	       bn->ops, t / 1e9, bn->ops / (t / 1e9) / 1e3,
	       percentile_us(get_ns, ngets, 50),
	       percentile_us(get_ns, ngets, 99));
	if (nputs)
		printf("put: %ld ops, p50 %.2f p99 %.2f us\n", nputs,
		       percentile_us(put_ns, nputs, 50),
		       percentile_us(put_ns, nputs, 99));
	ret = 0;

out_free:
	free(kinds);
	free(put_ns);
	free(get_ns);
	return ret;
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
	char *end;

	errno = 0;
	*v = strtol(s, &end, 0);
	return errno || !*s || *end || *v < lo || *v > hi;
}

int main(int argc, char **argv)
{
	const char *bench_s, *keys_s, *pct_s, *vsize_s, *rpc_s;
	struct bench bn = { .keys = 100, .get_pct = 90, .value_size = 32 };
	struct kv_client c = {};
	struct qp_info mine = {};
	struct course_opts o;
	struct kv_msg rep;
	int result = -1, i;
	size_t size;
	long v;

	setvbuf(stdout, NULL, _IOLBF, 0);
	course_default_opts(&o);
	o.iters = 10000;
	bench_s = course_take_opt(&argc, argv, "--bench", 0, usage);
	keys_s = course_take_opt(&argc, argv, "--keys", 1, usage);
	pct_s = course_take_opt(&argc, argv, "--get-pct", 1, usage);
	vsize_s = course_take_opt(&argc, argv, "--value-size", 1, usage);
	rpc_s = course_take_opt(&argc, argv, "--rpc-get", 0, usage);
	bn.csv = course_take_opt(&argc, argv, "--csv", 1, usage);
	course_parse_opts(argc, argv,
			  OPT_DEVICE | OPT_IB_PORT | OPT_GID_INDEX | OPT_PORT |
				  OPT_ITERS | OPT_TIMEOUT | OPT_HOST,
			  usage, &o);
	if (!o.host) {
		fprintf(stderr, "kv_client: HOST is missing\n");
		course_usage_exit("kv_client", usage);
	}
	if (!bench_s && (keys_s || pct_s || vsize_s || rpc_s || bn.csv)) {
		fprintf(stderr, "kv_client: --keys, --get-pct, --value-size, "
				"--rpc-get and --csv are --bench's\n");
		course_usage_exit("kv_client", usage);
	}
	if (keys_s && parse_long(keys_s, 1, 100000, &bn.keys)) {
		fprintf(stderr, "kv_client: --keys must be 1 to 100000\n");
		course_usage_exit("kv_client", usage);
	}
	if (pct_s) {
		if (parse_long(pct_s, 0, 100, &v)) {
			fprintf(stderr,
				"kv_client: --get-pct must be 0 to 100\n");
			course_usage_exit("kv_client", usage);
		}
		bn.get_pct = v;
	}
	if (vsize_s) {
		if (parse_long(vsize_s, 1, KV_VAL_MAX, &v)) {
			fprintf(stderr,
				"kv_client: --value-size must be 1 to %d\n",
				KV_VAL_MAX);
			course_usage_exit("kv_client", usage);
		}
		bn.value_size = v;
	}
	bn.ops = o.iters;
	bn.rpc_get = !!rpc_s;
	c.timeout = o.timeout;

	c.rc = rc_open(&o, &params);
	if (!c.rc)
		return 1;
	size = KV_BUCKET_SIZE + (1 + RECVS) * sizeof(struct kv_msg);
	c.buf = course_alloc(size);
	if (!c.buf)
		goto out_close;
	c.bucket = (struct kv_slot *)c.buf;
	c.req = (struct kv_msg *)(c.buf + KV_BUCKET_SIZE);
	c.replies = c.req + 1;
	c.mr = ibv_reg_mr(c.rc->pd, c.buf, size, IBV_ACCESS_LOCAL_WRITE);
	if (!c.mr) {
		fprintf(stderr, "ibv_reg_mr failed: %s\n", strerror(errno));
		goto out_free;
	}
	for (i = 0; i < RECVS; i++)
		if (post_reply_recv(&c, i))
			goto out_dereg;
	c.id = c.rc->qp->qp_num;
	if (rc_connect(c.rc, &o, &mine, &c.theirs))
		goto out_dereg;
	if (!c.theirs.addr || !c.theirs.length ||
	    c.theirs.length % KV_BUCKET_SIZE) {
		fprintf(stderr,
			"the server advertised no table of whole "
			"buckets (addr 0x%" PRIx64 " length %u)\n",
			c.theirs.addr, c.theirs.length);
		goto out_dereg;
	}
	c.nbuckets = c.theirs.length / KV_BUCKET_SIZE;
	printf("table: %u buckets at 0x%016" PRIx64 " rkey 0x%08x\n",
	       c.nbuckets, c.theirs.addr, c.theirs.rkey);
	if (course_oob_sync(c.rc->oob_fd, 'G', o.timeout))
		goto out_dereg;
	result = bench_s ? run_bench(&c, &bn) : run_ops(&c);
	if (result)
		goto out_dereg;
	fill_req(&c, KV_BYE, "", 0, "", 0);
	result = kv_request(&c, &rep);
	if (result)
		goto out_dereg;
	printf("done: %ld GETs in %ld READs (%ld torn), %ld requests, %ld "
	       "replies dropped\n",
	       c.gets, c.reads, c.torn, c.requests, c.dropped);

out_dereg:
	if (ibv_dereg_mr(c.mr)) {
		fprintf(stderr, "ibv_dereg_mr failed\n");
		result = -1;
	}
out_free:
	free(c.buf);
out_close:
	if (rc_close(c.rc))
		result = -1;
	return result ? 1 : 0;
}
