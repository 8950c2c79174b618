"""Grading sessions forked from a warm process: pytest, the grader and the
lessons' tests are imported once (seconds under the micro-VM's emulation),
then each grading is a fork that runs pytest.main() and exits.

Used by the warm grader (server.py), make grade-class's batches
(grader/classroom/classrun.py: class-run) and the mutants' self-check.
Whatever a session leaves behind goes with it (end_session): its process
tree, its cgroup, its sandbox's cgroup, mount namespace and scratch.
"""

import importlib
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

from grader.core import procs
from grader.core.course import COURSE
from grader.evidence.sandbox import STATE

LESSON_TESTS = COURSE / "grader" / "lessons"
# A grading session (make grade's, the warm grader's, a shard's, a
# class-run's, the self-check's) loads the grader's plugin, pytest-timeout
# and the built-in plugins the grader's tests use: not the built-in ones
# they do not (each costs a session's start about 10 ms under the
# micro-VM's emulation), and not whatever else is installed (a grade must
# not depend on what else a machine has). Both plugins are named in
# PYTEST_PLUGINS, not by -p: pytest looks a -p name up among every
# installed package's entry points (0.1 s per name in the VM), an
# environment one it imports. Assertions are not rewritten: the grader's
# checks raise GradeFailure.
UNUSED_PLUGINS = ["doctest", "legacypath", "monkeypatch", "nose", "pastebin",
                  "python_path", "recwarn", "setuponly", "setupplan",
                  "stepwise", "tmpdir", "unittest"]
AUTOLOAD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
PYTEST_ENV = {AUTOLOAD: "1",
              "PYTEST_PLUGINS": "grader.session.plugin,pytest_timeout"}
PYTEST_FLAGS = [*(a for p in UNUSED_PLUGINS for a in ("-p", f"no:{p}")),
                "--assert=plain", "-qq", "--tb=no", "-rN", "--color=no",
                "-o", "console_output_style=classic"]
# pytest warns that it cannot rewrite the asserts of modules imported
# before it ran; the grader's checks are explicit, it needs no rewriting.
QUIET = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]


def warm_imports(lessons=None):
    """Import what every grading session imports: pytest and its plugins,
    the grader, and the test modules of `lessons` (numbers like "05"; None:
    every lesson), as pytest would (rootdir-relative, `prepend`)."""
    import pytest
    from _pytest.config import default_plugins
    for name in default_plugins:
        try:
            importlib.import_module("_pytest." + name)
        except ImportError:
            pass
    for name in ("pytest_timeout", "grader.session.plugin",
                 "grader.session.pairs", "grader.evidence.trusted.run",
                 "grader.evidence.interpose"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if str(LESSON_TESTS) not in sys.path:
        sys.path.insert(0, str(LESSON_TESTS))
    with warnings.catch_warnings():     # @points: a mark of the plugin's
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        for f in sorted(LESSON_TESTS.glob("test_[0-9][0-9]_*.py")):
            if lessons is None or f.name[5:7] in lessons:
                importlib.import_module(f.stem)


GO = b"g"
_gate = None        # fork_session(gate=): read before the session's first test


def pass_gate():
    """In a session forked with a gate: wait until the process that forked
    it lets it run its tests (the warm grader, once it has found no grader
    file changed since it imported them); end at once if it never will."""
    global _gate
    if _gate is None:
        return
    fd, _gate = _gate, None
    go = os.read(fd, 1) == GO
    os.close(fd)
    if not go:
        os._exit(75)


def session_cgroup(group, name):
    """A cgroup for one session, `group`/`name` under cgroup v2's root
    (root only), or None."""
    if os.geteuid() != 0:
        return None
    root = procs.cgroup2_root()
    if root is None:
        return None
    cg = root / group / name
    try:
        cg.mkdir(parents=True, exist_ok=True)
        return cg
    except OSError:
        return None


def fork_session(args, stdio=None, cwd=None, env=None, cgroup=None,
                 log=None, closing=(), setsid=True, entry=None, gate=None):
    """Fork a pytest session running pytest.main(args) (or entry(args));
    its pid. `stdio`: descriptors for its stdin, stdout and stderr; `log`:
    a file for its stdout and stderr instead. It leads a session of its
    own (unless not `setsid`), in `cgroup` when given; `env` replaces the
    environment, `cwd` the directory; `closing`: the forking process's
    descriptors (or sockets) it closes; `gate`: a pipe's reading end from
    which it reads GO before its first test (pass_gate)."""
    import pytest
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 70
    global _gate
    if gate is not None:        # (a shard forked by shards.run keeps its
        _gate = gate            # session's gate: each reads its own GO)
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for c in closing:
            try:
                c.close() if hasattr(c, "close") else os.close(c)
            except OSError:
                pass
        if setsid:
            os.setsid()
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))
        if log is not None:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            stdio = [os.open(os.devnull, os.O_RDONLY), fd, fd]
        if stdio is not None:
            for target, fd in enumerate(stdio):
                if fd != target:
                    os.dup2(fd, target)
            for fd in set(stdio):
                if fd > 2:
                    os.close(fd)
            # A session forked from inside pytest: its capture holds
            # sys.stdout; this session writes to its own descriptors.
            sys.stdin = open(0, "r", closefd=False)
            sys.stdout = open(1, "w", buffering=1, closefd=False)
            sys.stderr = open(2, "w", buffering=1, closefd=False)
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        # The plugins are make grade's and no others (PYTEST_ENV).
        os.environ.update(PYTEST_ENV)
        code = int((entry or pytest.main)([*args, *QUIET]))
    except BaseException as e:          # noqa: BLE001 - the child's last word
        print(f"grader: the grading session failed: {e!r}", file=sys.stderr)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def end_session(pid, cgroup=None):
    """Kill everything of the session `pid`: its processes (its cgroup, or
    its process tree), its sandbox's cgroup, mount namespace and scratch."""
    procs.kill_tree(pid)
    if cgroup is not None:
        procs.kill_cgroup(cgroup)
    root = procs.cgroup2_root()
    if root is not None:
        procs.kill_cgroup(root / f"rdma-grade.{pid}")
    ns = STATE / f"mnt.{pid}"
    if ns.exists():
        subprocess.run(["umount", str(ns)], capture_output=True)
        ns.unlink(missing_ok=True)
    shutil.rmtree(Path(os.environ.get("TMPDIR", "/tmp"))
                  / f"rdma-grade-scratch.{pid}", ignore_errors=True)
