"""Running the reference peer (peer.py) from a test, next to the program
under test: fresh random inputs, bounded waits, its verdict as a dict.

On host A of a serving pair (`make grade HOSTS=2`: RDMA_PEER_JOBS is set)
the peer runs on host B through grader/evidence/remote.py, and the program under test
alone uses A's device: A's counters are its traffic only."""

import json
import os
import secrets
import sys
from pathlib import Path

from grader.core import harness
from grader.core.harness import GradeFailure, owner_problem
from grader.evidence.trusted.zygote import Zygote

PEER = Path(__file__).resolve().parent / "peer.py"
UDP_ECHO = Path(__file__).resolve().parent / "udp_echo.py"
# Run as a script: importing the grader package would import pytest.
REMOTE = Path(__file__).resolve().parent.parent / "remote.py"
READY = r"^listening on port (\d+)$"


def rand_between(lo, hi):
    """A fresh random integer in [lo, hi], unknowable to the program."""
    return lo + secrets.randbelow(hi - lo + 1)


def peer_cmd(lesson, role, *opts):
    cmd = [sys.executable, str(PEER), lesson, role, *map(str, opts)]
    jobs = os.environ.get("RDMA_PEER_JOBS")
    return [sys.executable, str(REMOTE), jobs, "--", *cmd] if jobs else cmd


# The peers are forked by one zygote per grading session (pyverbs imported
# once): a peer starts in milliseconds, not seconds. Not on host A of a pair:
# there the peers run on host B (remote.py).
_zygote = Zygote()


def prestart():
    """Start the zygote now, in the background (the grading session's
    first device test): its imports overlap what the session does next."""
    if not os.environ.get("RDMA_PEER_JOBS"):
        _zygote.start()
        if _zygote.pid():
            harness.keep_trusted(_zygote.pid())


def stop():
    _zygote.stop()


def _spawn(argv, env, cwd):
    if os.environ.get("RDMA_PEER_JOBS"):
        return None
    prestart()
    return _zygote.popen(argv, env=env, cwd=cwd)


# Waits that bound a hang, never a speed (grader/README.md, "Timing"):
# PEER_START, the reference peer's own start (forked by the zygote: well
# under a second; on host B of a pair a fresh pyverbs import: 2 s quiet,
# over 40 s seen on 2 loaded cores); T_ACCEPT, a server's wait for its
# client to connect, which includes the client's start: the program's -t
# when it serves the reference client, the reference server's
# --accept-timeout when the program's client may start late; T_CLIENT, the
# program's -t as the reference server's client: its waits include the
# server's own work between replies (its QP made after the accept, the
# kernel asked who owns the program's QP before 'R'), over 10 s in a loaded
# fresh-clone make test (run 42). It stays below the grader's own wait for
# the program (lesson.toml's timeout, 60 s where it is used): a client left
# waiting gives up by itself, a clean failure, not a hang that cuts the
# lesson's later waits (a cheat's client at -t 60 was killed and its
# lesson's next reference peer with it, fresh-clone run 43).
PEER_START = 120
T_ACCEPT = "60"
T_CLIENT = "30"


def start_peer(cmd, ready=None, timeout=PEER_START):
    """A reference peer (`python3 peer.py ...` or `udp_echo.py ...`),
    forked by the zygote when there is one."""
    return harness.start(cmd, ready=ready, timeout=timeout, spawn=_spawn)


def start_server(lesson, *opts, timeout=PEER_START):
    """The reference server, listening (its port: proc.port)."""
    return start_peer(peer_cmd(lesson, "server", *opts), ready=READY,
                      timeout=timeout)


def start_client(lesson, *opts, timeout=PEER_START):
    return start_peer(peer_cmd(lesson, "client", *opts), timeout=timeout)


def peer_result(res):
    """The `peer-result` line of a peer that has ended (its Result) as a
    dict (`_cmd`: the peer's command line, for messages), or None."""
    for line in res.stdout.splitlines():
        if line.startswith("peer-result "):
            out = json.loads(line.split(" ", 1)[1])
            out["_cmd"] = res.command
            return out
    return None


def verdict(proc, timeout=PEER_START, other=None):
    """Wait for the peer; its `peer-result` as a dict (`_cmd`: the peer's
    command line, for messages). `other`: the Result of the program under
    test, when it has ended (shown if the peer has no verdict)."""
    res = proc.wait(timeout=timeout)
    out = peer_result(res)
    if out is not None:
        return out
    if other is not None:
        raise GradeFailure(f"the program {other.status()} before the "
                           f"reference peer could finish the protocol with "
                           f"it\n{other.describe()}\nreference peer: "
                           f"{res.command}")
    raise GradeFailure(f"the reference peer ended without its verdict "
                       f"(a grader problem, or the program under test made "
                       f"it wait too long)\n{res.describe()}")


def failed_already(peer):
    """A stop_when for Proc.wait: once the reference peer has ended with
    a verdict that fails the program whatever it does next - not ok, and
    no corrupted message sent (a program must still report that one
    itself) - why; else None. The program is then waiting for what the
    peer will never send: waiting out its -t would only cost time (and
    a kill would count as a hang)."""
    def why():
        if peer.proc.poll() is None:
            return None
        v = peer_result(peer.wait(timeout=5))
        if v is None or v["ok"] or v.get("corrupted"):
            return None
        return f"the reference peer had ended, failing it: {v['error']}"
    return why


def after(res):
    """How long the peer may still take once the program has ended: a
    moment to report, less when the program failed (it may never have
    connected, and the peer would wait for it)."""
    return 15 if res.returncode == 0 else 2.5


def expect_peer_ok(v, what):
    if not v["ok"]:
        raise GradeFailure(f"{what}: the reference peer "
                           f"({v['_cmd']}) says:\n  {v['error']}")


def expect_own_traffic(rdma, v, meaning, count, who):
    """On host A of a pair the device carries the program's traffic alone:
    the counter for `meaning` (counters.py) must have moved by exactly
    `count` (on one host the peer's own traffic counts too: nothing to
    prove there)."""
    if not rdma.peer_jobs:
        return
    got = v["_counters"].of(meaning)
    if got != count:
        raise GradeFailure(
            f"{v['_counters'].label(meaning)} on the {who}'s host (host A; "
            f"the reference peer runs on "
            f"host B)\n  expected: {count}\n  got:      {got}\n  all "
            f"counters that moved: {v['_counters'].show()}")


def expect_owner(v, pid, who):
    """The QP the program named in its qp_info is its own (the kernel's
    `rdma resource show qp`)."""
    q = v.get("remote_qp")
    why = owner_problem(q, pid)
    if why:
        raise GradeFailure(
            f"the QP number the {who} sent in its qp_info (0x"
            f"{v.get('theirs', {}).get('qpn', 0):06x}) is not the {who}'s "
            f"own QP: {why}\n  expected: owned by pid {pid} (the {who})\n"
            f"  got:      rdma resource show qp says {q}")


def host(rdma):
    """Where the program under test listens."""
    return rdma.ip or "localhost"


def peer_host(rdma):
    """Where the reference peer listens: host B of a serving pair, else
    the same host as the program."""
    return rdma.peer_ip if rdma.peer_jobs else host(rdma)


def client_vs_peer(build, rdma, lesson, prog, peer_opts, client_args,
                   decided=True):
    """The program as the client of the reference server:
    (client Result, client pid, the peer's verdict). `decided`: every
    test of the run fails when the peer's verdict is not ok and it sent
    no corrupted message (expect_peer_ok, or no `corrupted` to report):
    the program is stopped once the peer has so ended (failed_already).
    False when a test grades the program by other evidence too (the
    wire): it gets its whole wait. The reference server waits T_ACCEPT
    for the program's connect, which includes the program's start (on a
    pair, host B's wait for host A's program: over 10 s loaded, fresh-clone
    run 68)."""
    with start_server(lesson, "--accept-timeout", T_ACCEPT,
                      *peer_opts) as peer:
        before = rdma.counters()
        with build.start(prog, "--port", peer.port, *client_args,
                         peer_host(rdma), ready=None) as client:
            pid = client.proc.pid
            res = client.wait(stop_when=failed_already(peer) if decided
                                  else None)
        v = verdict(peer, timeout=after(res), other=res)
    v["_counters"] = rdma.counters() - before
    return res, pid, v


def server_vs_peer(build, rdma, lesson, prog, server_args, peer_opts,
                   decided=True):
    """The program as the server of the reference client:
    (server Result, server pid, the peer's verdict); `decided`: see
    client_vs_peer."""
    with build.start(prog, "--port", "0", *server_args) as server:
        pid = server.proc.pid
        before = rdma.counters()
        with start_client(lesson, "--host", host(rdma), "--port",
                          server.port, *peer_opts) as peer:
            v = verdict(peer)
        res = server.wait(timeout=30, stop_when=failed_already(peer)
                          if decided else None)
    v["_counters"] = rdma.counters() - before
    return res, pid, v
