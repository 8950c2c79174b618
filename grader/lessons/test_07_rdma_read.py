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
import socket
import struct
import time
from pathlib import Path

import pytest

from grader import GradeFailure, expect_line, expect_match, points

PROG = "rdma_read"
SIZE = 100000        # not a multiple of the MTU: the last packet is short
T = "10"             # --timeout of normal runs (the VM can be slow)


def _host(rdma):
    return rdma.ip or "localhost"


def _cmd(build, *args):
    return " ".join([str(build.path(PROG)), *map(str, args)])


def _pair(build, rdma, server_args, client_args):
    """Run a server and a client to the end: (server, client, counter deltas)."""
    before = rdma.counters()
    with build.start(PROG, "--port", "0", *server_args) as server:
        client = build.run(PROG, "--port", server.port, *client_args,
                           _host(rdma))
        srv = server.wait(timeout=30)
    return srv, client, rdma.counters() - before


@pytest.fixture(scope="module")
def main_run(build, rdma):
    """The READ the first tests look at, run once: (server, client, counter
    deltas, the arguments both were given)."""
    args = ["-s", SIZE, "-t", T]
    return _pair(build, rdma, args, args) + (args,)


# ---- a fake peer: the out-of-band protocol, with a QP that does not exist ----

QP_INFO = struct.Struct("!HHII16sQII")   # lessons/common/course.c qp_info_wire
NO_SUCH_QPN = 0xfedcba                   # beyond any QPN rxe hands out


def _gid(rdma):
    text = (Path("/sys/class/infiniband") / rdma.device / "ports" / "1" /
            "gids" / str(rdma.gid_index)).read_text().strip()
    return bytes.fromhex(text.replace(":", ""))


class FakePeer:
    """Speaks course_oob_*: exchanges a qp_info naming a QP that does not
    exist (a peer whose QP is gone), then does the 'R' sync."""

    def __init__(self, rdma, length, addr=0, rkey=0):
        self.info = QP_INFO.pack(0, 0, NO_SUCH_QPN, 0x123456, _gid(rdma),
                                 addr, rkey, length)

    def _recv(self, sock, n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise GradeFailure(f"the program closed the TCP connection "
                                   f"during the exchange (got {len(data)} of "
                                   f"{n} bytes)")
            data += chunk
        return data

    def handshake(self, sock):
        sock.settimeout(30)
        sock.sendall(self.info)
        self._recv(sock, QP_INFO.size)
        sock.sendall(b"R")
        self._recv(sock, 1)

    def listen(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("0.0.0.0", 0))
        self.lsock.listen(1)
        return self.lsock.getsockname()[1]

    def accept(self, client):
        """The client's connection; fails as soon as the client exits."""
        self.lsock.settimeout(0.2)
        deadline = time.monotonic() + 30
        try:
            while True:
                try:
                    return self.lsock.accept()[0]
                except socket.timeout:
                    pass
                if client.proc.poll() is not None:
                    res = client.wait()
                    raise GradeFailure(f"the client {res.status()} before "
                                       f"it connected\n{res.describe()}")
                if time.monotonic() > deadline:
                    raise GradeFailure("the client did not connect to the "
                                       "fake server within 30 s")
        finally:
            self.lsock.close()

    def connect(self, host, port):
        return socket.create_connection((host, port), timeout=30)


def _free_port():
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _clean_failure(res, what, within):
    """A fault must end in a non-zero exit of its own, within seconds."""
    res.fails(what=what)
    if res.duration > within:
        raise GradeFailure(f"{what}: took {res.duration:.1f} s to give up "
                           f"(expected under {within} s)\n{res.describe()}")


# ---- the READ -------------------------------------------------------------------

@points(4, "the client READs, both sides exit 0")
def test_read(build, rdma, main_run):
    srv, cli, _, args = main_run
    srv.ok("server: " + _cmd(build, "--port", "0", *args))
    cli.ok("client: " + _cmd(build, "--port", "PORT", *args, _host(rdma)))
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
    srv, cli, _ = _pair(build, rdma, ["-s", "4096", "-t", "3"],
                        ["-s", "8192", "-t", "3"])
    _clean_failure(cli, "client reading 8192 bytes from a 4096-byte MR", 30)
    expect_match(cli.stderr, r"completion error: remote access error",
                 "client stderr")
    _clean_failure(srv, "server whose client read past its buffer", 30)


@points(2, "peer's QP gone: the READ fails with the completion status")
def test_qp_gone(build, rdma):
    peer = FakePeer(rdma, length=4096, addr=0x10000, rkey=0x1234)
    port = peer.listen()
    with build.start(PROG, "--port", port, "-s", "4096", "-t", "10",
                     _host(rdma), ready=None) as client:
        sock = peer.accept(client)
        try:
            peer.handshake(sock)
            res = client.wait(timeout=40)
        finally:
            sock.close()
    _clean_failure(res, "client reading from a QP that does not exist", 30)
    expect_match(res.stderr, r"completion error: transport retry counter "
                 r"exceeded", "client stderr (course_report_wc's line)")


@points(2, "client vanishes after connecting: the server says so, exit 1")
def test_client_vanishes(build, rdma):
    peer = FakePeer(rdma, length=0)
    with build.start(PROG, "--port", "0", "-s", "4096", "-t", "5") as server:
        sock = peer.connect(_host(rdma), server.port)
        try:
            peer.handshake(sock)
        finally:
            sock.close()
        res = server.wait(timeout=40)
    _clean_failure(res, "server whose client left without 'done'", 30)
    expect_match(res.stderr, r"out-of-band receive failed: (peer closed the "
                 r"connection|Connection reset by peer)", "server stderr")


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    port = _free_port()
    res = build.run(PROG, "--port", port, "-t", "1", _host(rdma), timeout=40)
    _clean_failure(res, _cmd(build, "--port", port, "-t", "1", _host(rdma)), 25)
    expect_match(res.stderr, r"cannot connect to ", "stderr")


@points(1, "unknown host: 'cannot resolve', exit 1")
def test_bad_host(build, rdma):
    res = build.run(PROG, "-t", "1", "no-such-host.invalid", timeout=40)
    _clean_failure(res, _cmd(build, "-t", "1", "no-such-host.invalid"), 25)
    expect_match(res.stderr, r"cannot resolve 'no-such-host.invalid'", "stderr")


@points(1, "bad GID index: named, exit 1")
def test_bad_gid(build, rdma):
    res = build.run(PROG, "--port", "0", "-g", "99", "-t", "1", timeout=40)
    _clean_failure(res, _cmd(build, "--port", "0", "-g", "99"), 25)
    expect_match(res.stderr, r"GID index 99 is not valid", "stderr")
