"""Running student programs: timeouts, process groups, readiness lines, signal
names, output caps, and the transcript every command is written to.

Nothing a student program does (hang, crash, fork a child and leave it running,
print megabytes or binary garbage) may hang or crash the grader.
"""

import ctypes.util
import difflib
import math
import os
import re
import select
import shutil
import shlex
import signal
import subprocess
import threading
import time

# Output kept per stream; the rest is counted and dropped.
OUTPUT_CAP = 256 * 1024
DEFAULT_TIMEOUT = 30
# Once a program has exited and its process group is killed, how long its
# pipes may stay idle before they are no longer read (something outside
# the group, a setsid() daemon, may hold them open for ever).
EXIT_GRACE = 0.3
# How long a program may stay silent after printing its final line (the
# lesson's [final_line]) before it is taken for hung in its cleanup and
# killed, whatever its wait had left: all that is left of a correct run is
# to free its resources and exit.
FINAL_GRACE = 10
# How long a student's program may sleep - every thread asleep, no CPU
# time used, no child - with neither the RDMA device nor any socket open
# before it is taken for hung and killed, whatever its wait had left:
# a program of the course waits for a peer (a socket), the device (its
# file, its completion channels) or a timer of its own while it holds
# them; before it opens them and after it has closed them it has nothing
# to wait for, and a correct one is running or in the kernel (loading
# its libraries: D), never asleep (Proc._idle). Checked every IDLE_STEP
# seconds; IDLE_SAMPLES looks in a row at least (a loaded machine slows
# the looks down: 20 took 15 s at load 10).
IDLE_LIMIT = 10
IDLE_STEP = 0.5
IDLE_SAMPLES = 5


class GradeFailure(AssertionError):
    """A failed check; its message is shown to the student as it is."""


def signal_name(num):
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


# ---- transcript -----------------------------------------------------------

class Transcript:
    """Every command a test ran, with its outcome and output."""

    def __init__(self):
        self.parts = []
        self.runs = []          # (Result, student program?) in order
        self.counters = []      # counter deltas the test computed
        self.spies = []         # interposer records of its runs (text())

    def add(self, text):
        self.parts.append(text)

    def text(self):
        return "\n".join(self.parts)


_current = Transcript()


def current_transcript():
    return _current


def new_transcript():
    global _current
    _current = Transcript()
    return _current


# ---- output capture ---------------------------------------------------------

class _Reader(threading.Thread):
    """Drains one pipe, keeps the first OUTPUT_CAP bytes, wakes waiters on
    every new line (for readiness regexes).

    It reads until end of file, or until finish() is called and the pipe
    has stayed empty for its grace: a process the program left behind in
    another session (a setsid() daemon) may hold the pipe open for ever,
    and its program's Result must not wait for it."""

    def __init__(self, pipe, cond):
        super().__init__(daemon=True)
        self.pipe, self.cond = pipe, cond
        self.buf = bytearray()
        self.total = 0
        self.eof = False
        self.abandoned = False      # stopped before end of file
        self.holders = []           # then: who held its writing end
        self.last = None            # when the last bytes came (monotonic)
        self._until = None          # finish(): stop once idle past this

    def finish(self, grace):
        """Stop at end of file, or once the pipe is idle `grace` seconds
        from now."""
        self._until = time.monotonic() + grace

    def run(self):
        fd = self.pipe.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while True:
                if not poller.poll(100):
                    if self._until is not None and \
                            time.monotonic() >= self._until:
                        self.abandoned = True
                        self.holders = pipe_writers(fd)
                        break
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                with self.cond:
                    self.last = time.monotonic()
                    self.total += len(chunk)
                    room = OUTPUT_CAP - len(self.buf)
                    if room > 0:
                        self.buf += chunk[:room]
                    self.cond.notify_all()
        except OSError:
            pass
        finally:
            with self.cond:
                self.eof = True
                self.cond.notify_all()

    def held(self, name):
        """What the transcript says of a pipe it stopped reading."""
        return (f"{name} ({self.total} bytes read) held open by "
                + (", ".join(self.holders) or "no process left"))

    def text(self):
        s = self.buf.decode("utf-8", errors="replace")
        if self.total > len(self.buf):
            s += f"\n[... {self.total - len(self.buf)} more bytes not kept]\n"
        return s


def pipe_writers(fd):
    """The processes that hold the writing end of the pipe read at `fd`
    open ("PID COMM" each): who kept a program's output from its end."""
    try:
        want = f"pipe:[{os.fstat(fd).st_ino}]"
    except OSError:
        return []
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for n in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{n}") != want:
                    continue
                with open(f"/proc/{pid}/fdinfo/{n}") as f:
                    flags = int(f.read().split("flags:")[1].split()[0], 8)
                if flags & 3 != os.O_WRONLY:
                    continue
                with open(f"/proc/{pid}/comm") as f:
                    out.append(f"{pid} {f.read().strip()}")
                break
            except (OSError, IndexError, ValueError):
                continue
    return out


# ---- results ------------------------------------------------------------------

class Result:
    """The outcome of one finished command."""

    def __init__(self, cmd, returncode, stdout, stderr, duration, timed_out,
                 timeout, final=None):
        self.cmd = cmd
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.duration = duration
        # When the grader saw it end (time.monotonic(); made at the reap).
        self.ended = time.monotonic()
        self.timed_out = timed_out
        self.timeout = timeout
        self.signal = (signal_name(-returncode)
                       if returncode is not None and returncode < 0
                       and not timed_out else None)
        # (user, system): the CPU seconds the process used, its threads
        # and the children it waited for included, as wait4() reported
        # them when the grader reaped it (what a shell's `time` reads);
        # None when unknown.
        self.cpu = None
        # `final`: a regex for the program's last line of a finished run
        # (lesson.toml [final_line]); killed after printing it, the program
        # hung while cleaning up, not while working.
        lines = stdout.rstrip("\n").splitlines()
        self.hung_after_output = bool(
            timed_out and final and lines and re.search(final, lines[-1]))
        # When killed asleep with nothing open (Proc._idle): the seconds
        # it slept so; else None.
        self.idle = None
        # When stopped because its run had been decided without it
        # (Proc.wait's stop_when): why; else None. Not a hang.
        self.stopped = None
        # (asked, waited) when killed at the end of a wait that the
        # machine's slowness had stretched (harness.stretch()); else None.
        self.stretched = None

    @property
    def command(self):
        return " ".join(shlex.quote(str(c)) for c in self.cmd)

    def status(self):
        if self.stopped:
            return (f"stopped by the grader after {self.duration:.1f} s, "
                    f"still running: {self.stopped}")
        if self.timed_out:
            # Killed by the grader's own limit, not the program's -t: say so.
            if self.hung_after_output:
                return (f"killed by the grader after {self.timeout} s: it "
                        f"hung after its last output (during cleanup?)")
            if self.idle is not None:
                return (f"killed by the grader after {self.timeout} s: it "
                        f"slept {self.idle} s with neither the RDMA device "
                        f"nor a socket open (waiting for nothing: hung?)")
            if self.stretched:
                asked, waited = self.stretched
                return (f"killed by the grader after {self.timeout} s (its "
                        f"{asked} s, stretched to {waited} s: the machine "
                        f"ran {waited / asked:.1f} times slower than usual)")
            return f"killed by the grader after {self.timeout} s"
        if self.signal:
            return f"crashed with {self.signal}"
        return f"exited with status {self.returncode}"

    def describe(self, lines=15):
        out = [f"command: {self.command}", f"result:  {self.status()}"]
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            tail = text.rstrip("\n").splitlines()[-lines:]
            if tail:
                out.append(f"{name} (last {len(tail)} lines):")
                out += ["  | " + line for line in tail]
            else:
                out.append(f"{name}: (empty)")
        return "\n".join(out)

    def ok(self, what=None, peer=None, peer_name="the other side"):
        """Fail unless the command exited 0. With `peer` (the Result of the
        program it talked to), the failure shows that side's end too: the
        line that explains a two-process failure is often the other's."""
        if self.returncode != 0 or self.timed_out:
            head = f"{what}: " if what else ""
            tail = ""
            if peer is not None:
                tail = (f"\n{peer_name}: {peer.status()}\n"
                        + peer.describe(lines=8).split("\n", 2)[2])
            raise GradeFailure(f"{head}expected exit status 0, got: "
                               f"{self.status()}\n{self.describe()}{tail}")
        return self

    def fails(self, code=None, what=None):
        """Fail unless the command exited non-zero (with `code` if given)
        on its own: a crash or a timeout is not a clean failure."""
        head = f"{what}: " if what else ""
        if self.timed_out or self.signal or self.stopped:
            raise GradeFailure(f"{head}expected a clean non-zero exit, got: "
                               f"{self.status()}\n{self.describe()}")
        if code is None and self.returncode == 0:
            raise GradeFailure(f"{head}expected a non-zero exit status, "
                               f"got 0\n{self.describe()}")
        if code is not None and self.returncode != code:
            raise GradeFailure(f"{head}expected exit status {code}, got: "
                               f"{self.status()}\n{self.describe()}")
        return self


def _record(result, label="run", student=False):
    current_transcript().runs.append((result, student))
    held = getattr(result, "pipes_held", None)
    held = (f"# something it left running in another session held its "
            f"output open: read no further ({held})\n"
            if held else "")
    current_transcript().add(
        f"$ {result.command}    # {label}, {result.duration:.2f}s, "
        f"{result.status()}\n{held}"
        f"--- stdout ---\n{result.stdout}--- stderr ---\n{result.stderr}"
        f"--- end ---\n")


# ---- the lesson's wait limit ----------------------------------------------------

class WaitLimit:
    """Once a program of a lesson has hung, what the lesson's later waits
    get: at most `each` seconds apiece, and at most `then` once one of
    those waits too has ended in a kill (it hangs every time). Whole
    seconds, so that the kill reads `killed by the grader after N s`."""

    def __init__(self, each, then):
        self.each, self.then = each, then

    def cap(self, timeout):
        return min(timeout, self.each)

    def killed(self):
        self.each = min(self.each, self.then)


_limit = None


def limit_waits(each=None, then=1):
    """From now on every wait of every process (the student's programs,
    reference peers, tools), whatever timeout its caller asked for, is
    capped (WaitLimit); limit_waits() lifts the cap. The grading session
    sets it when a lesson's program hung and lifts it at the next lesson."""
    global _limit
    _limit = WaitLimit(each, then) if each else None


def wait_limit():
    """The WaitLimit in force, or None."""
    return _limit


def capped(timeout):
    """`timeout` as the wait limit in force allows it."""
    if _limit is None or timeout is None:
        return timeout
    return _limit.cap(timeout)


def _killed():
    """A capped wait ended in a kill."""
    if _limit is not None:
        _limit.killed()


# ---- the machine's pace -------------------------------------------------------

# A wait bounds a hang, never a speed: its seconds, and a quick failure's
# "within N s", were set with a margin of about 10 over what a correct
# program takes in a make test (a micro-VM of one vCPU under TCG beside three
# others on two cores). Past that margin - a second make test beside, a busy
# lab machine, Gradescope's half CPU - it is the machine that is slow, not
# the program: a wait that runs out, or a failure that took longer than its
# bound, is judged again at the pace the machine runs now, measured by the
# grader itself with work of its own (pace()), never by the program's.
# PACE_WORK loop steps take PACE_BASE s at that usual pace (AMD EPYC host,
# 1-vCPU TCG guest, 2026-12-07, 8 runs each: 0.13-0.25 s alone, 0.29-0.39
# beside 3 busy host loops, 0.52-0.76 beside 7; natively 0.007); a wait is
# stretched at most PACE_MAX times.
PACE_WORK = 300_000
PACE_BASE = 0.4
PACE_MAX = 10


def pace():
    """How many times slower than its usual pace (PACE_BASE) this machine
    runs the grader's own fixed work right now: 1 when not slower, at most
    PACE_MAX. It takes PACE_BASE s at the usual pace, longer when slower."""
    begin = time.perf_counter()
    x = 0
    for i in range(PACE_WORK):
        x ^= i
    took = time.perf_counter() - begin
    return min(max(took / PACE_BASE, 1.0), PACE_MAX)


def stretch(seconds):
    """The whole seconds to add to a wait of `seconds` that has run out,
    so that it lasts as long as it would have at the usual pace (pace());
    0 when the machine runs at its usual pace, and once a program of the
    lesson has hung (the lesson's wait limit: its later waits are short on
    purpose)."""
    if _limit is not None or not seconds or seconds <= 0:
        return 0
    factor = pace()
    return math.ceil(seconds * (factor - 1)) if factor > 1 else 0


class Bound:
    """A bound of `seconds` on a wait its caller times itself (the time
    since the last progress): over(took) is true once `took` is past it,
    after one stretch (stretch()) when the machine runs slower than usual;
    the stretched bound holds for the later waits. `seconds`: the bound
    now, stretch included."""

    def __init__(self, seconds):
        self.asked = self.seconds = seconds

    def over(self, took):
        if took <= self.seconds:
            return False
        if self.seconds == self.asked:
            self.seconds += stretch(self.asked)
        return took > self.seconds

    @property
    def stretched(self):
        """(asked, waited) once stretched, else None."""
        return (self.asked, self.seconds) if self.seconds != self.asked \
            else None


class Deadline(Bound):
    """A wait of `seconds` (as the lesson's wait limit allows: capped())
    from now, for a caller that polls: passed() is true once it is over,
    after one stretch (Bound) when the machine runs slower than usual.
    `seconds`: the whole wait so far, stretch included."""

    def __init__(self, seconds):
        super().__init__(capped(seconds))
        self.start = time.monotonic()

    def left(self):
        return self.start + self.seconds - time.monotonic()

    def passed(self):
        return self.over(time.monotonic() - self.start)


def too_slow(took, within):
    """None when something that took `took` s was within `within` s at the
    machine's usual pace; else the bound it broke at the pace measured now
    (whole seconds). The pace is measured only when `took` is past
    `within`."""
    if took <= within:
        return None
    bound = within * pace()
    return None if took <= bound else math.ceil(bound)


def at_pace(within, bound):
    """What a message adds to `within` s when too_slow() gave `bound`."""
    return f"; {bound} s at the pace this machine ran just now" \
        if bound > within else ""


# ---- processes --------------------------------------------------------------

# The name of the program each pid the grader started a student's program
# as (Build.start/run): the kernel names a QP's owner by pid and comm, and
# the comm must be the program's own (the sandbox refuses a second exec;
# an uncontained run does not).
_program_names = {}


def started_program(pid, name):
    """Record that `pid` runs the student's program `name`."""
    _program_names[pid] = name


def owner_problem(q, pid):
    """Why `q` (a QP as `rdma resource show qp` gives it: pid, comm) is
    not owned by the program started as `pid`, or None when it is."""
    if not q or q.get("pid") != pid:
        return f"owned by pid {q.get('pid') if q else None}, not {pid}"
    name = _program_names.get(pid)
    if name and q.get("comm") is not None and q["comm"] != name[:15]:
        return (f"owned by pid {pid}, but that process runs "
                f"'{q['comm']}', not the program '{name}': it became "
                f"another program")
    return None


# The pids of live processes started outside the sandbox (trusted peers):
# a sandbox that is not contained kills every other leftover process.
_trusted = None


def track_trusted(pids):
    """Record live unsandboxed processes in the set `pids` (or stop: None)."""
    global _trusted
    _trusted = pids


def keep_trusted(pid):
    """A trusted process that outlives tests (a server of peers): never
    taken for a test's leftover."""
    if _trusted is not None:
        _trusted.add(pid)


def limits_prefix(rlimits=None, empty_dirs=()):
    """The command prefix that runs a program with `rlimits` ({name:
    value}: prlimit(1)'s names and units, memlock in bytes, soft and hard
    alike) and each directory of `empty_dirs` covered by an empty
    read-only tmpfs, with util-linux's unshare and prlimit. Contained, the
    sandbox's launcher does both itself (sandbox-exec lets its program
    start no other program); this prefix is how an uncontained run does
    it, and how a failure message says to reproduce such a run. Without
    root a user namespace grants the mount."""
    pre = []
    if empty_dirs:
        pre += ["unshare", "--mount",
                *([] if os.geteuid() == 0 else ["--user", "--map-root-user"]),
                "sh", "-c", 'for d; do [ "$d" = -- ] && break; mount -t '
                'tmpfs -o ro none "$d" || exit 127; shift; done; shift; '
                'exec "$@"', "sh", *map(str, empty_dirs), "--"]
    if rlimits:
        pre += ["prlimit", *(f"--{k}={v}" for k, v in sorted(rlimits.items())),
                "--"]
    return pre


class _Popen(subprocess.Popen):
    """A Popen that reaps its child with wait4(), keeping the child's
    resource usage (`rusage`: the CPU time it used, as a shell's `time`
    reports it). Popen reaps in two places, wait()'s _try_wait and
    poll()'s _internal_poll (which takes the wait function as an
    argument): both go through _wait4."""
    rusage = None

    def _wait4(self, pid, flags):
        pid, sts, usage = os.wait4(pid, flags)
        if pid:
            self.rusage = usage
        return pid, sts

    def _try_wait(self, wait_flags):
        try:
            return self._wait4(self.pid, wait_flags)
        except ChildProcessError:
            return self.pid, 0          # as Popen's own: the status is lost

    def _internal_poll(self, _deadstate=None, **kw):
        return super()._internal_poll(_deadstate, _waitpid=self._wait4)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _in_session(sid):
    """Does a process other than `sid` itself run in session `sid` (a
    child of a program started in its own session, or the child's)?"""
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != sid:
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            if len(fields) > 3 and fields[3] == str(sid):
                return True
    return False


class Proc:
    """A running program in its own process group (see start())."""

    def __init__(self, cmd, env=None, cwd=None, timeout=DEFAULT_TIMEOUT,
                 sandbox=None, on_result=None, final=None, spawn=None,
                 rlimits=None, empty_dirs=(), watch_idle=False):
        cmd = [str(c) for c in cmd]
        # `watch_idle`: a student's program, killed when it sleeps with
        # nothing open (_idle).
        self.watch_idle = watch_idle
        self._asleep = None         # (since, cpu, samples) while so
        self.idle_kill = None       # (seconds waited, slept) when killed
        # (asked, waited): a wait that ran out and was stretched (stretch())
        self.stretched = None
        # What messages show: the command as one would type it, its
        # limits and hidden directories as a prefix (limits_prefix).
        self.cmd = [*limits_prefix(rlimits, empty_dirs), *cmd]
        self.final = final
        self.timeout = timeout
        self.on_result = on_result
        self.match = None
        self.result = None
        self.sandbox = sandbox
        self.start_time = time.monotonic()
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update({k: str(v) for k, v in env.items()})
        argv = self.cmd
        # The interposer's record goes out through a descriptor the program
        # inherits (grader/evidence/interpose: Spy).
        fds = ()
        if full_env and full_env.get("VERBS_SPY_FD", "").isdigit():
            fds = (int(full_env["VERBS_SPY_FD"]),)
        if sandbox is not None:
            argv, cwd, full_env = sandbox.wrap(cmd, full_env, rlimits,
                                               empty_dirs)
        try:
            # `spawn`: another way to start the same command (a forking
            # server's), or None when it cannot; a Popen look-alike.
            self.proc = spawn(argv, full_env, cwd) if spawn else None
            if self.proc is None:
                self.proc = _Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, env=full_env, cwd=cwd,
                    start_new_session=True, pass_fds=fds)
        except OSError as e:
            raise GradeFailure(f"cannot run {self.cmd[0]}: "
                               f"{e.strerror or e}\n"
                               f"command: {shlex.join(self.cmd)}") from e
        if sandbox is None and _trusted is not None:
            _trusted.add(self.proc.pid)
        self.cond = threading.Condition()
        self.out = _Reader(self.proc.stdout, self.cond)
        self.err = _Reader(self.proc.stderr, self.cond)
        self.out.start()
        self.err.start()

    @property
    def port(self):
        return int(self.match.group(1)) if self.match else None

    def feed(self, data):
        try:
            if data:
                self.proc.stdin.write(data.encode() if isinstance(data, str)
                                      else data)
            self.proc.stdin.close()
        except OSError:
            pass

    def wait_for(self, regex, timeout=None):
        """Wait until stdout matches `regex` (a line-oriented search). Fails
        with the program's output if it exits or the time runs out first."""
        timeout = capped(self.timeout if timeout is None else timeout)
        pat = re.compile(prog_prefixed(regex), re.M)
        deadline = Deadline(timeout)
        exited = None
        with self.cond:
            while True:
                m = pat.search(self.out.buf.decode("utf-8", "replace"))
                if m:
                    self.match = m
                    return m
                if self.out.eof or deadline.passed():
                    break
                now = time.monotonic()
                left = deadline.left()
                # The program itself has gone but something it left
                # behind (a setsid() daemon) holds stdout open: what it
                # printed is in the pipe already; a moment to read it.
                if exited is None and self.proc.poll() is not None:
                    exited = now
                if exited is not None and now - exited > EXIT_GRACE:
                    break
                if exited is None and self._idle(now):
                    break
                self.cond.wait(min(left, 0.1 if exited else IDLE_STEP))
        if self.out.eof:
            # stdout closed: the program is exiting; let it finish so its
            # status is reported, not a timeout.
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        timed_out = self.proc.poll() is None
        timeout = deadline.seconds
        self.stretched = deadline.stretched
        res = self.wait(timeout=0 if timed_out else 5)
        if timed_out and res.idle is None:
            res.timeout = timeout
        why = (f"it printed no line matching /{regex}/: {res.status()}"
               if res.idle is not None else
               f"it printed no line matching /{regex}/ within {timeout} s"
               if timed_out else
               f"it {res.status()} before printing a line matching /{regex}/")
        raise GradeFailure(f"{shlex.join(self.cmd)}: {why}\n{res.describe()}")

    def wait(self, timeout=None, waited=None, stop_when=None):
        """Wait for exit (killing the group at the deadline); the Result.
        `waited`: the seconds to report when it is killed, when the caller
        has waited for it already (timeout 0: kill it now). `stop_when`:
        called every IDLE_STEP seconds while the program runs; once it
        returns a reason (its run has been decided without it: a
        reference peer has failed it already), the program is stopped
        then, its Result's `stopped` that reason: not a hang, the
        lesson's later waits keep theirs."""
        if self.result:
            return self.result
        timeout = capped(self.timeout if timeout is None else timeout)
        timed_out = False
        killed_after = self._wait_exit(timeout, stop_when)
        stopped = None
        if isinstance(killed_after, str):
            stopped, killed_after = killed_after, None
        elif killed_after is not None:
            timed_out = True
            _killed()
        # Whatever the program left behind in its group goes too.
        _kill_group(self.proc)
        self.proc.wait()
        if _trusted is not None:
            _trusted.discard(self.proc.pid)
        # The pipes end when the last process holding them does: not
        # necessarily the program's group (a setsid() daemon it started
        # lives on, until its test's end kills it). Read what is there.
        for r in (self.out, self.err):
            r.finish(EXIT_GRACE)
        for r in (self.out, self.err):
            r.join(timeout=EXIT_GRACE + 5)
        if self.idle_kill is not None:
            # Killed asleep with nothing open, by this wait or wait_for().
            timed_out, killed_after, waited = True, self.idle_kill[0], None
        self.result = Result(self.cmd, self.proc.returncode, self.out.text(),
                             self.err.text(),
                             time.monotonic() - self.start_time, timed_out,
                             timeout if killed_after is None else
                             killed_after if waited is None else waited,
                             final=self.final)
        if self.idle_kill is not None:
            self.result.idle = self.idle_kill[1]
        elif timed_out:
            self.result.stretched = self.stretched
        self.result.stopped = stopped
        usage = getattr(self.proc, "rusage", None)
        if usage is not None:
            self.result.cpu = (usage.ru_utime, usage.ru_stime)
        readers = ((self.out, "stdout"), (self.err, "stderr"))
        if any(r.abandoned or r.is_alive() for r, _ in readers):
            # Not a failure by itself; the transcript says why the output
            # was not read to its end, and who held it.
            self.result.pipes_held = "; ".join(
                r.held(name) if r.abandoned else
                f"{name} ({r.total} bytes read): its reader was still "
                f"reading" for r, name in readers
                if r.abandoned or r.is_alive())
        _record(self.result, student=self.sandbox is not None)
        if self.on_result:
            self.on_result(self.result)
        return self.result

    def hung_at(self, deadline):
        """The Result of a program killed now, when `deadline` (a Deadline
        its caller polled) passed before it did what it waited for."""
        self.stretched = deadline.stretched
        return self.wait(timeout=0, waited=deadline.seconds)

    def _wait_exit(self, timeout, stop_when=None):
        """Wait up to `timeout` seconds for the program to exit; None when
        it did, else the seconds waited (or stop_when's reason, a str). A
        program whose last line is its final line (`final`) and that has
        printed nothing for FINAL_GRACE seconds since is not waited for
        any longer: it hung in cleanup."""
        start = time.monotonic()
        deadline = Deadline(max(timeout, 0))
        while True:
            step = deadline.left()
            if self.final or self.watch_idle or stop_when:
                step = min(step, IDLE_STEP)
            try:
                self.proc.wait(timeout=max(step, 0))
                return None
            except subprocess.TimeoutExpired:
                pass
            if deadline.passed():
                self.stretched = deadline.stretched or self.stretched
                return deadline.seconds
            now = time.monotonic()
            quiet = self._quiet_after_final(now)
            if quiet is not None and quiet >= FINAL_GRACE:
                return round(now - start)
            if self._idle(now):
                return self.idle_kill[0]
            why = stop_when() if stop_when else None
            if why:
                return str(why)

    def _idle(self, now):
        """Is the program hung, waiting for nothing? True (and `idle_kill`
        set) once it has slept IDLE_LIMIT seconds - every thread of it
        asleep (S), its CPU time unchanged, no child - with neither the
        RDMA device (/dev/infiniband/) nor any socket open: before it
        opens them and after it has closed them a program of the course
        has nothing to wait for (IDLE_LIMIT). Only with `watch_idle`;
        False whenever /proc cannot tell."""
        if not self.watch_idle:
            return False
        pid = self.proc.pid
        try:
            tids = os.listdir(f"/proc/{pid}/task")
            states, cpu = [], 0
            for tid in tids:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rpartition(")")[2].split()[0])
            if not states or any(st != "S" for st in states):
                self._asleep = None
                return False
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith(("socket:", "/dev/infiniband/")):
                    self._asleep = None
                    return False
            for tid in tids:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    cpu += int(f.read().split()[0])
            if self._asleep is None or self._asleep[1] != cpu:
                self._asleep = (now, cpu, 1)
                return False
            since, _, samples = self._asleep
            self._asleep = (since, cpu, samples + 1)
            # Seen asleep that long by enough looks (not one look before
            # and one after the machine stalled us both), and waiting for
            # no child (a child that ended would have woken it).
            if now - since < IDLE_LIMIT or samples + 1 < IDLE_SAMPLES:
                return False
            if _in_session(pid):
                self._asleep = None
                return False
        except (OSError, ValueError, IndexError):
            self._asleep = None
            return False
        self.idle_kill = (round(now - self.start_time), round(now - since))
        return True

    def _quiet_after_final(self, now):
        """Seconds since the program's last output when that output ended
        with its final line, else None."""
        with self.cond:
            # (Output beyond the cap is not kept: its last line unknown.)
            if not self.final or self.out.last is None or \
                    self.out.total > len(self.out.buf):
                return None
            tail = self.out.buf[-4096:].decode("utf-8", "replace")
            lines = tail.rstrip("\n").splitlines()
            if not lines or not re.search(self.final, lines[-1]):
                return None
            last = max(t for t in (self.out.last, self.err.last) if t)
        return now - last

    def kill(self, sig=signal.SIGKILL):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.result is None:
            _kill_group(self.proc)
            self.wait(timeout=5)
        return False


def start(cmd, ready=None, timeout=DEFAULT_TIMEOUT, env=None, cwd=None,
          input=None, sandbox=None, on_result=None, final=None, spawn=None,
          rlimits=None, empty_dirs=(), watch_idle=False):
    """Start `cmd` in its own process group (inside `sandbox`, a
    grader.evidence.sandbox.Sandbox, when given; through `spawn`, see
    Proc, when given; with `rlimits` and `empty_dirs`, see
    limits_prefix); when `ready` is a regex, wait for it on stdout
    first; `watch_idle`: see Proc._idle. Use as a context manager."""
    p = Proc(cmd, env=env, cwd=cwd, timeout=timeout, sandbox=sandbox,
             on_result=on_result, final=final, spawn=spawn, rlimits=rlimits,
             empty_dirs=empty_dirs, watch_idle=watch_idle)
    p.feed(input)
    if ready:
        try:
            p.wait_for(ready)
        except BaseException:
            p.__exit__(None, None, None)
            raise
    return p


def run(cmd, timeout=DEFAULT_TIMEOUT, input=None, env=None, cwd=None,
        sandbox=None, final=None, spawn=None, rlimits=None, empty_dirs=(),
        watch_idle=False):
    """Run `cmd` to completion (killed at `timeout`, inside `sandbox` when
    given, with `rlimits` and `empty_dirs`, see limits_prefix; sooner when
    asleep with nothing open with `watch_idle`, see Proc._idle); the
    Result."""
    p = Proc(cmd, env=env, cwd=cwd, timeout=timeout, sandbox=sandbox,
             final=final, spawn=spawn, rlimits=rlimits, empty_dirs=empty_dirs,
             watch_idle=watch_idle)
    p.feed(input)
    return p.wait()


# ---- checks -------------------------------------------------------------------

# A line the grader looks for may start with the program's name, as err(3)
# and perror(argv[0]) write it ("reg_mr: ..." or "/path/to/reg_mr: "): the
# checks are about what a line says. A line that must be verbatim (a CSV
# row, lesson 09's experiment lines) is not matched through these.
PROG_PREFIX = r"(?:[^\s:]+: )?"


def prog_prefixed(regex):
    """`regex` with an optional PROG_PREFIX after its leading `^` (one not
    anchored at the line's start matches after a prefix already)."""
    return "^" + PROG_PREFIX + regex[1:] if regex.startswith("^") else regex


def _show(v):
    if isinstance(v, str) and "\n" in v:
        return "\n" + "\n".join("  | " + line for line in v.splitlines())
    return repr(v)


def expect(got, expected, what):
    """Fail unless got == expected; both shown, lined up."""
    if got != expected:
        raise GradeFailure(f"{what}\n  expected: {_show(expected)}\n"
                           f"  got:      {_show(got)}")


def expect_match(text, regex, what):
    """Fail unless `regex` matches somewhere in `text` (multi-line mode; a
    line may start with `PROG: `); returns the match."""
    m = re.search(prog_prefixed(regex), text, re.M)
    if not m:
        raise GradeFailure(f"{what}\n  expected a line matching: /{regex}/"
                           f"{_PREFIX_NOTE if regex.startswith('^') else ''}\n"
                           f"  got:{_show(text) if text else ' (no output)'}")
    return m


_PREFIX_NOTE = " (after an optional 'PROG: ')"


def expect_line(text, line, what):
    """Fail unless `line` is one of the lines of `text`, optionally after
    `PROG: ` (ignoring trailing white space). The failure names the line
    nearest to it, and where the two first differ."""
    want = line.rstrip()
    lines = [x.rstrip() for x in text.splitlines()]
    prefixed = re.compile(PROG_PREFIX + re.escape(want))
    if any(x == want or prefixed.fullmatch(x) for x in lines):
        return
    near = difflib.get_close_matches(
        want, [re.sub("^" + PROG_PREFIX, "", x) for x in lines], 1, 0.6)
    diff = ""
    if near:
        at = next((i for i, (a, b) in enumerate(zip(want, near[0]))
                   if a != b), min(len(want), len(near[0])))
        diff = (f"\n  nearest:  {near[0]!r}\n  they differ from character "
                f"{at + 1}: {want[at:at + 20]!r} vs {near[0][at:at + 20]!r}")
    raise GradeFailure(f"{what}\n  expected the line: {line!r}"
                       f"{_PREFIX_NOTE}{diff}\n"
                       f"  got:{_show(text) if text else ' (no output)'}")


# ---- leaks ---------------------------------------------------------------------

def leak_checker():
    """(wrap, env, description) running a program under LeakSanitizer
    (preloaded: fast, no rebuild), or valgrind when liblsan is missing.
    A leak makes the program exit 23."""
    lsan = ctypes.util.find_library("lsan")
    if lsan:
        return ((), {"LD_PRELOAD": lsan,
                     "LSAN_OPTIONS": "exitcode=23:color=never"},
                f"LD_PRELOAD={lsan} LSAN_OPTIONS=exitcode=23")
    if shutil.which("valgrind"):
        wrap = ("valgrind", "-q", "--leak-check=full",
                "--errors-for-leak-kinds=definite",
                "--show-leak-kinds=definite", "--error-exitcode=23")
        return wrap, None, " ".join(wrap)
    raise GradeFailure("no leak checker: install gcc's liblsan0 or valgrind "
                       "(make deps)")
