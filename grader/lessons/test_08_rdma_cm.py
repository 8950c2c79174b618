"""Lesson 08: the RDMA connection manager (librdmacm).

cm_server listens (port 0: rdma_cm picks one), cm_client connects to it over
$RDMA_IP, WRITEs a fresh random buffer into the server's, READs it back and
compares; the server READs the client's source buffer and compares it with
what it received (the exercise). The rxe counters must show the data moving
as WRITE/READ packets, not as SENDs; a corrupted source must be caught by the
server; and every fault (nobody listening, nobody there, a peer killed
mid-run) must end in a clean non-zero exit within seconds.
"""

import math
import random
import re
import time

import pytest

from grader import (GradeFailure, at_pace, expect_line, expect_match, points,
                    proven_by, too_slow)
from grader.evidence.trusted.run import T_ACCEPT

SERVER = "cm_server"
CLIENT = "cm_client"
SIZE = 65536
CORRUPT_AT = SIZE // 2
# Long enough for one run under TCG, short enough to fail fast.
T = 10
# A refused connection must be noticed at once, not at -t: the client gets
# -t T_REFUSED and REFUSED_LIMIT s from its start (its start included: a
# fraction of a second quiet) to exit by itself, far below T_REFUSED.
T_REFUSED, REFUSED_LIMIT = 20, 15
# A peer killed mid-run: the survivor has NOTICE s from the kill to exit by
# itself (the solution: well under a second); its -t is 60.
NOTICE = 30


def _pair(build, rdma, *client_args):
    """Run cm_server -p 0 and one cm_client against it; both Results. The
    server's -t is T_ACCEPT: its wait for the connection request includes
    the client's start (beside a second make test, six gradings at once,
    a server at -t 10 gave up before its client had connected)."""
    with build.start(SERVER, "-p", "0", "-t", T_ACCEPT) as srv:
        args = ["-p", srv.port, "-t", T, "-s", SIZE, *client_args, rdma.ip]
        # The grader waits lesson.toml's timeout (60 s) for each: a
        # backstop, far above the client's dozen waits of -t T.
        cli = build.run(CLIENT, *args)
        res = srv.wait()
    how = (f"server: {build.command(SERVER, '-p', srv.port, '-t', T_ACCEPT)}\n"
           f"  client: {build.command(CLIENT, *args)}")
    return res, cli, how


@pytest.fixture(scope="module")
def normal(build, rdma):
    """One good run, shared by the tests that look at it; with the rxe
    counters' movement during it."""
    try:
        before = rdma.counters()
        srv, cli, how = _pair(build, rdma)
        return {"srv": srv, "cli": cli, "how": how,
                "delta": rdma.counters() - before}
    except GradeFailure as e:
        return {"error": e}


def _need(run):
    if "error" in run:
        raise GradeFailure(str(run["error"]))
    return run["srv"], run["cli"], run["how"]


def _no_crash(res, who):
    if res.signal or res.timed_out:
        raise GradeFailure(f"{who} {res.status()}\n{res.describe()}")


@points(4, "connect with rdma_cm; the client WRITEs, READs back, compares")
def test_connect_and_round_trip(build, rdma, normal):
    srv, cli, how = _need(normal)
    _no_crash(cli, "cm_client")
    _no_crash(srv, "cm_server")
    expect_match(cli.stdout, r"^client: connected to \S+ port \d+$",
                 f"stdout of the client (TODOs 1-3)\n  {how}\n  stderr: "
                 f"{cli.stderr.strip()}")
    expect_match(srv.stdout, r"^server: connection from \S+ port \d+$",
                 f"stdout of the server (TODOs 4-6)\n  {how}\n  stderr: "
                 f"{srv.stderr.strip()}")
    expect_line(cli.stdout, f"client: wrote and read back {SIZE} bytes: match",
                f"the client's own verdict\n  {how}\n  stderr: "
                f"{cli.stderr.strip()}")


@points(4, "the server READs the client's buffer and verifies what it got")
@proven_by("test_peer_client_clean", "test_peer_client_corrupt")
def test_server_verifies(build, rdma, normal):
    srv, cli, how = _need(normal)
    _no_crash(srv, "cm_server")
    expect_line(srv.stdout, f"server: verified {SIZE} bytes: match",
                f"the server's verdict (TODO 7)\n  {how}\n  stderr: "
                f"{srv.stderr.strip()}")
    expect_line(cli.stdout, f"client: server verified {SIZE} bytes: match",
                f"the server's verdict as the client reports it\n  {how}")
    srv.ok("cm_server", peer=cli, peer_name="cm_client")
    cli.ok("cm_client", peer=srv, peer_name="cm_server")


def _active_mtu(build, rdma):
    res = build.run_cmd(["ibv_devinfo", "-d", rdma.device], timeout=T)
    m = re.search(r"active_mtu:\s+(\d+)", res.stdout)
    return int(m.group(1)) if m else 1024


@points(3, "the rxe counters show WRITE and READ moving the data, not SENDs")
@proven_by("test_peer_server_memory", "test_peer_client_corrupt")
def test_one_sided_counters(build, rdma, normal):
    srv, cli, how = _need(normal)
    if f"client: server verified {SIZE} bytes: match" not in cli.stdout:
        raise GradeFailure("no complete run to measure: the client and the "
                           "server must both verify the data first (see the "
                           f"tests above)\n  {how}")
    d = normal["delta"]
    mtu = _active_mtu(build, rdma)
    per_op = math.ceil(SIZE / mtu)
    # The client's WRITE, the client's READ, the server's READ.
    need = 3 * per_op
    # 4 protocol messages + rdma_cm's own (REQ, REP, RTU, DREQ, DREP) + slack.
    if d.of("packets sent") < need:
        raise GradeFailure(
            f"the {d.kind} device sent {d.of('packets sent')} packets during the "
            f"run; moving {SIZE} bytes three times (the client's WRITE and "
            f"READ, the server's READ) at MTU {mtu} takes at least {need}.\n"
            f"  Does the server READ the client's whole buffer (TODO 7)?\n"
            f"  counters: {d.show(['packets sent', 'packets received', 'SENDs sent', 'receives consumed'])}\n"
            f"  {how}")
    sends = d.of("SENDs sent")
    if sends > 10:
        raise GradeFailure(
            f"the {d.kind} device completed {sends} SENDs during the run; the "
            f"protocol has 4 (plus 5 of rdma_cm's own): the data must move "
            f"by RDMA WRITE and READ, not by SEND.\n"
            f"  counters: {d.show(['packets sent', 'SENDs sent', 'receives consumed'])}\n"
            f"  {how}")


@points(3, "--corrupt: the server catches a source that changed")
@proven_by("test_peer_client_corrupt")
def test_server_detects_corruption(build, rdma):
    srv, cli, how = _pair(build, rdma, "--corrupt")
    _no_crash(srv, "cm_server")
    _no_crash(cli, "cm_client")
    expect_line(srv.stdout,
                f"server: verified {SIZE} bytes: MISMATCH at offset {CORRUPT_AT}",
                f"the server's verdict when the client changed byte "
                f"{CORRUPT_AT} of its source after writing it (TODO 7)\n"
                f"  {how}\n  stderr: {srv.stderr.strip()}")
    srv.fails(what="cm_server after a mismatch")
    expect_line(cli.stdout,
                f"client: server verified {SIZE} bytes: MISMATCH at offset {CORRUPT_AT}",
                f"the client's report of the server's verdict\n  {how}")
    cli.fails(what="cm_client when the server reports a mismatch")


def _quick_failure(res, limit, regex, what):
    """A clean non-zero exit within @limit s, with stderr matching @regex."""
    _no_crash(res, what)
    res.fails(what=what)
    bound = too_slow(res.duration, limit)
    if bound:
        raise GradeFailure(f"{what} took {res.duration:.1f} s to give up "
                           f"(at most {limit} s{at_pace(limit, bound)})"
                           f"\n{res.describe()}")
    if "TODO" in res.stderr:
        raise GradeFailure(f"{what}: the program stopped at a TODO\n"
                           f"{res.describe()}")
    expect_match(res.stderr, regex, f"stderr of {what}")


@points(2, "wrong port: RDMA_CM_EVENT_REJECTED, exit 1, the server lives on")
def test_wrong_port(build, rdma):
    # The server's -t outlasts the client's whole run, however slow: the
    # test stops it (a -t 10 server gave up during a client's 22.6 s run
    # beside a second make test).
    with build.start(SERVER, "-p", "0", "-t", T_ACCEPT) as srv:
        port = srv.port + 1 if srv.port < 65535 else srv.port - 1
        res = build.run(CLIENT, "-p", port, "-t", T_REFUSED, rdma.ip,
                        timeout=2 * T_REFUSED)
        _quick_failure(res, REFUSED_LIMIT, r"RDMA_CM_EVENT_REJECTED",
                       f"'{build.command(CLIENT, '-p', port, '-t', T_REFUSED, rdma.ip)}' "
                       f"(the server listens on port {srv.port})")
        if srv.proc.poll() is not None:
            r = srv.wait(timeout=1)
            raise GradeFailure(f"the server should not notice a client that "
                               f"knocks on another port, but it "
                               f"{r.status()}\n{r.describe()}")


@points(2, "no server: RDMA_CM_EVENT_REJECTED, exit 1")
def test_no_server(build, rdma):
    port = random.randrange(20000, 60000)
    res = build.run(CLIENT, "-p", port, "-t", T_REFUSED, rdma.ip,
                    timeout=2 * T_REFUSED)
    _quick_failure(res, REFUSED_LIMIT, r"RDMA_CM_EVENT_REJECTED",
                   f"'{build.command(CLIENT, '-p', port, '-t', T_REFUSED, rdma.ip)}' "
                   f"(no server runs)")


@points(2, "a host nobody answers at: a clean failure within --timeout")
def test_wrong_host(build, rdma):
    # Nothing answers there: in the micro-VM (one host or a pair), an
    # address on rxe's own subnet that no machine has; elsewhere a
    # documentation address (RFC 5737).
    host = ("192.0.2.254" if (rdma.ip or "").startswith("192.0.2.")
            else "198.51.100.1")
    # It waits its -t 3 by design; 12 s more for its start and teardown.
    res = build.run(CLIENT, "-p", 7471, "-t", 3, host, timeout=40)
    _quick_failure(res, 3 + 12, r"RDMA_CM_EVENT_\w+|rdma_resolve_(addr|route)",
                   f"'{build.command(CLIENT, '-p', 7471, '-t', 3, host)}'")


def _kill_mid_run(build, rdma, victim):
    """Start a long client run, kill @victim ("server" or "client") once
    it is going; the survivor's Result and the seconds it took after the
    kill."""
    with build.start(SERVER, "-p", "0", "-t", 60) as srv:
        args = ["-p", srv.port, "-t", 60, "-s", 4096, "-n", 100000000, rdma.ip]
        with build.start(CLIENT, *args, ready=r"^client: connected to",
                         timeout=60) as cli:
            time.sleep(0.5)         # well into the WRITE/READ rounds
            dead, alive = (srv, cli) if victim == "server" else (cli, srv)
            dead.kill()
            t0 = time.monotonic()
            res = alive.wait(timeout=NOTICE)
            return res, time.monotonic() - t0, \
                build.command(CLIENT, *args)


@points(2, "server killed mid-run: the client says so and exits within seconds")
def test_server_killed(build, rdma):
    res, took, how = _kill_mid_run(build, rdma, "server")
    _no_crash(res, "cm_client")
    res.fails(what=f"'{how}' after its server was killed")
    bound = too_slow(took, NOTICE)
    if bound:
        raise GradeFailure(f"cm_client took {took:.1f} s to notice its server "
                           f"was killed (at most {NOTICE} s"
                           f"{at_pace(NOTICE, bound)})\n{res.describe()}")
    if not res.stderr.strip():
        raise GradeFailure(f"cm_client exited without saying what went "
                           f"wrong\n{res.describe()}")


@points(2, "client killed mid-run: the server says so and exits within seconds")
def test_client_killed(build, rdma):
    res, took, how = _kill_mid_run(build, rdma, "client")
    _no_crash(res, "cm_server")
    res.fails(what=f"cm_server after its client ('{how}') was killed")
    bound = too_slow(took, NOTICE)
    if bound:
        raise GradeFailure(f"cm_server took {took:.1f} s to notice its client "
                           f"was killed (at most {NOTICE} s"
                           f"{at_pace(NOTICE, bound)})\n{res.describe()}")
    if not res.stderr.strip():
        raise GradeFailure(f"cm_server exited without saying what went "
                           f"wrong\n{res.describe()}")


@points(1, "no client: the server gives up after --timeout")
def test_server_gives_up(build, rdma):
    # Timed from its readiness line, when its wait begins: -t 2 there,
    # the default -t (10 s) for a server that ignores it; 5 s of slack for
    # waking up and the teardown.
    with build.start(SERVER, "-p", "0", "-t", 2) as srv:
        ready = time.monotonic()
        res = srv.wait(timeout=30)
        took = srv.start_time + res.duration - ready
    _no_crash(res, "cm_server")
    res.fails(what=f"'{build.command(SERVER, '-p', 0, '-t', 2)}' with no client")
    if took > 2 + 5:
        raise GradeFailure(f"cm_server -t 2 took {took:.1f} s after its "
                           f"'listening' line to give up (at most 2 + 5 s)"
                           f"\n{res.describe()}")
    expect_match(res.stderr, r"no RDMA_CM_EVENT_CONNECT_REQUEST within 2 s",
                 f"stderr of '{build.command(SERVER, '-p', 0, '-t', 2)}'")
