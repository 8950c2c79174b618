"""Lesson 08 against the course's reference peer (grader/evidence/trusted/peer.py,
rdma_cm through pyverbs.cmid).

- The student's cm_client meets the reference server. After DONE the server
  READs the client's source buffer itself and compares it with what the
  client's RDMA WRITE left in its own (zeroed) buffer; the kernel
  (`rdma resource show qp`) must say the QP it is connected to belongs to
  the client's process.
- The student's cm_server meets the reference client, which WRITEs and READs
  back a fresh random source, then - in one of two runs - changes one byte
  of its source at a random offset before DONE, and always sends DONE with
  status 0 ("match"): the server's verdict must come from its own READ.
"""

import pytest

from grader import GradeFailure, expect_line, points
from grader.evidence.trusted.run import (T_ACCEPT, T_CLIENT, after,
                                         expect_owner, expect_peer_ok,
                                         failed_already, peer_host,
                                         rand_between, start_client,
                                         start_server, verdict)

SERVER, CLIENT = "cm_server", "cm_client"
T = "10"


def _size():
    return rand_between(8192, 65536)


@pytest.fixture(scope="module")
def as_client(build, rdma):
    size = _size()
    with start_server("08", "--host", peer_host(rdma), "--size", size,
                      "--timeout", T) as peer:
        # (-t T_CLIENT: the client's waits hold the reference server's
        # pyverbs work and its question to the kernel, run.py)
        with build.start(CLIENT, "-p", peer.port, "-t", T_CLIENT, "-s",
                         size, peer_host(rdma), ready=None) as cli:
            pid = cli.proc.pid
            # (every test of the run needs the peer's ok: a program it
            # has failed is stopped, run.failed_already)
            res = cli.wait(stop_when=failed_already(peer))
        v = verdict(peer, timeout=after(res), other=res)
    return res, pid, v, size


def _as_server(build, rdma, corrupt):
    size = _size()
    opts = ["--host", rdma.ip, "--size", size, "--timeout", T]
    if corrupt:
        opts += ["--corrupt-offset", rand_between(0, size - 1)]
    with build.start(SERVER, "-p", "0", "-t", T_ACCEPT) as srv:
        pid = srv.proc.pid
        with start_client("08", "--port", srv.port, *opts) as peer:
            v = verdict(peer)
        res = srv.wait(timeout=30, stop_when=failed_already(peer))
    return res, pid, v, size


@pytest.fixture(scope="module")
def as_server(build, rdma):
    return _as_server(build, rdma, corrupt=False)


@pytest.fixture(scope="module")
def as_server_corrupt(build, rdma):
    return _as_server(build, rdma, corrupt=True)


@points(4, "reference server: the client's WRITE put its source in the server's memory")
def test_peer_server_memory(as_client):
    res, pid, v, size = as_client
    expect_peer_ok(v, "cm_client against the reference server")
    if v["mismatch"] is not None:
        raise GradeFailure(
            f"the reference server READ the client's source buffer and "
            f"compared it with what the client's RDMA WRITE left in its own "
            f"buffer: they differ at byte {v['mismatch']} "
            f"({v['nonzero_bytes']} of {size} bytes were written at all)\n"
            f"  command: {res.command}")
    expect_owner(v, pid, "client")
    res.ok("cm_client against the reference server")
    expect_line(res.stdout, f"client: server verified {size} bytes: match",
                "client stdout")


@points(2, "reference client: the server verifies a good transfer")
def test_peer_client_clean(as_server):
    res, pid, v, size = as_server
    expect_peer_ok(v, "cm_server against the reference client")
    expect_owner(v, pid, "server")
    expect_line(res.stdout, f"server: verified {size} bytes: match",
                "server stdout")
    res.ok("cm_server against the reference client")


@points(4, "reference client: the server finds the changed byte by itself")
def test_peer_client_corrupt(as_server_corrupt):
    res, pid, v, size = as_server_corrupt
    expect_peer_ok(v, "cm_server against the reference client")
    off = v["corrupted"]["offset"]
    res.fails(1, what="cm_server whose client's source changed after the "
              "transfer")
    expect_line(res.stdout, f"server: verified {size} bytes: MISMATCH at "
                f"offset {off}", "server stdout (the client said 'match'; "
                f"its source differed at byte {off})")
