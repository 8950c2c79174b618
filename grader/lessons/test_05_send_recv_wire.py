"""Lesson 05 on the wire (make grade HOSTS=2 only; grader/lessons/conftest.py).

The program runs on host A, the reference peer on host B, and every frame
between them is recorded outside both guests (grader/evidence/wire.py):

- the client against the reference server: from A, -n SEND messages of -s
  bytes each, to the server's QP (its qp_info, as it crossed on TCP), from
  the PSN the client's qp_info announced, each carrying the documented
  bytes of its ping (byte i of message k is 1 + (i + 7k + 'c') % 251);
- the server against the reference client: from A, -n SENDs carrying the
  pongs (... + 's');
- neither TCP connection carries a run of the pattern.
"""

import pytest

from grader import expect, points
from grader.evidence import wire
from grader.evidence.trusted import patterns
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, client_vs_peer,
                                         rand_between, server_vs_peer)

pytestmark = pytest.mark.wire

PROG = "pingpong"
T = "10"


def _run(build, rdma, as_client):
    cap = wire.capture()
    iters, size = rand_between(8, 16), rand_between(600, 2000)
    peer = ["--iters", iters, "--size", size, "--timeout", T]
    # a server's -t includes the reference client's start on host B
    args = ["-n", iters, "-s", size, "-t", T_CLIENT if as_client else T_ACCEPT]
    mark = cap.mark()
    if as_client:
        res, pid, v = client_vs_peer(build, rdma, "05", PROG, peer, args,
                                     decided=False)
    else:
        res, pid, v = server_vs_peer(build, rdma, "05", PROG, args, peer,
                                     decided=False)
    return res, v, cap.since(mark), iters, size


@pytest.fixture(scope="module")
def client_on_wire(build, rdma):
    return _run(build, rdma, True)


@pytest.fixture(scope="module")
def server_on_wire(build, rdma):
    return _run(build, rdma, False)


def _sends(seg, iters, size, side):
    """The program's messages on the wire: -n SENDs of the documented
    bytes, to the peer's QP, from the PSN its qp_info announced."""
    a, b = wire.hosts()
    peer = wire.sent_qp_info(seg, b)
    mine = wire.sent_qp_info(seg, a)
    msgs = wire.requests(seg, a, b)
    expect(wire.kinds(msgs), ["SEND"] * iters, f"RoCE messages from the "
           f"program (host A) to the reference peer (host B), "
           f"acknowledgements aside ({wire.frames(msgs)})")
    expect(sorted({p.destqp for m in msgs for p in m.packets}), [peer.qpn],
           "their destination QP (the peer's qp_info names its QP)")
    expect(msgs[0].packets[0].psn, mine.psn, "the first SEND's PSN (the "
           "program's qp_info announced the PSN its QP starts at)")
    for k, m in enumerate(msgs):
        wire.expect_data(m.data, patterns.msg(k, side, size),
                         f"message {k}'s payload against the documented "
                         f"bytes", [m])


@points(3, "on the wire: the client's pings cross as -n SENDs of the documented bytes")
def test_wire_pings(client_on_wire):
    res, v, seg, iters, size = client_on_wire
    res.ok("client (host A) against the reference server (host B)")
    _sends(seg, iters, size, "c")


@points(3, "on the wire: the server's pongs cross as -n SENDs of the documented bytes")
def test_wire_pongs(server_on_wire):
    res, v, seg, iters, size = server_on_wire
    res.ok("server (host A) against the reference client (host B)")
    _sends(seg, iters, size, "s")


@points(2, "on the wire: TCP carries the qp_info and the syncs, not the messages")
def test_wire_tcp(client_on_wire, server_on_wire):
    wire.expect_no_data_on_tcp(client_on_wire[2],
                               "client against the reference server")
    wire.expect_no_data_on_tcp(server_on_wire[2],
                               "server against the reference client")
