"""Lesson 11: round-trip latency distributions, UDP vs RDMA SEND/RECV.

`latency --udp|--rdma` runs as a server (no HOST) and a client (HOST); the
client times every round trip and prints one summary line, and with --csv
every sample. No test times anything against a limit: the machine's
speed is not the student's (`make bench-latency` compares the reference
with perftest). What is checked:

- the summary line is the CSV's: min, p50, p90, p99 and max recomputed
  from the samples (nearest rank), N rows;
- the transports really carried the messages: for RDMA the rxe counters
  rdma_sends and rdma_recvs move by exactly 2 x (warm-up + N) (both sides
  run on the one device); for UDP they do not move at all (and neither do
  sent_pkts/rcvd_pkts);
- the samples are round trips: the client against a reference server (the
  RDMA one, `peer.py 11 server`; the UDP one,
  grader/evidence/trusted/udp_echo.py) that notes when each request
  arrived and when its answer left, and holds a few of them, drawn by the
  server, long before answering. Each sample began before its request
  arrived and ended after its answer left, and ended before the next
  request arrived and began after the previous answer left: it must lie
  between the server's hold of it and the time from the previous answer to
  the next request (causality, one clock: CLOCK_MONOTONIC of the server's
  host; no speed assumed, so the bounds hold 10x faster or slower).
  Invented samples miss the held round trips or exceed the others; a UDP
  client that sends before the echo came is seen by the server itself (a
  datagram already waiting when it echoes the one before).

Round trips are few (tens): under TCG with one vCPU a polling RDMA
round trip costs milliseconds (the two processes take turns at the
scheduler's pace).
"""

import heapq
import math
import re
import sys
from pathlib import Path

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.session import pairs
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, UDP_ECHO, after,
                                         expect_owner, expect_peer_ok,
                                         peer_host, rand_between, start_peer,
                                         start_server, verdict)

PROG = "latency"
T = "5"         # any one wait (a connection, a completion, a datagram): a
                # round trip takes milliseconds; a side left waiting for a
                # message that never comes busy-polls this long
# T_ACCEPT (60 s): a server's first wait, for its client to start and
# connect (or send its first datagram): a loaded machine starts programs
# slowly. It only bounds a hang (was 20 here: the solution's client,
# started after the server's 'listening', took over 20 s to connect with
# two make tests on a slower host, fresh-clone run 131).
WARMUP = 5
CSV = "samples.csv"
# Clocks: a sample is the client's CLOCK_MONOTONIC, the bounds the
# reference server's. On one host that is one clock; on a linked pair
# (HOSTS=2: the RDMA server on host B) two guests' clocks, whose rates
# differ by parts per million. The bounds allow that much, and 10 us.
RATE_SLACK = 0.005
ABS_SLACK_NS = 10_000
SUMMARY = (r"^rtt (udp|rdma|rdma-write) (\d+) bytes: min ([\d.]+) p50 "
           r"([\d.]+) p90 ([\d.]+) p99 ([\d.]+) max ([\d.]+) us "
           r"\((\d+) round trips\)$")


def host(rdma):
    return rdma.ip or "localhost"


def scratch(build):
    """Where the program's relative --csv lands: its working directory."""
    sb = getattr(build, "sandbox", None)
    return Path(sb.scratch if sb and sb.scratch else ".")


def read_csv(build):
    path = scratch(build) / CSV
    try:
        return path.read_text()
    except OSError as err:
        raise GradeFailure(f"the client was given --csv {CSV} but wrote no "
                           f"such file in its working directory ({err})")


def pair_run(build, rdma, transport):
    iters = rand_between(30, 50)
    size = rand_between(16, 1024)
    args = [f"--{transport}", "-s", size, "-n", iters, "--warmup", WARMUP]
    before = rdma.counters()
    with build.start(PROG, "--port", "0", *args, "-t", T_ACCEPT) as server:
        cli = build.run(PROG, "--port", server.port, *args, "-t", T, "--csv",
                        CSV, host(rdma))
        csv = read_csv(build) if cli.returncode == 0 else ""
        # A server whose client never came ends at its own -t.
        srv = server.wait(timeout=30 if cli.returncode == 0
                          else int(T_ACCEPT) + 10)
    return dict(server=srv, client=cli, delta=rdma.counters() - before,
                csv=csv, iters=iters, size=size, args=[*args, "-t", T])


@pytest.fixture(scope="module")
def rdma_run(build, rdma):
    return pair_run(build, rdma, "rdma")


@pytest.fixture(scope="module")
def udp_run(build, rdma):
    return pair_run(build, rdma, "udp")


def summary(run, transport):
    run["client"].ok(f"client: latency {' '.join(map(str, run['args']))}",
                     peer=run["server"], peer_name="server")
    m = expect_match(run["client"].stdout, SUMMARY, "client stdout (the "
                     "summary line)")
    expect(m.group(1), transport, "TRANSPORT in the summary line")
    expect(int(m.group(2)), run["size"], "SIZE in the summary line (-s)")
    expect(int(m.group(8)), run["iters"], "round trips in the summary line "
           "(-n, without the warm-up)")
    return m


def nearest_rank(sorted_ns, p):
    return sorted_ns[max(1, math.ceil(p / 100 * len(sorted_ns))) - 1]


def read_samples(csv):
    """The CSV's samples in round-trip order (ns), its header and rows
    checked."""
    lines = csv.strip().splitlines()
    expect(lines[0] if lines else "", "round_trip,rtt_ns", "the CSV's header")
    ns = []
    for no, line in enumerate(lines[1:], 2):
        if not re.fullmatch(r"\d+,\d+", line):
            raise GradeFailure(f"{CSV} line {no}: expected 'I,NS', got "
                               f"{line!r}")
        i, value = map(int, line.split(","))
        if i != no - 2:
            raise GradeFailure(f"{CSV} line {no}: round trip {i}, expected "
                               f"{no - 2} (one row per timed round trip, "
                               f"in order, from 0)")
        ns.append(value)
    return ns


def check_csv(run, m):
    ns = sorted(read_samples(run["csv"]))
    expect(len(ns), run["iters"], f"samples in {CSV} (one per timed round "
           f"trip, warm-up excluded)")
    want = {"min": ns[0], "p50": nearest_rank(ns, 50),
            "p90": nearest_rank(ns, 90), "p99": nearest_rank(ns, 99),
            "max": ns[-1]}
    got = dict(zip(("min", "p50", "p90", "p99", "max"), m.groups()[2:7]))
    for name, value in want.items():
        expect(got[name], f"{value / 1e3:.2f}",
               f"{name} in the summary line, recomputed from {CSV} "
               f"(nearest rank, us with 2 decimals)")
    return ns


def check_rounds(ns, v, warmup, what):
    """The samples against the reference server's record (udp_echo.Holds).
    Round trip j began before request j arrived and ended after answer j
    left, so it took at least the server's time between the two (long for
    a held one); it began after answer j - 1 left and ended before request
    j + 1 arrived (the program's 'D' for the last RDMA one), so it took at
    most the time between those. The samples must fit those windows one
    each, in any order (the CSV's order is not checked): matched
    smallest sample first, each to the open window that closes first."""
    arr, ans, end = v["arrived"], v["answered"], v.get("end")
    if len(arr) != warmup + len(ns) or len(ans) != len(arr):
        raise GradeFailure(
            f"the reference server answered {len(ans)} {what}s\n  expected: "
            f"{warmup + len(ns)} ({warmup} warm-up + {len(ns)} samples in "
            f"{CSV})")
    windows = []                            # (lo, hi, round trip)
    for j in range(warmup, len(arr)):
        lo = (ans[j] - arr[j]) * (1 - RATE_SLACK) - ABS_SLACK_NS
        later = arr[j + 1] if j + 1 < len(arr) else end
        hi = math.inf if later is None or j == 0 else \
            (later - ans[j - 1]) * (1 + RATE_SLACK) + ABS_SLACK_NS
        windows.append((lo, hi, j))
    windows.sort()
    us = lambda t: f"{t / 1e3:.2f} us"                      # noqa: E731
    held = ", ".join(f"{j} ({us(ans[j] - arr[j])})" for j in v["held"])
    why = (f"\n  (the reference server held round trips {held} before "
           f"answering; a sample that is not the time of a round trip fits "
           f"none of them)")
    open_, k = [], 0
    for s in sorted(ns):
        while k < len(windows) and windows[k][0] <= s:
            heapq.heappush(open_, (windows[k][1], windows[k][2]))
            k += 1
        if not open_:
            lo, _, j = windows[k]
            raise GradeFailure(
                f"a sample of {us(s)} is shorter than any round trip left: "
                f"the shortest of the {len(windows) - k} not matched yet, "
                f"round trip {j}, had its {what} at the reference server "
                f"{us(ans[j] - arr[j])} before the answer left\n  "
                f"expected: each of the "
                f"{len(ns)} samples in {CSV} at least as long as its round "
                f"trip's time at the server\n  got:      {us(s)}{why}")
        hi, j = heapq.heappop(open_)
        if s > hi:
            raise GradeFailure(
                f"no sample fits round trip {j}: the reference server "
                f"answered round trip {j - 1} and then saw "
                f"{f'round trip {j + 1} arrive' if j + 1 < len(arr) else 'the client end'}"
                f" {us(hi)} later, so round trip {j} took at most that; the "
                f"samples left are longer\n  expected: a sample <= "
                f"{us(hi)}\n  got:      {us(s)} (the shortest left){why}")


def served(run, warmup=WARMUP):
    total = warmup + run["iters"]
    run["server"].ok("server", peer=run["client"], peer_name="client")
    expect_match(run["server"].stdout, rf"^served {total} round trips "
                 rf"\({warmup} warm-up\)$", "server stdout")


# ---- RDMA ---------------------------------------------------------------------

@points(2, "rdma: server and client run, one summary line")
def test_rdma_pair(rdma_run):
    summary(rdma_run, "rdma")
    served(rdma_run)


@points(2, "rdma: the summary line is the CSV samples' (percentiles recomputed)")
def test_rdma_summary_is_the_samples(rdma_run):
    check_csv(rdma_run, summary(rdma_run, "rdma"))


@points(2, "rdma: the messages crossed rxe as SENDs (counters)")
def test_rdma_counters(rdma_run):
    summary(rdma_run, "rdma")
    n = 2 * (WARMUP + rdma_run["iters"])
    d = rdma_run["delta"]
    for name in ("SENDs sent", "receives consumed"):
        if d.of(name) != n:
            raise GradeFailure(
                f"{d.label(name)} moved by {d.of(name)}, expected "
                f"{n}: one SEND and one receive per message, "
                f"{WARMUP} + {rdma_run['iters']} round trips, two messages "
                f"each\n  all deltas: {d.show()}")


def holds(iters):
    """How many timed round trips the reference server holds."""
    return max(3, iters // 10)


@points(3, "rdma: every sample is a round trip the reference server answered")
def test_rdma_reference_server(build, rdma):
    iters = rand_between(30, 50)
    size = rand_between(16, 1024)
    args = ["--rdma", "-s", size, "-n", iters, "--warmup", WARMUP, "-t",
            T_CLIENT, "--csv", CSV]
    with start_server("11", "--size", size, "--iters", WARMUP + iters,
                      "--warmup", WARMUP, "--holds", holds(iters),
                      "--timeout", T, "--accept-timeout", T_ACCEPT) as peer:
        with build.start(PROG, "--port", peer.port, *args, peer_host(rdma),
                         ready=None) as client:
            pid = client.proc.pid
            res = client.wait()
        v = verdict(peer, timeout=after(res), other=res)
    res.ok("client against the reference RDMA server")
    expect_peer_ok(v, "the client of the reference RDMA server")
    expect_owner(v, pid, "client")
    summary(dict(client=res, server=None, size=size, iters=iters,
                 args=args), "rdma")
    ns = read_samples(read_csv(build))
    expect(len(ns), iters, f"samples in {CSV}")
    check_rounds(ns, v, WARMUP, "ping")


# ---- UDP ----------------------------------------------------------------------

@points(2, "udp: server and client run, one summary line")
def test_udp_pair(udp_run):
    summary(udp_run, "udp")
    served(udp_run)


@points(2, "udp: the summary line is the CSV samples' (percentiles recomputed)")
def test_udp_summary_is_the_samples(udp_run):
    check_csv(udp_run, summary(udp_run, "udp"))


@points(2, "udp: nothing went through rxe")
def test_udp_not_rxe(udp_run):
    summary(udp_run, "udp")
    d = udp_run["delta"]
    # The packet counts every device has (NoEvidence otherwise); the
    # SEND and receive counts where it has them.
    moved = {k: d.of(k) for k in ("packets sent", "packets received")}
    moved.update({k: d.of(k) for k in ("SENDs sent", "receives consumed")
                  if d.has(k)})
    if any(moved.values()):
        raise GradeFailure(f"--udp moved rxe's counters: {d.show()}; a UDP "
                           f"round trip uses the socket, not the RDMA "
                           f"device")


@points(4, "udp: every sample is a round trip the reference server echoed")
def test_udp_reference_server(build, rdma):
    iters = rand_between(20, 30)
    size = rand_between(16, 1024)
    cmd = [sys.executable, str(UDP_ECHO)]
    with start_peer([*cmd, "--size", str(size), "--count",
                     str(WARMUP + iters), "--warmup", str(WARMUP),
                     "--holds", str(holds(iters)), "--timeout", T_ACCEPT],
                    ready=r"^listening on port (\d+)$", timeout=40) as ref:
        cli = build.run(PROG, "--udp", "--port", ref.port, "-s", size, "-n",
                        iters, "--warmup", WARMUP, "-t", T, "--csv", CSV,
                        host(rdma))
        cli.ok("client against the reference UDP server")
        v = verdict(ref, timeout=15, other=cli)
    if not v["ok"] or v["echoed"] != WARMUP + iters or v["sizes_wrong"]:
        raise GradeFailure(
            f"the reference UDP server expected {WARMUP + iters} datagrams "
            f"of {size} bytes\n  got: {v['echoed']} echoed, "
            f"{v['sizes_wrong']} of another size, error: {v['error']}")
    if v["early"]:
        j = v["early"][0]
        raise GradeFailure(
            f"round trip {j + 1}'s datagram reached the reference UDP server "
            f"before it had echoed round trip {j}'s: the client sent it "
            f"without waiting for the echo ({len(v['early'])} of "
            f"{WARMUP + iters} round trips so)\n  expected: send, then "
            f"recv() the echo, then the next send")
    expect_match(cli.stdout, SUMMARY, "client stdout (the summary line)")
    ns = read_samples(read_csv(build))
    expect(len(ns), iters, f"samples in {CSV}")
    check_rounds(ns, v, WARMUP, "datagram")


# ---- the command line and faults -----------------------------------------------

@points(1, "--udp and --rdma together: usage, exit 2")
def test_usage(build):
    res = build.run(PROG, "--udp", "--rdma")
    res.fails(2, what="latency --udp --rdma")
    expect_match(res.stderr, r"^usage: latency ", "stderr")


@points(1, "rdma, no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)


@points(1, "udp, no server: round trip 0 fails, exit 1")
def test_udp_no_server(build, rdma):
    args = ("--udp", "--port", pairs.free_port(), "-t", "1", "-n", "3",
            "--warmup", "0", host(rdma))
    res = build.run(PROG, *args, timeout=30)
    pairs.clean_failure(res, build.command(PROG, *args), 20)
    expect_match(res.stderr, r"^round trip 0: ", "stderr")
