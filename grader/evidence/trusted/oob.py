"""The out-of-band TCP channel of lessons/common/course.c, played by the
trusted peer: course_oob_accept/connect, course_oob_exchange (struct
qp_info_wire, network byte order), course_oob_sync. Every wait is bounded."""

import socket
import struct
import time
from collections import namedtuple

from grader.core.harness import Deadline, stretch

# struct qp_info_wire in lessons/common/course.c (packed): lid, pad, qpn,
# psn, gid[16], addr, rkey, length. Change both together.
WIRE = struct.Struct("!HHII16sQII")

QpInfo = namedtuple("QpInfo", "lid qpn psn gid addr rkey length")


class PeerGone(Exception):
    """The program under test closed the connection or broke the protocol."""


def _wait(sock, call):
    """call() with `sock`'s timeout; when that runs out, once more for as
    long as the machine runs slower than usual (harness.stretch: a wait
    bounds a hang, not a speed). Raises socket.timeout with the seconds
    waited in all as its argument."""
    asked = sock.gettimeout()
    try:
        return call()
    except socket.timeout:
        extra = stretch(asked) if asked else 0
        if not extra:
            raise socket.timeout(asked) from None
    sock.settimeout(extra)
    try:
        return call()
    except socket.timeout:
        raise socket.timeout(asked + extra) from None
    finally:
        sock.settimeout(asked)


def pack(info):
    return WIRE.pack(info.lid, 0, info.qpn, info.psn, info.gid, info.addr,
                     info.rkey, info.length)


def unpack(data):
    lid, _, qpn, psn, gid, addr, rkey, length = WIRE.unpack(data)
    return QpInfo(lid, qpn, psn, gid, addr, rkey, length)


def listen(port=0):
    lsock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    lsock.bind(("::", port))
    lsock.listen(1)
    return lsock


def accept(lsock, timeout):
    lsock.settimeout(timeout)
    try:
        sock = _wait(lsock, lsock.accept)[0]
    except socket.timeout as waited:
        raise PeerGone(f"no client connected within "
                       f"{waited.args[0]:.0f} s") from None
    finally:
        lsock.close()
    sock.settimeout(timeout)
    return sock


def accept_one(lsock, timeout):
    """One client of a server of several (lesson 12): the listener stays
    open."""
    lsock.settimeout(timeout)
    try:
        sock = _wait(lsock, lsock.accept)[0]
    except socket.timeout as waited:
        raise PeerGone(f"no client connected within "
                       f"{waited.args[0]:.0f} s") from None
    sock.settimeout(timeout)
    return sock


def connect(host, port, timeout):
    deadline = Deadline(timeout)
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.settimeout(timeout)
            return sock
        except OSError as err:
            if deadline.passed():
                raise PeerGone(f"cannot connect to {host}:{port}: "
                               f"{err}") from None
            time.sleep(0.1)


def recv_all(sock, n, what):
    data = b""
    try:
        while len(data) < n:
            chunk = _wait(sock, lambda: sock.recv(n - len(data)))
            if not chunk:
                raise PeerGone(f"{what}: the program closed the TCP "
                               f"connection ({len(data)} of {n} bytes)")
            data += chunk
    except socket.timeout as waited:
        raise PeerGone(f"{what}: nothing from the program within "
                       f"{waited.args[0]:.0f} s ({len(data)} of {n} "
                       f"bytes)") from None
    except ConnectionError as err:
        raise PeerGone(f"{what}: {err}") from None
    return data


def exchange(sock, mine):
    try:
        sock.sendall(pack(mine))
    except OSError as err:
        raise PeerGone(f"qp_info exchange: {err}") from None
    return unpack(recv_all(sock, WIRE.size, "qp_info exchange"))


def sync(sock, tag):
    """course_oob_sync(): send our tag, expect the same back."""
    try:
        sock.sendall(tag)
    except OSError as err:
        raise PeerGone(f"sync '{tag.decode()}': {err}") from None
    got = recv_all(sock, 1, f"sync '{tag.decode()}'")
    if got != tag:
        raise PeerGone(f"sync '{tag.decode()}': the program sent {got!r}")


def expect_silence(sock, seconds=0.0):
    """After the protocol's last byte the program must send nothing more:
    returns what it sent anyway (b'' when it only closed or stayed quiet)."""
    sock.settimeout(max(seconds, 0.01))
    try:
        return sock.recv(65536)
    except (socket.timeout, OSError):
        return b""
