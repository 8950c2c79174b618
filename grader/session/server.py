"""The warm grader: in a warm micro-VM (make vm-up, make watch) a grading
session starts at once instead of importing Python's pytest, the grader
and pyverbs again (about 10 s under the VM's emulation).

    python3 -m grader.session.server [--ahead] SOCKET

vm-setup/microvm/stage2.sh starts it, as root, when a warm VM comes up.
It imports pytest, the grader and every lesson's tests once, forks the
reference peers' zygote (pyverbs imported; grader/evidence/trusted/zygote.py),
and serves on the Unix socket SOCKET (a root-only directory: the sandboxed
programs cannot reach it). Each request is one grading session, forked
from this warm process: nothing a session does reaches the next, because
nothing of it outlives it (forked.end_session: its processes, its cgroup,
its sandbox's cgroup, namespace and scratch; its peers end with their
connections to the zygote), and the server itself never runs a test.

A session is grader/session/shards.py's: its lessons spread over the
VM's devices and vCPUs. A request (client.c sends it) is JSON `{"argv": [PYTEST ARGS], "cwd": DIR,
"env": {NAME: VALUE}}` with three descriptors (the session's stdin, stdout,
stderr). The replies: `{"pid": N}`, then `{"status": EXIT}` when the session
ended. A client that hangs up first has its session ended. When a file of
grader/ changed since the warm-up the reply is `{"stale": WHY}` instead: the
client grades the cold way, and the server warms up again (it re-executes
itself once no session runs).

With --ahead (the warm VM's server: a student's make grade, make watch)
the next session is made ready before it is asked for: once a session of
one lesson (one shard) ended, the same grading is forked again and runs
pytest's configuration and collection (about 1.5 s of a one-test regrade
in the VM), then waits at its gate. A request that asks for the same
grading - the same arguments but for its --results file, the same
directory and environment, the lesson's lesson.toml unchanged - is handed
to it (its descriptors and results file with the gate's word,
forked.pass_gate; what it wrote before, a usage error found as it was
handed the request, reaches the request's stdout and stderr when it ends);
any other request ends it and is forked as before.
"""

import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

STARTED = time.monotonic()      # the grader's imports are the warm-up's start

from grader.core.course import COURSE  # noqa: E402
from grader.evidence.trusted import zygote  # noqa: E402
from grader.session import forked, shards  # noqa: E402

GRADER = COURSE / "grader"
# How long a client waits for this process to warm up (client.c's
# WARM_WAIT): 4.2 s quiet under TCG (2 vCPUs); in a fresh-clone make test,
# whose other parts held both cores, 120 s seemingly ran out.
WARM_WAIT = 300


def imported():
    """The Python files of grader/ this process has imported: what a
    session forked from it runs without reading them again. (A file it
    has not imported - a new lesson's tests, say - a session imports from
    the disk as it is.)"""
    out = set()
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if f:
            try:
                out.add(str(Path(f).resolve().relative_to(GRADER)))
            except ValueError:
                pass
    return sorted(out)


def fingerprint(files):
    """What the warm imports were made of: each of `files` (paths under
    grader/) with its size and modification time. Only these: walking
    the whole of grader/ took 2.5 s per request over the VM's 9p share,
    half of a one-test regrade."""
    out = []
    for rel in files:
        try:
            st = (GRADER / rel).stat()
        except OSError:
            out.append((rel, None, None))
            continue
        out.append((rel, st.st_size, st.st_mtime_ns))
    return out


def changed(before, after):
    """A few words on what differs between two fingerprints."""
    a, b = dict((p, rest) for p, *rest in before), \
        dict((p, rest) for p, *rest in after)
    diff = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    return ("grader/" + ", grader/".join(diff[:3])
            + (f" and {len(diff) - 3} more" if len(diff) > 3 else "")
            + " changed since the warm grader started")


def _results_free(argv):
    """argv without the value of its --results option (a fresh output
    directory per make grade), and that value."""
    out, results, value = [], None, False
    for a in argv:
        if value:
            results, a, value = a, "", False
        elif a == "--results":
            value = True
        elif a.startswith("--results="):
            results, a = a.split("=", 1)[1], "--results="
        out.append(a)
    return out, results


def _lesson_files(argv, env):
    """The lesson.toml (size and mtime) a session of argv reads while it
    collects: a session made ready ahead of its request read it then."""
    out = []
    root = Path(shards._opt(argv, "course-root") or COURSE)
    for num in shards.lessons_of(argv):
        for d in sorted((root / "lessons").glob(f"{num}-*")):
            try:
                st = (d / "lesson.toml").stat()
                out.append((str(d), st.st_size, st.st_mtime_ns))
            except OSError:
                out.append((str(d), None, None))
    return out


class Ahead:
    """A session forked before its request (--ahead): it waits at its gate
    (a socket) with stand-ins for its stdio."""

    def __init__(self, req, pid, cgroup, gate, stand_ins):
        self.req, self.pid, self.cgroup = req, pid, cgroup
        self.gate, self.stand_ins = gate, stand_ins
        self.key = Ahead.key_of(req)

    @staticmethod
    def key_of(req):
        argv, _ = _results_free(req["argv"])
        return (argv, req["cwd"], sorted(req["env"].items()),
                _lesson_files(req["argv"], req["env"]))

    def close(self):
        for fd in self.stand_ins:
            try:
                os.close(fd)
            except OSError:
                pass
        self.stand_ins = []
        self.gate.close()


class Server:
    def __init__(self, path, ahead=False):
        self.path = path
        self.ahead_on = ahead
        self.ahead = None           # Ahead, when one waits
        self.requests = {}          # pid -> its request (argv, cwd, env)
        self.sessions = {}          # pid -> (connection or None, cgroup)
        self.conns = {}             # connection -> pid
        # pid of a session made ready ahead, handed its request -> (its
        # stand-in stdout and stderr, the request's own) pairs: what it
        # wrote before its gate is the request's (forward_pregate)
        self.pregate = {}
        self.count = 0
        self.stale = None
        self.group = f"rdma-warm.{os.getpid()}"

    def log(self, what):
        print(f"{time.strftime('%H:%M:%S')} {what}", flush=True)

    def warm_up(self):
        forked.warm_imports()
        # The zygote is a fork of this process: pyverbs is imported once.
        mains = zygote._load_peers()
        # (The peers' modules too: the zygote's peers run them.)
        self.files = imported()
        self.print_ = fingerprint(self.files)
        self.zygote_path = str(Path(self.path).parent / "peers")
        r, self.zygote_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(self.zygote_w)
            os.setsid()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            try:
                zygote.serve(self.zygote_path, mains, control=r)
            finally:
                os._exit(0)
        os.close(r)
        self.zygote_pid = pid

    def serve(self):
        self.listener = listener = socket.socket(socket.AF_UNIX,
                                                 socket.SOCK_SEQPACKET)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        listener.bind(self.path)
        os.chmod(self.path, 0o600)
        listener.listen(16)
        self.wake_r, self.wake_w = wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        print(f"grader server ready on {self.path} (warmed up in "
              f"{time.monotonic() - STARTED:.1f} s)", flush=True)
        try:
            os.unlink(Path(self.path).parent / "warming")
        except FileNotFoundError:
            pass
        while True:
            if self.stale and not self.sessions:
                self.end_ahead()
                # Warming first, then no socket, then no listener: a client
                # that connects meanwhile waits (client.c) instead of
                # meeting a socket nobody listens on (ECONNREFUSED: it went
                # cold, in a fresh-clone make test's with-rxe.bats).
                (Path(self.path).parent / "warming").touch()
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
                listener.close()
                return self.stale
            watch = [wake_r, *self.conns] + ([listener] if not self.stale
                                              else [])
            ready, _, _ = select.select(watch, [], [], 5)
            if wake_r in ready:
                os.read(wake_r, 4096)
            if listener in ready:
                try:
                    conn, _ = listener.accept()
                    self.conns[conn] = None
                except OSError:
                    pass
            for conn in [c for c in ready if c in self.conns]:
                self.on_message(conn)
            self.reap()

    def on_message(self, conn):
        try:
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        except OSError:
            msg, fds = b"", []
        pid = self.conns[conn]
        if not msg:                     # the client hung up
            for fd in fds:
                os.close(fd)
            del self.conns[conn]
            conn.close()
            if pid is not None and pid in self.sessions:
                _, cg = self.sessions[pid]
                self.sessions[pid] = (None, cg)
                forked.end_session(pid, cg)
            return
        try:
            if pid is not None or len(fds) != 3:
                raise ValueError("one request per connection, with its "
                                 "stdin, stdout and stderr")
            req = json.loads(msg)
            argv, cwd, env = req["argv"], req["cwd"], dict(req["env"])
            env[zygote.Zygote.ENV] = self.zygote_path
            req = {"argv": argv, "cwd": cwd, "env": env}
            if self.hand_to_ahead(conn, req, fds):
                return
            self.count += 1
            cg = forked.session_cgroup(self.group, f"s{self.count}")
            # The session starts (pytest's configuration and collection,
            # about 1 s in the VM) while this process checks that no grader
            # file changed (0.2 s of stats over 9p); it runs no test until
            # told to (forked.pass_gate).
            gate_r, gate_w = os.pipe()
            child = forked.fork_session(
                argv, stdio=fds, cwd=cwd, env=env, cgroup=cg, entry=shards.run,
                gate=gate_r, closing=[*self.held(), gate_w])
            os.close(gate_r)
            now = fingerprint(self.files)
            if now != self.print_:
                os.close(gate_w)
                forked.end_session(child, cg)
                self.stale = changed(self.print_, now)
                conn.send(json.dumps({"stale": self.stale}).encode())
                return
            try:
                os.write(gate_w, forked.GO * 8)  # (a shard each, up to 3)
            except BrokenPipeError:
                # It ended before its gate (a usage error, found while the
                # stats above kept this process): it is still this
                # request's session, its error already on the client's
                # stderr; reap() sends its status.
                pass
            os.close(gate_w)
            self.sessions[child] = (conn, cg)
            self.requests[child] = req
            self.conns[conn] = child
            self.log(f"session {child} started: {' '.join(argv)[-120:]}")
            conn.send(json.dumps({"pid": child}).encode())
        except (ValueError, KeyError, TypeError, OSError) as e:
            try:
                conn.send(json.dumps({"error": str(e)}).encode())
            except OSError:
                pass
        finally:
            for fd in fds:
                os.close(fd)

    # -- a session made ready ahead (--ahead) --
    def aheadable(self, req):
        """Whether the grading `req` is made ready again once it ended: a
        session of one shard (shards.run forks none), with the server's
        --ahead."""
        return (self.ahead_on and not self.stale and not self.sessions
                and (len(shards.lessons_of(req["argv"])) == 1
                     or len(shards.devices(req["env"])) < 2))

    def start_ahead(self, req):
        """Fork the grading `req` again, to wait at its gate (a socket) with
        stand-ins for its stdin, stdout and stderr: three pipes, their
        other ends kept here (what it writes before its gate, nothing when
        all is well, is never read)."""
        self.count += 1
        cg = forked.session_cgroup(self.group, f"s{self.count}")
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pipes = [os.pipe() for _ in range(3)]
        stdio = [pipes[0][0], pipes[1][1], pipes[2][1]]
        kept = [pipes[0][1], pipes[1][0], pipes[2][0]]
        try:
            child = forked.fork_session(
                req["argv"], stdio=stdio, cwd=req["cwd"], env=req["env"],
                cgroup=cg, entry=shards.run, gate=theirs.fileno(), ahead=True,
                closing=[*self.held(), mine, *kept])
        finally:
            theirs.close()
            for fd in stdio:
                os.close(fd)
        os.close(kept.pop(0))       # (its stdin: at its end at once)
        self.ahead = Ahead(req, child, cg, mine, kept)
        self.log(f"session {child} made ready ahead")

    def end_ahead(self):
        if self.ahead is not None:
            a, self.ahead = self.ahead, None
            a.close()
            forked.end_session(a.pid, a.cgroup)

    def hand_to_ahead(self, conn, req, fds):
        """Hand `req` to the session made ready ahead when it is the same
        grading (Ahead.key_of); True when it took it, or when the grader
        turned out stale (the client was told). Any other request ends
        the session made ready ahead."""
        a = self.ahead
        if a is None:
            return False
        key = Ahead.key_of(req)
        if key != a.key:
            what = ("arguments", "directory", "environment", "lesson.toml")
            self.log(f"session {a.pid} made ready ahead ended: another "
                     + ", ".join(w for w, x, y in zip(what, key, a.key)
                                 if x != y))
            self.end_ahead()
            return False
        now = fingerprint(self.files)
        if now != self.print_:
            self.end_ahead()
            self.stale = changed(self.print_, now)
            conn.send(json.dumps({"stale": self.stale}).encode())
            return True
        _, results = _results_free(req["argv"])
        try:
            socket.send_fds(a.gate, [json.dumps({"results": results})
                                     .encode()], fds)
        except OSError:             # it ended (reaped below): fork anew
            self.end_ahead()
            return False
        self.ahead = None
        a.gate.close()
        self.pregate[a.pid] = list(zip(a.stand_ins, (os.dup(fds[1]),
                                                     os.dup(fds[2]))))
        a.stand_ins = []
        self.sessions[a.pid] = (conn, a.cgroup)
        self.requests[a.pid] = req
        self.conns[conn] = a.pid
        self.log(f"session {a.pid} started (made ready ahead): "
                 f"{' '.join(req['argv'])[-120:]}")
        conn.send(json.dumps({"pid": a.pid}).encode())
        return True

    def held(self):
        """This process's descriptors that a session it forks closes: none
        of them is a session's (a client's stderr held open by another
        session would keep its reader waiting)."""
        return [self.listener, self.wake_r, self.wake_w, self.zygote_w,
                *self.conns, *(fd for pairs in self.pregate.values()
                               for pair in pairs for fd in pair)]

    def forward_pregate(self, pid):
        """What the session `pid`, made ready ahead, wrote before its gate,
        onto its request's stdout and stderr, once it has ended: nothing
        when all went well; a usage error when it ended before it read its
        gate, though it was handed the request (when it ended before that,
        the request gets a fresh session)."""
        for mine, theirs in self.pregate.pop(pid, []):
            os.set_blocking(mine, False)
            try:
                while data := os.read(mine, 65536):
                    while data:
                        data = data[os.write(theirs, data):]
            except OSError:         # (drained, or the client's end gone)
                pass
            os.close(mine)
            os.close(theirs)

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == getattr(self, "zygote_pid", None):
                # The zygote died: later sessions start their own.
                self.zygote_pid = None
                continue
            if self.ahead is not None and pid == self.ahead.pid:
                # It ended before its request (a usage error, say): the
                # request is forked as before, and shows why.
                a, self.ahead = self.ahead, None
                a.close()
                forked.clear_session(pid, a.cgroup)
                self.log(f"session {pid} made ready ahead ended: exit "
                         f"{os.waitstatus_to_exitcode(status)}")
                continue
            if pid not in self.sessions:
                continue
            conn, cg = self.sessions.pop(pid)
            req = self.requests.pop(pid, None)
            # Its processes killed, its status sent, then the rest of its
            # cleanup (0.2 s in the VM: cgroups removed, its sandbox's
            # namespace unmounted, its scratch), before this process takes
            # the next request: no session starts beside another's remains.
            forked.stop_session(pid, cg)
            self.forward_pregate(pid)
            if conn is not None:
                try:
                    conn.send(json.dumps({
                        "status": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass
            forked.clear_session(pid, cg)
            self.log(f"session {pid} ended: exit "
                     f"{os.waitstatus_to_exitcode(status)}")
            if req is not None and self.ahead is None and \
                    self.aheadable(req):
                self.start_ahead(req)


def main(argv):
    ahead = argv[:1] == ["--ahead"]
    if len(argv) != 1 + ahead or argv[-1].startswith("-"):
        print("usage: python3 -m grader.session.server [--ahead] SOCKET",
              file=sys.stderr)
        return 2
    os.chdir(COURSE)
    server = Server(argv[-1], ahead=ahead)
    server.warm_up()
    why = server.serve()
    # A grader file changed: warm up again from the files as they are now
    # (clients meanwhile wait, as they do at the VM's start).
    print(f"grader server: {why}; warming up again", flush=True)
    (Path(argv[-1]).parent / "warming").touch()
    try:
        os.unlink(argv[-1])
    except FileNotFoundError:
        pass
    os.execv(sys.executable, [sys.executable, "-m", "grader.session.server",
                              *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
