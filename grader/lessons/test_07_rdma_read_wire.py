"""Lesson 07 on the wire (make grade HOSTS=2 only; grader/lessons/conftest.py).

The program runs on host A, the reference peer on host B, and every frame
between them is recorded outside both guests (grader/evidence/wire.py):

- the client against the reference server: from A exactly one RDMA READ
  request, whose RETH names the address and rkey the server's qp_info
  advertised (as it crossed on TCP) and the size, to the server's QP from
  the PSN the client announced; from B the READ responses, carrying
  exactly what the server served (the pattern with one byte changed at a
  random offset);
- the server against the reference client: the client's READ names the
  server's advertised buffer, and the server's NIC answers with the
  pattern from the server's memory;
- neither TCP connection carries a run of the pattern: a server that also
  sends its buffer over the socket (for a client that reads filler) is
  seen doing it.
"""

import pytest

from grader import GradeFailure, expect, points
from grader.evidence import wire
from grader.evidence.trusted import patterns
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, client_vs_peer,
                                         rand_between, server_vs_peer)

pytestmark = pytest.mark.wire

PROG = "rdma_read"
T = "10"


def _size():
    return rand_between(20000, 120000)


@pytest.fixture(scope="module")
def client_on_wire(build, rdma):
    cap = wire.capture()
    size = _size()
    off = rand_between(0, size - 1)
    mark = cap.mark()
    res, pid, v = client_vs_peer(build, rdma, "07", PROG,
                                 ["--size", size, "--timeout", T,
                                  "--corrupt-offset", off],
                                 ["-s", size, "-t", T_CLIENT], decided=False)
    return res, v, cap.since(mark), size, off


@pytest.fixture(scope="module")
def server_on_wire(build, rdma):
    cap = wire.capture()
    size = _size()
    mark = cap.mark()
    # the server's -t includes the reference client's start on host B
    res, pid, v = server_vs_peer(build, rdma, "07", PROG,
                                 ["-s", size, "-t", T_ACCEPT],
                                 ["--size", size, "--timeout", T],
                                 decided=False)
    return res, v, cap.since(mark), size


def _one_read(seg, reader, owner, size):
    """The one READ request from `reader` to `owner`, checked against the
    owner's advertised buffer; returns (request, responses)."""
    info = wire.sent_qp_info(seg, owner)
    mine = wire.sent_qp_info(seg, reader)
    reqs = wire.requests(seg, reader, owner)
    expect(wire.kinds(reqs), ["RDMA_READ_REQUEST"], f"RoCE messages from "
           f"{reader} (the reader) to {owner}, acknowledgements aside "
           f"({wire.frames(reqs)})")
    req = reqs[0].packets[0]
    expect(req.reth, (info.addr, info.rkey, size), "the READ request's RETH "
           "(virtual address, rkey, DMA length) against the advertised addr "
           "and rkey (the qp_info on TCP) and -s")
    expect(req.destqp, info.qpn, "the READ request's destination QP")
    expect(req.psn, mine.psn, "the READ request's PSN (the reader's qp_info "
           "announced the PSN its QP starts at)")
    resp = wire.requests(seg, owner, reader)
    if not resp or any(m.kind != "RDMA_READ_RESPONSE" for m in resp):
        raise GradeFailure(f"from {owner} to {reader}: "
                           f"{wire.kinds(resp)}, expected the READ "
                           f"responses only ({wire.frames(resp)})")
    return reqs, resp


@points(3, "on the wire: the client's one READ request, and the served bytes coming back")
def test_wire_client_reads(client_on_wire):
    res, v, seg, size, off = client_on_wire
    a, b = wire.hosts()
    reqs, resp = _one_read(seg, a, b, size)
    served = patterns.corrupt(patterns.lesson06(size), off)
    wire.expect_data(b"".join(m.data for m in resp), served,
                     "the READ responses' payload against what the "
                     f"reference server served (byte {off} changed)", resp)


@points(2, "on the wire: the server's NIC answers a READ with the pattern")
def test_wire_server_serves(server_on_wire):
    res, v, seg, size = server_on_wire
    res.ok("server (host A) against the reference client (host B)")
    a, b = wire.hosts()
    reqs, resp = _one_read(seg, b, a, size)
    wire.expect_data(b"".join(m.data for m in resp),
                     patterns.lesson06(size), "the READ responses' payload "
                     "(the server's buffer) against the pattern", resp)


@points(2, "on the wire: TCP carries the qp_info and the syncs, not the data")
def test_wire_tcp(client_on_wire, server_on_wire):
    wire.expect_no_data_on_tcp(client_on_wire[2],
                               "client against the reference server")
    wire.expect_no_data_on_tcp(server_on_wire[2],
                               "server against the reference client")
