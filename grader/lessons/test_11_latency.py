"""Lesson 11: round-trip latency distributions, UDP vs RDMA SEND/RECV.

`latency --udp|--rdma` runs as a server (no HOST) and a client (HOST); the
client times every round trip and prints one summary line, and with --csv
every sample. No test here times anything against a limit: the machine's
speed is not the student's (`make bench-latency` compares the reference
with perftest). What is checked:

- the summary line is the CSV's: min, p50, p90, p99 and max recomputed
  from the samples (nearest rank), N rows;
- the transports really carried the messages: for RDMA the rxe counters
  rdma_sends and rdma_recvs move by exactly 2 x (warm-up + N) (both sides
  run on the one device); for UDP they do not move at all (and neither do
  sent_pkts/rcvd_pkts), and the reference UDP server
  (grader/evidence/trusted/udp_echo.py) echoes every datagram itself;
- the timings are measured: the reference UDP server holds each datagram
  for a random delay before it answers, so no honest round trip is
  shorter than that delay.

Round trips are few (tens): under TCG with one vCPU a busy-polling RDMA
round trip costs milliseconds (the two processes take turns at the
scheduler's pace).
"""

import math
import re
import secrets
import sys
from pathlib import Path

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.session import pairs
from grader.evidence.trusted.run import (UDP_ECHO, rand_between, start_peer,
                                         verdict)

PROG = "latency"
T = "5"         # any one wait (a connection, a completion, a datagram): a
                # round trip takes milliseconds; a side left waiting for a
                # message that never comes busy-polls this long
T_ACCEPT = "20"  # a server's first wait, for its client to start and
                 # connect (or send its first datagram): a loaded machine
                 # starts programs slowly. It only bounds a hang.
WARMUP = 5
CSV = "samples.csv"
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
        srv = server.wait(timeout=30)
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


def check_csv(run, m):
    lines = run["csv"].strip().splitlines()
    expect(lines[0] if lines else "", "round_trip,rtt_ns", "the CSV's header")
    ns = []
    for no, line in enumerate(lines[1:], 2):
        if not re.fullmatch(r"\d+,\d+", line):
            raise GradeFailure(f"{CSV} line {no}: expected 'I,NS', got "
                               f"{line!r}")
        ns.append(int(line.split(",")[1]))
    expect(len(ns), run["iters"], f"samples in {CSV} (one per timed round "
           f"trip, warm-up excluded)")
    ns.sort()
    want = {"min": ns[0], "p50": nearest_rank(ns, 50),
            "p90": nearest_rank(ns, 90), "p99": nearest_rank(ns, 99),
            "max": ns[-1]}
    got = dict(zip(("min", "p50", "p90", "p99", "max"), m.groups()[2:7]))
    for name, value in want.items():
        expect(got[name], f"{value / 1e3:.2f}",
               f"{name} in the summary line, recomputed from {CSV} "
               f"(nearest rank, us with 2 decimals)")
    return ns


def served(run, warmup=WARMUP):
    total = warmup + run["iters"]
    run["server"].ok("server", peer=run["client"], peer_name="client")
    expect_match(run["server"].stdout, rf"^served {total} round trips "
                 rf"\({warmup} warm-up\)$", "server stdout")


# ---- RDMA ---------------------------------------------------------------------

@points(3, "rdma: server and client run, one summary line")
def test_rdma_pair(rdma_run):
    summary(rdma_run, "rdma")
    served(rdma_run)


@points(3, "rdma: the summary line is the CSV samples' (percentiles recomputed)")
def test_rdma_summary_is_the_samples(rdma_run):
    check_csv(rdma_run, summary(rdma_run, "rdma"))


@points(3, "rdma: the messages crossed rxe as SENDs (counters)")
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


@points(4, "udp: the reference server echoes every datagram; timings are real")
def test_udp_reference_server(build, rdma):
    iters = rand_between(20, 30)
    size = rand_between(16, 1024)
    delay_us = 1500 + secrets.randbelow(1500)
    cmd = [sys.executable, str(UDP_ECHO)]
    with start_peer([*cmd, "--size", str(size), "--count",
                     str(WARMUP + iters), "--delay-us", str(delay_us),
                     "--timeout", T_ACCEPT],
                    ready=r"^listening on port (\d+)$", timeout=40) as ref:
        cli = build.run(PROG, "--udp", "--port", ref.port, "-s", size, "-n",
                        iters, "--warmup", WARMUP, "-t", T, host(rdma))
        cli.ok("client against the reference UDP server")
        v = verdict(ref, timeout=15, other=cli)
    if not v["ok"] or v["echoed"] != WARMUP + iters or v["sizes_wrong"]:
        raise GradeFailure(
            f"the reference UDP server expected {WARMUP + iters} datagrams "
            f"of {size} bytes\n  got: {v['echoed']} echoed, "
            f"{v['sizes_wrong']} of another size, error: {v['error']}")
    m = expect_match(cli.stdout, SUMMARY, "client stdout (the summary line)")
    if float(m.group(3)) < delay_us:
        raise GradeFailure(
            f"the reference server held every datagram {delay_us} us before "
            f"echoing it, so no round trip can be shorter\n  expected: min "
            f">= {delay_us:.2f} us\n  got:      min {m.group(3)} us")


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
