"""Lesson 06 on the wire (make grade HOSTS=2 only; grader/lessons/conftest.py).

The client runs on host A against the reference server on host B, and
every frame between them is recorded outside both guests
(grader/evidence/wire.py). What crossed is the evidence:

- from A to B exactly one RoCE message, an RDMA WRITE WITH IMMEDIATE: its
  RETH names the address and rkey the server's qp_info advertised (as that
  qp_info crossed on TCP) and the size; its immediate is the size; it goes
  to the server's QP from the PSN the client's qp_info announced; its
  payload, packet by packet, is the pattern;
- the TCP connection carries no run of the pattern: the data did not cross
  the side channel.

A program that splits the WRITE from its notification (the data as a
plain WRITE, then a zero-length WRITE WITH IMMEDIATE) satisfies the
reference server - its memory holds the pattern, its receive completed
with the immediate - but not the wire.
"""

import pytest

from grader import GradeFailure, expect, points
from grader.evidence import wire
from grader.evidence.trusted import patterns
from grader.evidence.trusted.run import T_CLIENT, client_vs_peer, rand_between

pytestmark = pytest.mark.wire

PROG = "rdma_write"
T = "10"
WITH_IMM = ("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
            "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE")


@pytest.fixture(scope="module")
def on_wire(build, rdma):
    cap = wire.capture()
    size = rand_between(20000, 120000)
    mark = cap.mark()
    res, pid, v = client_vs_peer(build, rdma, "06", PROG,
                                 ["--size", size, "--timeout", T],
                                 ["-s", size, "-t", T_CLIENT], decided=False)
    return res, v, cap.since(mark), size


@points(4, "on the wire: one WRITE WITH IMMEDIATE of the pattern to the advertised buffer")
def test_wire_write(on_wire):
    res, v, seg, size = on_wire
    res.ok("client (host A) against the reference server (host B)")
    a, b = wire.hosts()
    server = wire.sent_qp_info(seg, b)
    client = wire.sent_qp_info(seg, a)
    msgs = wire.requests(seg, a, b)
    expect(wire.kinds(msgs), ["RDMA_WRITE"], "RoCE messages from the client "
           "(host A) to the server (host B), acknowledgements aside "
           f"({wire.frames(msgs)})")
    m = msgs[0]
    last = m.packets[-1]
    if last.name not in WITH_IMM:
        raise GradeFailure(f"the WRITE's last packet is {last.name}, not a "
                           f"WRITE WITH IMMEDIATE: the server would not be "
                           f"told ({wire.frames(msgs)})")
    expect(m.reth, (server.addr, server.rkey, size), "the WRITE's RETH "
           "(virtual address, rkey, DMA length) against the server's "
           "advertised addr and rkey (its qp_info on TCP) and -s")
    expect(m.imm, size, "the immediate data on the wire (the size written)")
    expect(m.packets[0].destqp, server.qpn, "the destination QP of the "
           "WRITE (the server's qp_info names its QP)")
    expect(m.packets[0].psn, client.psn, "the WRITE's first PSN (the "
           "client's qp_info announced the PSN its QP starts at)")
    wire.expect_data(m.data, patterns.lesson06(size),
                     "the WRITE's payload against the pattern", msgs)


@points(2, "on the wire: TCP carries the qp_info and the syncs, not the data")
def test_wire_tcp(on_wire):
    res, v, seg, size = on_wire
    res.ok("client (host A) against the reference server (host B)")
    wire.expect_no_data_on_tcp(seg, "client against the reference server")
