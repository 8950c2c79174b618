"""Fixtures for the grader's own tests."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.session.server import WARM_WAIT

HERE = Path(__file__).resolve().parent
COURSE = HERE.parent.parent


def unstretched(text):
    """`text` with each kill at a stretched wait (harness.Result.status:
    the pace the grader measured just then was slow) told at the seconds
    it asked for, for a test whose subject is not the pace. A stall of a
    busy host can make pace() read slow even there, where it is usually
    50 times faster than its base (fresh-clone run 151: 2.0 times)."""
    return re.sub(r"after \d+ s \(its (\d+) s, stretched to \d+ s: the "
                  r"machine ran [0-9.]+ times slower than usual\)",
                  r"after \1 s", text)


@pytest.fixture(scope="session", autouse=True)
def warm_grader(tmp_path_factory):
    """With a device, one warm grader (grader/session/server.py) for this
    session: the gradings the self-check starts (grade_tree) are sessions
    forked from it, spread over the VM's devices, and its zygote of
    reference peers serves every grading (the mutants' forks too): pytest,
    the grader and pyverbs are imported once, not once per grading."""
    if not os.environ.get("RDMA_DEVICE") or os.environ.get("RDMA_PEER_JOBS"):
        yield None
        return
    d = tmp_path_factory.mktemp("grader")
    d.chmod(0o700)
    sock, log = d / "sock", d / "log"
    with open(log, "w") as f:
        server = subprocess.Popen(
            [sys.executable, "-m", "grader.session.server", str(sock)],
            cwd=COURSE, stdout=f, stderr=subprocess.STDOUT,
            start_new_session=True)
    deadline = time.monotonic() + WARM_WAIT
    while "grader server ready" not in log.read_text():
        assert server.poll() is None and time.monotonic() < deadline, (
            "the warm grader did not start:\n" + log.read_text())
        time.sleep(0.1)
    saved = {k: os.environ.get(k) for k in ("GRADER_SERVER",
                                            "GRADER_PEER_ZYGOTE")}
    os.environ.update(GRADER_SERVER=str(sock),
                      GRADER_PEER_ZYGOTE=str(d / "peers"))
    yield sock
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    os.killpg(server.pid, 9)
    server.wait()


def pytest_collection_modifyitems(config, items):
    """A student repository (make student-repo) has no solutions/: the
    tests that need them (marked instructor) are not collected there."""
    if (COURSE / "solutions").is_dir():
        return
    gone = [i for i in items if i.get_closest_marker("instructor")]
    if gone:
        items[:] = [i for i in items if i not in gone]
        config.hook.pytest_deselected(items=gone)


@pytest.fixture(scope="session")
def badprogs(tmp_path_factory):
    """The programs in badprogs/, compiled; name -> path."""
    out = tmp_path_factory.mktemp("badprogs")
    progs = {}
    for src in sorted((HERE / "badprogs").glob("*.c")):
        exe = out / src.stem
        subprocess.run(["cc", "-O0", "-w", "-o", str(exe), str(src)],
                       check=True)
        progs[src.stem] = exe
    return progs


# ---- patched copies of the solutions (cheats/, mutants/) ---------------------

def patched_lesson(lesson, patches, dst, what):
    """dst/: solutions/@lesson's files, each FILE.c with @patches/FILE.patch
    applied when there is one (`patch`: text before the first `---` line is
    the patch's description). Files are only rewritten when they changed,
    so an earlier compile is reused; a patch that no longer applies fails,
    naming @what."""
    dst.mkdir(parents=True, exist_ok=True)
    for sol in (COURSE / "solutions" / lesson).iterdir():
        data = sol.read_bytes()
        patch = patches / (sol.stem + ".patch")
        if patch.exists():
            res = subprocess.run(
                ["patch", "-s", "-o", "-", str(sol), str(patch)],
                capture_output=True, timeout=60)
            assert res.returncode == 0, (
                f"{what}/{patch.name} no longer applies to "
                f"solutions/{lesson}/{sol.name}:\n"
                + res.stdout.decode() + res.stderr.decode())
            data = res.stdout
        if not (dst / sol.name).exists() or (dst / sol.name).read_bytes() != data:
            (dst / sol.name).write_bytes(data)


# ---- grading whole trees inside the VM (the device half of make test) --------

def grade_tree(tree, lessons=None, label=None, extra=()):
    """Grade `tree` (relative to the course) with the plugin, as make grade
    does inside the VM; (per-lesson {name: (got, total)}, stdout, results
    path). make test compiled the tree on the host first."""
    # In the course's build/ (the host sees it after the VM is gone): the
    # transcripts of a grading that lost points are what explains it.
    # One directory per tree and lesson set: make test LESSON=NN runs side
    # by side (one per engineer) and removed each other's results here.
    out = COURSE / "build" / "selftest-grades" / (
        str(tree).replace("/", "_")
        + (f"-{label}" if label else
           f"-{'-'.join(lessons)}" if lessons else ""))
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # Through the warm grader when the session has one (warm_grader): a
    # grading as make grade's, forked, its lessons side by side.
    from grader.core.build import grader_program
    from grader.session.forked import PYTEST_ENV, PYTEST_FLAGS
    res = subprocess.run(
        ["env", *(f"{k}={v}" for k, v in PYTEST_ENV.items()),
         grader_program(COURSE, "session/client.c"), sys.executable, "--",
         "-c", "grader/pytest.ini", "--rootdir", ".", *PYTEST_FLAGS,
         # every lesson in full: the self-check reads any lesson's lines
         "--verbose-failures",
         "grader/lessons", f"--src={tree}", f"--results={out}/results.json",
         f"--transcripts={out}/transcripts",
         *([f"--lesson={','.join(lessons)}"] if lessons else []), *extra],
        # A backstop for a hang (each program has its own limits): the
        # solutions' device lessons took 790-1030 s in fresh-clone make
        # tests on a slow host (runs 40, 41), against 1200 s then.
        cwd=COURSE, capture_output=True, text=True, timeout=2400)
    path = out / "results.json"
    assert path.exists(), f"grading {tree} wrote no results:\n{res.stdout}\n{res.stderr}"
    data = json.loads(path.read_text())
    per = {}
    for t in data["tests"]:
        lesson = t["name"].split(":")[0]
        got, total = per.get(lesson, (0, 0))
        per[lesson] = (got + t["score"], total + t["max_score"])
    return per, res.stdout, path


def need_device():
    if not os.environ.get("RDMA_DEVICE"):
        pytest.fail("no RDMA device: run the self-check through vm-setup/with-rxe (make test does)")


def only_lessons():
    """make test LESSON=NN (lesson-check.sh): GRADER_SELFTEST_LESSONS=NN,..
    grades those lessons of each whole tree only; None: every lesson."""
    only = os.environ.get("GRADER_SELFTEST_LESSONS", "")
    return [n.strip() for n in only.split(",") if n.strip()] or None


def lessons_graded(device):
    """The lesson numbers a whole-tree grading covers here: those that need
    a device (graded in the VM, the device half of make test) or those
    that do not (lesson.toml: device = false; graded on the host, as make
    grade LESSON=NN does: under the VM's emulation lesson 16's tshark runs
    took 140 s of the solutions' 626), of make test LESSON=NN's only."""
    from grader.core.course import needs_device
    only = only_lessons()
    return [p.name[:2] for p in sorted((COURSE / "lessons").glob("[0-9][0-9]-*"))
            if p.is_dir() and needs_device(p.name) == device
            and (only is None or p.name[:2] in only)]


def _tree_grade(tree, device):
    if device:
        need_device()
    lessons = lessons_graded(device)
    if not lessons:
        return {}, ""
    label = ("-".join(lessons) if only_lessons() else
             "device" if device else "host")
    # A skeleton need only fall short of full marks: each lesson's grading
    # ends at its first lost point (the rest earns nothing). Graded in full
    # it took 525 s of tests, lesson 15's alone 83 s (fresh clone, load
    # 5-13). test_hostile grades its lessons' skeletons in full itself.
    extra = ["--first-loss"] if tree == "skeletons" else []
    return grade_tree(tree, lessons, label, extra)[:2]


@pytest.fixture(scope="session")
def solutions_grade():
    return _tree_grade("solutions", True)


@pytest.fixture(scope="session")
def skeletons_grade():
    return _tree_grade("skeletons", True)


@pytest.fixture(scope="session")
def solutions_host_grade():
    return _tree_grade("solutions", False)


@pytest.fixture(scope="session")
def skeletons_host_grade():
    return _tree_grade("skeletons", False)
