"""Run a grading session on the warm grader when there is one, else the
cold way; what `make grade` runs where the device is.

    python3 -S grader/session/client.py -- PYTEST_ARG...

With a warm grader listening (grader/session/server.py, in a warm micro-VM)
the session is forked there, with this process's stdin, stdout, stderr,
directory and environment, and this process exits with its status; a
SIGINT or SIGTERM here ends it there. Otherwise (no warm grader, or one
whose grader files are older than the checkout's) this process becomes
`python3 -m grader.session.shards -- PYTEST_ARG...`: the same session,
without the warm imports.

A script of the standard library alone: importing the grader package here
would import pytest, the seconds this saves. It is run with `python3 -S`
and imports the C modules under json, socket and signal, not those:
their Python halves import re and enum, 0.2 s of the 0.45 s this script
took to start under the micro-VM's emulation.
"""

import _json
import _signal
import _socket
import os
import select
import sys
import time

SOCKET = os.environ.get("GRADER_SERVER", "/run/rdma-course-grader/sock")
WARM_WAIT = 300


class _Json:
    """What _json's scanner asks of a decoder: json.loads, plainly."""
    strict, object_hook, object_pairs_hook = True, None, None
    parse_float, parse_int, parse_constant = float, int, float
    memo = {}


_scan = _json.make_scanner(_Json())


def loads(data):
    text = data.decode().strip()
    obj, end = _scan(text, 0)
    if end != len(text):
        raise ValueError(f"extra data after the JSON value: {text[end:]!r}")
    return obj


def dumps(value):
    """JSON of a str, list or dict of those (what a request holds)."""
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(dumps, value)) + "]"
    return "{" + ", ".join(f"{dumps(k)}: {dumps(v)}"
                           for k, v in value.items()) + "}"


def cold(args, why=None):
    if why:
        print(f"grader: {why}: grading without the warm grader",
              file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "grader.session.shards",
                              "--", *args])


def main(argv):
    if not argv or argv[0] != "--":
        print("usage: python3 grader/session/client.py -- PYTEST_ARG...",
              file=sys.stderr)
        return 2
    args = argv[1:]
    # A warm grader still importing: waiting for it costs no more than
    # importing the same here (and beside it, on a loaded machine, more).
    # 4.2 s quiet under TCG (2 vCPUs; the server's ready line says); in a
    # fresh-clone make test, whose other parts held both cores, 120 s
    # seemingly ran out (a session went cold in silence): WARM_WAIT s, as
    # the self-check's own warm grader gets (grader/selftest/conftest.py).
    warming = os.path.join(os.path.dirname(SOCKET), "warming")
    deadline = time.monotonic() + WARM_WAIT
    sock = None
    while sock is None:
        while os.path.exists(warming) and not os.path.exists(SOCKET) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        if not os.path.exists(SOCKET):
            cold(args, f"the warm grader was still warming up after "
                 f"{WARM_WAIT} s" if os.path.exists(warming) else None)
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        try:
            sock.connect(SOCKET)
        except (ConnectionRefusedError, FileNotFoundError):
            # It is warming up again (a grader file changed): wait.
            sock.close()
            sock = None
            if not os.path.exists(warming) or time.monotonic() > deadline:
                cold(args, "the warm grader did not answer")
            time.sleep(0.1)
    try:
        req = {"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}
        fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
        sock.sendmsg([dumps(req).encode()],
                     [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        reply = loads(sock.recv(65536) or b"{}")
    except (OSError, ValueError) as e:
        sock.close()
        cold(args, f"the warm grader did not answer ({e})")
    if "pid" not in reply:
        sock.close()
        cold(args, reply.get("stale") or reply.get("error")
             or "the warm grader refused")
    # Ctrl-C or a kill ends the session there: hanging up says so.
    for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
        _signal.signal(sig, lambda num, _: os._exit(128 + num))
    while True:
        select.select([sock], [], [])
        data = sock.recv(65536)
        if not data:
            print("grader: the warm grader went away during the session",
                  file=sys.stderr)
            return 125
        msg = loads(data)
        if "status" in msg:
            status = msg["status"]
            return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
