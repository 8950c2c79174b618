"""Lesson 12 on the wire (make grade HOSTS=2 only; grader/lessons/conftest.py).

Two of the program's clients run on host A against the reference server
on host B (a fresh random --start), and every frame between them is
recorded outside both guests (grader/evidence/wire.py). Unlike the
interposer, which runs inside the client, the wire cannot be unhooked:

- each client's QP sends exactly -n FETCH_ADD packets, each adding 1 at
  the counter's address (the server's advertised addr, as its qp_info
  crossed on TCP) with its rkey;
- no RDMA READ or WRITE of either client touches the counter's 8 bytes;
- the old values in the server's ATOMIC ACKNOWLEDGEs of those
  fetch-and-adds are start, start + 1, ... start + 2n - 1, each once: every
  increment saw a different counter, which is what atomic means;
- at least 2 x -n COMPARE_SWAPs on the lock word (the spinlock's takes and
  releases).
"""

from contextlib import ExitStack

import pytest

from grader import GradeFailure, expect, points
from grader.evidence import wire
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, rand_between,
                                         start_server, verdict)

pytestmark = pytest.mark.wire

PROG = "atomics"
T = "10"
CLIENTS = 2
FETCH_ADD, COMPARE_SWAP, READ_REQUEST = 0x14, 0x13, 0x0c


@pytest.fixture(scope="module")
def on_wire(build, rdma):
    cap = wire.capture()
    iters = rand_between(10, 20)
    start = rand_between(1 << 40, 1 << 48)
    mark = cap.mark()
    # As lesson 12's clients against the reference server on one host
    # (clients_vs_ref_server): the server's accept waits T_ACCEPT for the
    # clients' start, each client's -t T_CLIENT spans the server's work
    # on host B. With 10 s for both, two make tests on a slower host ran
    # the solution's clients out of time on their connect ('Connection
    # timed out') and the server out of time on its accept.
    with start_server("12", "--clients", CLIENTS, "--iters", iters,
                      "--start", start, "--timeout", T,
                      "--accept-timeout", T_ACCEPT) as ref:
        with ExitStack() as stack:
            procs = [stack.enter_context(
                build.start(PROG, "--port", ref.port, "-n", iters, "-t",
                            T_CLIENT, rdma.peer_ip, ready=None))
                for _ in range(CLIENTS)]
            results = [p.wait() for p in procs]
        v = (verdict(ref, timeout=15) if all(r.returncode == 0
                                             for r in results) else None)
    return results, v, cap.since(mark), iters, start


def _ran(on_wire):
    """The fixture's run, once each client exited 0: a count of packets
    is only the program's when it finished its work (a client that gave
    up midway - say, 'transport retry counter exceeded' - is failed as
    such, not for the packets it did not send)."""
    results, v, seg, iters, start = on_wire
    for k, res in enumerate(results):
        res.ok(f"client {k + 1} of {CLIENTS} (host A) against the reference "
               f"server (host B)")
    return on_wire


def _connections(seg):
    """Per client: (the server's qp_info to it, the client's qp_info)."""
    a, b = wire.hosts()
    pairs = wire.qp_info_exchanges(seg, a, b)
    if len(pairs) != CLIENTS:
        raise GradeFailure(f"{len(pairs)} qp_info exchanges crossed the "
                           f"wire on TCP, expected one per client "
                           f"({CLIENTS})")
    return pairs


@points(3, "on the wire: each client's -n FETCH_ADDs of 1 on the counter")
def test_wire_fetch_add(on_wire):
    results, v, seg, iters, start = _ran(on_wire)
    a, b = wire.hosts()
    msgs = wire.requests(seg, a, b)
    for k, (server, client) in enumerate(_connections(seg)):
        mine = [m for m in msgs if m.packets[0].destqp == server.qpn]
        faa = [m.packets[0] for m in mine if m.packets[0].low == FETCH_ADD]
        got = sorted({(p.atomic[0], p.atomic[1], p.atomic[2]) for p in faa})
        expect((len(faa), got), (iters, [(server.addr, server.rkey, 1)]),
               f"client {k + 1}'s FETCH_ADD packets: (how many, their "
               f"(address, rkey, add) values) against -n and the counter "
               f"the server advertised ({wire.frames(mine)})")
        cas = [m.packets[0] for m in mine if m.packets[0].low == COMPARE_SWAP
               and m.packets[0].atomic[0] == server.addr + 8]
        if len(cas) < 2 * iters:
            raise GradeFailure(f"client {k + 1}: {len(cas)} COMPARE_SWAP "
                               f"packets on the lock word crossed; the lock "
                               f"takes at least one to lock and one to "
                               f"unlock per append ({2 * iters})")


@points(2, "on the wire: no READ or WRITE touches the counter")
def test_wire_counter_untouched(on_wire):
    results, v, seg, iters, start = _ran(on_wire)
    a, b = wire.hosts()
    for server, client in _connections(seg):
        lo, hi = server.addr, server.addr + 8
        for m in wire.requests(seg, a, b):
            r = m.reth
            if m.packets[0].destqp == server.qpn and r and \
                    r[0] < hi and lo < r[0] + r[2]:
                raise GradeFailure(
                    f"{m.kind} of {r[2]} bytes at 0x{r[0]:x} reaches the "
                    f"counter at 0x{lo:x}: the counter is moved by "
                    f"fetch-and-add alone ({wire.frames([m])})")


@points(3, "on the wire: the fetch-and-adds' old values are start .. start + 2n - 1, each once")
def test_wire_old_values(on_wire):
    results, v, seg, iters, start = _ran(on_wire)
    a, b = wire.hosts()
    acks = {(p.destqp, p.psn): p for p in seg.packets(b, a)
            if p.name == "RC_ATOMIC_ACKNOWLEDGE"}
    olds, missing = [], []
    for server, client in _connections(seg):
        for m in wire.requests(seg, a, b):
            p = m.packets[0]
            if p.destqp != server.qpn or p.low != FETCH_ADD:
                continue
            ack = acks.get((client.qpn, p.psn))
            if ack is None:
                missing.append(p.frame)
            else:
                olds.append(ack.orig)
    if missing:
        raise GradeFailure(f"no ATOMIC ACKNOWLEDGE from the server for the "
                           f"FETCH_ADDs in frames {missing[:5]} of "
                           f"{wire.WHERE}")
    want = list(range(start, start + CLIENTS * iters))
    if sorted(olds) != want:
        dup = sorted({x for x in olds if olds.count(x) > 1})[:3]
        raise GradeFailure(
            f"the old values the server's NIC returned for the "
            f"{len(olds)} fetch-and-adds\n  expected: each of {start} .. "
            f"{want[-1]} once\n  got:      {len(set(olds))} distinct, "
            f"min {min(olds, default=None)}, max {max(olds, default=None)}"
            + (f", repeated: {dup}" if dup else ""))
