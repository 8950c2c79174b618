"""Lesson 12: a shared counter and a spinlock in remote memory (atomics).

The server (no HOST) serves one region - counter, lock, tail, log[] - to
-c clients; each client does -n fetch-and-adds on the counter and -n
appends of its QP number to the log under a compare-and-swap spinlock.

Evidence:
- The reference server (grader/evidence/trusted/peer.py 12 server), with a fresh
  random --start, serves 2 and then 4 of the program's clients at once and
  reads the counter, the lock, the tail and the log in its own memory; the
  kernel (`rdma resource show qp`) says whose QPs connected to it.
- Each client's "old values A .. B" must lie in [start, start + C x N): the
  old value a fetch-and-add returns is the remote value before the add,
  in host order (measured on rxe; a byte-swapped or invented value is far
  outside with a random start above 2^40).
- The program's server is graded with a reference client that does one
  increment fewer than -n: the server's check must read its memory and
  say so.
- A fetch-and-add at an unaligned address (--offset 4) must fail; rxe
  refuses it in ibv_post_send with EINVAL (measured).
"""

import re
from contextlib import ExitStack

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.session import pairs
from grader.evidence.trusted.run import (expect_peer_ok, rand_between, start_client,
                                start_server, verdict)

PROG = "atomics"
T = "10"
T_CLIENT = "5"       # a client's waits: one completion, one sync (the server
                     # is listening before any client starts)
OLD = re.compile(r"^fetch_and_add: (\d+) increments, old values (\d+) \.\. "
                 r"(\d+)$", re.M)


def host(rdma):
    return rdma.ip or "localhost"


def clients_vs_ref_server(build, rdma, nclients, iters):
    """`nclients` of the program's clients at once against the reference
    server: (client Results, client pids, the peer's verdict, start)."""
    start = rand_between(1 << 40, 1 << 48)
    with start_server("12", "--clients", nclients, "--iters", iters,
                      "--start", start, "--timeout", T) as ref:
        with ExitStack() as stack:
            procs = [stack.enter_context(
                build.start(PROG, "--port", ref.port, "-n", iters, "-t", T,
                            host(rdma), ready=None))
                for _ in range(nclients)]
            pids = [p.proc.pid for p in procs]
            results = [p.wait() for p in procs]
        # A failed client fails the tests by itself (its Result comes
        # first); what the reference server found in its region then says
        # what the clients did (check_region shows it).
        ok = all(r.returncode == 0 for r in results)
        try:
            v = verdict(ref, timeout=15 if ok else 2.5)
        except GradeFailure:
            if ok:
                raise
            v = None
    return results, pids, v, start


@pytest.fixture(scope="module")
def ref2(build, rdma):
    return clients_vs_ref_server(build, rdma, 2, rand_between(15, 30))


@pytest.fixture(scope="module")
def ref4(build, rdma):
    return clients_vs_ref_server(build, rdma, 4, rand_between(10, 20))


def _region(v):
    """What the reference server found in its region, for a failure."""
    r = (v or {}).get("region")
    if not r:
        return ""
    return (f"\nthe reference server's region when the clients had ended: "
            f"counter = start + {r['counter'] - r['start']}, lock = "
            f"{r['lock']:#x}, tail = {r['tail']}")


def check_region(run, n):
    results, pids, v, start = run
    for i, res in enumerate(results):
        try:
            res.ok(f"client {i + 1} of {n} against the reference server")
        except GradeFailure as e:
            raise GradeFailure(f"{e}{_region(v)}") from None
    expect_peer_ok(v, f"{n} clients against the reference server")
    iters = v["tail"] // n if v["tail"] % n == 0 else None
    want = v["expected"]
    if v["counter"] != want:
        raise GradeFailure(
            f"the reference server read its counter after all {n} clients "
            f"said 'D'\n  expected: {want} (start {start} + {n} x -n)\n"
            f"  got:      {v['counter']} ({want - v['counter']} increments "
            f"missing)")
    expect(v["lock"], 0, "the lock word at the end (every lock released)")
    expect(v["tail"], want - start, "the log's tail (entries appended)")
    counts = {int(q): c for q, c in v["log_counts"].items()}
    expect(sorted(counts.values()), [iters] * n,
           "log entries per client QPN (each client's QPN -n times)")
    expect(v["foreign_entries"], 0, "log entries that are no client's QPN")
    owners = sorted(c["remote_qp"]["pid"] if c["remote_qp"] else None
                    for c in v["clients"])
    expect(owners, sorted(pids), "owners of the QPs that connected "
           "(rdma resource show qp: the clients' own pids)")


@points(5, "2 clients at once: the reference server's counter and log add up")
def test_ref_server_2_clients(ref2):
    check_region(ref2, 2)


@points(5, "4 clients at once: the reference server's counter and log add up")
def test_ref_server_4_clients(ref4):
    check_region(ref4, 4)


@points(3, "the old value a fetch-and-add returns is read in host order")
def test_old_values(ref2):
    results, pids, v, start = ref2
    for i, res in enumerate(results):
        res.ok(f"client {i + 1} against the reference server")
    expect_peer_ok(v, "2 clients against the reference server")
    top = v["expected"]
    for i, res in enumerate(results):
        m = expect_match(res.stdout, OLD.pattern, "client stdout")
        first, last = int(m.group(2)), int(m.group(3))
        if not start <= first <= last < top:
            raise GradeFailure(
                f"client {i + 1}: the old values of its fetch-and-adds must "
                f"lie in [start, start + 2 x -n) of the reference server's "
                f"counter\n  expected: {start} <= first <= last < {top}\n"
                f"  got:      first {first}, last {last}")


@points(4, "the program's server and 2 clients: counter and log check out")
def test_pair(build, rdma):
    iters = rand_between(15, 30)
    start = rand_between(0, 1 << 32)
    with build.start(PROG, "--port", "0", "-c", "2", "-n", iters, "--start",
                     start, "-t", T) as server:
        with ExitStack() as stack:
            procs = [stack.enter_context(
                build.start(PROG, "--port", server.port, "-n", iters, "-t",
                            T_CLIENT, host(rdma), ready=None))
                for _ in range(2)]
            results = [p.wait() for p in procs]
        srv = server.wait(timeout=30)
    srv.ok("server -c 2", peer=results[0], peer_name="client 1")
    for i, res in enumerate(results):
        res.ok(f"client {i + 1}", peer=srv, peer_name="server")
    want = start + 2 * iters
    expect_match(srv.stdout, rf"^counter: {want} \(expected {want}\)$",
                 "server stdout")
    expect_match(srv.stdout, rf"^log: 2 clients x {iters} entries$",
                 "server stdout")
    expect_match(srv.stdout, r"^atomic_cap: ATOMIC_(HCA|GLOB) \(\d\)$",
                 "server stdout (the device's atomic_cap)")


@points(4, "a reference client an increment short: the server notices")
def test_server_checks_counter(build, rdma):
    iters = rand_between(4, 8)
    start = rand_between(0, 1 << 32)
    with build.start(PROG, "--port", "0", "-c", "1", "-n", iters, "--start",
                     start, "-t", T) as server:
        with start_client("12", "--host", host(rdma), "--port", server.port,
                          "--iters", iters, "--skip", 1,
                          "--timeout", T_CLIENT) as ref:
            v = verdict(ref)
        srv = server.wait(timeout=30)
    expect_peer_ok(v, "reference client")
    want = start + iters
    srv.fails(1, what=f"server whose client added {iters - 1}, not {iters}, "
              f"to the counter")
    expect_match(srv.stderr, rf"^counter: got {want - 1}, expected {want} "
                 rf"\(1 updates lost\)$", "server stderr")
    if re.search(r"^log: ", srv.stderr, re.M):
        raise GradeFailure(f"the log was complete (the reference client "
                           f"appended {iters} times), but the server "
                           f"says:\n{srv.stderr}")


@points(2, "an unaligned atomic (--offset 4) fails: EINVAL from ibv_post_send")
def test_unaligned(build, rdma):
    with build.start(PROG, "--port", "0", "-c", "1", "-n", "1",
                     "-t", "3") as server:
        cli = build.run(PROG, "--port", server.port, "-n", "1", "-t", "3",
                        "--offset", "4", host(rdma))
        srv = server.wait(timeout=30)
    pairs.clean_failure(cli, "client whose fetch-and-add is 4 bytes off", 20)
    expect_match(cli.stderr, r"^ibv_post_send failed: Invalid argument$",
                 "client stderr")
    pairs.clean_failure(srv, "server whose client failed", 20)


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)


@points(1, "bad command line: usage, exit 2")
def test_usage(build):
    res = build.run(PROG, "-c", "2", "localhost")
    res.fails(2, what="a client given the server's -c")
    expect_match(res.stderr, r"^usage: atomics ", "stderr")
