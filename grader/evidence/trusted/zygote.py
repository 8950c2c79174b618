"""The reference peers' zygote: pyverbs and the peers imported once, then a
peer forked per request, in milliseconds instead of the 1.7 s a fresh
`python3 peer.py` spends importing pyverbs under the micro-VM's emulation.

    python3 grader/evidence/trusted/zygote.py SOCKET
    python3 grader/evidence/trusted/zygote.py --run SOCKET python3 SCRIPT ARG...

It listens on the Unix socket SOCKET, which must lie in a directory only the
grader's user can enter (the sandboxed programs run as another user and
cannot connect), prints `zygote ready` on stdout, and serves until its
stdin closes (the grader that started it has gone): then it kills every
peer it forked and exits.

A request is one message on a SOCK_SEQPACKET connection: JSON
`{"argv": [SCRIPT, ARG...], "cwd": DIR, "env": {NAME: VALUE}}` with three
descriptors attached (the peer's stdin, stdout and stderr). SCRIPT is
peer.py or udp_echo.py of this directory. The reply is `{"pid": N}` (or
`{"error": WHY}`), and when the peer has ended `{"status": WAITSTATUS}`.
The peer runs in a session of its own (pid = process group), exactly as
`python3 SCRIPT ARG...` would with that environment and directory: its
randomness comes from the kernel (`secrets`), never from the zygote's
state. A client that closes its connection before its peer ended has the
peer's process group killed: the grader's test is over.

ZygoteProcess is the client side: a subprocess.Popen look-alike that
grader.core.harness runs like any other process (pid, pipes, wait, poll,
returncode); Zygote starts one and hands them out.
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ("peer.py", "udp_echo.py", "kv.py", "ud_peer.py", "seq.py")
READY = "zygote ready"


# ---- the zygote itself (its own process) ------------------------------------

def _load_peers():
    """Import the peers as the scripts would, without grader/__init__.py
    (which imports pytest): {script name: main}."""
    if "grader" not in sys.modules:
        pkg = types.ModuleType("grader")
        pkg.__path__ = [str(HERE.parent.parent)]
        sys.modules["grader"] = pkg
    import importlib
    mains = {}
    for script in SCRIPTS:
        mod = importlib.import_module(
            "grader.evidence.trusted." + script[:-3])
        mains[script] = mod.main
    return mains


def _child(mains, req, fds, closing, pipes):
    """In the forked child: become `python3 SCRIPT ARG...`; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for s in closing:
            s.close()
        for fd in pipes:
            os.close(fd)
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(req.get("cwd") or "/")
        os.environ.clear()
        os.environ.update(req.get("env") or {})
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        script = Path(req["argv"][0]).name
        sys.argv = [str(HERE / script), *req["argv"][1:]]
        try:
            ret = mains[script](req["argv"][1:])
            code = ret if isinstance(ret, int) else 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (
                0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:          # noqa: BLE001 - as python3 would
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _kill(pid):
    """Kill a peer and its process group (a peer just forked may not have
    made its own group yet: the pid itself too)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def serve(path, mains, control=0):
    """Serve requests on the Unix socket `path` until `control` (a
    descriptor) reaches end of file."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        os.unlink(path)         # a zygote before this one left it
    except FileNotFoundError:
        pass
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    conns = {}                  # socket -> pid (None: no peer yet)
    peers = {}                  # pid -> socket, or None once it hung up
    print(READY, flush=True)
    try:
        while True:
            ready, _, _ = select.select([listener, wake_r, control,
                                         *conns], [], [])
            if control in ready:
                if not os.read(control, 4096):
                    return
            if wake_r in ready:
                os.read(wake_r, 4096)
            if listener in ready:
                try:
                    conn, _ = listener.accept()
                    conns[conn] = None
                except OSError:
                    pass
            for conn in [c for c in ready if c in conns]:
                try:
                    msg, fds, _, _ = socket.recv_fds(conn, 65536, 3)
                except OSError:
                    msg, fds = b"", []
                pid = conns[conn]
                if not msg:             # hung up: the test is over
                    for fd in fds:
                        os.close(fd)
                    del conns[conn]
                    conn.close()
                    if pid is not None and pid in peers:
                        peers[pid] = None
                        _kill(pid)
                    continue
                if pid is not None or len(fds) != 3:
                    for fd in fds:
                        os.close(fd)
                    continue
                try:
                    req = json.loads(msg)
                    if Path(req["argv"][0]).name not in mains:
                        raise ValueError(f"not a reference peer: "
                                         f"{req['argv'][0]}")
                except (ValueError, KeyError, IndexError, TypeError) as e:
                    conn.send(json.dumps({"error": str(e)}).encode())
                    for fd in fds:
                        os.close(fd)
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                child = os.fork()
                if child == 0:
                    _child(mains, req, fds, [listener, *conns],
                           [wake_r, wake_w])
                for fd in fds:
                    os.close(fd)
                conns[conn] = child
                peers[child] = conn
                conn.send(json.dumps({"pid": child}).encode())
            # Reap: tell each peer's client how it ended.
            while peers:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = peers.pop(pid, None)
                if conn is not None:
                    try:
                        conn.send(json.dumps({"status": status}).encode())
                    except OSError:
                        pass
    finally:
        for pid in peers:
            _kill(pid)
        listener.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def run_through(path, cmd):
    """`zygote.py --run SOCKET python3 SCRIPT ARG...`: the command as the
    zygote at SOCKET forks it, with this process's stdin, stdout, stderr,
    environment and directory (host B of a pair: grader/evidence/remote.py
    sends its peers so; there a peer's part of a job took 1.3 s so, 2.0-2.3
    s as a fresh `python3 SCRIPT`, which imports pyverbs).
    This process ends as the peer does, with its exit status (128 + N for
    signal N, as a shell reports it); killed, it takes the peer with it
    (the zygote kills the peer of a client that hung up). Without a
    zygote there, or one that refuses, it becomes the command itself."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        req = {"argv": cmd[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(s, [json.dumps(req).encode()], [0, 1, 2])
        if "pid" not in json.loads(s.recv(65536) or b"{}"):
            raise OSError("refused")
    except (OSError, ValueError):
        s.close()
        os.execv(cmd[0], cmd)
    data = s.recv(65536)
    if not data:                # the zygote went away, and its peers
        return 128 + signal.SIGKILL
    code = os.waitstatus_to_exitcode(json.loads(data)["status"])
    return code if code >= 0 else 128 - code


def main(argv):
    if len(argv) > 2 and argv[0] == "--run":
        return run_through(argv[1], argv[2:])
    if len(argv) != 1:
        print("usage: zygote.py SOCKET\n       zygote.py --run SOCKET "
              "python3 SCRIPT [ARG...]", file=sys.stderr)
        return 2
    serve(argv[0], _load_peers())
    return 0


# ---- the client side (the grader) ---------------------------------------------

class ZygoteProcess:
    """A reference peer forked by the zygote, with what grader.core.harness
    uses of subprocess.Popen: pid, stdin/stdout/stderr, poll(), wait(),
    returncode."""

    def __init__(self, path, argv, env=None, cwd=None):
        self.args = list(argv)
        self.returncode = None
        ends = [os.pipe() for _ in range(3)]
        theirs = [ends[0][0], ends[1][1], ends[2][1]]
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.sock.connect(str(path))
            req = {"argv": self.args, "cwd": str(cwd or os.getcwd()),
                   "env": dict(os.environ if env is None else env)}
            socket.send_fds(self.sock, [json.dumps(req).encode()], theirs)
            reply = json.loads(self.sock.recv(65536) or b"{}")
        except (OSError, ValueError) as e:
            self.sock.close()
            for r, w in ends:
                os.close(r)
                os.close(w)
            raise OSError(f"the reference peers' zygote did not answer: {e}")
        finally:
            for fd in theirs:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.stdin = os.fdopen(ends[0][1], "wb")
        self.stdout = os.fdopen(ends[1][0], "rb")
        self.stderr = os.fdopen(ends[2][0], "rb")
        if "pid" not in reply:
            self.stdin.close()
            raise OSError(f"the reference peers' zygote refused: "
                          f"{reply.get('error', 'no reply')}")
        self.pid = reply["pid"]

    def _status(self, timeout):
        """Read the end of the peer (within `timeout` seconds, None: no
        limit); True once it is known."""
        if self.returncode is not None:
            return True
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return False
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if data:
            self.returncode = os.waitstatus_to_exitcode(
                json.loads(data)["status"])
        else:
            # The zygote went away: its peers went with it.
            self.returncode = -signal.SIGKILL
        self.sock.close()
        return True

    def poll(self):
        self._status(0)
        return self.returncode

    def wait(self, timeout=None):
        if not self._status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


class Zygote:
    """One zygote process for this grader (started on first use), or the
    one named by $GRADER_PEER_ZYGOTE (a socket a parent process serves for
    the sessions it forks)."""

    ENV = "GRADER_PEER_ZYGOTE"

    def __init__(self):
        self.proc = None
        self.dir = None
        self.path = None
        self.failed = None

    def start(self, python=sys.executable):
        """Start the zygote in the background (its imports take a moment);
        popen() waits for it."""
        if self.path or self.proc or self.failed:
            return
        given = os.environ.get(self.ENV)
        if given:
            self.path = given
            return
        self.dir = tempfile.mkdtemp(prefix="rdma-peers.")
        self.proc = subprocess.Popen(
            [python, str(HERE / "zygote.py"), str(Path(self.dir) / "sock")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)

    def ready(self, timeout=120):
        if self.path and not self.proc and not os.path.exists(self.path):
            # A zygote given by the warm grader (GRADER_PEER_ZYGOTE) is a
            # fork that binds its socket on its own time: under load the
            # first peer can ask before it has (make test LESSON=17 at
            # load 10: six tests failed on ENOENT in the first 7 s, the
            # later ones passed). Wait for it once; if it never comes,
            # the peers start without it.
            deadline = time.monotonic() + timeout
            while not os.path.exists(self.path):
                if time.monotonic() > deadline:
                    self.path, self.failed = None, "the given zygote's " \
                        "socket never appeared"
                    break
                time.sleep(0.05)
        if self.path or self.failed:
            return self.path
        self.start()
        if self.path:
            return self.path
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [],
                                    deadline - time.monotonic())
            if not r:
                break
            line = self.proc.stdout.readline()
            if not line or line.decode().strip() == READY:
                break
        if line.decode().strip() == READY:
            self.path = str(Path(self.dir) / "sock")
        else:
            self.failed = (self.proc.stderr.read1(4096).decode(errors="replace")
                           if self.proc.poll() is not None else
                           f"not ready within {timeout} s")
            self.stop()
        return self.path

    def pid(self):
        return self.proc.pid if self.proc else None

    def popen(self, argv, env=None, cwd=None):
        """A ZygoteProcess for `argv` (python3 SCRIPT ARG...); None when
        there is no zygote (the caller starts the script itself)."""
        path = self.ready()
        if not path:
            return None
        return ZygoteProcess(path, argv[1:], env=env, cwd=cwd)

    def stop(self):
        """End the zygote this object started (not one it was given): its
        peers ended with their tests; one still importing is killed."""
        if self.proc:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=0.5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.dir:
            try:
                os.unlink(Path(self.dir) / "sock")
            except OSError:
                pass
            try:
                os.rmdir(self.dir)
            except OSError:
                pass
            self.dir = None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
