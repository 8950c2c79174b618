"""Lesson 06 against the course's reference peer (grader/evidence/trusted/peer.py).

- The student's client writes into the reference server's memory. The
  server compares its own buffer with the pattern (the program's
  "wrote ..." line is not evidence); its receive must complete as
  RECV_RDMA_WITH_IMM carrying the byte count (a SEND cannot land in a
  receive posted with no buffer); and the kernel (`rdma resource show qp`)
  must say the QP the WRITE came from - the only one the server's QP
  accepts packets from - belongs to the client's process.
- The reference client writes into the student's server: once the pattern,
  once the pattern with one byte changed at a random offset; the server's
  memcmp verdict must be right both times. Lengths and the immediate are
  correct, nothing else crosses TCP.
"""

import pytest

from grader import GradeFailure, expect, expect_line, points
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, client_vs_peer,
                                         expect_owner, expect_peer_ok,
                                         rand_between, server_vs_peer)

PROG = "rdma_write"
T = "10"


def _size():
    return rand_between(20000, 120000)


@pytest.fixture(scope="module")
def as_client(build, rdma):
    size = _size()
    return client_vs_peer(build, rdma, "06", PROG,
                          ["--size", size, "--timeout", T],
                          ["-s", size, "-t", T_CLIENT]) + (size,)


@pytest.fixture(scope="module")
def as_server(build, rdma):
    size = _size()
    return server_vs_peer(build, rdma, "06", PROG,
                          ["-s", size, "-t", T_ACCEPT],
                          ["--size", size, "--timeout", T]) + (size,)


@pytest.fixture(scope="module")
def as_server_corrupt(build, rdma):
    size = _size()
    off = rand_between(0, size - 1)
    return server_vs_peer(build, rdma, "06", PROG,
                          ["-s", size, "-t", T_ACCEPT],
                          ["--size", size, "--timeout", T,
                           "--corrupt-offset", off]) + (size,)


@points(4, "reference server: the pattern arrived in its memory")
def test_peer_server_memory(as_client):
    res, pid, v, size = as_client
    res.ok("client against the reference server")
    expect_peer_ok(v, "client against the reference server")
    if v["mismatch"] is not None:
        raise GradeFailure(
            f"the reference server compared its own buffer after the "
            f"client's WRITE: byte {v['mismatch']} is "
            f"0x{v['mismatch_got']:02x}, expected the pattern "
            f"(1 + i % 251); {v['nonzero_bytes']} of {size} bytes were "
            f"written at all\n  command: {res.command}")


@points(3, "reference server: one WRITE WITH IMMEDIATE from the client's own QP")
def test_peer_write_from_client_qp(as_client):
    res, pid, v, size = as_client
    expect_peer_ok(v, "client against the reference server")
    expect(v["with_imm"], True, "the reference server's receive completed "
           "as an RDMA WRITE WITH IMMEDIATE (IBV_WC_RECV_RDMA_WITH_IMM)")
    expect(v["imm_data"], size, "imm_data (bytes written)")
    expect_owner(v, pid, "client")


@points(2, "reference client: the server's memcmp finds the pattern")
def test_peer_client_clean(as_server):
    res, pid, v, size = as_server
    expect_peer_ok(v, "server against the reference client")
    res.ok("server against the reference client")
    expect_line(res.stdout, f"notified: RDMA_WRITE_WITH_IMM, imm_data {size}",
                "server stdout")
    expect_line(res.stdout, f"memcmp: OK ({size} bytes match)",
                "server stdout")
    expect_owner(v, pid, "server")


@points(3, "reference client: the server's memcmp finds a changed byte")
def test_peer_client_corrupt(as_server_corrupt):
    res, pid, v, size = as_server_corrupt
    expect_peer_ok(v, "server against the reference client")
    c = v["corrupted"]
    res.fails(1, what="server given the pattern with one byte changed")
    expect_line(res.stderr, f"memcmp: mismatch at byte {c['offset']}: got "
                f"0x{c['sent']:02x}, expected 0x{c['expected']:02x}",
                "server stderr")
