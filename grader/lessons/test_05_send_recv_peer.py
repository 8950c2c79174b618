"""Lesson 05 against the course's reference peer (grader/evidence/trusted/peer.py).

The student's pair agreeing with itself proves little: here each side meets
the grader's own pyverbs peer, which checks every message that arrives in
its memory and, in a second run, corrupts one byte of one message at a
random place (fresh per run, told to nobody). The program's verdict must
name exactly that message and byte. The peer sends nothing on TCP but the
qp_info and the two syncs.
"""

import pytest

from grader import GradeFailure, expect, expect_line, points
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, client_vs_peer,
                                         expect_own_traffic, expect_owner,
                                         expect_peer_ok, rand_between,
                                         server_vs_peer)

PROG = "pingpong"
T = "10"


def _args(iters, size, t=T):
    return ["-n", iters, "-s", size, "-t", t]


def _peer(iters, size, corrupt=None):
    opts = ["--iters", iters, "--size", size, "--timeout", T]
    if corrupt:
        opts += ["--corrupt-msg", corrupt[0], "--corrupt-offset", corrupt[1]]
    return opts


def _inputs(corrupt):
    iters, size = rand_between(8, 16), rand_between(600, 2000)
    c = ((rand_between(1, iters - 2), rand_between(0, size - 1))
         if corrupt else None)
    return iters, size, c


@pytest.fixture(scope="module")
def as_client(build, rdma):
    iters, size, _ = _inputs(False)
    return client_vs_peer(build, rdma, "05", PROG, _peer(iters, size),
                          _args(iters, size, T_CLIENT)) + (iters, size)


@pytest.fixture(scope="module")
def as_client_corrupt(build, rdma):
    iters, size, c = _inputs(True)
    return client_vs_peer(build, rdma, "05", PROG, _peer(iters, size, c),
                          _args(iters, size, T_CLIENT)) + (c, size)


@pytest.fixture(scope="module")
def as_server(build, rdma):
    iters, size, _ = _inputs(False)
    return server_vs_peer(build, rdma, "05", PROG,
                          _args(iters, size, T_ACCEPT),
                          _peer(iters, size)) + (iters, size)


@pytest.fixture(scope="module")
def as_server_corrupt(build, rdma):
    iters, size, c = _inputs(True)
    return server_vs_peer(build, rdma, "05", PROG,
                          _args(iters, size, T_ACCEPT),
                          _peer(iters, size, c)) + (c, size)


def _bad_line(v, side):
    c = v.get("corrupted")
    if not c:
        raise GradeFailure(f"the reference peer never got to send the "
                           f"corrupted message: {v['error']}")
    return (f"message {c['message']} from the {side}: byte {c['offset']} "
            f"is 0x{c['sent']:02x}, expected 0x{c['expected']:02x}")


@points(3, "reference server: every ping arrived intact in its memory")
def test_peer_server_checks_pings(rdma, as_client):
    res, pid, v, iters, size = as_client
    res.ok("client against the reference server")
    expect_peer_ok(v, "client against the reference server")
    expect(v["verified"], iters, "pings the reference server found intact")
    expect_owner(v, pid, "client")
    # make grade HOSTS=2: one SEND and one RECV per ping on the client's
    # device, nothing else.
    expect_own_traffic(rdma, v, "SENDs sent", iters, "client")
    expect_own_traffic(rdma, v, "receives consumed", iters, "client")
    expect_line(res.stdout, f"verified {iters} messages of {size} bytes",
                "client stdout")


@points(2, "reference server: the client catches a corrupted pong")
def test_peer_corrupt_pong(as_client_corrupt):
    res, pid, v, c, size = as_client_corrupt
    line = _bad_line(v, "server")
    res.fails(what="client given a corrupted pong")
    expect_line(res.stderr, line, "client stderr (check_msg's line)")


@points(3, "reference client: the server answered every ping intact")
def test_peer_client_checks_pongs(rdma, as_server):
    res, pid, v, iters, size = as_server
    res.ok("server against the reference client")
    expect_peer_ok(v, "server against the reference client")
    expect(v["verified"], iters, "pongs the reference client found intact")
    expect_owner(v, pid, "server")
    expect_own_traffic(rdma, v, "SENDs sent", iters, "server")
    expect_own_traffic(rdma, v, "receives consumed", iters, "server")
    expect_line(res.stdout, f"verified {iters} messages of {size} bytes",
                "server stdout")


@points(2, "reference client: the server catches a corrupted ping")
def test_peer_corrupt_ping(as_server_corrupt):
    res, pid, v, c, size = as_server_corrupt
    line = _bad_line(v, "client")
    res.fails(what="server given a corrupted ping")
    expect_line(res.stderr, line, "server stderr (check_msg's line)")
