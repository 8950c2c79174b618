"""Lesson 10: completion channels instead of spinning, and async events.

`events` is lesson 05's ping-pong (the same protocol, byte for byte) whose
waits either spin on ibv_poll_cq() (--mode poll) or sleep on a completion
channel (--mode event, the default), with a thread reading the device's
async events.

Evidence:
  - the data: each side against the course's reference peer for lesson 05
    (grader/evidence/trusted/peer.py), which checks every message in its own memory;
    the kernel says the QP the program named is its own;
  - event mode really sleeps on the channel: the interposer (verbs_spy.so)
    records the program's ibv_req_notify_cq() and ibv_get_cq_event() calls;
  - the lost wakeup: the interposer makes ibv_req_notify_cq() sleep 30 ms
    before it arms the CQ, so the peer's answer always arrives before the
    CQ is armed and raises no event: only a program that polls again after
    arming finishes;
  - CPU time: measured by the grader (bash's `time` around the program, in
    the sandbox), not taken from the program's `cpu:` line, which must
    agree with it;
  - port down: the grader takes the rxe device's netdev down mid-run (in
    the micro-VM only), both sides must report IBV_EVENT_PORT_ERR and exit
    1; the netdev is brought up again whatever happened, and the port must
    be ACTIVE with its GID back before the test ends.

Measured in the micro-VM (1 vCPU, TCG): 300 round trips of 64 bytes, per
side: poll 2.9 s CPU in 5.6 s (rtt 17.7 ms: two spinning processes share
the one CPU with rxe's own work), event 0.25-0.28 s CPU in 0.3-0.8 s (rtt
0.67 ms). Port down: both sides printed the PORT_ERR line and exited 1
within 0.73 s; the client's outstanding SEND completed with 'local QP
operation error' (status 2); no QP event.
"""

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from grader import GradeFailure, expect, expect_line, expect_match, points
from grader.evidence.interpose import Spy, build_interposer
from grader.session.pairs import clean_failure, host
from grader.evidence.trusted.run import (expect_owner, expect_peer_ok, rand_between,
                                start_client, start_server, verdict)
from grader.session import pairs

PROG = "events"
T = "10"
CPU_ITERS = "40"
CPU_RE = (r"^cpu: (\d+\.\d{3}) s user, (\d+\.\d{3}) s system in "
          r"(\d+\.\d{3}) s \(mode (poll|event)\)$")
# bash's `time` keyword around the program: its CPU time, measured by the
# grader's shell after the program has exited (last line of stderr).
TIMED = ["bash", "-c", 'TIMEFORMAT="grader-time %3U %3S"; time "$0" "$@"']
TIMED_RE = r"^grader-time (\d+\.\d{3}) (\d+\.\d{3})$"


def _args(mode, iters, size, t=T):
    return ["--mode", mode, "-n", iters, "-s", size, "-t", t]


def _peer_opts(iters, size, t=T):
    return ["--iters", iters, "--size", size, "--timeout", t]


def _vs_server(build, rdma, mode, iters, size, env=None, t=T):
    """The program as client of the reference server: (Result, pid,
    verdict)."""
    with start_server("05", *_peer_opts(iters, size, t)) as ref:
        with build.start(PROG, "--port", ref.port,
                         *_args(mode, iters, size, t), host(rdma),
                         ready=None, env=env) as client:
            pid = client.proc.pid
            res = client.wait()
        v = verdict(ref, timeout=15 if res.returncode == 0 else 2.5,
                    other=res)
    return res, pid, v


@pytest.fixture(scope="module")
def as_client(build, rdma):
    """Event mode under the interposer, against the reference server."""
    spy = Spy(build_interposer(build.course))
    iters, size = rand_between(20, 40), rand_between(500, 3000)
    return _vs_server(build, rdma, "event", iters, size, spy.env) + (
        spy, iters, size)


def _verified(res, iters, size, who):
    expect_line(res.stdout, f"verified {iters} messages of {size} bytes",
                f"{who} stdout")


@points(3, "event mode: client against the reference server, data checked")
def test_peer_server(as_client):
    res, pid, v, spy, iters, size = as_client
    res.ok("client (--mode event) against the reference server")
    expect_peer_ok(v, "client against the reference server")
    expect(v.get("verified"), iters, "pings the reference server checked")
    expect_owner(v, pid, "client")
    _verified(res, iters, size, "client")


@points(2, "event mode sleeps on the channel (ibv_req_notify_cq, ibv_get_cq_event)")
def test_uses_channel(as_client):
    res, pid, v, spy, iters, size = as_client
    res.ok("client (--mode event) against the reference server")
    arms = [c for _, c in spy.calls("req_notify_cq") if c.get("rc") == "0"]
    events = [c for _, c in spy.calls("get_cq_event") if c.get("rc") == "0"]
    if not arms or not events:
        raise GradeFailure(
            f"in {iters} round trips the interposer saw "
            f"{len(arms)} ibv_req_notify_cq() and {len(events)} "
            f"ibv_get_cq_event() calls that succeeded: event mode must arm "
            f"the CQ and take its events from the channel\n"
            f"reproduce: {spy.describe()} {build_cmd(res)}")
    m = expect_match(res.stdout, r"^completion events: (\d+)$",
                     "client stdout")
    expect(int(m.group(1)), len(events), "completion events the client "
           "printed vs the ibv_get_cq_event() calls the interposer saw")


def build_cmd(res):
    return res.command


@points(3, "event mode: server against the reference client, data checked")
def test_peer_client(build, rdma):
    iters, size = rand_between(20, 40), rand_between(500, 3000)
    # -t 20: the server's -t also bounds its wait for the connection, and
    # the reference client (Python, pyverbs) takes many seconds to start
    # under emulation on a loaded machine (over 10 s measured, with other
    # gradings beside it).
    with build.start(PROG, "--port", "0",
                     *_args("event", iters, size, "20")) as server:
        pid = server.proc.pid
        with start_client("05", "--host", host(rdma), "--port", server.port,
                          *_peer_opts(iters, size)) as ref:
            v = verdict(ref)
        # The client is done: the server has only its last lines and its
        # teardown left (well under a second; one that hangs there is
        # killed without waiting long).
        res = server.wait(timeout=10)
    res.ok("server (--mode event) against the reference client")
    expect_peer_ok(v, "server against the reference client")
    expect(v.get("verified"), iters, "pongs the reference client checked")
    expect_owner(v, pid, "server")
    _verified(res, iters, size, "server")


@points(3, "no lost wakeup: poll again after arming the CQ")
def test_lost_wakeup(build, rdma):
    spy = Spy(build_interposer(build.course), notify_delay_us=30000)
    iters, size = rand_between(6, 10), rand_between(100, 1000)
    res, pid, v = _vs_server(build, rdma, "event", iters, size, spy.env,
                             t="3")
    how = (f"{spy.describe()} {build.command(PROG, '--port', 'PORT', *_args('event', iters, size, '3'), host(rdma))}"
           f" (against grader/evidence/trusted/peer.py 05 server)")
    if res.returncode != 0:
        raise GradeFailure(
            f"with ibv_req_notify_cq() slowed down by 30 ms, the answer "
            f"arrives before the CQ is armed and raises no event; the "
            f"client must find it by polling the CQ once more after "
            f"arming (TODO 2)\nreproduce: {how}\n{res.describe()}")
    expect_peer_ok(v, "client against the reference server")


# ---- CPU time --------------------------------------------------------------------

def _child_cpu(pid):
    """CPU seconds used so far by the one child of `pid` (the program
    under bash's `time`), from /proc; None when it cannot be read."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        stat = Path(f"/proc/{kids[0]}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _timed_pair(build, rdma, mode):
    """Server and client, each under bash's `time`, and the CPU time each
    had used when both were connected: ((server, client), (s0, c0))."""
    args = _args(mode, CPU_ITERS, "64")
    with build.start(PROG, "--port", "0", *args, wrap=TIMED) as server:
        with build.start(PROG, "--port", server.port, *args, host(rdma),
                         wrap=TIMED, ready=r"^connected$") as client:
            server.wait_for(r"^connected$")
            at_start = (_child_cpu(server.proc.pid),
                        _child_cpu(client.proc.pid))
            # The end of the ping-pong: each side's 'verified' line (the
            # teardown after it costs the same in both modes).
            at_end = []
            for proc in (server, client):
                proc.wait_for(r"^verified ", timeout=60)
                at_end.append(_child_cpu(proc.proc.pid))
            cli = client.wait(timeout=60)
        srv = server.wait(timeout=60)
    for res, who in ((srv, "server"), (cli, "client")):
        res.ok(f"{who}, --mode {mode}: "
               + build.command(PROG, "--port", "PORT", *args))
        _verified(res, CPU_ITERS, 64, f"{who} (--mode {mode})")
    if None in at_start:
        raise GradeFailure(f"--mode {mode}: could not read the programs' "
                           f"CPU time from /proc (a grader problem)")
    # A program already gone at its 'verified' line: its whole run.
    sampled = at_end
    at_end = [t if t is not None else _cpu(r, f"{mode} run")
              for t, r in zip(at_end, (srv, cli))]
    return (srv, cli), at_start, at_end, sampled


def _cpu(res, what):
    lines = res.stderr.strip().splitlines()
    m = re.match(TIMED_RE, lines[-1]) if lines else None
    if not m:
        raise GradeFailure(f"{what}: no CPU time from bash's time (a "
                           f"grader problem)\n{res.describe()}")
    return float(m.group(1)) + float(m.group(2))


@pytest.fixture(scope="module")
def cpu_runs(build, rdma):
    return {mode: _timed_pair(build, rdma, mode) for mode in ("poll", "event")}


@points(3, "event mode uses a small fraction of poll mode's CPU")
def test_cpu(cpu_runs):
    # The ping-pong's CPU time, from 'connected' to 'verified' (setup and
    # teardown cost the same in both modes), read from /proc.
    used = {mode: sum(t1 - t0 for t0, t1 in zip(at_start, at_end))
            for mode, (_, at_start, at_end, _) in cpu_runs.items()}
    if not used["event"] <= 0.25 * used["poll"]:
        raise GradeFailure(
            f"{CPU_ITERS} round trips of 64 bytes, CPU time of server + "
            f"client from 'connected' to 'verified', as the grader read it "
            f"in /proc:\n"
            f"  poll mode:  {used['poll']:.3f} s\n"
            f"  event mode: {used['event']:.3f} s\n"
            f"expected event mode to use at most a quarter of poll mode's: "
            f"does event mode sleep in poll() on the channel's fd, or "
            f"spin?")


@points(1, "the cpu: line reports the program's own CPU time (getrusage)")
def test_cpu_reported(cpu_runs):
    # getrusage() at the cpu: line, after 'verified' and before the
    # teardown, lies between the /proc reading at 'verified' and bash's
    # total for the whole process (1 tick = 10 ms of slack each side).
    for mode, (pair, _, _, sampled) in cpu_runs.items():
        for res, verified, who in zip(pair, sampled, ("server", "client")):
            total = _cpu(res, f"{mode} {who}")
            m = expect_match(res.stdout, CPU_RE, f"{who} stdout "
                             f"(--mode {mode})")
            expect(m.group(4), mode, f"{who}'s cpu: line, the mode")
            said = float(m.group(1)) + float(m.group(2))
            low = (verified or 0) - 0.02
            if not low <= said <= total + 0.02:
                raise GradeFailure(
                    f"{who} --mode {mode}: its cpu: line says "
                    f"{said:.3f} s (user + system); the grader read "
                    f"{verified if verified is not None else 'nothing'} s in "
                    f"/proc at its 'verified' line and bash's time "
                    f"measured {total:.3f} s for the whole process\n"
                    f"  {m.group(0)}\n(getrusage(RUSAGE_SELF) after the "
                    f"ping-pong must lie between the two)")


# ---- async events and errors -------------------------------------------------

def _netdev(rdma, state):
    return subprocess.run(["ip", "link", "set", rdma.netdev, state],
                          capture_output=True, text=True, timeout=10)


def _gid(rdma):
    return (rdma.port_dir / "gids" / str(rdma.gid_index)).read_text().strip()


@points(3, "port down mid-run: IBV_EVENT_PORT_ERR on both sides, exit 1")
def test_port_down(build, rdma):
    if rdma.backend != "vm" or not rdma.netdev:
        raise GradeFailure(
            f"this test takes the RDMA device's netdev down, which it does "
            f"only inside the course's micro-VM (backend here: "
            f"{rdma.backend}, netdev {rdma.netdev}); grade lesson 10 there")
    gid = _gid(rdma)
    args = _args("event", "1000000", "64", "10")
    down = None
    try:
        with build.start(PROG, "--port", "0", *args) as server:
            with build.start(PROG, "--port", server.port, *args, host(rdma),
                             ready=r"^connected$") as client:
                time.sleep(0.5)
                res = _netdev(rdma, "down")
                if res.returncode:
                    raise GradeFailure(f"ip link set {rdma.netdev} down "
                                       f"failed (a grader problem): "
                                       f"{res.stderr}")
                down = time.monotonic()
                cli = client.wait(timeout=15)
            srv = server.wait(timeout=15)
    finally:
        _netdev(rdma, "up")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (
                rdma.port_state() == "ACTIVE" and _gid(rdma) == gid):
            time.sleep(0.1)
    expect((rdma.port_state(), _gid(rdma)), ("ACTIVE", gid),
           f"port state and GID {rdma.gid_index} after 'ip link set "
           f"{rdma.netdev} up' (the grader restores the port)")
    if down is None:
        raise GradeFailure("the port was never taken down: the client did "
                           "not get to 'connected'")
    for res, who in ((cli, "client"), (srv, "server")):
        clean_failure(res, f"{who} whose port went down mid-run", 15)
        expect_line(res.stderr, "async event: IBV_EVENT_PORT_ERR (port error)",
                    f"{who} stderr (the async event thread's line)")


@points(2, "peer's QP gone: the completion error, exit 1")
def test_qp_gone(build, rdma):
    pairs.qp_gone(build, rdma, PROG, ["--mode", "event", "-s", "64", "-t",
                                     T], "client (--mode event) sending to "
                 "a QP that does not exist", length=64)


@points(1, "bad --mode: usage, exit 2")
def test_usage(build):
    for args in (["--mode", "spin"], ["--mode"], ["--bogus"]):
        res = build.run(PROG, *args).fails(2, build.command(PROG, *args))
        expect_match(res.stderr, r"^usage: ", "stderr")
