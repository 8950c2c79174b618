// SPDX-License-Identifier: MIT
/*
 * worksheet_check.c - runs the worksheet functions of lesson 04.
 *
 *   worksheet_check            check the worksheet's own numbers; prints
 *                              PASS/FAIL per exercise, exit 0 when all pass
 *   worksheet_check --cases    read cases from stdin, one a line, and print
 *                              each followed by " -> " and what the
 *                              functions returned (the grader's way in)
 *
 * A case is a kind and its inputs (integers in C syntax, 0x... allowed):
 *
 *   A.pages ADDR LEN PAGE_SIZE                     ws_pages
 *   A.table ADDR LEN PAGE_SIZE ENTRY_SIZE          ws_table_bytes
 *   A.max   CAPACITY PAGE_SIZE ENTRY_SIZE          ws_max_registrable
 *   B.qp    MAX_SEND_WR MAX_RECV_WR WQE CQE        ws_qp_memory
 *   C.write WR_ID LADDR LKEY RADDR RKEY LENGTH     ws_fill_rdma_write
 *   D.rtt   SEND RECV POST POLL NET  (us, reals)   ws_round_trips
 *
 * This file is provided by the lesson; the exercises are in worksheet.c.
 */
#include "course.h"
#include "worksheet.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 8

struct kind {
	const char *name;	/* "A.pages" */
	const char *func;	/* "ws_pages" */
	int nargs;
	int real;		/* arguments are doubles */
};

static const struct kind kinds[] = {
	{ "A.pages", "ws_pages", 3, 0 },
	{ "A.table", "ws_table_bytes", 4, 0 },
	{ "A.max", "ws_max_registrable", 3, 0 },
	{ "B.qp", "ws_qp_memory", 4, 0 },
	{ "C.write", "ws_fill_rdma_write", 6, 0 },
	{ "D.rtt", "ws_round_trips", 5, 1 },
};

#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

struct parsed {
	const struct kind *kind;
	unsigned long long u[MAX_ARGS];
	double d[MAX_ARGS];
	char args[256];		/* the arguments as written, comma separated */
};

static const char *opcode_name(unsigned int op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
		return "IBV_WR_RDMA_WRITE";
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return "IBV_WR_RDMA_WRITE_WITH_IMM";
	case IBV_WR_SEND:
		return "IBV_WR_SEND";
	case IBV_WR_SEND_WITH_IMM:
		return "IBV_WR_SEND_WITH_IMM";
	case IBV_WR_RDMA_READ:
		return "IBV_WR_RDMA_READ";
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return "IBV_WR_ATOMIC_CMP_AND_SWP";
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return "IBV_WR_ATOMIC_FETCH_AND_ADD";
	default:
		return NULL;
	}
}

static void format_flags(char *buf, size_t len, unsigned int flags)
{
	static const struct {
		unsigned int bit;
		const char *name;
	} names[] = {
		{ IBV_SEND_FENCE, "IBV_SEND_FENCE" },
		{ IBV_SEND_SIGNALED, "IBV_SEND_SIGNALED" },
		{ IBV_SEND_SOLICITED, "IBV_SEND_SOLICITED" },
		{ IBV_SEND_INLINE, "IBV_SEND_INLINE" },
		{ IBV_SEND_IP_CSUM, "IBV_SEND_IP_CSUM" },
	};
	size_t i, n = 0;

	buf[0] = '\0';
	if (!flags) {
		snprintf(buf, len, "0");
		return;
	}
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(flags & names[i].bit))
			continue;
		n += snprintf(buf + n, len - n, "%s%s", n ? "|" : "",
			      names[i].name);
		flags &= ~names[i].bit;
	}
	if (flags)
		snprintf(buf + n, len - n, "%s0x%x", n ? "|" : "", flags);
}

static void format_ptr(char *buf, size_t len, const void *p, const void *sge)
{
	if (!p)
		snprintf(buf, len, "NULL");
	else if (sge && p == sge)
		snprintf(buf, len, "sge");
	else
		snprintf(buf, len, "%p", p);
}

/* Run one parsed case; write "key=value ..." into @out. */
static void run_case(const struct parsed *c, char *out, size_t len)
{
	const char *k = c->kind->name;
	const unsigned long long *u = c->u;

	if (!strcmp(k, "A.pages")) {
		snprintf(out, len, "pages=%llu",
			 (unsigned long long)ws_pages(u[0], u[1], u[2]));
	} else if (!strcmp(k, "A.table")) {
		snprintf(out, len, "bytes=%llu",
			 (unsigned long long)ws_table_bytes(u[0], u[1], u[2],
							    u[3]));
	} else if (!strcmp(k, "A.max")) {
		snprintf(out, len, "bytes=%llu",
			 (unsigned long long)ws_max_registrable(u[0], u[1],
								u[2]));
	} else if (!strcmp(k, "B.qp")) {
		struct ws_qp_mem m = ws_qp_memory(u[0], u[1], u[2], u[3]);

		snprintf(out, len,
			 "sq_bytes=%llu rq_bytes=%llu qp_bytes=%llu cq_entries=%llu cq_bytes=%llu",
			 (unsigned long long)m.sq_bytes,
			 (unsigned long long)m.rq_bytes,
			 (unsigned long long)m.qp_bytes,
			 (unsigned long long)m.cq_entries,
			 (unsigned long long)m.cq_bytes);
	} else if (!strcmp(k, "C.write")) {
		struct ibv_send_wr wr;
		struct ibv_sge sge;
		char next[32], sg_list[32], flags[128], op[32];
		const char *name;

		/* What a stack holds before you fill it: not zeroes. */
		memset(&wr, 0xa5, sizeof(wr));
		memset(&sge, 0xa5, sizeof(sge));
		ws_fill_rdma_write(&wr, &sge, u[0], u[1], u[2], u[3], u[4],
				   u[5]);
		format_ptr(next, sizeof(next), wr.next, NULL);
		format_ptr(sg_list, sizeof(sg_list), wr.sg_list, &sge);
		format_flags(flags, sizeof(flags), wr.send_flags);
		name = opcode_name(wr.opcode);
		if (name)
			snprintf(op, sizeof(op), "%s", name);
		else
			snprintf(op, sizeof(op), "%u", (unsigned int)wr.opcode);
		snprintf(out, len,
			 "wr_id=0x%llx next=%s sg_list=%s num_sge=%d opcode=%s send_flags=%s remote_addr=0x%llx rkey=0x%x sge.addr=0x%llx sge.length=%u sge.lkey=0x%x",
			 (unsigned long long)wr.wr_id, next, sg_list,
			 wr.num_sge, op, flags,
			 (unsigned long long)wr.wr.rdma.remote_addr,
			 wr.wr.rdma.rkey, (unsigned long long)sge.addr,
			 sge.length, sge.lkey);
	} else if (!strcmp(k, "D.rtt")) {
		struct ws_costs costs = {
			.sock_send_us = c->d[0],
			.sock_recv_us = c->d[1],
			.post_send_us = c->d[2],
			.poll_cq_us = c->d[3],
			.net_rtt_us = c->d[4],
		};
		struct ws_round_trip r = ws_round_trips(&costs);

		snprintf(out, len, "socket_us=%.6f rdma_us=%.6f speedup=%.6f",
			 r.socket_us, r.rdma_us, r.speedup);
	}
}

/* Parse "KIND ARG..." into @c; 0, or -1 with a message in @err. */
static int parse_case(const char *line, struct parsed *c, char *err,
		      size_t errlen)
{
	char copy[512], *tok, *save, *end;
	size_t i, n = 0, used = 0;

	snprintf(copy, sizeof(copy), "%s", line);
	tok = strtok_r(copy, " \t\r\n", &save);
	if (!tok) {
		snprintf(err, errlen, "empty line");
		return -1;
	}
	c->kind = NULL;
	for (i = 0; i < NKINDS; i++)
		if (!strcmp(tok, kinds[i].name))
			c->kind = &kinds[i];
	if (!c->kind) {
		snprintf(err, errlen, "unknown case kind '%s'", tok);
		return -1;
	}
	c->args[0] = '\0';
	while ((tok = strtok_r(NULL, " \t\r\n", &save))) {
		if (n == MAX_ARGS)
			break;
		errno = 0;
		if (c->kind->real)
			c->d[n] = strtod(tok, &end);
		else
			c->u[n] = strtoull(tok, &end, 0);
		if (errno || end == tok || *end || tok[0] == '-') {
			snprintf(err, errlen, "%s: bad number '%s'",
				 c->kind->name, tok);
			return -1;
		}
		used += snprintf(c->args + used, sizeof(c->args) - used,
				 "%s%s", n ? ", " : "", tok);
		if (used >= sizeof(c->args))
			used = sizeof(c->args) - 1;
		n++;
	}
	if ((int)n != c->kind->nargs) {
		snprintf(err, errlen, "%s takes %d numbers, got %zu",
			 c->kind->name, c->kind->nargs, n);
		return -1;
	}
	return 0;
}

static int run_cases(void)
{
	char line[512], err[160], out[512];
	struct parsed c;
	int lineno = 0;

	while (fgets(line, sizeof(line), stdin)) {
		lineno++;
		line[strcspn(line, "\r\n")] = '\0';
		if (!line[strspn(line, " \t")] || line[0] == '#')
			continue;
		if (parse_case(line, &c, err, sizeof(err))) {
			fprintf(stderr, "worksheet_check: line %d: %s\n",
				lineno, err);
			return EXIT_USAGE;
		}
		run_case(&c, out, sizeof(out));
		printf("%s -> %s\n", line, out);
		fflush(stdout);
	}
	return 0;
}

/* ---- the self-check: the worksheet's own numbers ------------------------ */

struct check {
	const char *line;
	const char *expect;
};

static const struct check checks[] = {
	{ "A.pages 0x7f0000000000 1073741824 4096", "pages=262144" },
	{ "A.pages 0x1800 4096 4096", "pages=2" },
	{ "A.pages 0x7f0000000fff 2 4096", "pages=2" },
	{ "A.pages 0x7f0000000000 0 4096", "pages=0" },
	{ "A.pages 0x7f0000000000 1073741824 2097152", "pages=512" },
	{ "A.table 0x7f0000000000 1073741824 4096 8", "bytes=2097152" },
	{ "A.table 0x7f0000000000 17179869184 4096 8", "bytes=33554432" },
	{ "A.max 1048576 4096 8", "bytes=536870912" },
	{ "A.max 16777216 4096 8", "bytes=8589934592" },
	{ "A.max 1048576 2097152 8", "bytes=274877906944" },
	{ "B.qp 128 64 64 32",
	  "sq_bytes=8192 rq_bytes=4096 qp_bytes=12288 cq_entries=192 cq_bytes=6144" },
	{ "B.qp 1 1 64 64",
	  "sq_bytes=64 rq_bytes=64 qp_bytes=128 cq_entries=2 cq_bytes=128" },
	{ "C.write 1 0x7f0000000000 0x1234 0x7f0010000000 0x5678 4096",
	  "wr_id=0x1 next=NULL sg_list=sge num_sge=1 opcode=IBV_WR_RDMA_WRITE send_flags=IBV_SEND_SIGNALED remote_addr=0x7f0010000000 rkey=0x5678 sge.addr=0x7f0000000000 sge.length=4096 sge.lkey=0x1234" },
	{ "D.rtt 25 25 0.5 0.5 5",
	  "socket_us=105.000000 rdma_us=6.000000 speedup=17.500000" },
};

static const struct {
	char letter;
	const char *title;
} exercises[] = {
	{ 'A', "registration cost" },
	{ 'B', "queue pair memory" },
	{ 'C', "RDMA WRITE work request" },
	{ 'D', "round trips" },
};

/* Value of @key in "k=v k=v ..." copied into @val ("" when absent). */
static void field(const char *s, const char *key, char *val, size_t len)
{
	size_t klen = strlen(key), n;
	const char *p = s;

	val[0] = '\0';
	while (*p) {
		if (!strncmp(p, key, klen) && p[klen] == '=') {
			p += klen + 1;
			n = strcspn(p, " ");
			snprintf(val, len, "%.*s", (int)n, p);
			return;
		}
		p += strcspn(p, " ");
		p += strspn(p, " ");
	}
}

/* Compare one check; print the differing fields when @verbose. 0 = pass. */
static int compare(const struct check *ck, int verbose)
{
	char out[512], err[160], key[64], want[128], got[128];
	const char *p = ck->expect;
	struct parsed c;
	size_t n;
	int bad = 0;

	if (parse_case(ck->line, &c, err, sizeof(err))) {
		fprintf(stderr, "worksheet_check: built-in case: %s\n", err);
		return -1;
	}
	run_case(&c, out, sizeof(out));
	while (*p) {
		n = strcspn(p, "=");
		snprintf(key, sizeof(key), "%.*s", (int)n, p);
		field(ck->expect, key, want, sizeof(want));
		field(out, key, got, sizeof(got));
		if (strcmp(want, got)) {
			if (verbose && !bad)
				printf("    %s(%s):\n", c.kind->func, c.args);
			if (verbose)
				printf("      %-12s expected %s, got %s\n", key,
				       want, got[0] ? got : "(nothing)");
			bad = 1;
		}
		p += strcspn(p, " ");
		p += strspn(p, " ");
	}
	return bad;
}

static int self_check(void)
{
	size_t e, i;
	int passed = 0;

	printf("lesson 04 worksheet self-check (the worksheet's own numbers)\n");
	for (e = 0; e < sizeof(exercises) / sizeof(exercises[0]); e++) {
		int total = 0, failed = 0, first = -1;

		for (i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
			if (checks[i].line[0] != exercises[e].letter)
				continue;
			total++;
			if (compare(&checks[i], 0)) {
				failed++;
				if (first < 0)
					first = i;
			}
		}
		if (!failed) {
			passed++;
			printf("Exercise %c (%s): PASS (%d of %d cases)\n",
			       exercises[e].letter, exercises[e].title, total,
			       total);
			continue;
		}
		printf("Exercise %c (%s): FAIL (%d of %d cases wrong), first:\n",
		       exercises[e].letter, exercises[e].title, failed, total);
		compare(&checks[first], 1);
	}
	printf("%d of %zu exercises pass%s\n", passed,
	       sizeof(exercises) / sizeof(exercises[0]),
	       passed == (int)(sizeof(exercises) / sizeof(exercises[0])) ?
		       "; now run: make grade LESSON=04" :
		       "");
	return passed == (int)(sizeof(exercises) / sizeof(exercises[0])) ? 0 :
									   1;
}

static const char usage[] = "[--cases]";

int main(int argc, char **argv)
{
	struct course_opts o;
	int cases;

	cases = course_take_opt(&argc, argv, "--cases", 0, usage) != NULL;
	course_default_opts(&o);
	course_parse_opts(argc, argv, 0, usage, &o);
	return cases ? run_cases() : self_check();
}
