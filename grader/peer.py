"""Client/server helpers for the lessons whose programs speak the
out-of-band protocol of lessons/common/course.c (05, 06, 07): run a pair,
play a fake peer, check that a fault ends cleanly and quickly."""

import socket
import struct
import time

from .harness import GradeFailure

# The wire format of course_oob_exchange(): struct qp_info_wire in
# lessons/common/course.c, network byte order. Change both together.
QP_INFO = struct.Struct("!HHII16sQII")
NO_SUCH_QPN = 0xfedcba                   # beyond any QPN rxe hands out


def host(rdma):
    return rdma.ip or "localhost"


def pair(build, rdma, prog, server_args, client_args):
    """Run a server and a client to the end: (server, client, counter deltas)."""
    before = rdma.counters()
    with build.start(prog, "--port", "0", *server_args) as server:
        client = build.run(prog, "--port", server.port, *client_args,
                           host(rdma))
        srv = server.wait(timeout=30)
    return srv, client, rdma.counters() - before


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


def free_port():
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def clean_failure(res, what, within):
    """A fault must end in a non-zero exit of its own, within seconds."""
    res.fails(what=what)
    if res.duration > within:
        raise GradeFailure(f"{what}: took {res.duration:.1f} s to give up "
                           f"(expected under {within} s)\n{res.describe()}")
