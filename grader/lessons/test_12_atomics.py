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
- The counter must have been moved by remote atomics, not by READ and
  WRITE (under the lock or not), nor by a server adding locally what a
  client told it: every client runs with the grader's interposer
  (grader/evidence/interpose/verbs_spy.c), which records each work request
  it posts and each completion, with the old value an atomic left in the
  client's buffer. Each client must have posted exactly -n
  IBV_WR_ATOMIC_FETCH_AND_ADD of 1 on the counter's address, each
  completed, and IBV_WR_ATOMIC_CMP_AND_SWP on the lock; the old values it
  prints are the first and last the device returned; the program's own
  server posts no work request at all (its memory is only ever changed
  by the clients' NICs).
"""

import re
from contextlib import ExitStack

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.evidence import behaviour
from grader.evidence.interpose import Spy, build_interposer, parse_int
from grader.session import pairs
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, expect_peer_ok,
                                         peer_host, rand_between, start_client,
                                         start_server, verdict)

PROG = "atomics"
T = "10"
# T_CLIENT (trusted/run.py): a client's waits include the 'G' barrier,
# which comes once every client has started and connected: started
# together, one may start seconds after another on a loaded machine.
# T_ACCEPT: a server's wait for its clients to connect includes their
# start (the reference client's: pyverbs, 1-2 s quiet, 30 s measured on 2
# loaded cores in half a CPU; the program's own two clients under the
# interposer: 10 s measured, six gradings on one loaded vCPU, and the
# server's -t 10 closed its port before they came). Both only bound a hang.
OLD = re.compile(r"^fetch_and_add: (\d+) increments, old values (\d+) \.\. "
                 r"(\d+)$", re.M)
CMP_AND_SWP, FETCH_AND_ADD = 5, 6        # enum ibv_wr_opcode
WC_COMP_SWAP, WC_FETCH_ADD = 3, 4        # enum ibv_wc_opcode
EINVAL = 22


@pytest.fixture(scope="module")
def spy_lib(build):
    return build_interposer(build.course)


def atomics_of(spy):
    """(fetch-and-adds posted, their successful completions' old values,
    compare-and-swaps posted, everything the client posted) from one
    client's interposer record."""
    posts = [c for _, c in spy.calls("post_send")]
    faa = [c for c in posts if int(c["opcode"]) == FETCH_AND_ADD]
    cas = [c for c in posts if int(c["opcode"]) == CMP_AND_SWP]
    olds = [parse_int(c["old"]) for _, c in spy.calls("poll_cq")
            if int(c["opcode"]) == WC_FETCH_ADD and c["status"] == "0"
            and "old" in c]
    return faa, olds, cas, posts


def check_atomics(spy, iters, who):
    """The client's counter updates were -n fetch-and-adds of 1 on one
    address, each completed, and its lock compare-and-swaps; returns the
    old values the device returned."""
    faa, olds, cas, posts = atomics_of(spy)
    if len(faa) != iters or any(parse_int(c["cmp"]) != 1 for c in faa) \
            or len({c["raddr"] for c in faa}) != 1 or \
            any(c["rc"] != "0" for c in faa):
        raise GradeFailure(
            f"{who}: the interposer saw {len(faa)} IBV_WR_ATOMIC_FETCH_AND_ADD "
            f"posted (adding {sorted({parse_int(c['cmp']) for c in faa})}, "
            f"to {len({c['raddr'] for c in faa})} addresses); expected -n "
            f"{iters}, each adding 1 to the counter: the counter must be "
            f"moved by remote atomics, not READ and WRITE nor a message")
    if len(olds) != iters:
        raise GradeFailure(f"{who}: {len(olds)} of its {iters} "
                           f"fetch-and-adds completed successfully "
                           f"(ibv_poll_cq, as the interposer saw it)")
    if len(cas) < 2 * iters:
        raise GradeFailure(f"{who}: {len(cas)} IBV_WR_ATOMIC_CMP_AND_SWP "
                           f"posted; the lock takes at least one to lock "
                           f"and one to unlock per append ({2 * iters})")
    return olds


def host(rdma):
    return rdma.ip or "localhost"


def clients_vs_ref_server(build, rdma, spy_lib, nclients, iters):
    """`nclients` of the program's clients at once against the reference
    server, each under the interposer: (client Results, client pids, the
    peer's verdict, start, the clients' Spy records, -n)."""
    start = rand_between(1 << 40, 1 << 48)
    spies = [Spy(spy_lib) for _ in range(nclients)]
    with start_server("12", "--clients", nclients, "--iters", iters,
                      "--start", start, "--timeout", T,
                      "--accept-timeout", T_ACCEPT) as ref:
        with ExitStack() as stack:
            procs = [stack.enter_context(
                build.start(PROG, "--port", ref.port, "-n", iters, "-t",
                            T_CLIENT, peer_host(rdma), ready=None,
                            env=spy.env))
                for spy in spies]
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
    return results, pids, v, start, spies, iters


@pytest.fixture(scope="module")
def ref2(build, rdma, spy_lib):
    return clients_vs_ref_server(build, rdma, spy_lib, 2,
                                 rand_between(15, 30))


@pytest.fixture(scope="module")
def ref4(build, rdma, spy_lib):
    return clients_vs_ref_server(build, rdma, spy_lib, 4,
                                 rand_between(10, 20))


def _region(v):
    """What the reference server found in its region, for a failure."""
    r = (v or {}).get("region")
    if not r:
        return ""
    return (f"\nthe reference server's region when the clients had ended: "
            f"counter = start + {r['counter'] - r['start']}, lock = "
            f"{r['lock']:#x}, tail = {r['tail']}")


def check_region(run, n):
    results, pids, v, start, spies, iters_asked = run
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
    for i, spy in enumerate(spies):
        check_atomics(spy, iters_asked, f"client {i + 1} of {n}")


@points(5, "2 clients at once: the reference server's counter and log add up")
def test_ref_server_2_clients(ref2):
    check_region(ref2, 2)


@points(5, "4 clients at once: the reference server's counter and log add up")
def test_ref_server_4_clients(ref4):
    check_region(ref4, 4)


@points(3, "the old value a fetch-and-add returns is read in host order")
def test_old_values(ref2):
    results, pids, v, start, spies, iters = ref2
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
        olds = check_atomics(spies[i], iters, f"client {i + 1}")
        expect((first, last), (olds[0], olds[-1]),
               f"client {i + 1}: the first and last old values printed vs "
               f"the ones its fetch-and-adds' completions left in its "
               f"buffer (the interposer read them)")


@points(4, "the program's server and 2 clients: counter and log check out")
def test_pair(build, rdma, spy_lib):
    iters = rand_between(15, 30)
    start = rand_between(0, 1 << 32)
    sspy, cspies = Spy(spy_lib), [Spy(spy_lib) for _ in range(2)]
    with build.start(PROG, "--port", "0", "-c", "2", "-n", iters, "--start",
                     start, "-t", T_ACCEPT, env=sspy.env) as server:
        with ExitStack() as stack:
            procs = [stack.enter_context(
                build.start(PROG, "--port", server.port, "-n", iters, "-t",
                            T_CLIENT, host(rdma), ready=None, env=spy.env))
                for spy in cspies]
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
    for i, spy in enumerate(cspies):
        check_atomics(spy, iters, f"client {i + 1}")
    posted = [c for k, c in sspy.calls() if k in ("post_send", "post_recv")]
    if posted:
        raise GradeFailure(f"the server posted {len(posted)} work requests "
                           f"(the interposer's record: {posted[:3]} ...): "
                           f"its region changes only by the clients' "
                           f"atomics, READs and WRITEs; the server only "
                           f"reads it at the end")


@points(4, "a reference client an increment short: the server notices")
def test_server_checks_counter(build, rdma):
    iters = rand_between(4, 8)
    start = rand_between(0, 1 << 32)
    with build.start(PROG, "--port", "0", "-c", "1", "-n", iters, "--start",
                     start, "-t", T_ACCEPT) as server:
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
def test_unaligned(build, rdma, spy_lib):
    spy = Spy(spy_lib)
    with build.start(PROG, "--port", "0", "-c", "1", "-n", "1",
                     "-t", T_ACCEPT) as server:
        cli = build.run(PROG, "--port", server.port, "-n", "1", "-t", T,
                        "--offset", "4", host(rdma), env=spy.env)
        srv = server.wait(timeout=30)
    pairs.clean_failure(cli, "client whose fetch-and-add is 4 bytes off", 30)
    faa, _, _, _ = atomics_of(spy)
    if behaviour.unaligned_atomic(rdma.kind) == "completion":
        # A NIC that posts it (mlx5): the WR completes with an error.
        expect_match(cli.stderr, r"completion error: ", "client stderr")
        posted = {c["wr_id"] for c in faa if parse_int(c["raddr"]) % 8 == 4
                  and int(c["rc"]) == 0}
        failed = [c for _, c in spy.calls("poll_cq")
                  if c["status"] != "0" and c["wr_id"] in posted]
        if not failed:
            raise GradeFailure(f"the interposer saw no fetch-and-add at an "
                               f"address 4 bytes off alignment posted and "
                               f"completed with an error on this "
                               f"{rdma.kind} device (it saw {faa})")
    else:
        expect_match(cli.stderr, r"^ibv_post_send failed: Invalid argument$",
                     "client stderr")
        if not [c for c in faa if parse_int(c["raddr"]) % 8 == 4
                and int(c["rc"]) == EINVAL]:
            raise GradeFailure(f"the interposer saw no fetch-and-add at an "
                               f"address 4 bytes off alignment refused with "
                               f"EINVAL (it saw {faa})")
    pairs.clean_failure(srv, "server whose client failed", 30, after=cli)


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)


@points(1, "bad command line: usage, exit 2")
def test_usage(build):
    res = build.run(PROG, "-c", "2", "localhost")
    res.fails(2, what="a client given the server's -c")
    expect_match(res.stderr, r"^usage: atomics ", "stderr")
