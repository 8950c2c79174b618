"""Where the student's programs run: nothing a submission does may change its
grade, the course tree, or the next grading.

Contained (the grader runs as root: the micro-VM, or a native host graded by
root), every program a test starts through the `build` fixture:
  - runs as an unprivileged user (STUDENT_UID), no supplementary groups, no
    new privileges (setuid programs stay unprivileged), with the memlock
    limit RDMA needs (inherited from the grader, which raised it);
  - sees none of the course tree (an empty read-only directory in its
    place: no grader, no solutions/, no .git, no other tree) and every other
    shared (9p) directory read-only: a mount namespace made once per grading
    session (unshare(2)), entered per program (sandbox-exec);
  - runs the grader's copies of the course's files it is given (its
    programs, the interposer): a directory of the grader's that any user
    may enter (the stage). The checkout itself may lie where that user
    cannot go: a home directory made 0700 (Debian's adduser) or 0750
    (Ubuntu, GitHub's runners), /root in a container, a mktemp -d;
  - lives in the test's cgroup: when the test ends, everything in it is
    killed (cgroup.kill), double-forked and setsid() daemons included;
  - has a per-test scratch directory as its working directory and HOME, the
    one place of the grader's it may write; it is deleted after the test;
  - is the last program sandbox-exec starts: a seccomp filter refuses every
    later execve()/execveat() (EPERM), its own and its children's. A
    program that became another one would keep its PID, and the kernel
    would name it as the owner of the other program's QPs. So no wrapper
    runs in the sandbox: the limits and hidden directories a test asks
    for (rlimits, empty_dirs) are sandbox-exec's options, its CPU time is
    wait4()'s (harness.Result.cpu).

Otherwise (an ordinary user on the native backend) programs run as that
user, in their own session, with the scratch directory as working directory;
the grader is a child subreaper, so orphans come back to it, and at the end
of each test every process the test left behind is killed. The course tree
stays writable there: the micro-VM is the contained configuration.

Trusted processes (the course's reference peers, `rdma resource show`) are
started with harness.run()/start() directly and are not sandboxed.
"""

import contextlib
import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from grader.core import procs
from grader.core.build import grader_program
from grader.core.harness import limits_prefix

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

    def __init__(self, course, read_only=()):
        self.course = Path(course)
        # Made on the host by `python3 -m grader build`; here only if not.
        self.launcher = grader_program(self.course, "evidence/sandbox-exec.c")
        self.shared = False         # (_namespace: one for all sessions)
        self.base = self._cgroup()
        try:
            self.nsfile = self._namespace([Path(p) for p in read_only])
        except BaseException:
            procs.kill_cgroup(self.base)
            raise

    def _cgroup(self):
        # Mounted once, under the lock: the shards of a grading start side
        # by side, both found no cgroup2 (the micro-VM mounts none), the
        # second mount failed (status 32: busy), and that shard ran its
        # programs uncontained, as root: the hostile submissions wrote
        # into the checkout (test_hostile.py, through the warm grader).
        cg = procs.cgroup2_root()
        if cg is None:
            with _mount_lock():
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

    def _namespace(self, read_only):
        # The namespace file must sit on a private mount of its own, made
        # once: the shards of a grading start side by side, and a second
        # bind mount stacked on the first hides the namespace files made on
        # it (a shard's setns() then found an empty file: 'setns
        # /run/rdma-course-grade/mnt.175: Invalid argument', a whole lesson
        # lost, in make bench-stability under load). The lock makes the
        # look and the mount one step.
        STATE.mkdir(mode=0o700, exist_ok=True)
        # Everything shared with the guest (9p) and what the caller names
        # is read-only; the course tree is not there at all (an empty
        # read-only tmpfs over it, so also over whatever is shared or named
        # inside it): the programs run from the stage (Sandbox.wrap).
        course = os.path.realpath(self.course)
        ro = {str(p) for p in read_only}
        ro |= {p for p, t in procs.mounts() if t == "9p"}
        ro = {p for p in ro if not _inside(p, course)}
        # In the micro-VM every session makes the same view (its mounts do
        # not change while it runs): the first one's namespace serves the
        # others (a program enters it and makes its own copy to change,
        # sandbox-exec.c). Made per session, its some 20 processes and
        # mounts under emulation were seconds of each mutant's grading.
        # On a host, a namespace left behind would hold its mounts busy:
        # each session makes its own and removes it.
        self.shared = os.environ.get("RDMA_BACKEND") == "vm"
        key = hashlib.sha256(repr((course, sorted(ro))).encode())
        nsfile = (STATE / f"mnt.shared.{key.hexdigest()[:16]}" if self.shared
                  else STATE / f"mnt.{os.getpid()}")
        with _mount_lock():
            mounts = procs.mounts()
            if self.shared and (str(nsfile), "nsfs") in mounts:
                return nsfile
            if str(STATE) not in {p for p, _ in mounts}:
                subprocess.run(["mount", "--bind", STATE, STATE], check=True,
                               capture_output=True)
            subprocess.run(["mount", "--make-private", STATE], check=True,
                           capture_output=True)
            if not self.shared:
                _sweep(mounts, self.base.parent)
            nsfile.touch()
            if self.shared:         # made under the lock: one for all
                self._make_namespace(nsfile, course, ro)
        if not self.shared:
            self._make_namespace(nsfile, course, ro)
        return nsfile

    def _make_namespace(self, nsfile, course, ro):
        """Make the view in a mount namespace of its own and keep it in
        @nsfile. A forked child unshares and mounts (system calls, no
        programs: unshare(1), a shell and a mount(8) per mount cost 1.6 s of
        each grading session under the micro-VM's emulation); this process,
        still in the old namespace, binds the child's namespace to @nsfile
        (as `unshare --mount=FILE` does)."""
        steps = []
        for p in sorted(ro):
            steps.append(("bind", p, lambda p=p: _mount(p, p, flags=MS_BIND)))
            steps.append(("remount read-only", p, lambda p=p: _mount(
                None, p, flags=MS_REMOUNT | MS_BIND | MS_RDONLY
                | _kept_flags(p))))
        steps.append(("hide with an empty tmpfs", course, lambda: _mount(
            "hidden", course, "tmpfs", MS_RDONLY, "size=4k,mode=0555")))
        ready_r, ready_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:                # the child: system calls only
            code = 1
            try:
                os.close(ready_r)
                os.close(done_w)
                what = "unshare the mount namespace"
                if _libc.unshare(CLONE_NEWNS) != 0:
                    raise OSError(ctypes.get_errno(), "unshare")
                what = "make / private"
                _mount(None, "/", flags=MS_REC | MS_PRIVATE)
                for what, path, step in steps:
                    what = f"{what} {path}"
                    step()
                os.write(ready_w, b"ok")
                os.read(done_r, 1)  # held until the namespace is kept
                code = 0
            except BaseException as e:
                try:
                    os.write(ready_w, f"{what}: {e}".encode()[:4000])
                except BaseException:
                    pass
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(done_r)
        try:
            said = b""
            while chunk := os.read(ready_r, 4096):
                said += chunk
                if said == b"ok":
                    break
            if said != b"ok":
                raise RuntimeError("setting up the read-only view failed: "
                                   + (said.decode(errors="replace")
                                      or "its process died"))
            try:
                _mount(f"/proc/{pid}/ns/mnt", nsfile, flags=MS_BIND)
            except OSError as e:
                raise RuntimeError("setting up the read-only view failed: "
                                   f"keeping the namespace in {nsfile}: "
                                   f"{e}") from e
        finally:
            os.close(ready_r)
            os.close(done_w)        # the child ends
            os.waitpid(pid, 0)

    def close(self):
        if not self.shared:
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

    def argv(self, cgroup, cwd, cmd, rlimits=None, empty_dirs=()):
        """The launcher's command line that runs `cmd` contained: with
        `rlimits` ({name: value}, see harness.limits_prefix) and each of
        `empty_dirs` covered by an empty read-only tmpfs in a mount
        namespace of its own. `cmd` is the last program it runs: its
        seccomp filter refuses every later execve() (sandbox-exec.c), so a
        wrapper that execs `cmd` in turn cannot run in it."""
        opts = []
        for name, value in sorted((rlimits or {}).items()):
            opts += ["--rlimit", f"{name}={value}"]
        for d in empty_dirs:
            opts += ["--empty-dir", str(d)]
        return [str(self.launcher), *opts, str(cgroup or self.base),
                str(self.nsfile), str(cwd), str(STUDENT_UID),
                str(STUDENT_GID), "--", *cmd]


class Sandbox:
    """Where a grading session's student programs run, test by test: a
    scratch directory each, and (contained) a cgroup each inside the
    session's Containment; uncontained, the leftovers of each test are
    found below the grader (a child subreaper) and killed."""

    def __init__(self, course, read_only=()):
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
                self.containment = Containment(course, read_only)
                self.contained = True
            except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
                self.why_not = f"cannot contain programs: {e}"
                # In the micro-VM the grader is root and the course tree is
                # shared read-write: uncontained, a program would run as
                # root there. Fail closed: no grading at all.
                if os.environ.get("RDMA_BACKEND") == "vm":
                    raise RuntimeError(
                        f"the micro-VM could not contain the programs "
                        f"({e}): refusing to run them as root (a grader "
                        f"problem)") from e
        else:
            self.why_not = ("the grader is not root, so the programs run as "
                            "you, uncontained (the micro-VM contains them)")
        if not self.contained:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Contained, the scratch directories and the stage must be where the
        # sandbox's user can go: TMPDIR only if every directory above it
        # lets others through (a TMPDIR in a 0700 home does not).
        # The stage must also allow exec (a hardened /tmp is noexec).
        tmp = os.environ.get("TMPDIR") or "/tmp"
        if self.contained:
            tmp = next((d for d in (tmp, "/tmp", "/var/tmp", "/run")
                        if _enterable(d) and _exec_ok(d)), "/tmp")
        self.scratch_root = Path(tmp) / f"rdma-grade-scratch.{os.getpid()}"
        self.scratch_root.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self.scratch_root, 0o711)      # whatever the umask
        self.stage = self.scratch_root / "stage"
        self.staged = {}            # source path -> (dev, ino, mtime, size)
        # A test may start programs from several threads (lesson 09's lab,
        # three at a time): one stages a file while the others wait, or
        # each copied to the same .new and all but one found it gone.
        self.staging = threading.Lock()

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

    def wrap(self, cmd, env, rlimits=None, empty_dirs=()):
        """(argv, cwd, env) that run `cmd` inside the sandbox, with
        `rlimits` and `empty_dirs` (harness.limits_prefix). Contained,
        every argument and LD_PRELOAD entry that is a file of the course
        tree (a lesson's program, the interposer) becomes the stage's copy
        of it: the sandbox's user cannot see the tree; and `cmd` may start
        no other program (Containment.argv). Uncontained, prlimit and
        unshare set the limits and cover the directories."""
        cwd = self.scratch or self.scratch_root
        env = dict(env if env is not None else os.environ)
        env["HOME"] = str(cwd)
        env.pop("TMPDIR", None)
        if not self.contained:
            return ([*limits_prefix(rlimits, empty_dirs), *cmd], str(cwd),
                    env)
        cmd = [self._staged(str(c)) for c in cmd]
        if env.get("LD_PRELOAD"):
            env["LD_PRELOAD"] = " ".join(
                self._staged(x) for x in env["LD_PRELOAD"].split())
        return (self.containment.argv(self.cgroup, cwd, cmd, rlimits,
                                      empty_dirs), "/", env)

    def _staged(self, arg):
        """The stage's copy of `arg` when it names a file of the course
        tree (copied when new or changed; executables 0755, other files
        0644, directories 0755, all root's); else `arg` itself."""
        course = os.path.realpath(self.course)
        if not arg.startswith("/") or not (_inside(arg, course) or
                                           _inside(arg, str(self.course))):
            return arg
        real = os.path.realpath(arg)
        if not _inside(real, course) or not os.path.isfile(real):
            return arg
        rel = os.path.relpath(real, course)
        dest = self.stage / rel
        st = os.stat(real)
        # Copied for every start unless it is the very file copied before
        # (same inode, time and size): a build dir reused for another
        # tree's program must never run the last one's copy.
        key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        with self.staging:
            if self.staged.get(real) != key or not dest.exists():
                for d in reversed(dest.relative_to(self.scratch_root).parents):
                    if str(d) != ".":
                        (self.scratch_root / d).mkdir(mode=0o755,
                                                      exist_ok=True)
                        os.chmod(self.scratch_root / d, 0o755)
                tmp = dest.with_name(dest.name + ".new")
                shutil.copyfile(real, tmp)
                os.chmod(tmp, 0o755 if st.st_mode & 0o111 else 0o644)
                os.replace(tmp, dest)
                self.staged[real] = key
        return str(dest)


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS = 0x20000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME = 1 << 14, 1 << 18, 1 << 21
MNT_DETACH = 2


def _mount(source, target, fstype=None, flags=0, data=None):
    """mount(2); OSError naming @target when it fails."""
    enc = (lambda v: None if v is None else os.fsencode(str(v)))
    if _libc.mount(enc(source), enc(target), enc(fstype),
                   ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(target))


def _sweep(mounts, cgroot):
    """Remove what host sessions that ended without close() (killed) left:
    their namespaces, each holding its mounts for as long as the machine
    ran, and their cgroups with whatever still runs in them."""
    dead = (lambda pid: pid.isdigit() and not os.path.exists(f"/proc/{pid}"))
    for f in STATE.glob("mnt.[0-9]*"):
        if dead(f.name[len("mnt."):]):
            if (str(f), "nsfs") in mounts:
                subprocess.run(["umount", "--lazy", f], capture_output=True)
            with contextlib.suppress(OSError):
                f.unlink()
    for cg in cgroot.glob("rdma-grade.[0-9]*"):
        if dead(cg.name[len("rdma-grade."):]):
            procs.kill_cgroup(cg, timeout=1)


def _kept_flags(path):
    """The flags of @path's mount a read-only remount keeps (a bind remount
    sets them anew: nosuid, nodev, noexec and the atime ones)."""
    f = os.statvfs(path).f_flag
    out = f & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for st, ms in ((os.ST_NOATIME, MS_NOATIME),
                   (os.ST_NODIRATIME, MS_NODIRATIME),
                   (os.ST_RELATIME, MS_RELATIME)):
        if f & st:
            out |= ms
    return out


@contextlib.contextmanager
def _mount_lock():
    """The grader's mounts are looked for and made under this lock (a
    file of root's alone: a program could not hold it even for its
    session): sessions start side by side."""
    fd = os.open(STATE.parent / f"{STATE.name}.lock",
                 os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with open(fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _inside(path, top):
    """Is `path` `top` or below it (as strings, no file system)?"""
    path, top = os.path.normpath(path), os.path.normpath(top)
    return path == top or path.startswith(top.rstrip("/") + "/")


def _exec_ok(path):
    """Is `path` on a file system that allows exec (not mounted noexec)?"""
    try:
        return not os.statvfs(path).f_flag & os.ST_NOEXEC
    except OSError:
        return False


def _enterable(path):
    """May any user go through every directory from / down to `path`?"""
    p = Path(os.path.realpath(path))
    for d in [p, *p.parents]:
        try:
            if not os.stat(d).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def check(course, where):
    """make doctor's proof that grading can run a program here: a copy of
    /bin/sh in this checkout's build directory, run through the sandbox as
    a lesson's program is (contained: as the sandbox's user, the course
    tree hidden, unable to start /bin/true). Prints one PASS or FAIL line
    (with the fix); returns 0 when it ran as it must."""
    course = Path(course)
    probe = course / "build" / "doctor" / "probe-sh"
    probe.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(os.path.realpath("/bin/sh"), probe)
    os.chmod(probe, 0o755)
    try:
        sb = Sandbox(course)
    except RuntimeError as e:
        print(f"FAIL  sandbox ({where}): {e}\n      fix: report it with "
              f"this line (python3 -m grader sandbox-check shows it again)")
        return 1
    try:
        sb.begin_test("doctor")
        # Builtins only: contained, the shell can start no other program.
        argv, cwd, env = sb.wrap(
            [str(probe), "-c", 'while read -r k v _; do [ "$k" = Uid: ] && '
             'echo "$v"; done </proc/self/status; [ -e "$1/grader" ] && '
             'echo sees-course; (exec /bin/true) 2>/dev/null && '
             'echo runs-programs; exit 0', "probe", str(course)], None)
        res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True,
                             text=True, timeout=60)
    finally:
        sb.close()
    out = res.stdout.split()
    how = f"{where}, {'contained' if sb.contained else 'uncontained'}"
    want_uid = str(STUDENT_UID if sb.contained else os.geteuid())
    escaped = {"sees-course", "runs-programs"} & set(out)
    if res.returncode == 0 and out[:1] == [want_uid] and \
            (not sb.contained or not escaped):
        what = ("as the sandbox's user, with the course tree hidden, "
                "starting no other program"
                if sb.contained else f"as you ({sb.why_not})")
        print(f"PASS  sandbox ({how}): a program of {probe.parent} ran {what}")
        return 0
    why = (res.stderr.strip() or res.stdout.strip() or
           f"exit {res.returncode}").splitlines()[-1]
    if res.returncode == 0 and out[:1] == [want_uid] and "sees-course" in out:
        why = "it could see the course tree"
    elif res.returncode == 0 and out[:1] == [want_uid]:
        why = "it could start another program (/bin/true)"
    print(f"FAIL  sandbox ({how}): a program of {probe.parent} did not run "
          f"as graded programs must: {why}\n"
          f"      fix: report it with this line (python3 -m grader "
          f"sandbox-check shows it again)")
    return 1
