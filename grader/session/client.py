"""Run a grading session on the warm grader when there is one, else the
cold way; what `make grade` runs where the device is.

    python3 grader/session/client.py -- PYTEST_ARG...

With a warm grader listening (grader/session/server.py, in a warm micro-VM)
the session is forked there, with this process's stdin, stdout, stderr,
directory and environment, and this process exits with its status; a
SIGINT or SIGTERM here ends it there. Otherwise (no warm grader, or one
whose grader files are older than the checkout's) this process becomes
`python3 -m grader.session.shards -- PYTEST_ARG...`: the same session,
without the warm imports.

A script of the standard library alone: importing the grader package here
would import pytest, the seconds this saves.
"""

import json
import os
import select
import signal
import socket
import sys
import time

SOCKET = os.environ.get("GRADER_SERVER", "/run/rdma-course-grader/sock")
WARM_WAIT = 300


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
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
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
        socket.send_fds(sock, [json.dumps(req).encode()], [0, 1, 2])
        reply = json.loads(sock.recv(65536) or b"{}")
    except (OSError, ValueError) as e:
        sock.close()
        cold(args, f"the warm grader did not answer ({e})")
    if "pid" not in reply:
        sock.close()
        cold(args, reply.get("stale") or reply.get("error")
             or "the warm grader refused")
    # Ctrl-C or a kill ends the session there: hanging up says so.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda num, _: os._exit(128 + num))
    while True:
        select.select([sock], [], [])
        data = sock.recv(65536)
        if not data:
            print("grader: the warm grader went away during the session",
                  file=sys.stderr)
            return 125
        msg = json.loads(data)
        if "status" in msg:
            status = msg["status"]
            return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
