"""Lesson 13: throughput - outstanding work requests, selective signaling,
chains of work requests, inline data.

`bw` streams -n messages to a server (RDMA WRITE, or SEND with --send):
message i leaves local slot i % D, is stamped with i and lands in remote
slot i % M. Nothing here takes the program's word, and nothing compares a
speed with a limit:

- the data: the reference server (grader/evidence/trusted/peer.py 13
  server) zeroes M slots (M random), and after the client's 'D' checks in
  its own memory that each slot holds the last message aimed at it, the
  pattern of a random --seed stamped with the message's number; with
  --send it posts a receive per message up front and counts them; the
  kernel says the QP that wrote is the client's;
- what the program asked of the device: the interposer (verbs_spy.so,
  aggregate `sq` line) counts, per QP, the ibv_post_send() calls and the
  WRs each carried (batching), the signaled WRs and the gaps between
  them (selective signaling), the inline WRs, and the WRs outstanding
  after every post - posted minus known complete, the program's own view
  (a signaled completion it polled completes every WR before it): the
  depth is proven without a clock, at any speed. That the queue is kept
  that full throughout, not filled once: at every turn from posting to
  polling, and at every poll that waited (the second in a row that
  brought the QP nothing), while messages were left, the room was less
  than a chain (fills, waits). A program that posts while a chain fits
  and only then polls meets it by construction, however fast the device
  completes (rxe in the micro-VM completes a chain inside its
  ibv_post_send(): the program's polls then find the queue done, and it
  refills it whole); one that filled the queue once and then kept fewer
  outstanding turns to polling with room to spare. With VERBS_SPY_INFLIGHT
  it also sums each WR's buffer when it is posted and when the program
  learns it completed: a buffer rewritten in between is caught even where
  rxe happened to read it in time;
- the rxe counters (supporting): a WRITE stream sends no SEND and at least
  n x ceil(SIZE / 1024) packets; a SEND stream exactly n SENDs;
- the summary line against clocks it does not control: T must lie between
  the interposer's first post -> last completion (inside the program) and
  the grader's wall time of the whole process (outside it), both of which
  bracket an honest T by construction; the rates must be N / T and
  N x SIZE / T; the CPU time of a single-threaded stream cannot exceed T.

The checks that read a clock, and why each holds for an honest program
from 10x faster to 10x slower than the build machine and under load
(grader/README.md's Timing table has a row for each):

- test_summary, T: the interposer's first post and last completion lie
  inside the program's own two clock reads, and those inside the process's
  lifetime as the grader's clock measures it; both bounds hold by
  construction at any speed. Margin: 1 us below (T is printed to 6
  decimals), none above.
- test_summary, the rates: arithmetic on the printed N, SIZE and T (1 %
  plus 0.002), no clock.
- test_summary, cpu: one thread's CPU time over an interval cannot exceed
  the interval's wall time (getrusage sums the scheduler's nanoseconds);
  preemption only adds wall time. Margin: 10 % and 50 ms, for a guest
  whose CPU accounting and CLOCK_MONOTONIC drift apart (measured in the
  micro-VM: cpu 2.360 s printed for a stream of T = 2.350 s).
- Waits bound hangs only: the client's -t 10 is the longest it may go
  without a single completion (a 64 KiB WRITE takes about 2 ms here, so
  200 ms at 100x slower); the servers' 60 s cover a whole stream of at
  most 480 x 8 KiB (under 0.5 s here at 10 MB/s, the slowest measured).
- The depth (1 against 16 included) and the queue kept full are the
  interposer's counts of WRs outstanding after each post and at each
  turn to polling: no clock at all.
"""

import math
import re
from pathlib import Path

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.evidence.interpose import Spy, build_interposer
from grader.evidence.trusted.run import (T_CLIENT, after, expect_owner,
                                         expect_peer_ok, peer_host,
                                         rand_between, start_server, verdict)
from grader.session import pairs

PROG = "bw"
T = "10"            # the program's own client's waits: a connection, one completion
T_SERVER = "60"     # the server's wait for DONE spans the whole stream
MTU = 1024
SUMMARY = re.compile(
    r"^bw (write|send) (\d+) bytes depth (\d+): (\d+) msgs in ([\d.]+) s = "
    r"([\d.]+) Mmsg/s, ([\d.]+) MB/s, cpu ([\d.]+) s$", re.M)
CSV = "bw.csv"


def scratch(build):
    """Where the program's relative --csv lands: its working directory."""
    sb = getattr(build, "sandbox", None)
    return Path(sb.scratch if sb and sb.scratch else ".")


def shape():
    """A random stream shape the program must honour exactly: depth D,
    batch B dividing D, signal N (2 or more) a multiple or divisor of B
    (N < D), and
    n leaving a partial last chain and an unsignaled tail, so that the
    last WR's own signal and the short chain are exercised."""
    depth = [8, 16, 32][rand_between(0, 2)]
    batch = [2, 4][rand_between(0, 1)]
    # never 1: every WR signaled would leave nothing to check; never D:
    # a program that learns of completions a whole queue at a time must
    # empty it before each refill, and "kept full" would say nothing
    signals = [x for x in (batch // 2, batch, 2 * batch, 4 * batch)
               if 2 <= x < depth]
    signal = signals[rand_between(0, len(signals) - 1)]
    while True:
        iters = rand_between(240, 480)
        if iters % batch and iters % signal:
            return dict(depth=depth, batch=batch, signal=signal, iters=iters)


def client_args(s):
    # -t T_CLIENT: against the reference server the client's waits hold the
    # server's own work (its resources after the accept, the kernel asked
    # who owns the client's QP before 'R'); beside a second make test a
    # client's first receive ran out of 10 s (fresh-clone run 71).
    args = ["-s", s["size"], "-n", s["iters"], "--seed", s["seed"], "-t",
            T_CLIENT]
    for k in ("depth", "signal", "batch"):
        if k in s:
            args += [f"--{k}", s[k]]
    if s.get("send"):
        args.append("--send")
    if s.get("inline"):
        args.append("--inline")
    if s.get("csv"):
        args += ["--csv", CSV]
    return args


def stream_vs_ref(build, rdma, s):
    """The client, under the interposer, against the reference server:
    a dict with the client's Result, pid, the peer's verdict, the counter
    deltas, the spy and the shape."""
    spy = Spy(build_interposer(build.course), inflight=1)
    s = dict(s, slots=rand_between(3, 12), seed=rand_between(1, 1 << 30))
    peer = ["--size", s["size"], "--iters", s["iters"], "--slots",
            s["slots"], "--seed", s["seed"], "--timeout", T_SERVER]
    if s.get("send"):
        peer.append("--send")
    with start_server("13", *peer) as ref:
        before = rdma.counters()
        with build.start(PROG, "--port", ref.port, *client_args(s),
                         peer_host(rdma), ready=None, env=spy.env) as cli:
            pid = cli.proc.pid
            res = cli.wait(timeout=120)
        v = verdict(ref, timeout=after(res), other=res)
    csv = None
    if s.get("csv") and res.returncode == 0:
        try:
            csv = (scratch(build) / CSV).read_text()
        except OSError as err:
            csv = f"(no {CSV}: {err})"
    return dict(res=res, pid=pid, v=v, delta=rdma.counters() - before,
                spy=spy, s=s, csv=csv,
                how=f"{spy.describe()} {build.command(PROG, '--port', 'PORT', *client_args(s), 'HOST')}"
                    f"  (against grader/evidence/trusted/peer.py 13 server "
                    f"{' '.join(map(str, peer))})")


# The WRITE stream's SIZE: from 1 KiB, so that its MB/s (printed to 3
# decimals) tells 2^20 from 10^6 whatever the speed of a stream of N >= 240
# WRs (rates_problem(): up to T = 10 s, where lesson 13's README shows
# 1000 WRs of 64 KiB in 1.8 s). From 16 B it could not at T = 0.18 s and in many cases
# beyond: such a stream's MB/s is about 0.01, and 10^6 against 2^20 moved
# it less than half its last digit (fresh-clone run 176: the mutant
# 13/mb-decimal lost no points; grader/selftest/test_bw_summary.py).
WRITE_SIZES = (1024, 8192)


@pytest.fixture(scope="module")
def write_run(build, rdma):
    return stream_vs_ref(build, rdma, dict(shape(),
                                           size=rand_between(*WRITE_SIZES),
                                           csv=True))


@pytest.fixture(scope="module")
def send_run(build, rdma):
    return stream_vs_ref(build, rdma, dict(shape(), send=True,
                                           size=rand_between(16, MTU)))


@pytest.fixture(scope="module")
def inline_run(build, rdma):
    return stream_vs_ref(build, rdma, dict(shape(), inline=True,
                                           size=rand_between(16, 256)))


# ---- reading the evidence ----------------------------------------------------------

def ran(run, what):
    """The client exited 0 and the reference server is content."""
    run["res"].ok(f"{what}: {run['how']}")
    expect_peer_ok(run["v"], what)
    return run["v"]


def hist(text):
    return {} if text in ("-", "") else {
        int(k): int(v) for k, v in (kv.split(":") for kv in text.split(","))}


def sq(run):
    """The interposer's `sq` line of the QP that streamed (its fields as
    numbers; the histograms as dicts)."""
    lines = [f for _, f in run["spy"].calls("sq") if int(f.get("wrs", 0))]
    if not lines:
        raise GradeFailure(
            f"the interposer saw no work request posted by the client "
            f"(ibv_post_send() through the QP's context)\nreproduce: "
            f"{run['how']}")
    f = max(lines, key=lambda f: int(f["wrs"]))
    # The record's QP must be the one outside evidence names: the QP the
    # client's qp_info gave the reference server (which accepts packets of
    # that QP only), owned by the client's PID (the kernel).
    v = run["v"]
    theirs = (v.get("theirs") or {}).get("qpn")
    if theirs is None or int(f["qpn"]) != theirs:
        raise GradeFailure(
            f"the interposer's record streamed on QP {f['qpn']}, but the "
            f"QP the client named to the reference server (its qp_info) "
            f"is {theirs}: the record is not of the stream the server "
            f"received\nreproduce: {run['how']}")
    expect_owner(v, run["pid"], "client")
    hists = ("opcodes", "chains", "gaps", "fills", "waits")
    out = {k: int(v) for k, v in f.items() if k not in hists}
    out.update({k: hist(f.get(k, "-")) for k in hists})
    return out


def kept_full(run, depth, batch):
    """The queue kept --depth full throughout the stream: whenever the
    program turned from posting to polling, and whenever it waited on its
    CQ (a poll that brought the QP nothing, after another), with messages
    left to post, its room was less than a chain: more than depth - batch
    WRs outstanding (posted, not yet known complete). The interposer
    counts both, in the program's own view, until the QP's last post."""
    q = sq(run)
    if not q["fills"]:
        raise GradeFailure(
            f"the interposer saw no ibv_poll_cq() of the QP's send CQ "
            f"between two of its ibv_post_send() calls: the stream must "
            f"poll its completions to learn of room (and --depth "
            f"{depth} leaves room for only {depth} of the "
            f"{q['wrs']} WRs)\nreproduce: {run['how']}")
    floor = depth - batch
    low = sum(n for h in (q["fills"], q["waits"]) for k, n in h.items()
              if k <= floor)
    if low:
        raise GradeFailure(
            f"the queue was not kept full: {low} times the stream stopped "
            f"posting to poll, or waited for a completion, with room for "
            f"another chain of --batch {batch} in its --depth {depth} "
            f"(the interposer's count, until the last post: the tail "
            f"drains the queue)\n  expected: more than {floor} WRs "
            f"outstanding (posted, not yet known complete) each time\n"
            f"  got:      {{outstanding: times}} at the turns to polling "
            f"{q['fills']}, at the waits {q['waits']}\n"
            f"reproduce: {run['how']}")


def memory(run, what):
    v = ran(run, what)
    s = run["s"]
    bad = v.get("mismatch")
    if bad:
        raise GradeFailure(
            f"{what}: the reference server's slot {bad['slot']} (of "
            f"{s['slots']}) should hold message {bad['message']} of "
            f"{s['iters']} (the last aimed at it: i % {s['slots']} = "
            f"{bad['slot']}), the pattern of --seed {s['seed']} with the "
            f"message's number in its first and last 8 bytes\n"
            f"  expected: byte {bad['offset']} = 0x{bad['expected']:02x}\n"
            f"  got:      0x{bad['got']:02x} (the slot's first 8 bytes say "
            f"message {bad['found_message']}; {bad['nonzero_bytes']} of its "
            f"{s['size']} bytes are not zero)\nreproduce: {run['how']}")
    expect(v.get("slots_checked"), min(s["slots"], s["iters"]),
           "slots the reference server checked")
    expect_owner(v, run["pid"], "client")
    return v


def expected_signaled(n, sig):
    return n // sig + (1 if n % sig else 0)


def expected_gaps(n, sig):
    gaps = {sig: n // sig} if n // sig else {}
    if n % sig:
        gaps[n % sig] = gaps.get(n % sig, 0) + 1
    return gaps


def expected_chains(n, b):
    chains = {b: n // b} if n // b else {}
    if n % b:
        chains[n % b] = chains.get(n % b, 0) + 1
    return chains


def summary(run):
    s = run["s"]
    m = expect_match(run["res"].stdout, SUMMARY.pattern,
                     "client stdout (the summary line)")
    expect(m.group(1), "send" if s.get("send") else "write",
           "TRANSPORT in the summary line")
    expect(int(m.group(2)), s["size"], "SIZE in the summary line (-s)")
    expect(int(m.group(3)), s["depth"], "the depth in the summary line")
    expect(int(m.group(4)), s["iters"], "msgs in the summary line (-n)")
    return m


# ---- the stream of WRITEs ------------------------------------------------------------

@points(5, "WRITE stream: every slot of the reference server holds its last message")
def test_write_reference(write_run):
    memory(write_run, "client streaming WRITEs to the reference server")


@points(2, "WRITE stream: WRITEs crossed rxe, no SEND (counters)")
def test_write_counters(write_run):
    ran(write_run, "client streaming WRITEs")
    s, d = write_run["s"], write_run["delta"]
    packets = s["iters"] * math.ceil(s["size"] / MTU)
    if d.has("SENDs sent"):
        sends = d.of("SENDs sent")
    else:
        # A device that does not count SENDs (mlx5): the SENDs and SENDs
        # with immediate the interposer saw posted on any of the
        # client's QPs.
        sends = sum(hist(f.get("opcodes", "-")).get(op, 0)
                    for _, f in write_run["spy"].calls("sq") for op in (2, 3))
    if sends or d.of("packets sent") < packets:
        raise GradeFailure(
            f"{s['iters']} RDMA WRITEs of {s['size']} bytes are at least "
            f"{packets} packets (path MTU {MTU}) and no SEND\n  got: "
            f"{d.show()}\nreproduce: {write_run['how']}")


@points(3, "at most --depth WRs outstanding, and the queue kept that full (interposer)")
def test_depth(write_run):
    ran(write_run, "client streaming WRITEs")
    s, q = write_run["s"], sq(write_run)
    want = min(s["depth"], s["iters"])
    got = q["max_outstanding"]
    if got != want:
        why = ("more WRs outstanding than --depth" if got > want else
               "the queue was never full")
        raise GradeFailure(
            f"WRs outstanding (posted, not yet known complete) right after "
            f"an ibv_post_send(), at most, with --depth {s['depth']}: the "
            f"stream fills the queue before it first polls, and never "
            f"overfills it\n  expected: {want}\n  got:      {got} ({why})"
            f"\nreproduce: {write_run['how']}")
    kept_full(write_run, s["depth"], s["batch"])


@points(3, "one WR in --signal is signaled, and the last (interposer)")
def test_signaled(write_run):
    ran(write_run, "client streaming WRITEs")
    s, q = write_run["s"], sq(write_run)
    n, sig = s["iters"], s["signal"]
    expect(q["signaled"], expected_signaled(n, sig),
           f"signaled WRs of {n} with --signal {sig} (every {sig}th, and "
           f"the last)")
    expect(q["gaps"], expected_gaps(n, sig),
           "distances between signaled WRs {distance: how often}")
    expect(q["last_signaled"], 1, "the last WR signaled (1: yes)")


@points(3, "--batch WRs per ibv_post_send() call (interposer)")
def test_batched(write_run):
    ran(write_run, "client streaming WRITEs")
    s, q = write_run["s"], sq(write_run)
    n, b = s["iters"], s["batch"]
    expect(q["chains"], expected_chains(n, b),
           f"WRs per ibv_post_send() call with --batch {b}, {n} messages "
           f"{{WRs in the chain: calls}}")
    expect(q["failed_calls"], 0, "ibv_post_send() calls that failed")


def rates_problem(n, size, secs, mmsg_text, mb_text):
    """What is wrong with the summary line's printed Mmsg/s and MB/s for N
    messages of SIZE bytes in T = `secs` s, else None: each within 1 % and
    half a unit of its last printed digit of N / T / 10^6 and
    N x SIZE / T / 2^20."""
    for name, text, want in (("Mmsg/s", mmsg_text, n / secs / 1e6),
                             ("MB/s", mb_text, n * size / secs / (1 << 20))):
        got = float(text)
        digits = len(text.partition(".")[2])
        if abs(got - want) > 0.01 * want + 0.5 * 10 ** -digits:
            return (f"{name} in the summary line, recomputed from its N = "
                    f"{n} and T = {secs:.6f} (Mmsg/s = N / T / 10^6, MB/s = "
                    f"N x SIZE / T / 2^20)\n  expected: {want:.6f}\n"
                    f"  got:      {got}")
    return None


@points(3, "the summary line is the stream's: T between the two clocks, rates N/T")
def test_summary(write_run):
    ran(write_run, "client streaming WRITEs")
    s, q, res = write_run["s"], sq(write_run), write_run["res"]
    m = summary(write_run)
    secs, cpu = float(m.group(5)), float(m.group(8))
    inner = (q["last_done_ns"] - q["first_post_ns"]) / 1e9
    if not inner - 1e-6 <= secs <= res.duration:
        raise GradeFailure(
            f"T in the summary line: the stream runs from its first "
            f"ibv_post_send() to its last completion, which the "
            f"interposer saw {inner:.6f} s apart, inside a process that "
            f"lived {res.duration:.3f} s by the grader's clock\n"
            f"  expected: {inner:.6f} <= T <= {res.duration:.3f}\n"
            f"  got:      T = {secs:.6f}")
    why = rates_problem(s["iters"], s["size"], secs, m.group(6), m.group(7))
    if why:
        raise GradeFailure(why)
    if cpu > 1.1 * secs + 0.05:
        raise GradeFailure(
            f"cpu in the summary line: one thread streaming for T = "
            f"{secs:.6f} s cannot use more CPU than that (10 % and 50 ms "
            f"allowed for a VM's clocks)\n  got: cpu {cpu} s")


@points(2, "no buffer rewritten while its WR was in flight (interposer)")
def test_buffers(write_run):
    ran(write_run, "client streaming WRITEs")
    q = sq(write_run)
    if q["modified_in_flight"]:
        raise GradeFailure(
            f"the client rewrote the buffer of {q['modified_in_flight']} "
            f"WRs after posting them and before it knew they had "
            f"completed (the first: WR {q['first_modified']} of the "
            f"stream): the device may read the buffer any time until "
            f"then, so what it sends can be the later message's bytes "
            f"(rxe often copied it in time; a NIC reads it later)\n"
            f"reproduce: {write_run['how']}")


@points(1, "--csv: the row is the summary line's")
def test_csv(write_run):
    ran(write_run, "client streaming WRITEs with --csv")
    m = summary(write_run)
    rows = (write_run["csv"] or "").strip().splitlines()
    expect(rows[0] if rows else "",
           "transport,size,depth,signal,batch,inline,msgs,seconds,"
           "mmsg_per_s,mb_per_s,cpu_s", f"{CSV}'s header")
    s = write_run["s"]
    want = (f"write,{s['size']},{s['depth']},{s['signal']},{s['batch']},0,"
            f"{s['iters']},{m.group(5)},{m.group(6)},{m.group(7)},"
            f"{m.group(8)}")
    expect(rows[1] if len(rows) > 1 else "", want,
           f"{CSV}'s row (the summary line's numbers)")


# ---- SENDs, inline, depth ------------------------------------------------------------

@points(3, "SEND stream: the reference server received every message in its slot")
def test_send_reference(send_run):
    v = memory(send_run, "client streaming SENDs to the reference server")
    expect(v.get("wrong_length"), 0, "receives of another length than -s")


@points(2, "SEND stream: n SENDs crossed rxe (counters)")
def test_send_counters(send_run, rdma):
    ran(send_run, "client streaming SENDs")
    n, d = send_run["s"]["iters"], send_run["delta"]
    names = (["SENDs sent"] if rdma.peer_jobs
             else ["SENDs sent", "receives consumed"])
    if not d.has("SENDs sent"):
        # A device that does not count SENDs (mlx5): every SEND is at
        # least one packet; the interposer's count of SENDs posted follows.
        names = []
        if d.of("packets sent") < n:
            raise GradeFailure(
                f"{d.label('packets sent')} moved by {d.of('packets sent')}, "
                f"expected at least {n}: one SEND per message\n  all "
                f"deltas: {d.show()}\nreproduce: {send_run['how']}")
    for name in names:
        if d.of(name) != n:
            raise GradeFailure(
                f"{d.label(name)} moved by {d.of(name)}, expected "
                f"{n}: one SEND per message, no other\n  all deltas: "
                f"{d.show()}\nreproduce: {send_run['how']}")
    q = sq(send_run)
    expect(q["opcodes"], {2: n}, "WRs posted {opcode: count} (2: IBV_WR_SEND)")


@points(3, "--inline: every WR carries its payload inline, the data arrives")
def test_inline(inline_run):
    memory(inline_run, "client streaming inline WRITEs")
    n, q = inline_run["s"]["iters"], sq(inline_run)
    expect_match(inline_run["res"].stdout,
                 r"^inline: up to (\d+) bytes \(max_inline_data\)$",
                 "client stdout")
    expect(q["inline"], n, "WRs posted with IBV_SEND_INLINE")


@points(2, "--inline beyond max_inline_data: not inline, no failure")
def test_inline_too_big(build, rdma):
    run = stream_vs_ref(build, rdma, dict(
        inline=True, size=rand_between(600, 4096), iters=rand_between(40, 80),
        depth=4, signal=2, batch=2))
    memory(run, "client with --inline and messages above max_inline_data")
    m = expect_match(
        run["res"].stdout, r"^inline: (\d+) bytes is more than "
        r"max_inline_data \((\d+)\): not inline$", "client stdout")
    expect(int(m.group(1)), run["s"]["size"], "SIZE in the inline line")
    expect(sq(run)["inline"], 0, "WRs posted with IBV_SEND_INLINE")


@points(3, "--depth 1 against --depth 16: 1 and 16 WRs in flight (interposer)")
def test_depth_1_vs_16(build, rdma):
    got = {}
    for depth in (1, 16):
        run = stream_vs_ref(build, rdma, dict(
            size=64, iters=rand_between(100, 200), depth=depth, signal=1,
            batch=1))
        memory(run, f"client with --depth {depth}")
        got[depth] = sq(run)["max_outstanding"]
        kept_full(run, depth, 1)
    expect(got, {1: 1, 16: 16}, "most WRs outstanding after a post "
           "{--depth: WRs}")


# ---- the program's own server, the command line ---------------------------------------

@points(2, "the program's server and client, --send: both exit 0, slots verified")
def test_pair(build, rdma):
    n, size, slots = rand_between(50, 150), rand_between(16, 4096), 8
    seed = rand_between(1, 1 << 30)
    common = ["-s", size, "-n", n, "--seed", seed, "--send"]
    with build.start(PROG, "--port", "0", *common, "--slots", slots,
                     "-t", T_SERVER) as server:
        cli = build.run(PROG, "--port", server.port, *common, "--depth", 8,
                        "--signal", 4, "--batch", 2, "-t", T,
                        pairs.host(rdma), timeout=120)
        srv = server.wait(timeout=60)
    cli.ok("client", peer=srv, peer_name="server")
    srv.ok("server", peer=cli, peer_name="client")
    expect_match(srv.stdout, rf"^verified {slots} slots: messages {n - slots} "
                 rf"to {n - 1}$", "server stdout")


@points(1, "bad command line (--signal above --depth): usage, exit 2")
def test_usage(build):
    res = build.run(PROG, "--depth", "4", "--signal", "8", "localhost")
    res.fails(2, what="bw --depth 4 --signal 8")
    expect_match(res.stderr, r"^usage: bw ", "stderr")


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)
