// SPDX-License-Identifier: MIT
/*
 * course.c - helpers every lesson shares. See course.h for the contracts.
 */
#define _GNU_SOURCE
#include "course.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

uint64_t course_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- command line ------------------------------------------------------ */

void course_default_opts(struct course_opts *o)
{
	*o = (struct course_opts){
		.device = NULL,
		.ib_port = 1,
		.gid_index = -1,
		.port = 18515,
		.iters = 1000,
		.size = 4096,
		.timeout = 10,
		.host = NULL,
	};
}

static void __attribute__((noreturn))
usage_exit(const char *prog, const char *usage, int code)
{
	FILE *f = code ? stderr : stdout;

	fprintf(f, "usage: %s %s\n", prog, usage);
	exit(code);
}

void course_usage_exit(const char *prog, const char *usage)
{
	usage_exit(prog, usage, EXIT_USAGE);
}

const char *course_take_opt(int *argc, char **argv, const char *name,
			    int has_arg, const char *usage)
{
	size_t len = strlen(name);
	const char *val = NULL;
	int i, j, skip;

	for (i = 1; i < *argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (strncmp(argv[i], name, len) ||
		    (argv[i][len] && argv[i][len] != '='))
			continue;
		if (!has_arg && argv[i][len] == '=') {
			fprintf(stderr, "%s: option '%s' takes no value\n",
				argv[0], name);
			usage_exit(argv[0], usage, EXIT_USAGE);
		} else if (!has_arg) {
			val = "";
			skip = 1;
		} else if (argv[i][len] == '=') {
			val = argv[i] + len + 1;
			skip = 1;
		} else if (i + 1 < *argc) {
			val = argv[i + 1];
			skip = 2;
		} else {
			fprintf(stderr, "%s: option '%s' needs a value\n",
				argv[0], name);
			usage_exit(argv[0], usage, EXIT_USAGE);
		}
		for (j = i; j + skip <= *argc; j++)
			argv[j] = argv[j + skip];
		*argc -= skip;
		i--;
	}
	return val;
}

static long parse_num(const char *prog, const char *usage, const char *flag,
		      const char *arg, long min, long max, int allow_suffix)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 0);
	if (allow_suffix && end != arg) {
		if (*end == 'k' || *end == 'K') {
			v *= 1024;
			end++;
		} else if (*end == 'm' || *end == 'M') {
			v *= 1024 * 1024;
			end++;
		}
	}
	if (errno || end == arg || *end || v < min || v > max) {
		fprintf(stderr,
			"%s: %s expects a number from %ld to %ld, got '%s'\n",
			prog, flag, min, max, arg);
		usage_exit(prog, usage, EXIT_USAGE);
	}
	return v;
}

void course_parse_opts(int argc, char **argv, unsigned int accept,
		       const char *usage, struct course_opts *o)
{
	static const struct option all[] = {
		{ .name = "device", .has_arg = 1, .val = 'd' },
		{ .name = "ib-port", .has_arg = 1, .val = 'i' },
		{ .name = "gid-index", .has_arg = 1, .val = 'g' },
		{ .name = "port", .has_arg = 1, .val = 'p' },
		{ .name = "iters", .has_arg = 1, .val = 'n' },
		{ .name = "size", .has_arg = 1, .val = 's' },
		{ .name = "timeout", .has_arg = 1, .val = 't' },
		{ .name = "help", .has_arg = 0, .val = 'h' },
	};
	static const unsigned int need[] = {
		OPT_DEVICE, OPT_IB_PORT, OPT_GID_INDEX, OPT_PORT,
		OPT_ITERS,  OPT_SIZE,	 OPT_TIMEOUT,	0,
	};
	struct option longopts[sizeof(all) / sizeof(all[0]) + 1] = {};
	char shortopts[32] = ":";
	const char *prog = argv[0];
	const char *env;
	size_t i, n = 0;
	int c;

	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		if (need[i] && !(accept & need[i]))
			continue;
		longopts[n++] = all[i];
		snprintf(shortopts + strlen(shortopts),
			 sizeof(shortopts) - strlen(shortopts), "%c%s",
			 all[i].val, all[i].has_arg ? ":" : "");
	}

	opterr = 0;
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			o->device = optarg;
			break;
		case 'i':
			o->ib_port = parse_num(prog, usage, "--ib-port", optarg,
					       1, 255, 0);
			break;
		case 'g':
			o->gid_index = parse_num(prog, usage, "--gid-index",
						 optarg, 0, 255, 0);
			break;
		case 'p':
			o->port = parse_num(prog, usage, "--port", optarg, 0,
					    65535, 0);
			break;
		case 'n':
			o->iters = parse_num(prog, usage, "--iters", optarg, 1,
					     100000000, 0);
			break;
		case 's':
			o->size = parse_num(prog, usage, "--size", optarg, 1,
					    1L << 30, 1);
			break;
		case 't':
			o->timeout = parse_num(prog, usage, "--timeout", optarg,
					       1, 3600, 0);
			break;
		case 'h':
			usage_exit(prog, usage, 0);
			break;
		case ':':
			fprintf(stderr, "%s: option '%s' needs a value\n", prog,
				argv[optind - 1]);
			usage_exit(prog, usage, EXIT_USAGE);
			break;
		default:
			fprintf(stderr, "%s: unknown option '%s'\n", prog,
				argv[optind - 1]);
			usage_exit(prog, usage, EXIT_USAGE);
		}
	}

	if ((accept & OPT_HOST) && optind == argc - 1) {
		o->host = argv[optind++];
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", prog,
			argv[optind]);
		usage_exit(prog, usage, EXIT_USAGE);
	}

	if (!o->device) {
		env = getenv("RDMA_DEVICE");
		if (env && *env)
			o->device = env;
	}
	if (o->gid_index < 0) {
		env = getenv("RDMA_GID_INDEX");
		if (env && *env)
			o->gid_index = parse_num(prog, usage, "$RDMA_GID_INDEX",
						 env, 0, 255, 0);
	}
}

/* ---- devices ----------------------------------------------------------- */

struct ibv_context *course_open_device(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int i, num;

	list = ibv_get_device_list(&num);
	if (!list) {
		fprintf(stderr, "ibv_get_device_list failed: %s\n",
			strerror(errno));
		return NULL;
	}
	if (num == 0) {
		fprintf(stderr,
			"no RDMA devices found (is rdma_rxe set up? run: make doctor)\n");
		goto out_free_list;
	}
	for (i = 0; i < num; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (i == num) {
		fprintf(stderr, "device '%s' not found; devices here:", name);
		for (i = 0; i < num; i++)
			fprintf(stderr, " %s", ibv_get_device_name(list[i]));
		fprintf(stderr, "\n");
		goto out_free_list;
	}
	ctx = ibv_open_device(list[i]);
	if (!ctx)
		fprintf(stderr, "ibv_open_device(%s) failed: %s\n",
			ibv_get_device_name(list[i]), strerror(errno));

out_free_list:
	ibv_free_device_list(list);
	return ctx;
}

void course_gid_str(const union ibv_gid *gid, char *buf, size_t len)
{
	const uint8_t *r = gid->raw;

	snprintf(
		buf, len,
		"%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9],
		r[10], r[11], r[12], r[13], r[14], r[15]);
}

static int gid_is_ipv4(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };

	return !memcmp(gid->raw, prefix, sizeof(prefix));
}

int course_pick_gid(struct ibv_context *ctx, int port, int want)
{
	struct ibv_port_attr pattr;
	struct ibv_gid_entry entry;
	union ibv_gid gid, zero = {};
	int i, first_valid = -1;

	if (ibv_query_port(ctx, port, &pattr)) {
		fprintf(stderr, "ibv_query_port(%d) failed: %s\n", port,
			strerror(errno));
		return -1;
	}
	if (want >= 0) {
		if (want >= pattr.gid_tbl_len ||
		    ibv_query_gid(ctx, port, want, &gid) ||
		    !memcmp(&gid, &zero, sizeof(gid))) {
			fprintf(stderr,
				"GID index %d is not valid on port %d (see: ibv_devinfo -v)\n",
				want, port);
			return -1;
		}
		return want;
	}
	for (i = 0; i < pattr.gid_tbl_len; i++) {
		if (ibv_query_gid_ex(ctx, port, i, &entry, 0))
			continue;
		if (first_valid < 0)
			first_valid = i;
		if (entry.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		    gid_is_ipv4(&entry.gid))
			return i;
	}
	if (first_valid < 0)
		fprintf(stderr, "port %d has no valid GID\n", port);
	return first_valid;
}

/* ---- the out-of-band channel (TCP) -------------------------------------- */

/* Wait until @fd is readable (POLLIN) or writable; 0, or -1 on timeout. */
static int wait_fd(int fd, short events, int timeout)
{
	struct pollfd p = { .fd = fd, .events = events };
	int ret;

	do
		ret = poll(&p, 1, timeout * 1000);
	while (ret < 0 && errno == EINTR);
	if (ret == 0)
		errno = ETIMEDOUT;
	return ret > 0 ? 0 : -1;
}

int course_oob_listen(int port)
{
	struct sockaddr_in6 addr = {
		.sin6_family = AF_INET6,
		.sin6_addr = IN6ADDR_ANY_INIT,
		.sin6_port = htons(port),
	};
	socklen_t alen = sizeof(addr);
	int one = 1, zero = 0;
	int lfd;

	lfd = socket(AF_INET6, SOCK_STREAM, 0);
	if (lfd < 0) {
		fprintf(stderr, "socket failed: %s\n", strerror(errno));
		return -1;
	}
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) ||
	    listen(lfd, 8) ||
	    getsockname(lfd, (struct sockaddr *)&addr, &alen)) {
		fprintf(stderr, "cannot listen on TCP port %d: %s\n", port,
			strerror(errno));
		close(lfd);
		return -1;
	}
	printf("listening on port %d\n", ntohs(addr.sin6_port));
	fflush(stdout);
	return lfd;
}

int course_oob_accept_on(int lfd, int timeout)
{
	int fd;

	if (wait_fd(lfd, POLLIN, timeout)) {
		fprintf(stderr, "no client connected within %d s\n", timeout);
		return -1;
	}
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		fprintf(stderr, "accept failed: %s\n", strerror(errno));
	return fd;
}

int course_oob_accept(int port, int timeout)
{
	int lfd, fd;

	lfd = course_oob_listen(port);
	if (lfd < 0)
		return -1;
	fd = course_oob_accept_on(lfd, timeout);
	close(lfd);
	return fd;
}

/*
 * One non-blocking connect() to @ai, waiting at most until @deadline: a host
 * that drops the SYN must not block us for the kernel's two minutes.
 * Returns a connected, blocking socket, or -1 with *err set.
 */
static int connect_by(const struct addrinfo *ai, uint64_t deadline, int *err)
{
	int64_t left_ms =
		((int64_t)deadline - (int64_t)course_now_ns()) / 1000000;
	struct pollfd p = { .events = POLLOUT };
	socklen_t len = sizeof(*err);
	int fd, flags;

	fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
	if (fd < 0) {
		*err = errno;
		return -1;
	}
	flags = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	if (connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		if (errno != EINPROGRESS) {
			*err = errno;
			goto out_close;
		}
		p.fd = fd;
		if (poll(&p, 1, left_ms > 0 ? left_ms : 0) != 1) {
			*err = ETIMEDOUT;
			goto out_close;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len) || *err)
			goto out_close;
	}
	fcntl(fd, F_SETFL, flags);
	return fd;

out_close:
	close(fd);
	return -1;
}

int course_oob_connect(const char *host, int port, int timeout)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *ai;
	uint64_t deadline = course_now_ns() + (uint64_t)timeout * 1000000000ull;
	char service[8];
	int fd = -1, err = 0;

	snprintf(service, sizeof(service), "%d", port);
	err = getaddrinfo(host, service, &hints, &res);
	if (err) {
		fprintf(stderr, "cannot resolve '%s': %s\n", host,
			gai_strerror(err));
		return -1;
	}
	/* The server may still be starting: retry refused connections. */
	for (;;) {
		for (ai = res; ai; ai = ai->ai_next) {
			fd = connect_by(ai, deadline, &err);
			if (fd >= 0)
				goto out_free_addr;
		}
		if (course_now_ns() >= deadline) {
			fprintf(stderr, "cannot connect to %s:%d: %s\n", host,
				port, strerror(err));
			break;
		}
		usleep(100 * 1000);
	}

out_free_addr:
	freeaddrinfo(res);
	return fd;
}

/* Full-length read/write with a deadline: the peer may be slow or gone. */
static int xfer_all(int fd, void *buf, size_t len, int is_write, int timeout)
{
	uint8_t *p = buf;
	ssize_t n;

	while (len) {
		if (wait_fd(fd, is_write ? POLLOUT : POLLIN, timeout)) {
			fprintf(stderr, "out-of-band %s timed out after %d s\n",
				is_write ? "send" : "receive", timeout);
			return -1;
		}
		n = is_write ? send(fd, p, len, MSG_NOSIGNAL)
			     : recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "out-of-band %s failed: %s\n",
				is_write ? "send" : "receive",
				n ? strerror(errno)
				  : "peer closed the connection");
			return -1;
		}
		p += n;
		len -= n;
	}
	return 0;
}

struct qp_info_wire {
	uint16_t lid;
	uint16_t pad;
	uint32_t qpn;
	uint32_t psn;
	uint8_t gid[16];
	uint64_t addr;
	uint32_t rkey;
	uint32_t length;
} __attribute__((packed));

static uint64_t to_be64(uint64_t v)
{
	return ((uint64_t)htonl(v & 0xffffffff) << 32) | htonl(v >> 32);
}

int course_oob_exchange(int fd, const struct qp_info *mine,
			struct qp_info *theirs, int timeout)
{
	struct qp_info_wire out = {
		.lid = htons(mine->lid),
		.qpn = htonl(mine->qpn),
		.psn = htonl(mine->psn),
		.addr = to_be64(mine->addr),
		.rkey = htonl(mine->rkey),
		.length = htonl(mine->length),
	}, in;

	memcpy(out.gid, mine->gid.raw, sizeof(out.gid));
	if (xfer_all(fd, &out, sizeof(out), 1, timeout) ||
	    xfer_all(fd, &in, sizeof(in), 0, timeout))
		return -1;
	*theirs = (struct qp_info){
		.lid = ntohs(in.lid),
		.qpn = ntohl(in.qpn),
		.psn = ntohl(in.psn),
		.addr = to_be64(in.addr),
		.rkey = ntohl(in.rkey),
		.length = ntohl(in.length),
	};
	memcpy(theirs->gid.raw, in.gid, sizeof(in.gid));
	return 0;
}

int course_oob_sync(int fd, char tag, int timeout)
{
	char got;

	if (xfer_all(fd, &tag, 1, 1, timeout) ||
	    xfer_all(fd, &got, 1, 0, timeout))
		return -1;
	if (got != tag) {
		fprintf(stderr,
			"out-of-band sync: expected '%c', peer sent '%c'\n",
			tag, got);
		return -1;
	}
	return 0;
}

void course_print_qp_info(const char *who, const struct qp_info *info)
{
	char gid[40];

	course_gid_str(&info->gid, gid, sizeof(gid));
	printf("%s: lid 0x%04x qpn 0x%06x psn 0x%06x gid %s", who, info->lid,
	       info->qpn, info->psn, gid);
	if (info->addr)
		printf(" addr 0x%016llx rkey 0x%08x len %u",
		       (unsigned long long)info->addr, info->rkey,
		       info->length);
	printf("\n");
}

/* ---- completions --------------------------------------------------------- */

void course_poll_pause(uint64_t start, uint64_t now)
{
	struct timespec nap = { .tv_nsec = COURSE_POLL_NAP_NS };

	if (now - start < COURSE_POLL_SPIN_NS)
		return;
	if (now - start >= COURSE_POLL_LONG_NS)
		nap.tv_nsec = COURSE_POLL_LONG_NAP_NS;
	nanosleep(&nap, NULL);
}

int course_poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int timeout,
		    const char *what)
{
	uint64_t start = course_now_ns(), now;
	uint64_t deadline = start + (uint64_t)timeout * 1000000000ull;
	int n;

	for (;;) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0) {
			fprintf(stderr, "%s: ibv_poll_cq failed\n", what);
			return -1;
		}
		if (n == 1)
			return 0;
		now = course_now_ns();
		if (now >= deadline) {
			fprintf(stderr, "%s: no completion within %d s\n", what,
				timeout);
			return -1;
		}
		course_poll_pause(start, now);
	}
}

void course_report_wc(const char *what, const struct ibv_wc *wc)
{
	fprintf(stderr,
		"%s: completion error: %s (status %d, vendor_err 0x%x)\n", what,
		ibv_wc_status_str(wc->status), wc->status, wc->vendor_err);
}

int course_wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int timeout,
		   int oob_fd, const char *what)
{
	ssize_t n;
	char c;

	if (course_poll_one(cq, wc, timeout, what)) {
		if (oob_fd < 0)
			return -1;
		n = recv(oob_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n == 0 ||
		    (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
			fprintf(stderr,
				"the peer closed the out-of-band connection: it has exited\n");
		return -1;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		course_report_wc(what, wc);
		return -1;
	}
	return 0;
}

const char *course_event_name(enum ibv_event_type type)
{
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		return "IBV_EVENT_CQ_ERR";
	case IBV_EVENT_QP_FATAL:
		return "IBV_EVENT_QP_FATAL";
	case IBV_EVENT_QP_REQ_ERR:
		return "IBV_EVENT_QP_REQ_ERR";
	case IBV_EVENT_QP_ACCESS_ERR:
		return "IBV_EVENT_QP_ACCESS_ERR";
	case IBV_EVENT_COMM_EST:
		return "IBV_EVENT_COMM_EST";
	case IBV_EVENT_SQ_DRAINED:
		return "IBV_EVENT_SQ_DRAINED";
	case IBV_EVENT_PATH_MIG:
		return "IBV_EVENT_PATH_MIG";
	case IBV_EVENT_PATH_MIG_ERR:
		return "IBV_EVENT_PATH_MIG_ERR";
	case IBV_EVENT_DEVICE_FATAL:
		return "IBV_EVENT_DEVICE_FATAL";
	case IBV_EVENT_PORT_ACTIVE:
		return "IBV_EVENT_PORT_ACTIVE";
	case IBV_EVENT_PORT_ERR:
		return "IBV_EVENT_PORT_ERR";
	case IBV_EVENT_LID_CHANGE:
		return "IBV_EVENT_LID_CHANGE";
	case IBV_EVENT_PKEY_CHANGE:
		return "IBV_EVENT_PKEY_CHANGE";
	case IBV_EVENT_SM_CHANGE:
		return "IBV_EVENT_SM_CHANGE";
	case IBV_EVENT_SRQ_ERR:
		return "IBV_EVENT_SRQ_ERR";
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return "IBV_EVENT_SRQ_LIMIT_REACHED";
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return "IBV_EVENT_QP_LAST_WQE_REACHED";
	case IBV_EVENT_CLIENT_REREGISTER:
		return "IBV_EVENT_CLIENT_REREGISTER";
	case IBV_EVENT_GID_CHANGE:
		return "IBV_EVENT_GID_CHANGE";
	case IBV_EVENT_WQ_FATAL:
		return "IBV_EVENT_WQ_FATAL";
	}
	return "IBV_EVENT_?";
}

/* ---- the skeletons' placeholder ------------------------------------------ */

int course_todo(int n, const char *what)
{
	fprintf(stderr, "%s: TODO %d is not done yet: %s\n",
		program_invocation_short_name, n, what);
	return ENOSYS;
}

/* ---- test data ---------------------------------------------------------- */

void *course_alloc(size_t len)
{
	void *p;
	int ret;

	ret = posix_memalign(&p, sysconf(_SC_PAGESIZE), len);
	if (ret) {
		fprintf(stderr, "cannot allocate %zu bytes: %s\n", len,
			strerror(ret));
		return NULL;
	}
	memset(p, 0, len);
	return p;
}

void course_fill_pattern(void *buf, size_t len, size_t seed)
{
	uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (uint8_t)(1 + (i + seed) % 251);
}

size_t course_first_diff(const void *a, const void *b, size_t len)
{
	const uint8_t *x = a, *y = b;
	size_t i;

	if (!memcmp(a, b, len))
		return len;
	for (i = 0; x[i] == y[i]; i++)
		;
	return i;
}
