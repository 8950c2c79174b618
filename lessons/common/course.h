/* SPDX-License-Identifier: MIT */
/*
 * course.h - helpers every lesson shares.
 *
 * Nothing in here is an exercise: these are the chores around the verbs
 * calls (argument parsing, the out-of-band TCP exchange, timing, bounded
 * polling) so that a lesson's skeleton contains only what it teaches.
 *
 * Conventions for every lesson program (lessons/README.md has them all):
 *   exit 0  success
 *   exit 1  a call failed at run time (one line on stderr names it:
 *           "CALL failed: STRERROR")
 *   exit 2  bad command line (usage on stderr)
 */
#ifndef RDMA_COURSE_H
#define RDMA_COURSE_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#define EXIT_USAGE 2

/* ---- the RC queue pair attributes every lesson uses ---------------------- */

/*
 * RTR and RTS values of lessons 03, 05 (rc.c) and 08 (man ibv_modify_qp):
 *   COURSE_QP_TIMEOUT        ACK timeout, 4.096 us * 2^17: about 0.54 s
 *                            (a NIC's programs often use 14, 67 ms; an
 *                            emulated peer on a loaded machine can be
 *                            silent longer than 7 x 67 ms and a correct
 *                            program would fail: 17 gives it 3.8 s)
 *   COURSE_QP_RETRY_CNT      resends of an unacknowledged packet; rxe takes
 *                            7 to mean "forever", so a dead peer would never
 *                            be noticed: 6
 *   COURSE_QP_RNR_RETRY      resends after an RNR NAK (7 would be forever)
 *   COURSE_QP_MIN_RNR_TIMER  how long a peer waits after our RNR NAK: 12 is
 *                            0.64 ms
 */
#define COURSE_QP_TIMEOUT	17
#define COURSE_QP_RETRY_CNT	6
#define COURSE_QP_RNR_RETRY	3
#define COURSE_QP_MIN_RNR_TIMER 12

/* ---- command line ------------------------------------------------------ */

/* Which of the shared options a program accepts (or them together). */
enum {
	OPT_DEVICE = 1 << 0,	/* -d, --device NAME   */
	OPT_IB_PORT = 1 << 1,	/* -i, --ib-port N     */
	OPT_GID_INDEX = 1 << 2, /* -g, --gid-index N   */
	OPT_PORT = 1 << 3,	/* -p, --port N (TCP)  */
	OPT_ITERS = 1 << 4,	/* -n, --iters N       */
	OPT_SIZE = 1 << 5,	/* -s, --size BYTES    */
	OPT_TIMEOUT = 1 << 6,	/* -t, --timeout SECS  */
	OPT_HOST = 1 << 7, /* a positional HOST is allowed (then: client) */
};

struct course_opts {
	const char *device; /* NULL: $RDMA_DEVICE, else the first device */
	int ib_port;	    /* default 1 */
	int gid_index;	    /* -1: $RDMA_GID_INDEX, else auto (RoCE v2 IPv4) */
	int port;	    /* TCP port; 0 = any free port (server prints it) */
	long iters;	    /* default 1000 */
	size_t size;	    /* default 4096; accepts k/K, m/M suffixes */
	int timeout;	    /* seconds any single wait may take, default 10 */
	const char *host;   /* positional HOST (client mode) or NULL */
};

/*
 * Parse argv into @o. @accept says which shared options exist; @o holds the
 * defaults on entry. On a bad or unknown option prints "PROG: ..." and the
 * usage line (@usage, after the program name) to stderr and exits 2.
 * -h/--help prints usage to stdout and exits 0.
 */
void course_parse_opts(int argc, char **argv, unsigned int accept,
		       const char *usage, struct course_opts *o);

/* Fill @o with the documented defaults. */
void course_default_opts(struct course_opts *o);

/*
 * Remove one lesson-specific option from argv, before course_parse_opts()
 * sees the rest: "--NAME VALUE" or "--NAME=VALUE" when @has_arg, the bare
 * flag "--NAME" otherwise (@name includes the dashes). Returns VALUE ("" for
 * a flag), or NULL when the option is absent. A missing value, or a value
 * given to a flag, prints the error and the usage line, and exits 2.
 */
const char *course_take_opt(int *argc, char **argv, const char *name,
			    int has_arg, const char *usage);

/* Print "usage: PROG USAGE" to stderr and exit 2. */
void course_usage_exit(const char *prog, const char *usage)
	__attribute__((noreturn));

/* ---- devices ----------------------------------------------------------- */

/*
 * Open the device called @name, or the first one when @name is NULL.
 * Prints a clear message (listing what exists) and returns NULL when it is
 * not there.
 */
struct ibv_context *course_open_device(const char *name);

/*
 * Pick a GID index on @port: @want >= 0 is checked and returned as is;
 * otherwise the first RoCE v2 GID holding an IPv4-mapped address
 * (::ffff:a.b.c.d), else the first valid GID (InfiniBand: index 0).
 * Returns -1 with a message when none is usable.
 */
int course_pick_gid(struct ibv_context *ctx, int port, int want);

/* Format a GID as the kernel does ("fe80:0000:...") into @buf (>= 40 B). */
void course_gid_str(const union ibv_gid *gid, char *buf, size_t len);

/* ---- the out-of-band channel (TCP) -------------------------------------- */

/*
 * Everything a peer needs to reach a QP and, optionally, a memory region.
 * course_oob_exchange() converts to network byte order on the wire.
 */
struct qp_info {
	uint16_t lid;
	uint32_t qpn;
	uint32_t psn;
	union ibv_gid gid;
	uint64_t addr; /* 0 when no buffer is advertised */
	uint32_t rkey;
	uint32_t length;
};

/*
 * Server side: listen on @port (0 = any), print the readiness line
 * "listening on port N" to stdout (flushed), accept one client within
 * @timeout seconds. Returns the connected socket or -1 (message printed).
 */
int course_oob_accept(int port, int timeout);

/*
 * A server of several clients (lesson 12): course_oob_listen() listens on
 * @port (0 = any), prints the same readiness line and returns the listening
 * socket (-1, message printed); course_oob_accept_on() accepts one client on
 * it within @timeout seconds (-1, message printed). close() the listener.
 */
int course_oob_listen(int port);
int course_oob_accept_on(int lfd, int timeout);

/* Client side: connect to HOST:PORT, retrying until @timeout seconds. */
int course_oob_connect(const char *host, int port, int timeout);

/* Send @mine and receive the peer's into @theirs. 0 or -1. */
int course_oob_exchange(int fd, const struct qp_info *mine,
			struct qp_info *theirs, int timeout);

/*
 * A one-byte barrier: both sides send @tag and wait for the peer's.
 * Returns 0, or -1 when the peer is gone or sent another tag.
 */
int course_oob_sync(int fd, char tag, int timeout);

void course_print_qp_info(const char *who, const struct qp_info *info);

/* ---- completions --------------------------------------------------------- */

/*
 * What a wait for a completion does after a poll that found nothing: for
 * its first COURSE_POLL_SPIN_NS, nothing (it polls again at once: a round
 * trip on a NIC or on rxe in a quiet VM takes far less); after that, a nap
 * of COURSE_POLL_NAP_NS, which leaves the CPU to the peer and to rxe's
 * kernel work; once the wait has lasted COURSE_POLL_LONG_NS (a peer still
 * starting, a completion that never comes), naps of COURSE_POLL_LONG_NAP_NS:
 * a wait that long is not a round trip, and every wake-up costs CPU that
 * others could use (a program that waits out a 10 s --timeout wakes 2,000
 * times instead of 20,000). @start: when the wait began, @now: now
 * (course_now_ns()).
 */
#define COURSE_POLL_SPIN_NS	1000000ull   /* 1 ms */
#define COURSE_POLL_NAP_NS	500000	     /* 0.5 ms */
#define COURSE_POLL_LONG_NS	100000000ull /* 100 ms */
#define COURSE_POLL_LONG_NAP_NS 5000000	     /* 5 ms */
void course_poll_pause(uint64_t start, uint64_t now);

/*
 * Poll @cq for one completion, for at most @timeout seconds (with
 * course_poll_pause() after each poll that found nothing).
 * Returns 0 with *wc filled (check wc->status yourself), or -1 on a poll
 * error or timeout (message printed naming @what).
 */
int course_poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int timeout,
		    const char *what);

/*
 * Print one line about a completion that did not succeed:
 * "WHAT: completion error: <ibv_wc_status_str> (status N, vendor_err 0x..)"
 */
void course_report_wc(const char *what, const struct ibv_wc *wc);

/*
 * Wait for one completion on @cq that succeeded: course_poll_one(), then the
 * status. A receive never fails because the peer died, it just never
 * completes: when the wait times out and @oob_fd (the TCP connection to the
 * peer, or -1) is closed, also prints
 *   the peer closed the out-of-band connection: it has exited
 * A completion with an error status is printed by course_report_wc().
 * Returns 0 with *wc filled, or -1 (message printed naming @what).
 */
int course_wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int timeout,
		   int oob_fd, const char *what);

/*
 * The enumerator's name of an asynchronous event ("IBV_EVENT_PORT_ERR"),
 * as written in <infiniband/verbs.h>; ibv_event_type_str() gives the
 * words ("port error"). "IBV_EVENT_?" for a value the header lacks.
 */
const char *course_event_name(enum ibv_event_type type);

/* ---- the skeletons' placeholder ------------------------------------------ */

/*
 * What a skeleton's unfinished TODO does: prints
 *   PROG: TODO N is not done yet: WHAT
 * to stderr and returns ENOSYS, so that the error path after it runs (the
 * caller prints "CALL failed: Function not implemented" and exits 1).
 */
int course_todo(int n, const char *what);

/* ---- test data ---------------------------------------------------------- */

/*
 * @len bytes, page-aligned and zeroed, for a buffer to register; free() it.
 * NULL with "cannot allocate N bytes: ..." printed when there is no memory.
 */
void *course_alloc(size_t len);

/* The course's pattern: byte i is 1 + (i + seed) % 251 (never 0). */
void course_fill_pattern(void *buf, size_t len, size_t seed);

/* The offset of the first byte where @a and @b differ, or @len if none. */
size_t course_first_diff(const void *a, const void *b, size_t len);

/* ---- time ---------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t course_now_ns(void);

#endif /* RDMA_COURSE_H */
