"""Lesson 17 on the wire (make grade HOSTS=2 only; grader/lessons/conftest.py).

The program's client on host A against the reference UD server on host B,
then the program's server on A against a reference UD client on B, every
frame between them recorded outside both guests (grader/evidence/wire.py).
What the interposer saw inside the program, the wire shows as it left:

- every request and every reply is one packet, a UD SEND ONLY (opcode
  0x64) of SIZE bytes: a UD message is never split;
- its DETH carries the Q_Key of the run (-q, a fresh random one) and the
  sending QP: the client's QP for a request (the QP the reference server
  saw the requests come from), the server's QP for a reply;
- a request goes to the server's QP (its qp_info), a reply to the QP its
  request came from;
- nothing is acknowledged: no ACK crosses the link either way.
"""

import os
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from grader import GradeFailure, expect, points
from grader.evidence import wire
from grader.evidence.trusted.run import (REMOTE, rand_between, start_peer,
                                         verdict)

pytestmark = pytest.mark.wire

PROG = "ud"
UD_PEER = Path(__file__).resolve().parent.parent / "evidence/trusted/ud_peer.py"
T = "10"
MTU = 1024


def qkey():
    return rand_between(1, 0x7FFFFFFF)


def on_b(role, *opts):
    """The reference UD peer on host B (remote.py): the program alone uses
    host A's device."""
    cmd = [sys.executable, str(UD_PEER), role, *map(str, opts)]
    return [sys.executable, str(REMOTE), os.environ["RDMA_PEER_JOBS"], "--",
            *cmd]


def ref_server(*opts):
    return start_peer(on_b("server", "--timeout", "60", "--accept-timeout",
                           "60", *opts), ready=r"^listening on port (\d+)$",
                      timeout=120)


def ref_client(*opts):
    return start_peer(on_b("client", "--timeout", T, *opts), timeout=120)

UD_SEND_ONLY = 0x64
ACKS = (0x11, 0x12)      # RC ACKNOWLEDGE, ATOMIC ACKNOWLEDGE


@pytest.fixture(scope="module")
def client_on_wire(build, rdma):
    cap = wire.capture()
    n, size, key = rand_between(5, 15), rand_between(16, MTU), qkey()
    mark = cap.mark()
    with ref_server("--clients", 1, "--qkey", hex(key), "--size",
                    size) as peer:
        with build.start(PROG, "--port", peer.port, "-q", hex(key), "-s",
                         size, "-n", n, "-t", T, rdma.peer_ip,
                         ready=None) as client:
            res = client.wait(timeout=120)
        v = verdict(peer, timeout=60, other=res)
    return dict(res=res, v=v, seg=cap.since(mark), n=n, size=size, key=key)


@pytest.fixture(scope="module")
def server_on_wire(build, rdma):
    cap = wire.capture()
    n, size, key = rand_between(5, 15), rand_between(16, MTU), qkey()
    mark = cap.mark()
    with build.start(PROG, "--port", "0", "-c", 1, "-q", hex(key), "-s",
                     size, "-t", "60") as server:
        with ExitStack() as stack:
            ref = stack.enter_context(ref_client(
                "--host", rdma.ip, "--port", server.port, "--qkey", hex(key),
                "--size", size, "--iters", n))
            v = verdict(ref, timeout=120)
        res = server.wait(timeout=60)
    return dict(res=res, v=v, seg=cap.since(mark), n=n, size=size, key=key)


def datagrams(seg, src, dst, what):
    pk = seg.packets(src=src, dst=dst)
    acks = [p for p in pk if p.opcode in ACKS]
    if acks:
        raise GradeFailure(f"{what}: {len(acks)} ACK packets crossed the "
                           f"link (frame {acks[0].frame} of {wire.WHERE}): "
                           f"UD acknowledges nothing")
    return [p for p in pk if p.opcode == UD_SEND_ONLY], pk


def expect_datagrams(got, all_pk, n, size, destqp, key, srcqp, what):
    others = [p for p in all_pk if p.opcode != UD_SEND_ONLY]
    if others:
        raise GradeFailure(f"{what}: packets of opcode 0x{others[0].opcode:02x}"
                           f" (frame {others[0].frame} of {wire.WHERE}), "
                           f"expected UD SEND ONLY (0x64) only")
    expect(len(got), n, f"{what}: UD SEND ONLY packets on the link")
    seen = sorted({(p.destqp, p.deth, len(p.payload)) for p in got})
    expect(seen, [(destqp, (key, srcqp), size)],
           f"{what}: (destination QP, DETH (Q_Key, source QP), payload "
           f"bytes) of every packet")


@points(2, "on the wire: each request one UD SEND, the DETH's Q_Key and the client's QP, no ACK")
def test_wire_requests(client_on_wire):
    r = client_on_wire
    r["res"].ok("the client against the reference server on host B")
    v = r["v"]
    senders = list(v["senders"].values())
    expect(len(senders), 1, "QPs the reference server took requests from")
    a, b = wire.hosts()
    got, pk = datagrams(r["seg"], a, b, "client (host A) to server (B)")
    expect_datagrams(got, pk, r["n"], r["size"], v["qpn"], r["key"],
                     senders[0]["qpn"], "the client's requests")


@points(2, "on the wire: each reply one UD SEND to the request's QP, the Q_Key, the server's QP, no ACK")
def test_wire_replies(server_on_wire):
    r = server_on_wire
    v = r["v"]
    if not v["ok"]:
        raise GradeFailure(f"the reference client on host B says: "
                           f"{v['error']}\n{r['res'].describe()}")
    r["res"].ok("the server of the reference client on host B")
    a, b = wire.hosts()
    got, pk = datagrams(r["seg"], a, b, "server (host A) to client (B)")
    expect_datagrams(got, pk, r["n"], r["size"], v["qpn"], r["key"],
                     v["theirs"]["qpn"], "the server's replies")
