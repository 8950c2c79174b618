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

from grader import GradeFailure, expect_line, expect_match, points
from grader.peer import FakePeer, clean_failure, free_port, host, pair

PROG = "rdma_read"
SIZE = 100000        # not a multiple of the MTU: the last packet is short
T = "10"             # --timeout of normal runs (the VM can be slow)


def _cmd(build, *args):
    return " ".join([str(build.path(PROG)), *map(str, args)])


@pytest.fixture(scope="module")
def main_run(build, rdma):
    """The READ the first tests look at, run once: (server, client, counter
    deltas, the arguments both were given)."""
    args = ["-s", SIZE, "-t", T]
    return pair(build, rdma, PROG, args, args) + (args,)


# ---- the READ -------------------------------------------------------------------

@points(4, "the client READs, both sides exit 0")
def test_read(build, rdma, main_run):
    srv, cli, _, args = main_run
    srv.ok("server: " + _cmd(build, "--port", "0", *args))
    cli.ok("client: " + _cmd(build, "--port", "PORT", *args, host(rdma)))
    m = expect_match(srv.stdout, r"^local: .* addr 0x([0-9a-f]+) rkey "
                     r"0x([0-9a-f]+) len (\d+)$", "server stdout (the "
                     "advertised buffer, printed by course_print_qp_info)")
    expect_line(cli.stdout, f"read {SIZE} bytes from 0x{m.group(1)} rkey "
                f"0x{m.group(2)}", "client stdout (the buffer it read must "
                "be the one the server advertised)")


@points(4, "the client's memcmp() finds the server's pattern")
def test_client_memcmp(main_run):
    _, cli, _, _ = main_run
    expect_line(cli.stdout, f"memcmp: OK ({SIZE} bytes match)",
                "client stdout")


@points(2, "the server only waits: serves, then hears 'done'")
def test_server_waits(main_run):
    srv, _, _, _ = main_run
    expect_match(srv.stdout, rf"^serving {SIZE} bytes at 0x[0-9a-f]+ rkey "
                 r"0x[0-9a-f]+$", "server stdout")
    expect_line(srv.stdout, "client done", "server stdout")


@points(5, "one-sided: no SENDs, no RECVs, no TCP - the bytes crossed rxe")
def test_one_sided(main_run):
    _, _, delta, _ = main_run
    names = ["rdma_sends", "rdma_recvs", "sent_pkts", "rcvd_pkts"]
    for name in ("rdma_sends", "rdma_recvs"):
        if delta.get(name, 0):
            raise GradeFailure(
                f"hw_counters/{name} moved by {delta[name]}: messages "
                f"(SEND/RECV) went through the device, but the lesson's data "
                f"path is one RDMA READ and nothing else\n"
                f"  all deltas: {delta.show(names)}")
    least = math.ceil(SIZE / 4096)
    for name in ("sent_pkts", "rcvd_pkts"):
        if delta.get(name, 0) < least:
            raise GradeFailure(
                f"hw_counters/{name} moved by {delta.get(name, 0)}: {SIZE} "
                f"bytes need at least {least} RoCE packets, so the data did "
                f"not cross the rxe device (the TCP connection is for "
                f"addresses only)\n  all deltas: {delta.show(names)}")


# ---- protection and faults ---------------------------------------------------

@points(3, "a READ past the advertised buffer: remote access error")
def test_read_past_end(build, rdma):
    srv, cli, _ = pair(build, rdma, PROG, ["-s", "4096", "-t", "3"],
                        ["-s", "8192", "-t", "3"])
    clean_failure(cli, "client reading 8192 bytes from a 4096-byte MR", 30)
    expect_match(cli.stderr, r"completion error: remote access error",
                 "client stderr")
    clean_failure(srv, "server whose client read past its buffer", 30)


@points(2, "peer's QP gone: the READ fails with the completion status")
def test_qp_gone(build, rdma):
    peer = FakePeer(rdma, length=4096, addr=0x10000, rkey=0x1234)
    port = peer.listen()
    with build.start(PROG, "--port", port, "-s", "4096", "-t", "10",
                     host(rdma), ready=None) as client:
        sock = peer.accept(client)
        try:
            peer.handshake(sock)
            res = client.wait(timeout=40)
        finally:
            sock.close()
    clean_failure(res, "client reading from a QP that does not exist", 30)
    expect_match(res.stderr, r"completion error: transport retry counter "
                 r"exceeded", "client stderr (course_report_wc's line)")


@points(2, "client vanishes after connecting: the server says so, exit 1")
def test_client_vanishes(build, rdma):
    peer = FakePeer(rdma, length=0)
    with build.start(PROG, "--port", "0", "-s", "4096", "-t", "5") as server:
        sock = peer.connect(host(rdma), server.port)
        try:
            peer.handshake(sock)
        finally:
            sock.close()
        res = server.wait(timeout=40)
    clean_failure(res, "server whose client left without 'done'", 30)
    expect_match(res.stderr, r"out-of-band receive failed: (peer closed the "
                 r"connection|Connection reset by peer)", "server stderr")


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    port = free_port()
    res = build.run(PROG, "--port", port, "-t", "1", host(rdma), timeout=40)
    clean_failure(res, _cmd(build, "--port", port, "-t", "1", host(rdma)), 25)
    expect_match(res.stderr, r"cannot connect to ", "stderr")


@points(1, "unknown host: 'cannot resolve', exit 1")
def test_bad_host(build, rdma):
    res = build.run(PROG, "-t", "1", "no-such-host.invalid", timeout=40)
    clean_failure(res, _cmd(build, "-t", "1", "no-such-host.invalid"), 25)
    expect_match(res.stderr, r"cannot resolve 'no-such-host.invalid'", "stderr")


@points(1, "bad GID index: named, exit 1")
def test_bad_gid(build, rdma):
    res = build.run(PROG, "--port", "0", "-g", "99", "-t", "1", timeout=40)
    clean_failure(res, _cmd(build, "--port", "0", "-g", "99"), 25)
    expect_match(res.stderr, r"GID index 99 is not valid", "stderr")
