"""Lesson 06: a one-sided RDMA WRITE WITH IMMEDIATE, checked with memcmp().

The server (no HOST) registers and advertises a buffer; the client (HOST)
writes a pattern into it; the server memcmp()s it. Both run on the one rxe
device, so its hw_counters hold both sides' traffic.

What the rxe hw_counters say (measured in the course's micro-VM, Debian 6.1
kernel, rxe0 on a dummy netdev, active MTU 1024):

    ib_send_bw -n 10 -s 65536         rdma_sends +10  rdma_recvs +10
                                      sent_pkts +650  rcvd_pkts +650
    ib_write_bw -n 10 -s 65536        sent_pkts +650  rcvd_pkts +650 (only)
    ib_read_bw -n 10 -s 65536         sent_pkts +650  rcvd_pkts +650 (only)
    rdma_write -s 100000              rdma_recvs +1
                                      sent_pkts +100  rcvd_pkts +100

rdma_sends counts completed SEND work requests (SEND, SEND_WITH_IMM,
SEND_WITH_INV; rxe_comp.c) and nothing else; rdma_recvs counts receive
completions (rxe_resp.c), which a WRITE WITH IMMEDIATE produces too. An RDMA
WRITE itself shows only in sent_pkts / rcvd_pkts: 98 packets of 1024 bytes
for 100000 bytes, plus ACKs.

Hence the one-sided test: rdma_sends must not move at all (the data did not
travel as SENDs; the lesson's protocol has no SEND), and sent_pkts and
rcvd_pkts must move by at least ceil(SIZE / 4096) (the data crossed the rxe
device, not the TCP side channel, whatever the MTU). Checked against two
deliberately cheating variants (bytes over the TCP socket + a zero-length
WRITE WITH IMMEDIATE; bytes as one SEND): both print 'memcmp: OK' and both
lose the one-sided points.
"""

import math

import pytest

from grader import (GradeFailure, expect, expect_line, expect_match, points,
                    proven_by)
from grader.session import pairs
from grader.session.pairs import T_SERVER, clean_failure, pair

PROG = "rdma_write"
SIZE = 100000        # not a multiple of the MTU: the last packet is short
T = "10"             # --timeout of normal runs (the VM can be slow)
ARGS = ["-s", SIZE, "-t", T]                    # main_run's client
# ... and its server: -t T_SERVER (pairs.py says why).
SERVER_ARGS = ["-s", SIZE, "-t", T_SERVER]


@pytest.fixture(scope="module")
def main_run(build, rdma):
    """The WRITE the first tests look at, run once: a pairs.Pair."""
    return pair(build, rdma, PROG, SERVER_ARGS, ARGS)


# ---- the WRITE -------------------------------------------------------------------

@points(4, "the client WRITEs, both sides exit 0")
def test_write(build, rdma, main_run):
    pairs.both_ok(build, rdma, PROG, main_run, SERVER_ARGS, ARGS)
    addr, rkey = pairs.advertised(main_run.server)
    expect_line(main_run.client.stdout,
                f"wrote {SIZE} bytes to 0x{addr} rkey 0x{rkey}",
                "client stdout (the buffer it wrote to must be the one the "
                "server advertised)")


@points(4, "the server's memcmp() finds the pattern")
@proven_by("test_peer_client_clean", "test_peer_client_corrupt")
def test_server_memcmp(main_run):
    expect_line(main_run.server.stdout, f"memcmp: OK ({SIZE} bytes match)",
                "server stdout")


@points(2, "the server was told by the immediate data")
@proven_by("test_peer_write_from_client_qp")
def test_notified(main_run):
    expect_line(main_run.server.stdout,
                f"notified: RDMA_WRITE_WITH_IMM, imm_data {SIZE}",
                "server stdout")
    delta = main_run.delta
    expect(delta.of("receives consumed"), 1,
           f"{delta.label('receives consumed')} delta (one receive consumed "
           f"by the WRITE WITH IMMEDIATE, no other)")


@points(5, "one-sided: no SENDs, no TCP - the bytes crossed rxe as a WRITE")
@proven_by("test_peer_server_memory", "test_peer_write_from_client_qp")
def test_one_sided(main_run):
    delta = main_run.delta
    names = ["SENDs sent", "receives consumed", "packets sent",
             "packets received"]
    if delta.of("SENDs sent"):
        raise GradeFailure(
            f"{delta.label('SENDs sent')} moved by {delta.of('SENDs sent')}: "
            f"SENDs went through the device, but the lesson's data path is "
            f"one RDMA WRITE WITH IMMEDIATE and nothing else\n"
            f"  all deltas: {delta.show(names)}")
    least = math.ceil(SIZE / 4096)
    for name in ("packets sent", "packets received"):
        if delta.of(name) < least:
            raise GradeFailure(
                f"{delta.label(name)} moved by {delta.of(name)}: {SIZE} "
                f"bytes need at least {least} RoCE packets, so the data did "
                f"not cross the {delta.kind} device (the TCP connection is "
                f"for addresses only)\n  all deltas: {delta.show(names)}")


# ---- protection and faults ---------------------------------------------------

@points(3, "a short WRITE is caught by the server's memcmp()")
def test_short_write(build, rdma):
    srv, cli, _ = pair(build, rdma, PROG, ["-s", "8192", "-t", T_SERVER],
                        ["-s", "4096", "-t", T])
    srv.fails(1, "server given -s 8192, client wrote 4096 bytes")
    expect_match(srv.stderr, r"^memcmp: mismatch at byte 4096: got 0x00, "
                 r"expected 0x[0-9a-f]{2}$", "server stderr")


@points(2, "a WRITE past the advertised buffer: remote access error")
def test_write_past_end(build, rdma):
    srv, cli, _ = pair(build, rdma, PROG, ["-s", "4096", "-t", T_SERVER],
                        ["-s", "8192", "-t", T])
    clean_failure(cli, "client writing 8192 bytes into a 4096-byte MR", 30)
    expect_match(cli.stderr, r"completion error: remote access error",
                 "client stderr")
    clean_failure(srv, "server whose client wrote past its buffer", 30,
                  after=cli)


@points(2, "peer's QP gone: the WRITE fails with the completion status")
def test_qp_gone(build, rdma):
    pairs.qp_gone(build, rdma, PROG, ["-s", "4096", "-t", "10"],
                 "client writing to a QP that does not exist", length=4096,
                 addr=0x10000, rkey=0x1234)


@points(2, "client vanishes after connecting: the server gives up, exit 1")
def test_client_vanishes(build, rdma):
    # -t T: the server's wait for the client's connect is the same -t
    # (under load the grader's connect came more than 3 s after the
    # server listened); the server notices the client gone only once its
    # wait for the WRITE has run out.
    pairs.peer_vanishes(
        build, rdma, PROG, ["-s", "4096", "-t", T],
        "server whose client left without writing",
        (rf"no completion within {T} s", "server stderr"),
        (r"peer closed the out-of-band connection",
         "server stderr (course_wait_wc's peer-gone line)"))


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)


@points(1, "unknown host: 'cannot resolve', exit 1")
def test_bad_host(build, rdma):
    pairs.bad_host(build, PROG)


@points(1, "bad GID index: named, exit 1")
def test_bad_gid(build, rdma):
    pairs.bad_gid(build, PROG)
