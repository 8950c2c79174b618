"""Client/server helpers for the lessons whose programs speak the
out-of-band protocol of lessons/common/course.c (05, 06, 07): run a pair,
play a fake peer, check that a fault ends cleanly and quickly.

The faults every such lesson is graded on are here once (no_server,
bad_host, bad_gid, qp_gone, peer_vanishes); each lesson keeps its own
two-line @points test calling them, so that points, titles and hint keys
stay per lesson."""

import socket
import struct
from collections import namedtuple

from grader.core.harness import (Deadline, GradeFailure, at_pace, expect_match,
                                 too_slow)

# The wire format of course_oob_exchange(): struct qp_info_wire in
# lessons/common/course.c, network byte order. Change both together.
QP_INFO = struct.Struct("!HHII16sQII")
NO_SUCH_QPN = 0xfedcba                   # beyond any QPN rxe hands out


def host(rdma):
    return rdma.ip or "localhost"


Pair = namedtuple("Pair", "server client delta")
Pair.__doc__ = """What pair() saw: the server's and the client's Result, and
the rxe counters' deltas over both runs."""


# The program's server in pair() runs with -t T_SERVER, the client with the
# lesson's -t (10). The server's first wait, for the client's connect, holds
# the difference of the two starts: seconds in a loaded sandbox, and over
# 10 s beside a second make test, six gradings at once (fresh-clone run 77:
# mutant 06/plain-write's server gave up with 'no client connected within
# 10 s' and showed no symptom). Its later waits (a completion that never
# comes) end at -t too, so pair() waits for it RUN_OUT s past the client.
T_SERVER = "30"
RUN_OUT = 60


def free_port():
    """A TCP port no socket of this host is bound to now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def pair(build, rdma, prog, server_args, client_args):
    """Run a server and a client to the end: a Pair(server, client, delta).

    Both start at once, on a port the grader chose: the server's -t counts
    from its own readiness, and a client started only after that line
    spent the server's wait on its own start (sandbox, device, QP): on a
    loaded machine more than 10 s, and eight servers of lessons 05-07 gave
    up with 'no client connected within 10 s' (fresh-clone make test, load
    ~10). The client retries a refused connection until its own -t
    (course_oob_connect); a server that ended before it listened leaves it
    nothing to wait for, and it is stopped."""
    before = rdma.counters()
    port = str(free_port())
    with build.start(prog, "--port", port, *server_args,
                     ready=None) as server:
        with build.start(prog, "--port", port, *client_args, host(rdma),
                         ready=None) as client:
            try:
                server.wait_for(r"listening on port \d+")
            except GradeFailure:
                client.kill()
            cli = client.wait()
        srv = server.wait(timeout=RUN_OUT)
    return Pair(srv, cli, rdma.counters() - before)


def both_ok(build, rdma, prog, run, server_args, client_args):
    """Both sides of @run (a Pair of @prog given these args) exited 0."""
    run.server.ok("server: " + build.command(prog, "--port", "0",
                                             *server_args),
                  peer=run.client, peer_name="client")
    run.client.ok("client: " + build.command(prog, "--port", "PORT",
                                             *client_args, host(rdma)),
                  peer=run.server, peer_name="server")


def advertised(server):
    """(addr, rkey) in hex of the buffer the server advertised: its 'local:'
    line, printed by course_print_qp_info()."""
    m = expect_match(server.stdout, r"^local: .* addr 0x([0-9a-f]+) rkey "
                     r"0x([0-9a-f]+) len (\d+)$", "server stdout (the "
                     "advertised buffer, printed by course_print_qp_info)")
    return m.group(1), m.group(2)


def gid_bytes(rdma):
    text = (rdma.port_dir / "gids" / str(rdma.gid_index)).read_text().strip()
    return bytes.fromhex(text.replace(":", ""))


class FakePeer:
    """Speaks course_oob_*: exchanges a qp_info naming a QP that does not
    exist (a peer whose QP is gone), then does the 'R' sync."""

    def __init__(self, rdma, length, addr=0, rkey=0):
        self.info = QP_INFO.pack(0, 0, NO_SUCH_QPN, 0x123456, gid_bytes(rdma),
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
        # short once a program of the lesson hung, longer on a slow machine
        deadline = Deadline(30)
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
                if deadline.passed():
                    # It hung: killed as at a timeout, and said so.
                    res = client.hung_at(deadline)
                    raise GradeFailure(f"the client did not connect to the "
                                       f"fake server within "
                                       f"{deadline.seconds} s\n"
                                       f"{res.describe()}")
        finally:
            self.lsock.close()

    def connect(self, host, port):
        return socket.create_connection((host, port), timeout=30)


def clean_failure(res, what, within, after=None):
    """A fault must end in a non-zero exit of its own, within seconds: of
    its start, or of the end of @after (the Result of the peer whose
    failure it must notice; a server's whole run also holds its client's
    start, a speed: 30.5 s for lesson 12's solution beside a second make
    test, fresh-clone run 76); @within times the pace the machine runs at
    when it took longer (harness.too_slow)."""
    res.fails(what=what)
    took = res.duration if after is None else res.ended - after.ended
    bound = too_slow(took, within)
    if bound:
        since = "" if after is None else " after its peer ended"
        raise GradeFailure(f"{what}: took {took:.1f} s{since} to give up "
                           f"(expected under {within} s{at_pace(within, bound)})"
                           f"\n{res.describe()}")


# ---- the faults every lesson with a TCP side channel is graded on ------------

def no_server(build, rdma, prog):
    """A client given a port nobody listens on: 'cannot connect', exit 1."""
    args = ("--port", free_port(), "-t", "1", host(rdma))
    res = build.run(prog, *args, timeout=40)
    clean_failure(res, build.command(prog, *args), 25)
    expect_match(res.stderr, r"cannot connect to ", "stderr")


def bad_host(build, prog):
    """A client given a host name that does not resolve: 'cannot resolve'."""
    args = ("-t", "1", "no-such-host.invalid")
    res = build.run(prog, *args, timeout=40)
    clean_failure(res, build.command(prog, *args), 25)
    expect_match(res.stderr, r"cannot resolve 'no-such-host.invalid'", "stderr")


def bad_gid(build, prog):
    """A server given a GID index the port does not have: named, exit 1."""
    args = ("--port", "0", "-g", "99", "-t", "1")
    res = build.run(prog, *args, timeout=40)
    clean_failure(res, build.command(prog, *args), 25)
    expect_match(res.stderr, r"GID index 99 is not valid", "stderr")


def qp_gone(build, rdma, prog, args, what, length, addr=0, rkey=0):
    """A client whose fake server names a QP that does not exist: its first
    work request must fail with the completion status as text."""
    peer = FakePeer(rdma, length=length, addr=addr, rkey=rkey)
    port = peer.listen()
    with build.start(prog, "--port", port, *args, host(rdma),
                     ready=None) as client:
        sock = peer.accept(client)
        try:
            peer.handshake(sock)
            res = client.wait(timeout=40)
        finally:
            sock.close()
    clean_failure(res, what, 30)
    expect_match(res.stderr, r"completion error: transport retry counter "
                 r"exceeded", "client stderr (course_report_wc's line)")


def peer_vanishes(build, rdma, prog, server_args, what, *stderr_res):
    """A server whose client connects, passes the 'R' barrier and goes away:
    it must give up by itself, exit 1, and say so (each regex in
    @stderr_res as (regex, where))."""
    peer = FakePeer(rdma, length=0)
    with build.start(prog, "--port", "0", *server_args) as server:
        sock = peer.connect(host(rdma), server.port)
        try:
            peer.handshake(sock)
        finally:
            sock.close()
        res = server.wait(timeout=40)
    clean_failure(res, what, 30)
    for regex, where in stderr_res:
        expect_match(res.stderr, regex, where)
