"""Lesson 07: a one-sided RDMA READ, checked with memcmp().

The server (no HOST) fills, registers and advertises a buffer and then only
waits for the client's 'done' on the TCP connection; the client (HOST) READs
it into its own buffer and memcmp()s it. Both run on the one rxe device, so
its hw_counters hold both sides' traffic.

What the rxe hw_counters say (measured in the course's micro-VM, Debian 6.1
kernel, rxe0 on a dummy netdev, active MTU 1024):

    ib_send_bw -n 10 -s 65536         rdma_sends +10  rdma_recvs +10
                                      sent_pkts +650  rcvd_pkts +650
    ib_write_bw -n 10 -s 65536        sent_pkts +650  rcvd_pkts +650 (only)
    ib_read_bw -n 10 -s 65536         sent_pkts +650  rcvd_pkts +650 (only)
    rdma_read -s 100000               sent_pkts +99   rcvd_pkts +99 (only)

rdma_sends counts completed SEND work requests and rdma_recvs receive
completions (rxe_comp.c, rxe_resp.c); an RDMA READ moves neither, only
sent_pkts / rcvd_pkts: one request plus 98 response packets of 1024 bytes
for 100000 bytes (READ responses are not acknowledged).

Hence the one-sided test: rdma_sends and rdma_recvs must not move at all
(the server SENT nothing, the client received nothing as a message), and
sent_pkts and rcvd_pkts must move by at least ceil(SIZE / 4096) (the data
crossed the rxe device, not the TCP side channel, whatever the MTU).
Checked against two deliberately cheating variants (the server sends the
bytes over the TCP socket; the server SENDs them): both print 'memcmp: OK'
and both lose the one-sided points. The counters cannot tell a READ from a
WRITE (same packet counts, both devices are one here); a server that WRITEs
into the client would need the client to advertise its buffer, which the
lesson's client does not do.
"""

import math

import pytest

from grader import (GradeFailure, expect_line, expect_match, points,
                    proven_by)
from grader.session import pairs
from grader.session.pairs import T_SERVER, clean_failure, pair

PROG = "rdma_read"
SIZE = 100000        # not a multiple of the MTU: the last packet is short
T = "10"             # --timeout of normal runs (the VM can be slow)
ARGS = ["-s", SIZE, "-t", T]                    # main_run's client
# ... and its server: -t T_SERVER (pairs.py says why).
SERVER_ARGS = ["-s", SIZE, "-t", T_SERVER]


@pytest.fixture(scope="module")
def main_run(build, rdma):
    """The READ the first tests look at, run once: a pairs.Pair."""
    return pair(build, rdma, PROG, SERVER_ARGS, ARGS)


# ---- the READ -------------------------------------------------------------------

@points(4, "the client READs, both sides exit 0")
def test_read(build, rdma, main_run):
    pairs.both_ok(build, rdma, PROG, main_run, SERVER_ARGS, ARGS)
    addr, rkey = pairs.advertised(main_run.server)
    expect_line(main_run.client.stdout,
                f"read {SIZE} bytes from 0x{addr} rkey 0x{rkey}",
                "client stdout (the buffer it read must be the one the "
                "server advertised)")


@points(4, "the client's memcmp() finds the server's pattern")
@proven_by("test_peer_changed_byte")
def test_client_memcmp(main_run):
    expect_line(main_run.client.stdout, f"memcmp: OK ({SIZE} bytes match)",
                "client stdout")


@points(2, "the server only waits: serves, then hears 'done'")
@proven_by("test_peer_client_reads")
def test_server_waits(main_run):
    srv = main_run.server
    expect_match(srv.stdout, rf"^serving {SIZE} bytes at 0x[0-9a-f]+ rkey "
                 r"0x[0-9a-f]+$", "server stdout")
    expect_line(srv.stdout, "client done", "server stdout")


@points(5, "one-sided: no SENDs, no RECVs, no TCP - the bytes crossed rxe")
@proven_by("test_peer_read_from_client_qp", "test_peer_client_reads")
def test_one_sided(main_run):
    delta = main_run.delta
    names = ["SENDs sent", "receives consumed", "packets sent",
             "packets received"]
    for name in ("SENDs sent", "receives consumed"):
        if delta.of(name):
            raise GradeFailure(
                f"{delta.label(name)} moved by {delta.of(name)}: messages "
                f"(SEND/RECV) went through the device, but the lesson's data "
                f"path is one RDMA READ and nothing else\n"
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

@points(3, "a READ past the advertised buffer: remote access error")
def test_read_past_end(build, rdma):
    srv, cli, _ = pair(build, rdma, PROG, ["-s", "4096", "-t", T_SERVER],
                        ["-s", "8192", "-t", T])
    clean_failure(cli, "client reading 8192 bytes from a 4096-byte MR", 30)
    expect_match(cli.stderr, r"completion error: remote access error",
                 "client stderr")
    clean_failure(srv, "server whose client read past its buffer", 30,
                  after=cli)


@points(2, "peer's QP gone: the READ fails with the completion status")
def test_qp_gone(build, rdma):
    pairs.qp_gone(build, rdma, PROG, ["-s", "4096", "-t", "10"],
                 "client reading from a QP that does not exist", length=4096,
                 addr=0x10000, rkey=0x1234)


@points(2, "client vanishes after connecting: the server says so, exit 1")
def test_client_vanishes(build, rdma):
    pairs.peer_vanishes(
        build, rdma, PROG, ["-s", "4096", "-t", T],
        "server whose client left without 'done'",
        (r"out-of-band receive failed: (peer closed the connection|"
         r"Connection reset by peer)", "server stderr"))


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)


@points(1, "unknown host: 'cannot resolve', exit 1")
def test_bad_host(build, rdma):
    pairs.bad_host(build, PROG)


@points(1, "bad GID index: named, exit 1")
def test_bad_gid(build, rdma):
    pairs.bad_gid(build, PROG)
