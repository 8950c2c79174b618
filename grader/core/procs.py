"""Processes and cgroups as the kernel lists them: who is whose child,
where cgroup v2 is mounted, killing a cgroup whole. Shared by the sandbox
(a test's leftovers) and the forked grading sessions (a session's)."""

import os
import signal
import time
from pathlib import Path


def mounts():
    """(mount point, fs type) of this process's mount namespace."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        f = line.split()
        out.append((f[1].replace("\\040", " "), f[2]))
    return out


def cgroup2_root():
    """Where cgroup v2 is mounted, or None."""
    for point, fstype in mounts():
        if fstype == "cgroup2":
            return Path(point)
    return None


def parents():
    """{pid: parent pid} of every process there is."""
    parent = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return parent


def descendants(pid, parent=None):
    """Every process below `pid`."""
    parent = parents() if parent is None else parent
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        todo += kids
    return found


def kill_tree(pid):
    """SIGKILL `pid` and everything below it."""
    for p in [pid, *descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def signal_cgroup(cg):
    """SIGKILL everything in the cgroup `cg` (a directory) and below it,
    without waiting; False when it cannot."""
    try:
        (Path(cg) / "cgroup.kill").write_text("1")
        return True
    except OSError:
        return False


def kill_cgroup(cg, timeout=10):
    """Kill everything in the cgroup `cg` (a directory) and remove it with
    its children; False when it would not go within `timeout` s."""
    cg = Path(cg)
    if not cg.is_dir():
        return True
    if not signal_cgroup(cg):
        return False
    deadline = time.monotonic() + timeout
    for sub in sorted((p for p in cg.rglob("*") if p.is_dir()),
                      key=lambda p: -len(p.parts)):
        try:
            sub.rmdir()
        except OSError:
            pass
    while time.monotonic() < deadline:
        try:
            cg.rmdir()
            return True
        except OSError:
            time.sleep(0.02)
    return False
