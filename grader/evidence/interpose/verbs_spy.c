// SPDX-License-Identifier: MIT
/*
 * verbs_spy.so - what a program really asked of libibverbs, for the grader.
 *
 * Preloaded (LD_PRELOAD) into a student's program by the grader; never part
 * of a lesson. It wraps the exported entry points, calls the real ones
 * (dlsym(RTLD_NEXT)), and records each call and its result, one line each,
 * at exit (records are kept in memory so that the timings the program takes
 * are not disturbed), where the grader says:
 *
 *   $VERBS_SPY_FD=N $VERBS_SPY_KEY=HEX  (the grader's way) to the descriptor
 *       N, inherited from the grader (a file only the grader can open),
 *       each process's record followed by one line
 *         end bytes=N mac=HEX
 *       where mac is BLAKE2s-256 of the record's N bytes keyed with KEY:
 *       the grader takes only sealed records (grader/evidence/interpose/
 *       __init__.py). Before main() runs, every VERBS_SPY_* variable is
 *       read here and removed from the environment, and N is moved to a
 *       descriptor of its own choosing, closed on exec: the program is
 *       told neither where the record goes nor the key, so a line it adds
 *       or a record it forges does not verify. $VERBS_SPY_TARGET=NAME: only
 *       a process whose executable's file is NAME does any of this (not the
 *       shell a test wraps the program in).
 *   $VERBS_SPY_LOG=FILE  (by hand, to see what the grader sees) appended to
 *       FILE, without the end line.
 *
 * The record's lines:
 *
 *   reg_mr len=N access=0xA ns=T ok=1|0 addr=0x.. lkey=0x.. rkey=0x.. errno=E
 *          at=S
 *   dereg_mr len=N ns=T rc=R lkey=0x.. at=S
 *       (S: CLOCK_MONOTONIC when the call went in, T: how long it took, ns;
 *       a program's own clock reads around one call lie between the end of
 *       the call before it and the start of the call after it)
 *   query_device node_guid=0x... (the value handed to the program)
 *   get_device_guid node_guid=0x...
 *   post_send qpn=Q opcode=O len=N num_sge=K wr_id=W flags=0xF
 *             sge0=ADDR:LEN:LKEY [sge1=...] raddr=0x.. rkey=0x..
 *             cmp=0x.. swap=0x.. rc=R cpu=NS [run=NS at=NS]  (rc: what
 *             ibv_post_send returned; cpu: the process's CPU time so far,
 *             all threads; run, at: with $VERBS_SPY_EMPTY, see below)
 *   post_recv qpn=Q wr_id=W len=N rc=R
 *   poll_cq wc opcode=O status=S len=N qpn=Q wr_id=W [old=0x..] [sum=0x..]
 *             [vcsw=N] cpu=NS [run=NS at=NS]
 *   poll_empty  (only with $VERBS_SPY_EMPTY, see below)
 *             (old: an atomic's old value, as it landed in the program's
 *             buffer; sum: FNV-1a of what a READ brought)
 *   read_source qpn=Q raddr=0x.. len=N sum=0x..  (a READ of this process's
 *             own memory: what the source held when it was posted)
 *   munmap addr=0x.. len=N sum=0x..     (only of registered memory)
 *   mmap addr=0x.. len=N fixed=1 ok=1|0 (only with MAP_FIXED)
 *   get_device_list num=N;  free_device_list;  close_device rc=R
 *   query_port port=P state=S active_mtu=M link_layer=L (what it returned)
 *   query_gid port=P index=I rc=0      (ibv_query_gid_ex(), ibv_query_gid():
 *                                      the slots that answered)
 *   modify_qp qpn=Q state=S mask=0xM rc=R
 *   query_qp qpn=Q state=S
 *   req_notify_cq solicited=S rc=R
 *   get_cq_event rc=R
 *   create_qp qpn=Q type=T srq=H sq_sig_all=S max_send_wr=N max_recv_wr=N
 *             max_inline=N          (srq: the SRQ's handle + 1, 0: none)
 *   create_srq handle=H max_wr=ASKED granted=N limit=L ok=1|0
 *   modify_srq handle=H mask=0xM max_wr=N limit=L rc=R
 *   post_srq_recv handle=H wrs=K rc=R in=N   (one line per call; in: the
 *             receives in the SRQ after it, in the program's view: posted
 *             minus the receive completions it polled on the SRQ's QPs)
 *   query_srq handle=H max_wr=N limit=L rc=R (what ibv_query_srq() said)
 *   async_event type=T srq=H                 (srq: for an SRQ's event)
 *
 * and, written at exit whatever the log's size, one line per QP that
 * posted sends or received (lessons 13 and 14: thousands of work requests
 * are counted, not listed):
 *
 *   sq qpn=Q calls=C wrs=W signaled=S inline=I max_outstanding=O ...
 *
 * (stats_flush() lists its fields). Outstanding is the program's own view:
 * WRs posted minus WRs it knows complete - a signaled completion it polled
 * completes that WR and every WR posted before it on the QP (RC completes
 * in order). Whether the program kept its queue full throughout, not only
 * once, is in two histograms {outstanding: how often}, of the moments it
 * stopped posting and turned to its CQ (the QP's send CQ):
 *   fills  the WRs outstanding after its last post before a poll;
 *   waits  the WRs outstanding at a poll that brought the QP nothing,
 *          right after another that brought it nothing (the program
 *          waiting, not draining its CQ), the last of them before it
 *          posted again.
 * Both are counted when the QP posts again: what follows its last post
 * (a stream's tail, which drains the queue) is not in them.
 * $VERBS_SPY_INFLIGHT=1 also sums the local buffer of every
 * non-inline SEND/WRITE when it is posted and again when the program
 * learns it completed: a sum that changed is a buffer the program rewrote
 * while the device could still be reading it (modified_in_flight).
 *
 * $VERBS_SPY_PAYLOAD and $VERBS_SPY_STOP_AT_RTS: see post_send, query_qp.
 * $VERBS_SPY_NOTIFY_WAIT_US=N makes ibv_req_notify_cq() wait up to N us for
 * the CQ's next completion before it arms the CQ: it polls the CQ itself,
 * keeps the completion and hands it to the program's next ibv_poll_cq() of
 * that CQ (recorded then, as any other). That completion came before the
 * CQ was armed and raises no event, however fast or slow the machine: a
 * program that does not poll again after arming waits for ever (the lost
 * wakeup of lesson 10). (A fixed delay before arming, 30 ms, let the
 * lost wakeup go unseen beside a second make test: the reply came after.)
 *
 * $VERBS_SPY_EMPTY=1 also records an ibv_poll_cq() that found nothing, once
 * per run of them: `poll_empty` when no empty poll is the record's last
 * line (any other line ends a run). A wait's shape is then in the record:
 * found at the first look, after arming the CQ, after its event, or after
 * empty polls with nothing between (a spin or a nap, lesson 10). Each
 * poll_cq line then also says vcsw=N: the calling thread's voluntary
 * context switches so far (getrusage(RUSAGE_THREAD)): a thread that slept
 * between two completions without the channel (a nap before it looked)
 * has more of them; one the scheduler took the CPU from has not. The
 * post_send and poll_cq lines then also say run=NS, the time every thread
 * of the process has been runnable so far (running, or waiting for a CPU:
 * the first two fields of /proc/self/task/T/schedstat, summed; left out
 * when they cannot be read), and at=NS, CLOCK_MONOTONIC: a thread that
 * spins is runnable all the time, however many others share its CPU,
 * while one that sleeps on the channel is not (lesson 10).
 *
 * $VERBS_SPY_NODE_GUID=HEX makes ibv_get_device_guid() and
 * ibv_query_device() return that node GUID:
 * a program that prints the GUID from sysfs instead of asking the device
 * prints the wrong one. Likewise, values the grader chooses and a copy of
 * sysfs cannot know (lesson 01):
 *   $VERBS_SPY_PORT=STATE:MTU:LINK  ibv_query_port()'s state, active_mtu
 *                                   and link_layer (enum values)
 *   $VERBS_SPY_GID=HEX32:TYPE       every GID slot that holds one reads
 *                                   as HEX32 with its last two bytes the
 *                                   index, of gid_type TYPE
 *   $VERBS_SPY_DEVICE_SUFFIX=S      ibv_get_device_name() adds S
 *
 * The data path's calls (ibv_post_send, ibv_poll_cq)
 * are inline functions that jump through the context's ops table, so
 * ibv_open_device() is wrapped to put our functions in that table.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#undef ibv_reg_mr /* the header makes it a macro: wrap the function */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_CAP (1 << 20)

/* The calls' lines fill at most LOG_CAP; the slack holds the per-QP
 * lines and the seal written at exit. */
#define LOG_SLACK (1 << 16)

static char log_buf[LOG_CAP + LOG_SLACK];
static void stats_flush(void);
static size_t log_len;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the environment, read once before main() ---------------------------- */

#define ENV_MAX 16
static struct {
	char *name, *value;
} spy_vars[ENV_MAX];
static int log_fd = -1;
static uint8_t log_key[32];
static size_t log_key_len;

/* The value the grader gave VERBS_SPY_... (NULL: none): what the
 * environment held before main(), whatever the program did to it since. */
static const char *spy_env(const char *name)
{
	int i;

	for (i = 0; i < ENV_MAX && spy_vars[i].name; i++)
		if (!strcmp(spy_vars[i].name, name))
			return spy_vars[i].value;
	return NULL;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * Is this process the one the grader preloaded us for? $VERBS_SPY_TARGET
 * names the program's file (no directory): a wrapper the grader starts it
 * with (a shell that sets a limit and execs it) passes everything on
 * untouched and records nothing.
 */
static int is_target(void)
{
	const char *want = getenv("VERBS_SPY_TARGET"), *base;
	char exe[4096];
	ssize_t n;

	if (!want)
		return 1;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return 0;
	exe[n] = 0;
	base = strrchr(exe, '/');
	return !strcmp(base ? base + 1 : exe, want);
}

/* Runs before the program's own constructors and main(). */
__attribute__((constructor(101))) static void capture_env(void)
{
	extern char **environ;
	const char *fd, *key;
	char **e, *eq;
	int n = 0, i, moved;

	if (!is_target())
		return;
	for (e = environ; e && *e && n < ENV_MAX; e++) {
		if (strncmp(*e, "VERBS_SPY_", 10) || !(eq = strchr(*e, '=')))
			continue;
		spy_vars[n].name = strndup(*e, eq - *e);
		spy_vars[n].value = strdup(eq + 1);
		n++;
	}
	for (i = 0; i < n; i++)
		unsetenv(spy_vars[i].name);
	key = spy_env("VERBS_SPY_KEY");
	for (i = 0; key && key[2 * i] && key[2 * i + 1] && i < 32; i++) {
		if (hexval(key[2 * i]) < 0 || hexval(key[2 * i + 1]) < 0)
			break;
		log_key[i] = hexval(key[2 * i]) << 4 | hexval(key[2 * i + 1]);
	}
	log_key_len = i;
	fd = spy_env("VERBS_SPY_FD");
	if (fd && log_key_len == 32) {
		struct timespec ts;

		/* Somewhere the program did not put it, closed on exec. */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		moved = fcntl(atoi(fd), F_DUPFD_CLOEXEC,
			      200 + (int)(ts.tv_nsec % 700));
		if (moved >= 0) {
			close(atoi(fd));
			log_fd = moved;
		}
	}
	for (i = 0; i < n; i++)
		if (!strcmp(spy_vars[i].name, "VERBS_SPY_KEY") ||
		    !strcmp(spy_vars[i].name, "VERBS_SPY_FD"))
			memset(spy_vars[i].value, 0, strlen(spy_vars[i].value));
}

/* ---- BLAKE2s-256 (RFC 7693), keyed: the record's seal ------------------- */

static const uint32_t b2s_iv[8] = { 0x6A09E667, 0xBB67AE85, 0x3C6EF372,
				    0xA54FF53A, 0x510E527F, 0x9B05688C,
				    0x1F83D9AB, 0x5BE0CD19 };
static const uint8_t b2s_sigma[10][16] = {
	{ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 },
	{ 14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3 },
	{ 11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4 },
	{ 7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8 },
	{ 9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13 },
	{ 2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9 },
	{ 12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11 },
	{ 13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10 },
	{ 6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5 },
	{ 10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0 },
};

struct b2s {
	uint32_t h[8];
	uint64_t t;
	uint8_t buf[64];
	size_t n;
};

static uint32_t ror32(uint32_t x, int r)
{
	return x >> r | x << (32 - r);
}

static void b2s_compress(struct b2s *c, int last)
{
	uint32_t v[16], m[16];
	int i, r;

	for (i = 0; i < 16; i++)
		m[i] = (uint32_t)c->buf[4 * i] | (uint32_t)c->buf[4 * i + 1] << 8 |
		       (uint32_t)c->buf[4 * i + 2] << 16 |
		       (uint32_t)c->buf[4 * i + 3] << 24;
	for (i = 0; i < 8; i++) {
		v[i] = c->h[i];
		v[i + 8] = b2s_iv[i];
	}
	v[12] ^= (uint32_t)c->t;
	v[13] ^= (uint32_t)(c->t >> 32);
	if (last)
		v[14] = ~v[14];
#define B2S_G(a, b, cc, d, x, y)                 \
	do {                                     \
		v[a] = v[a] + v[b] + (x);        \
		v[d] = ror32(v[d] ^ v[a], 16);   \
		v[cc] = v[cc] + v[d];            \
		v[b] = ror32(v[b] ^ v[cc], 12);  \
		v[a] = v[a] + v[b] + (y);        \
		v[d] = ror32(v[d] ^ v[a], 8);    \
		v[cc] = v[cc] + v[d];            \
		v[b] = ror32(v[b] ^ v[cc], 7);   \
	} while (0)
	for (r = 0; r < 10; r++) {
		const uint8_t *s = b2s_sigma[r];

		B2S_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
		B2S_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
		B2S_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
		B2S_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
		B2S_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
		B2S_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
		B2S_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
		B2S_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
	}
#undef B2S_G
	for (i = 0; i < 8; i++)
		c->h[i] ^= v[i] ^ v[i + 8];
}

static void b2s_update(struct b2s *c, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len) {
		size_t take;

		/* The last block is compressed by b2s_final, flagged. */
		if (c->n == 64) {
			c->t += 64;
			b2s_compress(c, 0);
			c->n = 0;
		}
		take = 64 - c->n < len ? 64 - c->n : len;
		memcpy(c->buf + c->n, p, take);
		c->n += take;
		p += take;
		len -= take;
	}
}

static void b2s_init(struct b2s *c, const uint8_t *key, size_t keylen)
{
	memset(c, 0, sizeof(*c));
	memcpy(c->h, b2s_iv, sizeof(c->h));
	c->h[0] ^= 0x01010000 ^ (uint32_t)(keylen << 8) ^ 32;
	if (keylen) {
		b2s_update(c, key, keylen);
		c->n = 64;      /* the key fills one whole block, zero padded */
	}
}

static void b2s_final(struct b2s *c, uint8_t out[32])
{
	int i;

	c->t += c->n;
	memset(c->buf + c->n, 0, 64 - c->n);
	b2s_compress(c, 1);
	for (i = 0; i < 32; i++)
		out[i] = c->h[i / 4] >> (8 * (i % 4));
}

/* The record's last line is a poll_empty (VERBS_SPY_EMPTY). */
static int last_empty;

static void record(const char *fmt, ...)
{
	va_list ap;
	int n;

	pthread_mutex_lock(&log_lock);
	last_empty = 0;
	if (log_len < LOG_CAP - 256) {
		va_start(ap, fmt);
		n = vsnprintf(log_buf + log_len, LOG_CAP - log_len, fmt, ap);
		va_end(ap);
		if (n > 0 && (size_t)n < LOG_CAP - log_len)
			log_len += n;
	}
	pthread_mutex_unlock(&log_lock);
}

/* One poll_empty line per run of empty polls: under the lock, so that a
 * line another thread records between two empty polls ends the run. */
static void record_empty(void)
{
	pthread_mutex_lock(&log_lock);
	if (!last_empty && log_len < LOG_CAP - 256) {
		memcpy(log_buf + log_len, "poll_empty\n", 11);
		log_len += 11;
		last_empty = 1;
	}
	pthread_mutex_unlock(&log_lock);
}

static void write_all(int fd, const char *p, size_t len)
{
	ssize_t n;

	while (len) {
		n = write(fd, p, len);
		if (n <= 0)
			return;
		p += n;
		len -= n;
	}
}

/*
 * At exit: the record, then (the grader's way) its seal, in one write: a
 * regular file opened O_APPEND takes it whole, even with other processes
 * of the program (fork) ending at the same time.
 */
__attribute__((destructor)) static void flush_log(void)
{
	const char *path = spy_env("VERBS_SPY_LOG");
	uint8_t mac[32];
	struct b2s c;
	int fd, i;

	stats_flush();
	if (log_fd >= 0) {
		char *end = log_buf + log_len;
		size_t room = LOG_CAP + LOG_SLACK - log_len;
		int n;

		b2s_init(&c, log_key, log_key_len);
		b2s_update(&c, log_buf, log_len);
		b2s_final(&c, mac);
		n = snprintf(end, room, "end bytes=%zu mac=", log_len);
		for (i = 0; i < 32 && n > 0 && (size_t)n + 3 < room; i++)
			n += snprintf(end + n, room - n, "%02x", mac[i]);
		if (n > 0 && (size_t)n + 1 < room) {
			end[n++] = '\n';
			write_all(log_fd, log_buf, log_len + n);
		}
	}
	if (path) {
		fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0666);
		if (fd >= 0) {
			write_all(fd, log_buf, log_len);
			close(fd);
		}
	}
	log_len = 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* CPU time this process has used so far, every thread (lesson 10: the
 * CPU a wait costs, between two calls the program makes). */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* " run=NS at=NS" into buf (see $VERBS_SPY_EMPTY), or "" when
 * /proc/self/task cannot be read. */
static void runnable(char *buf, size_t size)
{
	unsigned long long run = 0, exec_ns, delay_ns;
	char path[288], text[128];
	struct dirent *d;
	DIR *dir;
	ssize_t got;
	int fd, ok = 0;

	buf[0] = 0;
	dir = opendir("/proc/self/task");
	if (!dir)
		return;
	while ((d = readdir(dir))) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat",
			 d->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		got = read(fd, text, sizeof(text) - 1);
		close(fd);
		if (got <= 0)
			continue;
		text[got] = 0;
		if (sscanf(text, "%llu %llu", &exec_ns, &delay_ns) != 2)
			continue;
		run += exec_ns + delay_ns;
		ok = 1;
	}
	closedir(dir);
	if (ok)
		snprintf(buf, size, " run=%llu at=%llu", run,
			 (unsigned long long)now_ns());
}

#define REAL(name) \
	static __typeof__(name) *real; \
	if (!real) \
		real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

/* The MRs this process registered: where their memory is. */
#define MAX_MRS 256
static struct {
	uintptr_t addr;
	size_t len;
	uint32_t lkey;
} mrs[MAX_MRS];
static int n_mrs;

static void mr_added(const struct ibv_mr *mr)
{
	pthread_mutex_lock(&log_lock);
	if (n_mrs < MAX_MRS) {
		mrs[n_mrs].addr = (uintptr_t)mr->addr;
		mrs[n_mrs].len = mr->length;
		mrs[n_mrs].lkey = mr->lkey;
		n_mrs++;
	}
	pthread_mutex_unlock(&log_lock);
}

static void mr_removed(uint32_t lkey)
{
	int i;

	pthread_mutex_lock(&log_lock);
	for (i = 0; i < n_mrs; i++)
		if (mrs[i].lkey == lkey) {
			mrs[i] = mrs[--n_mrs];
			break;
		}
	pthread_mutex_unlock(&log_lock);
}

/* Does [addr, addr + len) overlap memory this process registered? */
static int registered(uintptr_t addr, size_t len)
{
	int i, hit = 0;

	pthread_mutex_lock(&log_lock);
	for (i = 0; i < n_mrs && !hit; i++)
		hit = addr < mrs[i].addr + mrs[i].len &&
		      mrs[i].addr < addr + len;
	pthread_mutex_unlock(&log_lock);
	return hit;
}

/*
 * FNV-1a of [addr, addr + len) of this process, read with
 * process_vm_readv() so that memory that is not mapped gives 0 instead of
 * a crash.
 */
static uint64_t checksum(uintptr_t addr, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	unsigned char chunk[4096];
	size_t off, n, i;

	for (off = 0; off < len; off += n) {
		struct iovec local = { chunk, sizeof(chunk) };
		struct iovec remote = { (void *)(addr + off), 0 };

		n = len - off < sizeof(chunk) ? len - off : sizeof(chunk);
		local.iov_len = remote.iov_len = n;
		if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) !=
		    (ssize_t)n)
			return 0;
		for (i = 0; i < n; i++)
			h = (h ^ chunk[i]) * 0x100000001b3ull;
	}
	return h;
}

static void record_mr(const char *what, size_t length, int access,
		      uint64_t t0, uint64_t ns, const struct ibv_mr *mr, int err)
{
	record("%s len=%zu access=0x%x ns=%llu ok=%d addr=0x%llx lkey=0x%x "
	       "rkey=0x%x errno=%d at=%llu\n", what, length, access,
	       (unsigned long long)ns, mr != NULL,
	       mr ? (unsigned long long)(uintptr_t)mr->addr : 0ull,
	       mr ? mr->lkey : 0, mr ? mr->rkey : 0, mr ? 0 : err,
	       (unsigned long long)t0);
	if (mr)
		mr_added(mr);
}

/*
 * libibverbs' own ibv_reg_mr() calls ibv_reg_mr_iova2(), through this
 * library: one registration, recorded once (by the outer call).
 */
static __thread int in_reg_mr;

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			  int access)
{
	struct ibv_mr *mr;
	uint64_t t0, ns;
	int err;

	REAL(ibv_reg_mr);
	t0 = now_ns();
	in_reg_mr++;
	mr = real(pd, addr, length, access);
	in_reg_mr--;
	ns = now_ns() - t0;
	err = errno;
	record_mr("reg_mr", length, access, t0, ns, mr, err);
	errno = err;
	return mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	struct ibv_mr *mr;
	uint64_t t0, ns;
	int err;

	REAL(ibv_reg_mr_iova2);
	t0 = now_ns();
	mr = real(pd, addr, length, iova, access);
	ns = now_ns() - t0;
	err = errno;
	if (!in_reg_mr)
		record_mr("reg_mr", length, access & 0xffff, t0, ns, mr, err);
	errno = err;
	return mr;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	size_t len = mr ? mr->length : 0;
	uint32_t lkey = mr ? mr->lkey : 0;
	uint64_t t0;
	int rc;

	REAL(ibv_dereg_mr);
	t0 = now_ns();
	rc = real(mr);
	record("dereg_mr len=%zu ns=%llu rc=%d lkey=0x%x at=%llu\n", len,
	       (unsigned long long)(now_ns() - t0), rc, lkey,
	       (unsigned long long)t0);
	if (!rc)
		mr_removed(lkey);
	return rc;
}

int ibv_query_device(struct ibv_context *context,
		     struct ibv_device_attr *device_attr)
{
	const char *guid = spy_env("VERBS_SPY_NODE_GUID");
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
	const char *guid = spy_env("VERBS_SPY_NODE_GUID");
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
	const char *stop = spy_env("VERBS_SPY_STOP_AT_RTS");
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

/* ---- send queues and SRQs, counted (lessons 13 and 14) --------------------
 */

#define SQ_MAX	 32   /* QPs counted */
#define SQ_RING	 8192 /* signaled / in-flight WRs remembered per QP */
#define HIST_MAX 256  /* chain lengths and signal gaps, the last bucket: more  \
		       */
#define SRQ_MAX 8

struct sq_stats {
	uint32_t qpn;
	int used, sig_all;
	uint64_t posted,
		done; /* WRs accepted; WRs the program knows complete */
	uint64_t calls, failed_calls, signaled, inline_wrs, opcodes[16];
	int first_rc;
	uint64_t chains[HIST_MAX + 1], gaps[HIST_MAX + 1], last_signaled;
	uint64_t max_outstanding, completions, errors, recvs;
	uint64_t first_post_ns, last_done_ns;
	uint64_t sig[SQ_RING], sig_head, sig_tail; /* seqs of signaled WRs */
	struct {
		uint64_t seq, sum;
		uintptr_t addr;
		uint32_t len;
	} fl[SQ_RING];
	uint64_t fl_head, fl_tail, modified, first_modified, untracked;
	struct ibv_cq *cq; /* its send CQ (NULL: not created through us) */
	uint32_t srq;	   /* its SRQ's handle + 1, 0: none */
	/* fills and waits (above): outstanding after the last post, whether
	 * a poll came since, whether the last poll brought nothing, and the
	 * outstanding at the last wait since the last post */
	uint64_t fills[HIST_MAX + 1], waits[HIST_MAX + 1];
	uint64_t last_out, wait_out;
	int polled, idle, waited;
};

static struct sq_stats sqs[SQ_MAX];
static pthread_mutex_t sq_lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
	uint32_t handle;
	uint64_t calls, wrs;
	int64_t in;	 /* receives in it, the program's view */
	uint64_t max_in; /* the most, right after a post */
} srqs[SRQ_MAX];

/* The index of @handle's SRQ entry, or of the free entry that will be
 * its (-1: the table is full). Under sq_lock. */
static int srq_index(uint32_t handle)
{
	int i;

	for (i = 0; i < SRQ_MAX && srqs[i].calls && srqs[i].handle != handle;
	     i++)
		;
	return i < SRQ_MAX ? i : -1;
}

/* The counters of @qpn, created on first use (NULL when the table is full). */
static struct sq_stats *sq_of(uint32_t qpn)
{
	int i;

	for (i = 0; i < SQ_MAX && sqs[i].used; i++)
		if (sqs[i].qpn == qpn)
			return &sqs[i];
	if (i == SQ_MAX)
		return NULL;
	sqs[i].used = 1;
	sqs[i].qpn = qpn;
	return &sqs[i];
}

/* A sum of @len bytes at @addr, a 64-bit word at a time. */
static uint64_t buf_sum(uintptr_t addr, uint32_t len)
{
	const unsigned char *p = (const unsigned char *)addr;
	uint64_t h = 0xcbf29ce484222325ull, w;
	uint32_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
	}
	for (; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static int inflight_checked(void)
{
	static int v = -1;

	if (v < 0)
		v = spy_env("VERBS_SPY_INFLIGHT") != NULL;
	return v;
}

/* ibv_post_send() of the chain @wr on @qp returned @rc (@bad: where it
 * stopped): count what the device accepted. */
static void stats_post(struct ibv_qp *qp, struct ibv_send_wr *wr, int rc,
		       struct ibv_send_wr *bad)
{
	struct sq_stats *s;
	struct ibv_send_wr *w;
	uint64_t n = 0, out;

	pthread_mutex_lock(&sq_lock);
	s = sq_of(qp->qp_num);
	if (!s)
		goto out_unlock;
	if (!s->first_post_ns)
		s->first_post_ns = now_ns();
	if (s->calls && s->polled) {
		/* the program turned to its CQ after its last post, and now
		 * posts again: count that turn, and the wait in it */
		s->fills[s->last_out < HIST_MAX ? s->last_out : HIST_MAX]++;
		if (s->waited)
			s->waits[s->wait_out < HIST_MAX ? s->wait_out
							: HIST_MAX]++;
	}
	s->polled = s->idle = s->waited = 0;
	s->calls++;
	if (rc) {
		if (!s->failed_calls++)
			s->first_rc = rc;
	}
	for (w = wr; w && !(rc && w == bad); w = w->next) {
		uint64_t seq = ++s->posted;

		n++;
		s->opcodes[w->opcode & 15]++;
		if (w->send_flags & IBV_SEND_INLINE)
			s->inline_wrs++;
		if ((w->send_flags & IBV_SEND_SIGNALED) || s->sig_all) {
			uint64_t gap = seq - s->last_signaled;

			s->gaps[gap < HIST_MAX ? gap : HIST_MAX]++;
			s->last_signaled = seq;
			s->signaled++;
			if (s->sig_tail - s->sig_head < SQ_RING)
				s->sig[s->sig_tail++ % SQ_RING] = seq;
		}
		if (inflight_checked() && w->num_sge > 0 &&
		    !(w->send_flags & IBV_SEND_INLINE) &&
		    (w->opcode == IBV_WR_SEND ||
		     w->opcode == IBV_WR_SEND_WITH_IMM ||
		     w->opcode == IBV_WR_RDMA_WRITE ||
		     w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
			if (s->fl_tail - s->fl_head < SQ_RING) {
				uint64_t k = s->fl_tail++ % SQ_RING;

				s->fl[k].seq = seq;
				s->fl[k].addr = w->sg_list[0].addr;
				s->fl[k].len = w->sg_list[0].length;
				s->fl[k].sum =
					buf_sum(s->fl[k].addr, s->fl[k].len);
			} else {
				s->untracked++;
			}
		}
	}
	if (n)
		s->chains[n < HIST_MAX ? n : HIST_MAX]++;
	out = s->posted - s->done;
	if (out > s->max_outstanding)
		s->max_outstanding = out;
	s->last_out = out;
out_unlock:
	pthread_mutex_unlock(&sq_lock);
}

/* One completion the program polled. */
static void stats_wc(const struct ibv_wc *wc)
{
	struct sq_stats *s;

	pthread_mutex_lock(&sq_lock);
	s = sq_of(wc->qp_num);
	if (!s)
		goto out_unlock;
	if (wc->status != IBV_WC_SUCCESS) {
		s->errors++;
		goto out_unlock;
	}
	if (wc->opcode & IBV_WC_RECV) {
		int k = s->srq ? srq_index(s->srq - 1) : -1;

		s->recvs++;
		if (k >= 0 && srqs[k].calls)
			srqs[k].in--;
		goto out_unlock;
	}
	s->completions++;
	if (s->sig_head < s->sig_tail)
		s->done = s->sig[s->sig_head++ % SQ_RING];
	s->last_done_ns = now_ns();
	while (s->fl_head < s->fl_tail &&
	       s->fl[s->fl_head % SQ_RING].seq <= s->done) {
		uint64_t k = s->fl_head++ % SQ_RING;

		if (buf_sum(s->fl[k].addr, s->fl[k].len) != s->fl[k].sum &&
		    !s->modified++)
			s->first_modified = s->fl[k].seq;
	}
out_unlock:
	pthread_mutex_unlock(&sq_lock);
}

/* A poll of @cq brought @got completions @wc: for the QPs that send
 * through it and posted before, a turn from posting to polling, and a
 * wait when it brought one of them nothing twice in a row. */
static void stats_poll(struct ibv_cq *cq, const struct ibv_wc *wc, int got)
{
	int i, k, mine;

	pthread_mutex_lock(&sq_lock);
	for (i = 0; i < SQ_MAX && sqs[i].used; i++) {
		struct sq_stats *s = &sqs[i];

		if ((s->cq && s->cq != cq) || !s->calls)
			continue;
		for (mine = 0, k = 0; k < got && !mine; k++)
			mine = wc[k].qp_num == s->qpn &&
			       !(wc[k].status == IBV_WC_SUCCESS &&
				 (wc[k].opcode & IBV_WC_RECV));
		s->polled = 1;
		if (mine) {
			s->idle = 0;
		} else if (s->idle) {
			s->waited = 1;
			s->wait_out = s->posted - s->done;
		} else {
			s->idle = 1;
		}
	}
	pthread_mutex_unlock(&sq_lock);
}

/* "A:N,B:M" for the non-zero buckets of @h. */
static void hist_str(char *out, size_t len, const uint64_t *h)
{
	size_t n = 0;
	int i;

	out[0] = 0;
	for (i = 0; i <= HIST_MAX && n + 32 < len; i++)
		if (h[i])
			n += snprintf(out + n, len - n, "%s%d:%llu",
				      n ? "," : "", i,
				      (unsigned long long)h[i]);
	if (!n)
		snprintf(out, len, "-");
}

/* Appends the per-QP and per-SRQ lines to the record (into the slack). */
static void stats_add(const char *line, int n)
{
	if (n > 0 && log_len + n + 256 < LOG_CAP + LOG_SLACK) {
		memcpy(log_buf + log_len, line, n);
		log_len += n;
	}
}

static void stats_flush(void)
{
	char chains[1024], gaps[1024], fills[1024], waits[1024], ops[256];
	char line[5120];
	int i, k, n;

	for (i = 0; i < SQ_MAX && sqs[i].used; i++) {
		struct sq_stats *s = &sqs[i];
		size_t m = 0;

		hist_str(chains, sizeof(chains), s->chains);
		hist_str(gaps, sizeof(gaps), s->gaps);
		hist_str(fills, sizeof(fills), s->fills);
		hist_str(waits, sizeof(waits), s->waits);
		ops[0] = 0;
		for (k = 0; k < 16; k++)
			if (s->opcodes[k])
				m += snprintf(
					ops + m, sizeof(ops) - m, "%s%d:%llu",
					m ? "," : "", k,
					(unsigned long long)s->opcodes[k]);
		n = snprintf(
			line, sizeof(line),
			"sq qpn=%u sig_all=%d calls=%llu failed_calls=%llu "
			"first_rc=%d wrs=%llu signaled=%llu inline=%llu "
			"last_signaled=%d max_outstanding=%llu "
			"completions=%llu errors=%llu recvs=%llu "
			"first_post_ns=%llu last_done_ns=%llu "
			"modified_in_flight=%llu first_modified=%llu "
			"untracked=%llu opcodes=%s chains=%s gaps=%s "
			"fills=%s waits=%s\n",
			s->qpn, s->sig_all, (unsigned long long)s->calls,
			(unsigned long long)s->failed_calls, s->first_rc,
			(unsigned long long)s->posted,
			(unsigned long long)s->signaled,
			(unsigned long long)s->inline_wrs,
			s->posted && s->last_signaled == s->posted,
			(unsigned long long)s->max_outstanding,
			(unsigned long long)s->completions,
			(unsigned long long)s->errors,
			(unsigned long long)s->recvs,
			(unsigned long long)s->first_post_ns,
			(unsigned long long)s->last_done_ns,
			(unsigned long long)s->modified,
			(unsigned long long)s->first_modified,
			(unsigned long long)s->untracked, m ? ops : "-", chains,
			gaps, fills, waits);
		stats_add(line, n < (int)sizeof(line) ? n : -1);
	}
	for (i = 0; i < SRQ_MAX && srqs[i].calls; i++) {
		n = snprintf(line, sizeof(line),
			     "srq_posts handle=%u calls=%llu wrs=%llu "
			     "max_in=%llu\n",
			     srqs[i].handle, (unsigned long long)srqs[i].calls,
			     (unsigned long long)srqs[i].wrs,
			     (unsigned long long)srqs[i].max_in);
		stats_add(line, n < (int)sizeof(line) ? n : -1);
	}
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
			     struct ibv_qp_init_attr *init_attr)
{
	struct ibv_qp *qp;
	struct sq_stats *s;

	REAL(ibv_create_qp);
	qp = real(pd, init_attr);
	if (!qp)
		return qp;
	record("create_qp qpn=%u type=%d srq=%u sq_sig_all=%d max_send_wr=%u "
	       "max_recv_wr=%u max_inline=%u\n",
	       qp->qp_num, init_attr->qp_type,
	       init_attr->srq ? init_attr->srq->handle + 1 : 0,
	       init_attr->sq_sig_all, init_attr->cap.max_send_wr,
	       init_attr->cap.max_recv_wr, init_attr->cap.max_inline_data);
	pthread_mutex_lock(&sq_lock);
	s = sq_of(qp->qp_num);
	if (s) {
		s->sig_all = init_attr->sq_sig_all;
		s->cq = init_attr->send_cq;
		s->srq = init_attr->srq ? init_attr->srq->handle + 1 : 0;
	}
	pthread_mutex_unlock(&sq_lock);
	return qp;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
			       struct ibv_srq_init_attr *init_attr)
{
	uint32_t asked = init_attr->attr.max_wr;
	struct ibv_srq *srq;

	REAL(ibv_create_srq);
	srq = real(pd, init_attr);
	record("create_srq handle=%u max_wr=%u granted=%u limit=%u ok=%d\n",
	       srq ? srq->handle : 0, asked, init_attr->attr.max_wr,
	       init_attr->attr.srq_limit, srq != NULL);
	return srq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
		   int attr_mask)
{
	int rc;

	REAL(ibv_modify_srq);
	rc = real(srq, attr, attr_mask);
	record("modify_srq handle=%u mask=0x%x max_wr=%u limit=%u rc=%d\n",
	       srq->handle, attr_mask, attr->max_wr, attr->srq_limit, rc);
	return rc;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	int rc;

	REAL(ibv_query_srq);
	rc = real(srq, attr);
	record("query_srq handle=%u max_wr=%u limit=%u rc=%d\n", srq->handle,
	       rc ? 0 : attr->max_wr, rc ? 0 : attr->srq_limit, rc);
	return rc;
}

int ibv_get_async_event(struct ibv_context *context,
			struct ibv_async_event *event)
{
	int rc;

	REAL(ibv_get_async_event);
	rc = real(context, event);
	if (!rc)
		record("async_event type=%d srq=%u\n", event->event_type,
		       (event->event_type == IBV_EVENT_SRQ_LIMIT_REACHED ||
			event->event_type == IBV_EVENT_SRQ_ERR) &&
				       event->element.srq
			       ? event->element.srq->handle + 1
			       : 0);
	return rc;
}

/* ---- the data path, through the context's ops table ---------------------- */

static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *,
			     struct ibv_send_wr **);
static int (*real_post_recv)(struct ibv_qp *, struct ibv_recv_wr *,
			     struct ibv_recv_wr **);
static int (*real_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);

/*
 * Where the work requests in flight keep their local data, by (QP, wr_id):
 * an atomic's old value and a READ's data land there, and poll_cq reads
 * them when the request completes.
 */
#define MAX_POSTED 64
static struct {
	uint32_t qpn;
	uint64_t wr_id;
	int opcode;
	uintptr_t addr;
	uint32_t len;
} posted[MAX_POSTED];
static unsigned int n_posted;

static void remember(uint32_t qpn, const struct ibv_send_wr *w)
{
	unsigned int i;

	if (w->num_sge < 1)
		return;
	pthread_mutex_lock(&log_lock);
	i = n_posted++ % MAX_POSTED;
	posted[i].qpn = qpn;
	posted[i].wr_id = w->wr_id;
	posted[i].opcode = w->opcode;
	posted[i].addr = w->sg_list[0].addr;
	posted[i].len = w->sg_list[0].length;
	pthread_mutex_unlock(&log_lock);
}

/* The latest request posted on @qpn with @wr_id: its index, or -1. */
static int lookup(uint32_t qpn, uint64_t wr_id)
{
	unsigned int n, k;
	int found = -1;

	pthread_mutex_lock(&log_lock);
	n = n_posted < MAX_POSTED ? n_posted : MAX_POSTED;
	for (k = 1; k <= n && found < 0; k++) {
		unsigned int i = (n_posted - k) % MAX_POSTED;

		if (posted[i].qpn == qpn && posted[i].wr_id == wr_id)
			found = i;
	}
	pthread_mutex_unlock(&log_lock);
	return found;
}

static int empty_wanted(void)
{
	static int v = -1;

	if (v < 0)
		v = spy_env("VERBS_SPY_EMPTY") != NULL;
	return v;
}

static int spy_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			 struct ibv_send_wr **bad)
{
	const char *payload = spy_env("VERBS_SPY_PAYLOAD");
	struct ibv_send_wr *w;
	char sges[128], run[64];
	uint32_t len;
	size_t off;
	int i, rc, n;

	for (w = wr; w; w = w->next) {
		for (len = 0, i = 0; i < w->num_sge; i++)
			len += w->sg_list[i].length;
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
		/* A READ of this process's own registered memory (two QPs
		 * of one process): what the source holds now. */
		if (w->opcode == IBV_WR_RDMA_READ &&
		    registered(w->wr.rdma.remote_addr, len))
			record("read_source qpn=%u raddr=0x%llx len=%u "
			       "sum=0x%016llx\n", qp->qp_num,
			       (unsigned long long)w->wr.rdma.remote_addr, len,
			       (unsigned long long)checksum(
				       w->wr.rdma.remote_addr, len));
		remember(qp->qp_num, w);
	}
	rc = real_post_send(qp, wr, bad);
	stats_post(qp, wr, rc, rc ? *bad : NULL);
	for (w = wr; w; w = w->next) {
		for (len = 0, n = 0, i = 0; i < w->num_sge; i++) {
			len += w->sg_list[i].length;
			if (i < 2)
				n += snprintf(sges + n, sizeof(sges) - n,
					      " sge%d=0x%llx:%u:0x%x", i,
					      (unsigned long long)
						      w->sg_list[i].addr,
					      w->sg_list[i].length,
					      w->sg_list[i].lkey);
		}
		if (!n)
			sges[0] = 0;
		run[0] = 0;
		if (empty_wanted())
			runnable(run, sizeof(run));
		record("post_send qpn=%u opcode=%d len=%u num_sge=%d wr_id=%llu "
		       "flags=0x%x%s raddr=0x%llx rkey=0x%x cmp=0x%llx "
		       "swap=0x%llx rc=%d cpu=%llu%s\n",
		       qp->qp_num, w->opcode, len, w->num_sge,
		       (unsigned long long)w->wr_id, w->send_flags, sges,
		       (unsigned long long)(w->opcode >= IBV_WR_ATOMIC_CMP_AND_SWP &&
					    w->opcode <= IBV_WR_ATOMIC_FETCH_AND_ADD
				       ? w->wr.atomic.remote_addr
				       : w->wr.rdma.remote_addr),
		       w->opcode >= IBV_WR_ATOMIC_CMP_AND_SWP &&
				       w->opcode <= IBV_WR_ATOMIC_FETCH_AND_ADD
			       ? w->wr.atomic.rkey
			       : w->wr.rdma.rkey,
		       (unsigned long long)w->wr.atomic.compare_add,
		       (unsigned long long)w->wr.atomic.swap, rc,
		       (unsigned long long)cpu_ns(), run);
	}
	return rc;
}

static int spy_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			 struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *w;
	uint32_t len;
	int i, rc;

	rc = real_post_recv(qp, wr, bad);
	for (w = wr; w; w = w->next) {
		for (len = 0, i = 0; i < w->num_sge; i++)
			len += w->sg_list[i].length;
		record("post_recv qpn=%u wr_id=%llu len=%u rc=%d\n", qp->qp_num,
		       (unsigned long long)w->wr_id, len, rc);
	}
	return rc;
}

/* Completions ibv_req_notify_cq() took off a CQ ($VERBS_SPY_NOTIFY_WAIT_US),
 * one per CQ, for the program's next ibv_poll_cq() of it: a slot is taken
 * (cq set) before the CQ is polled, and holds a completion once ready. */
#define KEPT_CQS 16
static struct {
	struct ibv_cq *cq;
	int ready;
	struct ibv_wc wc;
} kept[KEPT_CQS];
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* The completion kept for @cq into *@wc: 1, or 0 when none is. */
static int take_kept(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int i, found = 0;

	pthread_mutex_lock(&kept_lock);
	for (i = 0; i < KEPT_CQS && !found; i++)
		if (kept[i].cq == cq && kept[i].ready) {
			*wc = kept[i].wc;
			kept[i].cq = NULL;
			kept[i].ready = 0;
			found = 1;
		}
	pthread_mutex_unlock(&kept_lock);
	return found;
}

/* A slot for @cq's completion: its index, or -1 when @cq has one already
 * or every slot is taken. */
static int take_slot(struct ibv_cq *cq)
{
	int i, free_slot = -1;

	pthread_mutex_lock(&kept_lock);
	for (i = 0; i < KEPT_CQS; i++) {
		if (kept[i].cq == cq) {
			free_slot = -1;
			break;
		}
		if (!kept[i].cq && free_slot < 0)
			free_slot = i;
	}
	if (free_slot >= 0)
		kept[free_slot].cq = cq;
	pthread_mutex_unlock(&kept_lock);
	return free_slot;
}

/* Slot @i holds @wc (or, @wc NULL, is given back). */
static void fill_slot(int i, const struct ibv_wc *wc)
{
	pthread_mutex_lock(&kept_lock);
	if (wc) {
		kept[i].wc = *wc;
		kept[i].ready = 1;
	} else {
		kept[i].cq = NULL;
	}
	pthread_mutex_unlock(&kept_lock);
}

static int spy_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = 0, more, i, k;
	char extra[64], run[64] = "";

	if (n > 0 && take_kept(cq, wc))
		got = 1;
	more = got < n ? real_poll_cq(cq, n - got, wc + got) : 0;
	if (more < 0 && !got)
		got = more;
	else if (more > 0)
		got += more;

	for (i = 0; i < got; i++) {
		extra[0] = 0;
		k = wc[i].status == IBV_WC_SUCCESS
			    ? lookup(wc[i].qp_num, wc[i].wr_id)
			    : -1;
		if (k >= 0 && (wc[i].opcode == IBV_WC_COMP_SWAP ||
			       wc[i].opcode == IBV_WC_FETCH_ADD) &&
		    posted[k].len >= 8) {
			uint64_t old;

			memcpy(&old, (void *)posted[k].addr, sizeof(old));
			snprintf(extra, sizeof(extra), " old=0x%llx",
				 (unsigned long long)old);
		} else if (k >= 0 && wc[i].opcode == IBV_WC_RDMA_READ) {
			snprintf(extra, sizeof(extra), " sum=0x%016llx",
				 (unsigned long long)checksum(posted[k].addr,
							      posted[k].len));
		}
		if (empty_wanted()) {
			struct rusage ru;

			if (!getrusage(RUSAGE_THREAD, &ru))
				snprintf(extra + strlen(extra),
					 sizeof(extra) - strlen(extra),
					 " vcsw=%ld", ru.ru_nvcsw);
		}
		if (empty_wanted())
			runnable(run, sizeof(run));
		record("poll_cq wc opcode=%d status=%d len=%u qpn=%u wr_id=%llu%s "
		       "cpu=%llu%s\n",
		       wc[i].opcode, wc[i].status, wc[i].byte_len,
		       wc[i].qp_num, (unsigned long long)wc[i].wr_id, extra,
		       (unsigned long long)cpu_ns(), run);
		stats_wc(&wc[i]);
	}
	if (got == 0 && empty_wanted())
		record_empty();
	if (got >= 0)
		stats_poll(cq, wc, got);
	return got;
}

/* ---- mappings under registered memory (lesson 09's munmap-remap) ---------- */

int munmap(void *addr, size_t len)
{
	REAL(munmap);
	if (registered((uintptr_t)addr, len))
		record("munmap addr=0x%llx len=%zu sum=0x%016llx\n",
		       (unsigned long long)(uintptr_t)addr, len,
		       (unsigned long long)checksum((uintptr_t)addr, len));
	return real(addr, len);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p;

	REAL(mmap);
	p = real(addr, len, prot, flags, fd, off);
	if (flags & MAP_FIXED)
		record("mmap addr=0x%llx len=%zu fixed=1 ok=%d\n",
		       (unsigned long long)(uintptr_t)addr, len,
		       p != MAP_FAILED);
	return p;
}

static int (*real_req_notify_cq)(struct ibv_cq *, int);

static int spy_req_notify_cq(struct ibv_cq *cq, int solicited)
{
	const char *wait = spy_env("VERBS_SPY_NOTIFY_WAIT_US");
	uint64_t until;
	struct ibv_wc wc;
	int rc, slot;

	if (wait && (slot = take_slot(cq)) >= 0) {
		until = now_ns() + 1000ull * strtoull(wait, NULL, 10);
		while ((rc = real_poll_cq(cq, 1, &wc)) == 0 && now_ns() < until)
			usleep(200);
		fill_slot(slot, rc == 1 ? &wc : NULL);
	}
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

/* ---- what a program asks about the devices (lesson 01) ------------------- */

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list;
	int n = 0;

	REAL(ibv_get_device_list);
	list = real(&n);
	if (num_devices)
		*num_devices = n;
	record("get_device_list num=%d ok=%d\n", n, list != NULL);
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	REAL(ibv_free_device_list);
	real(list);
	record("free_device_list\n");
}

int ibv_close_device(struct ibv_context *context)
{
	int rc;

	REAL(ibv_close_device);
	rc = real(context);
	record("close_device rc=%d\n", rc);
	return rc;
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	static __thread char names[8][IBV_SYSFS_NAME_MAX + 32];
	static __thread unsigned int next;
	const char *suffix = spy_env("VERBS_SPY_DEVICE_SUFFIX");
	const char *name;
	char *out;

	REAL(ibv_get_device_name);
	name = real(device);
	if (!name || !suffix)
		return name;
	out = names[next++ % 8];
	snprintf(out, sizeof(names[0]), "%s%s", name, suffix);
	return out;
}

static int (*real_query_port)(struct ibv_context *, uint8_t,
			      struct ibv_port_attr *, size_t);

static int spy_query_port(struct ibv_context *context, uint8_t port_num,
			  struct ibv_port_attr *attr, size_t size)
{
	const char *want = spy_env("VERBS_SPY_PORT");
	unsigned int state, mtu, link;
	int rc;

	rc = real_query_port(context, port_num, attr, size);
	if (rc)
		return rc;
	if (want && sscanf(want, "%u:%u:%u", &state, &mtu, &link) == 3) {
		attr->state = state;
		attr->active_mtu = mtu;
		attr->link_layer = link;
	}
	record("query_port port=%u state=%d active_mtu=%d link_layer=%d\n",
	       port_num, attr->state, attr->active_mtu, attr->link_layer);
	return rc;
}

/* $VERBS_SPY_GID: the GID (and type) slot @index reads as. 0 or -1. */
static int spy_gid(uint32_t index, union ibv_gid *gid, uint32_t *type)
{
	const char *want = spy_env("VERBS_SPY_GID");
	unsigned int b, t;
	int i;

	if (!want || strlen(want) < 34 || want[32] != ':')
		return -1;
	for (i = 0; i < 16; i++) {
		if (sscanf(want + 2 * i, "%2x", &b) != 1)
			return -1;
		gid->raw[i] = b;
	}
	gid->raw[14] = index >> 8;
	gid->raw[15] = index & 0xff;
	if (type && sscanf(want + 33, "%u", &t) == 1)
		*type = t;
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
		      uint32_t gid_index, struct ibv_gid_entry *entry,
		      uint32_t flags, size_t entry_size)
{
	int rc;

	REAL(_ibv_query_gid_ex);
	rc = real(context, port_num, gid_index, entry, flags, entry_size);
	if (!rc)
		spy_gid(gid_index, &entry->gid, &entry->gid_type);
	if (!rc)
		record("query_gid port=%u index=%u rc=%d\n", port_num,
		       gid_index, rc);
	return rc;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
		  union ibv_gid *gid)
{
	static const union ibv_gid zero;
	int rc;

	REAL(ibv_query_gid);
	rc = real(context, port_num, index, gid);
	/* An empty slot reads as zeros: it stays empty. */
	if (!rc && memcmp(gid, &zero, sizeof(zero)))
		spy_gid(index, gid, NULL);
	if (!rc)
		record("query_gid port=%u index=%d rc=%d\n", port_num, index,
		       rc);
	return rc;
}

/* ---- state changes (lesson 03) -------------------------------------------- */

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	int rc;

	REAL(ibv_modify_qp);
	rc = real(qp, attr, attr_mask);
	record("modify_qp qpn=%u state=%d mask=0x%x rc=%d\n", qp->qp_num,
	       attr_mask & IBV_QP_STATE ? (int)attr->qp_state : -1, attr_mask,
	       rc);
	return rc;
}

static int (*real_post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *,
				 struct ibv_recv_wr **);

static int spy_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			     struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *w;
	int rc, n = 0, i;
	long long in = -1;

	rc = real_post_srq_recv(srq, wr, bad);
	for (w = wr; w && !(rc && w == *bad); w = w->next)
		n++;
	pthread_mutex_lock(&sq_lock);
	i = srq_index(srq->handle);
	if (i >= 0) {
		srqs[i].handle = srq->handle;
		srqs[i].calls++;
		srqs[i].wrs += n;
		srqs[i].in += n;
		if (srqs[i].in > (int64_t)srqs[i].max_in)
			srqs[i].max_in = srqs[i].in;
		in = srqs[i].in;
	}
	pthread_mutex_unlock(&sq_lock);
	record("post_srq_recv handle=%u wrs=%d rc=%d in=%lld\n", srq->handle,
	       n, rc, (long long)in);
	return rc;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct verbs_context *vctx;
	struct ibv_context *ctx;

	REAL(ibv_open_device);
	ctx = real(device);
	if (ctx) {
		real_post_send = ctx->ops.post_send;
		real_post_recv = ctx->ops.post_recv;
		real_poll_cq = ctx->ops.poll_cq;
		real_req_notify_cq = ctx->ops.req_notify_cq;
		ctx->ops.post_send = spy_post_send;
		ctx->ops.post_recv = spy_post_recv;
		ctx->ops.poll_cq = spy_poll_cq;
		ctx->ops.req_notify_cq = spy_req_notify_cq;
		vctx = verbs_get_ctx_op(ctx, query_port);
		if (vctx) {
			real_query_port = vctx->query_port;
			vctx->query_port = spy_query_port;
		}
		real_post_srq_recv = ctx->ops.post_srq_recv;
		ctx->ops.post_srq_recv = spy_post_srq_recv;
		record("open_device %s\n", device->name);
	}
	return ctx;
}
