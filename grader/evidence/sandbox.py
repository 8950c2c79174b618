"""Where the student's programs run: nothing a submission does may change its
grade, the course tree, or the next grading.

Contained (the grader runs as root: the micro-VM, or a native host graded by
root), every program a test starts through the `build` fixture:
  - runs as an unprivileged user (STUDENT_UID), no supplementary groups, no
    new privileges (setuid programs stay unprivileged), with the memlock
    limit RDMA needs (inherited from the grader, which raised it);
  - sees the course tree and every shared (9p) directory read-only, and
    solutions/ and .git hidden: a mount namespace made once per grading
    session (unshare), entered per program (nsenter);
  - lives in the test's cgroup: when the test ends, everything in it is
    killed (cgroup.kill), double-forked and setsid() daemons included;
  - has a per-test scratch directory as its working directory and HOME, the
    one place of the grader's it may write; it is deleted after the test.

Otherwise (an ordinary user on the native backend) programs run as that
user, in their own session, with the scratch directory as working directory;
the grader is a child subreaper, so orphans come back to it, and at the end
of each test every process the test left behind is killed. The course tree
stays writable there: the micro-VM is the contained configuration.

Trusted processes (the course's reference peers, `rdma resource show`) are
started with harness.run()/start() directly and are not sandboxed.
"""

import ctypes
import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from grader.core import procs
from grader.core.build import grader_program

STUDENT_UID = 64000
STUDENT_GID = 64000
STATE = Path("/run/rdma-course-grade")          # root only, 0700
PR_SET_CHILD_SUBREAPER = 36


class Containment:
    """What contains a grading session's programs, made once per session
    (root only): the mount namespace with the read-only view (entered per
    program by sandbox-exec), the session's cgroup under which each test
    gets its own, and the launcher. Raises RuntimeError (or OSError) when
    it cannot be made."""

    def __init__(self, course, read_only=(), hide=("solutions", ".git")):
        self.course = Path(course)
        for tool in ("unshare", "mount"):
            if not shutil.which(tool):
                raise RuntimeError(f"{tool} is missing (util-linux)")
        # Made on the host by `python3 -m grader build`; here only if not.
        self.launcher = grader_program(self.course, "evidence/sandbox-exec.c")
        self.base = self._cgroup()
        try:
            self.nsfile = self._namespace([Path(p) for p in read_only], hide)
        except BaseException:
            procs.kill_cgroup(self.base)
            raise

    def _cgroup(self):
        cg = procs.cgroup2_root()
        if cg is None:
            Path("/sys/fs/cgroup").mkdir(exist_ok=True)
            subprocess.run(["mount", "-t", "cgroup2", "cgroup2",
                            "/sys/fs/cgroup"], check=True,
                           capture_output=True)
            cg = Path("/sys/fs/cgroup")
        base = cg / f"rdma-grade.{os.getpid()}"
        base.mkdir(exist_ok=True)
        if not (base / "cgroup.kill").exists():
            raise RuntimeError("cgroup v2 without cgroup.kill (kernel < 5.14)")
        return base

    def _namespace(self, read_only, hide):
        # The namespace file must sit on a private mount of its own, made
        # once: the shards of a grading start side by side, and a second
        # bind mount stacked on the first hides the namespace files made on
        # it (a shard's setns() then found an empty file: 'setns
        # /run/rdma-course-grade/mnt.175: Invalid argument', a whole lesson
        # lost, in make bench-stability under load). The lock makes the
        # look and the mount one step.
        STATE.mkdir(mode=0o700, exist_ok=True)
        # (root's alone: a program could not hold it even for its session)
        fd = os.open(STATE.parent / f"{STATE.name}.lock",
                     os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with open(fd, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if str(STATE) not in {p for p, _ in procs.mounts()}:
                subprocess.run(["mount", "--bind", STATE, STATE], check=True,
                               capture_output=True)
            subprocess.run(["mount", "--make-private", STATE], check=True,
                           capture_output=True)
        nsfile = STATE / f"mnt.{os.getpid()}"
        nsfile.touch()
        ro = {str(self.course)} | {str(p) for p in read_only}
        ro |= {p for p, t in procs.mounts() if t == "9p"}
        lines = ["set -e"]
        for p in sorted(ro):
            lines.append(f"mount --bind '{p}' '{p}'")
            lines.append(f"mount -o remount,bind,ro '{p}'")
        for name in hide:
            p = self.course / name
            if p.is_dir():
                lines.append(f"mount -t tmpfs -o ro,size=4k,mode=0555 "
                             f"hidden '{p}'")
            elif p.exists():
                lines.append(f"mount --bind /dev/null '{p}'")
        for p in ro | {str(self.course / n) for n in hide}:
            if "'" in p:
                raise RuntimeError(f"cannot sandbox a path with a quote: {p}")
        res = subprocess.run(
            ["unshare", f"--mount={nsfile}", "--propagation", "private",
             "--", "sh", "-c", "\n".join(lines)],
            capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError("setting up the read-only view failed: "
                               + res.stderr.strip())
        return nsfile

    def close(self):
        subprocess.run(["umount", self.nsfile], capture_output=True)
        try:
            self.nsfile.unlink(missing_ok=True)
        except OSError:
            pass
        # Anything started outside a test was put here: it goes too.
        (self.base / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.base.rmdir()
                break
            except OSError:
                time.sleep(0.02)

    def argv(self, cgroup, cwd, cmd):
        """The launcher's command line that runs `cmd` contained."""
        return [str(self.launcher), str(cgroup or self.base),
                str(self.nsfile), str(cwd), str(STUDENT_UID),
                str(STUDENT_GID), "--", *cmd]


class Sandbox:
    """Where a grading session's student programs run, test by test: a
    scratch directory each, and (contained) a cgroup each inside the
    session's Containment; uncontained, the leftovers of each test are
    found below the grader (a child subreaper) and killed."""

    def __init__(self, course, read_only=(), hide=("solutions", ".git")):
        self.course = Path(course)
        self.contained = False
        self.containment = None
        self.why_not = ""
        self.scratch = None
        self.cgroup = None
        self.count = 0
        self.trusted = set()        # pids of live unsandboxed Procs
        if os.geteuid() == 0:
            try:
                self.containment = Containment(course, read_only, hide)
                self.contained = True
            except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
                self.why_not = f"cannot contain programs: {e}"
        else:
            self.why_not = ("the grader is not root, so the programs run as "
                            "you, uncontained (the micro-VM contains them)")
        if not self.contained:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.scratch_root = Path(os.environ.get("TMPDIR", "/tmp")) / \
            f"rdma-grade-scratch.{os.getpid()}"
        self.scratch_root.mkdir(mode=0o711, exist_ok=True)

    def close(self):
        self.end_test()
        if self.containment:
            self.containment.close()
        shutil.rmtree(self.scratch_root, ignore_errors=True)

    # ---- per test ---------------------------------------------------------------

    def begin_test(self, name):
        self.end_test()
        self.count += 1
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
        self.scratch = self.scratch_root / f"{self.count:03d}-{safe}"
        self.scratch.mkdir(mode=0o700)
        if self.contained:
            os.chown(self.scratch, STUDENT_UID, STUDENT_GID)
            self.cgroup = self.containment.base / f"t{self.count}"
            self.cgroup.mkdir()

    def end_test(self):
        """Kill everything the test's programs started; delete the scratch
        directory. Returns the number of processes that were still there."""
        left = 0
        if self.cgroup is not None:
            left = len((self.cgroup / "cgroup.procs").read_text().split())
            (self.cgroup / "cgroup.kill").write_text("1")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if "populated 0" in (self.cgroup / "cgroup.events").read_text():
                    break
                time.sleep(0.02)
            try:
                self.cgroup.rmdir()
            except OSError:
                pass
            self.cgroup = None
        elif not self.contained:
            left = self._kill_descendants()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        return left

    def _kill_descendants(self):
        """Not contained: every process below the grader that no live
        trusted Proc owns. Orphans were reparented here (subreaper)."""
        parent = procs.parents()
        me = os.getpid()
        keep = set(self.trusted)
        victims = []
        for pid in parent:
            chain, p = [], pid
            while p in parent and p not in (me, 0, 1) and p not in keep:
                chain.append(p)
                p = parent[p]
            if p == me and pid not in keep and chain:
                victims.append(pid)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in victims:
            if parent.get(pid) == me:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
        return len(victims)

    # ---- per program --------------------------------------------------------------

    def wrap(self, cmd, env):
        """(argv, cwd, env) that run `cmd` inside the sandbox."""
        cwd = self.scratch or self.scratch_root
        env = dict(env if env is not None else os.environ)
        env["HOME"] = str(cwd)
        env.pop("TMPDIR", None)
        if not self.contained:
            return list(cmd), str(cwd), env
        return self.containment.argv(self.cgroup, cwd, cmd), "/", env
