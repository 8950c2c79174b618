"""Grading sessions forked from a warm process: pytest, the grader and the
lessons' tests are imported once (seconds under the micro-VM's emulation),
then each grading is a fork that runs pytest.main() and exits.

Used by the warm grader (server.py), make grade-class's batches
(grader/classroom/classrun.py: class-run) and the mutants' self-check.
Whatever a session leaves behind goes with it (end_session): its process
tree, its cgroup, its sandbox's cgroup, mount namespace and scratch.
"""

import builtins
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
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
    # (pdb: pytest's debugging plugin imports it in every session's
    # configuration, with cmd, code and codeop.)
    for name in ("pytest_timeout", "grader.session.plugin",
                 "grader.session.pairs", "grader.evidence.trusted.run",
                 "grader.evidence.interpose", "pdb"):
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
    prepare_config()


# pytest's configuration as far as no session's arguments change it, made
# once in the warm process (prepare_config) and used by the sessions forked
# from it: each starts from its own copy (the fork's), the warm process's
# is never used. pytest builds it in every session otherwise: the built-in
# plugins registered (each parsed for its hooks), every option added, and
# argparse's parser built from all of them (some 470 options) six times
# per session. That was 40 % of a one-test session's configuration and
# collection on the host (0.13 s for 0.21 s, 7 runs each), which the
# micro-VM's emulation makes some ten times longer.
_config = None


def prepare_config():
    """Make the configuration every session shares (_config) and have
    pytest.main() in a session forked later start from it. Where this
    pytest lacks what it uses, sessions configure themselves as before."""
    global _config
    if _config is not None:
        return
    try:
        from _pytest import config as pytest_config
        config = pytest_config.get_config(list(PYTEST_FLAGS))
        for name in PYTEST_ENV["PYTEST_PLUGINS"].split(","):
            config.pluginmanager.import_plugin(name)
        parser = config._parser
        build, built = parser._getparser, {}

        def getparser():
            # Options are only ever added: their count names the parser.
            key = (parser.prog, len(parser._groups), len(parser._anonymous.options),
                   sum(len(g.options) for g in parser._groups))
            if key not in built:
                built.clear()
                built[key] = build()
            # (Its error messages show what pytest found since: the ini
            # file, the rootdir.)
            built[key].extra_info = parser.extra_info
            return built[key]
        parser._getparser = getparser
        getparser()
        # (What a session calls: a pytest whose signature differs fails here.)
        pytest_config.Config.InvocationParams(args=(), plugins=None,
                                              dir=Path.cwd())
    except (ImportError, AttributeError, TypeError):
        return
    _config = config
    _scan_fixtures_once(config)


# Each session's fixture manager looks for fixtures in every plugin and
# test module it meets: every attribute of each fetched and asked for a
# fixture mark (parsefactories), some 3800 attributes for one lesson, 0.4 s
# of a one-test session's start under the micro-VM's emulation (cProfile,
# 35 modules and plugins). The modules and plugins of the warm process are
# the sessions' own: they are looked through here once, and a session's
# parsefactories goes through only the names that held a fixture. A
# holder whose names differ from what was looked through (anything a
# session made or changed) is looked through in full, as pytest would.
_scanned = {}       # id(holder) -> (holder, its names, those of fixtures)


def _fixture_names(*obj):
    """parsefactories' `dir(holderobj)` (the module's global `dir`,
    before the builtin): the names it looks through."""
    if len(obj) == 1:
        h, names, found = _scanned.get(id(obj[0]), (None, None, None))
        if h is obj[0]:
            now = builtins.dir(h)
            return list(found) if now == names else now
    return builtins.dir(*obj)


def scan_fixtures(holders):
    """Look through `holders` (modules, plugin objects) for fixtures once,
    for every session forked after."""
    try:
        from _pytest import fixtures
        from _pytest.compat import safe_getattr
        marker, kind = fixtures.getfixturemarker, fixtures.FixtureFunctionMarker
    except (ImportError, AttributeError):
        return
    fixtures.dir = _fixture_names   # (set first: one of that module's names)
    for h in holders:
        names = builtins.dir(h)
        _scanned[id(h)] = (h, names, [
            n for n in names
            if isinstance(marker(safe_getattr(h, n, None)), kind)])


def _scan_fixtures_once(config):
    scan_fixtures([*config.pluginmanager.get_plugins(),
                   *(m for n, m in list(sys.modules.items())
                     if n.startswith(("_pytest.", "grader.", "test_"))
                     and getattr(m, "__file__", None))])


def _start_from_prepared():
    """In a forked session: pytest.main()'s get_config() returns the
    prepared configuration, once (a session forked from this one, a shard,
    gets its own copy: this process's is not used until pytest.main())."""
    if _config is None:
        return
    from _pytest import config as pytest_config
    if getattr(pytest_config.get_config, "prepared", False):
        return
    original = pytest_config.get_config

    def get_config(args=None, plugins=None):
        global _config
        pytest_config.get_config = original
        config, _config = _config, None
        config.invocation_params = pytest_config.Config.InvocationParams(
            args=args or (), plugins=plugins, dir=Path.cwd())
        if args is not None:        # -p no:NAME, as pytest's own does
            config.pluginmanager.consider_preparse(args, exclude_only=True)
        return config
    get_config.prepared = True
    pytest_config.get_config = get_config


GO = b"g"
_gate = None        # fork_session(gate=): read before the session's first test
_stand_ins = None   # fork_session(ahead=True): its stdio's (st_dev, st_ino)


def pass_gate():
    """In a session forked with a gate: wait until the process that forked
    it lets it run its tests (the warm grader, once it has found no grader
    file changed since it imported them); end at once if it never will.

    A session made ready ahead (fork_session(ahead=True)) was forked before
    anyone asked for it: its gate is a socket, and the word that lets it
    run brings the request's stdin, stdout and stderr (they replace its
    stand-ins everywhere, pytest's saved copies of them included) and a
    JSON object of what the request changes (server.py: {"results": PATH});
    that object is returned. Otherwise None."""
    global _gate
    if _gate is None:
        return None
    fd, _gate = _gate, None
    if _stand_ins is None:
        go = os.read(fd, 1) == GO
        os.close(fd)
        if not go:
            os._exit(75)
        return None
    sock = socket.socket(fileno=fd)
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
    except OSError:
        msg, fds = b"", []
    sock.close()
    if not msg or len(fds) != 3:
        os._exit(75)
    take_stdio(fds)
    return json.loads(msg)


def take_stdio(fds):
    """Put the descriptors `fds` (stdin, stdout, stderr) in place of this
    session's stand-ins (_stand_ins): at 0, 1 and 2, and wherever a copy of
    a stand-in is open (pytest's capture keeps one of each to restore after
    every test, its faulthandler one of stderr)."""
    global _stand_ins
    sys.stdout.flush()
    sys.stderr.flush()
    which = {ident: new for ident, new in zip(_stand_ins, fds)}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in fds:
            continue
        try:
            st = os.fstat(fd)
        except OSError:             # (listdir's own descriptor)
            continue
        new = which.get((st.st_dev, st.st_ino))
        if new is not None:
            os.dup2(new, fd, inheritable=fd <= 2)
    for fd in fds:
        os.close(fd)
    _stand_ins = None


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
                 log=None, closing=(), setsid=True, entry=None, gate=None,
                 ahead=False):
    """Fork a pytest session running pytest.main(args) (or entry(args));
    its pid. `stdio`: descriptors for its stdin, stdout and stderr; `log`:
    a file for its stdout and stderr instead. It leads a session of its
    own (unless not `setsid`), in `cgroup` when given; `env` replaces the
    environment, `cwd` the directory; `closing`: the forking process's
    descriptors (or sockets) it closes; `gate`: a pipe's reading end from
    which it reads GO before its first test (pass_gate). `ahead`: a
    session made ready before it is asked for; `gate` is a socket, and
    `stdio` stand-ins (three distinct pipes) that the descriptors its GO
    brings replace."""
    import pytest
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 70
    global _gate, _stand_ins
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
        if ahead:
            _stand_ins = [(st.st_dev, st.st_ino) for st in
                          (os.fstat(fd) for fd in (0, 1, 2))]
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        # The plugins are make grade's and no others (PYTEST_ENV).
        os.environ.update(PYTEST_ENV)
        _start_from_prepared()
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
    stop_session(pid, cgroup)
    clear_session(pid, cgroup)


def wait_session(pid, timeout, cgroup=None):
    """Reap the session `pid`; one still running after `timeout` s is ended
    (end_session) first. (Its exit status, whether it was ended.)"""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            end_session(pid, cgroup)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), True
        time.sleep(0.1)


def _cgroups(pid, cgroup):
    """The session's cgroup (when it has one) and its sandbox's."""
    root = procs.cgroup2_root()
    return [cg for cg in (cgroup, root / f"rdma-grade.{pid}" if root else None)
            if cg is not None]


def stop_session(pid, cgroup=None):
    """The first half of end_session(): a SIGKILL to every process of the
    session `pid` (its process tree, its cgroup, its sandbox's cgroup)."""
    procs.kill_tree(pid)
    for cg in _cgroups(pid, cgroup):
        procs.signal_cgroup(cg)


def clear_session(pid, cgroup=None):
    """The rest of end_session(): its cgroups removed once their processes
    are gone, its sandbox's mount namespace and scratch."""
    for cg in _cgroups(pid, cgroup):
        procs.kill_cgroup(cg)
    ns = STATE / f"mnt.{pid}"
    if ns.exists():
        subprocess.run(["umount", str(ns)], capture_output=True)
        ns.unlink(missing_ok=True)
    shutil.rmtree(Path(os.environ.get("TMPDIR", "/tmp"))
                  / f"rdma-grade-scratch.{pid}", ignore_errors=True)


def main(argv):
    """python3 -m grader.session.forked ARGS [--- ARGS ...]: pytest.main(ARGS)
    for each ARGS, one session after another, each forked from this one
    process, which imports pytest and the lessons' tests once (the wire
    self-check's three gradings on a linked pair's host A). Exit status:
    the first session's that failed, else 0."""
    runs = [[]]
    for a in argv:
        if a == "---":
            runs.append([])
        else:
            runs[-1].append(a)
    warm_imports()
    worst = 0
    for args in runs:
        pid = fork_session([*PYTEST_FLAGS, *args], setsid=False)
        _, status = os.waitpid(pid, 0)
        worst = worst or os.waitstatus_to_exitcode(status)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
