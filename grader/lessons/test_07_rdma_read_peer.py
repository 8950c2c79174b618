"""Lesson 07 against the course's reference peer (grader/evidence/trusted/peer.py).

- The student's client reads from the reference server, which serves the
  pattern with one byte changed at a random offset (fresh per run, told to
  nobody) from an MR and a QP that allow remote READs and nothing else, and
  sends nothing on TCP but the qp_info and the syncs. The client's memcmp
  must name exactly that byte: the only way to learn it is an RDMA READ
  through the one QP the server's QP accepts - which the kernel
  (`rdma resource show qp`) must say is the client's own.
- The reference client READs the student's server and compares what
  arrived in its own memory with the pattern.
"""

import pytest

from grader import GradeFailure, expect_line, points
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, client_vs_peer,
                                         expect_owner, expect_peer_ok,
                                         rand_between, server_vs_peer)

PROG = "rdma_read"
T = "10"


def _size():
    return rand_between(20000, 120000)


@pytest.fixture(scope="module")
def as_client(build, rdma):
    size = _size()
    off = rand_between(0, size - 1)
    return client_vs_peer(build, rdma, "07", PROG,
                          ["--size", size, "--timeout", T,
                           "--corrupt-offset", off],
                          ["-s", size, "-t", T_CLIENT]) + (size,)


@pytest.fixture(scope="module")
def as_server(build, rdma):
    size = _size()
    return server_vs_peer(build, rdma, "07", PROG,
                          ["-s", size, "-t", T_ACCEPT],
                          ["--size", size, "--timeout", T]) + (size,)


@points(4, "reference server: the client's memcmp finds the one changed byte")
def test_peer_changed_byte(as_client):
    res, pid, v, size = as_client
    c = v.get("corrupted")
    if not c:
        raise GradeFailure(f"the reference server did not start serving: "
                           f"{v['error']}")
    res.fails(1, what="client reading the pattern with one byte changed")
    expect_line(res.stderr, f"memcmp: mismatch at byte {c['offset']}: got "
                f"0x{c['served']:02x}, expected 0x{c['expected']:02x}",
                "client stderr")


@points(2, "reference server: read through the client's own QP, nothing on TCP")
def test_peer_read_from_client_qp(as_client):
    res, pid, v, size = as_client
    expect_peer_ok(v, "client against the reference server")
    expect_owner(v, pid, "client")
    if v.get("extra_tcp_bytes"):
        raise GradeFailure(f"the client sent {v['extra_tcp_bytes']} bytes on "
                           f"TCP after the protocol's 'D'")


@points(3, "reference client: it READ the pattern from the server's memory")
def test_peer_client_reads(as_server):
    res, pid, v, size = as_server
    expect_peer_ok(v, "server against the reference client")
    if v["mismatch"] is not None:
        raise GradeFailure(
            f"the reference client READ {size} bytes from the address and "
            f"rkey the server advertised: byte {v['mismatch']} is "
            f"0x{v['mismatch_got']:02x}, expected the pattern (1 + i % 251)")
    expect_owner(v, pid, "server")
    res.ok("server against the reference client")
    expect_line(res.stdout, "client done", "server stdout")
