"""Planted mistakes prove the lessons' symptoms (lesson.toml [[symptom]]).

grader/selftest/mutants/NN/NAME/FILE.patch is one realistic mistake: a patch
of solutions/NN-topic/FILE.c whose first lines say what it plants and what
it must prove:

    mutant: IBV_QP_MAX_DEST_RD_ATOMIC in the RTS mask
    symptom: rts-mask
    tests: test_state_sequence test_send

Graded with those tests only (`--lesson NN`, the test ids), a mutant must
(a) lose points and (b) have the cause of symptom `rts-mask` shown first in
its first failing test's output (`likely cause: ...`), which also names the
command that reproduces it. Every symptom of every lesson must be named by a
mutant: a symptom no mutant proves is a row of the README nobody checked.

The trees (build/selftest-mutants/NN-NAME/NN-topic/) are made and compiled
on the host (the non-device tests below); the device test grades them
inside the VM beside the cheats (run-all.sh part 4b): pytest.main() per
mutant in a fork of this process (`import pytest` under emulation costs
seconds), several at a time (MUTANTS_PARALLEL, default 6). MUTANTS=05,08/x
grades only those.
Lessons graded without a device (lesson.toml: device = false) are graded
right here on the host.
"""

import json
import os
import re
import time
import tomllib

import pytest

from conftest import COURSE, patched_lesson
from grader.session import forked

MUTANTS = COURSE / "grader" / "selftest" / "mutants"
TREE = COURSE / "build" / "selftest-mutants"
LESSONS = {p.name[:2]: p for p in (COURSE / "lessons").glob("[0-9][0-9]-*")
           if p.is_dir()}


def _meta(lesson_dir):
    path = lesson_dir / "lesson.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


class Mutant:
    def __init__(self, path):
        self.path = path
        self.num = path.parent.name
        self.name = path.name
        self.id = f"{self.num}/{self.name}"
        assert self.num in LESSONS, f"mutants/{self.id}: no lesson {self.num}"
        self.lesson = LESSONS[self.num].name
        head = {}
        patches = sorted(path.glob("*.patch"))
        assert patches, f"mutants/{self.id}: no FILE.patch"
        for p in patches:
            for line in p.read_text().split("\n---", 1)[0].splitlines():
                key, sep, value = line.partition(": ")
                if sep and key in ("mutant", "symptom", "tests"):
                    assert key not in head, f"mutants/{self.id}: two '{key}:'"
                    head[key] = value.strip()
        for key in ("mutant", "symptom", "tests"):
            assert head.get(key), f"mutants/{self.id}: no '{key}:' line"
        self.what, self.symptom = head["mutant"], head["symptom"]
        self.tests = head["tests"].split()
        self.tree = TREE / f"{self.num}-{self.name}"
        self.device = _meta(LESSONS[self.num]).get("device", True)

    def make_tree(self):
        patched_lesson(self.lesson, self.path, self.tree / self.lesson,
                       f"mutants/{self.id}")

    def nodes(self):
        """The test node ids of self.tests (each in one of the lesson's
        test files)."""
        files = sorted((COURSE / "grader" / "lessons").glob(
            f"test_{self.num}_*.py"))
        out = []
        for test in self.tests:
            where = [f for f in files if re.search(
                rf"^def {test}\(", f.read_text(), re.M)]
            assert len(where) == 1, (f"mutants/{self.id}: test {test} is in "
                                     f"{len(where)} files of lesson {self.num}")
            out.append(f"{where[0].relative_to(COURSE)}::{test}")
        return out


def all_mutants():
    return [Mutant(p) for p in sorted(MUTANTS.glob("[0-9][0-9]/*"))
            if p.is_dir()]


def _symptoms(num):
    from grader.session import symptoms
    return {s.id: s for s in symptoms.load(_meta(LESSONS[num]))}


def test_every_symptom_is_proven_by_a_mutant():
    named = {}
    for m in all_mutants():
        syms = _symptoms(m.num)
        assert m.symptom in syms, (f"mutants/{m.id} names symptom "
                                   f"'{m.symptom}', which lessons/{m.lesson}/"
                                   f"lesson.toml does not have")
        named.setdefault(m.num, set()).add(m.symptom)
    unproven = [f"{LESSONS[n].name}: {s}" for n in sorted(LESSONS)
                for s in _symptoms(n) if s not in named.get(n, set())]
    assert not unproven, ("symptoms no mutant proves (add one under "
                          "grader/selftest/mutants/NN/):\n  "
                          + "\n  ".join(unproven))


def test_mutants_compile():
    """Make and compile every mutant's tree here (on the host, two at a
    time; a tree whose inputs did not change is not compiled again); the
    device test reuses the builds."""
    from concurrent.futures import ThreadPoolExecutor
    from grader.core.build import compile_lesson
    mutants = all_mutants()
    for m in mutants:
        m.make_tree()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(
            lambda m: compile_lesson(COURSE, m.tree, m.lesson), mutants))
    for m, res in zip(mutants, results):
        assert not res["missing"] and res["rc"] == 0, (
            f"mutants/{m.id}:\n{res['command']}\n{res['stdout']}"
            f"{res['stderr']}")


def _pytest_args(m, out):
    return ["-c", str(COURSE / "grader/pytest.ini"), "--rootdir", str(COURSE),
            *forked.PYTEST_FLAGS, *m.nodes(), f"--src={m.tree}",
            *(["--prebuilt"] if m.device else []), f"--lesson={m.num}",
            f"--results={out}/results.json",
            f"--transcripts={out}/transcripts"]


def check_mutant(m, out):
    """Mutant @m's problems (lines; none when it proves its symptom), from
    the results its grading wrote into @out."""
    results = out / "results.json"
    if not results.exists():
        log = out / "log"
        return [f"mutants/{m.id}: grading wrote no results\n"
                + (log.read_text()[-3000:] if log.exists() else "")]
    data = json.loads(results.read_text())
    problems = []
    if data["score"] >= data["max_score"]:
        problems.append(f"mutants/{m.id} ({m.what}) lost no points in "
                        f"{', '.join(m.tests)}")
    failing = [t for t in data["tests"] if t["status"] != "passed"]
    if failing:
        sym = _symptoms(m.num).get(m.symptom)
        want = sym.cause if sym else f"(no symptom '{m.symptom}')"
        output = failing[0]["output"]
        first = next((line[len("likely cause: "):] for line in
                      output.splitlines()
                      if line.startswith("likely cause: ")), None)
        if not re.search(r"^\s*(command|reproduce):", output, re.M):
            problems.append(f"mutants/{m.id}: the failure block of "
                            f"'{failing[0]['name']}' has no command to "
                            f"reproduce it:\n{output}")
        if first != want:
            problems.append(
                f"mutants/{m.id} ({m.what}): the first cause shown in "
                f"'{failing[0]['name']}' is not symptom '{m.symptom}'\n"
                f"  expected: {want}\n  shown:    {first}\n  output:\n"
                + "\n".join("    | " + x for x in output.splitlines()))
    return problems


def _fork_grade(m, out):
    """Grade @m in a session forked from this process (pytest and the
    lessons' tests are imported already: under the VM's emulation that
    saves seconds per mutant); its pid."""
    out.mkdir(parents=True, exist_ok=True)
    return forked.fork_session(_pytest_args(m, out), log=out / "log")


# Mutants graded at once. Most of a mutant's time is a program waiting for
# its --timeout (10 s in lessons 05-08), which overlaps well; each has its
# own sandbox (per pid) and ports (-p 0). No symptom of lessons 01-08 reads
# the device-wide counters, which other mutants' runs would move.
PARALLEL = int(os.environ.get("MUTANTS_PARALLEL", "6"))


# At most this many mutants of one lesson are graded at once while other
# lessons' mutants wait to start: one lesson's programs start, connect and
# wait alike, and six of them at once (lesson 08's, fresh-clone run 62)
# met the same window of load together instead of spreading it.
PER_LESSON = 2


def _next(todo, running):
    """The index in @todo (slowest first) of the next mutant to start: the
    first whose lesson has fewer than PER_LESSON of @running's (mutant,
    start) pairs, else the first."""
    busy = [m.num for m, _ in running]
    return next((i for i, m in enumerate(todo)
                 if busy.count(m.num) < PER_LESSON), 0)


def _grade_all(mutants, tmp_path, parallel):
    """Grade @mutants, @parallel at a time, the slowest (last run's times)
    first; (problems, a report of the seconds each took)."""
    times_file = TREE / f"times-{'device' if mutants[0].device else 'host'}.txt"
    last = {}
    if times_file.exists():
        for line in times_file.read_text().splitlines():
            f = line.split()
            if len(f) == 3 and f[1] == "s":
                last[f[2]] = float(f[0])
    todo = sorted(mutants, key=lambda m: -last.get(m.id, 0))
    forked.warm_imports({m.num for m in mutants})
    t0 = time.monotonic()
    running, took, problems = {}, {}, []
    while todo or running:
        while todo and len(running) < parallel:
            m = todo.pop(_next(todo, running.values()))
            running[_fork_grade(m, tmp_path / f"{m.num}-{m.name}")] = (
                m, time.monotonic())
        pid, _ = os.wait()
        if pid not in running:
            continue
        m, start = running.pop(pid)
        took[m.id] = time.monotonic() - start
        problems += check_mutant(m, tmp_path / f"{m.num}-{m.name}")
    report = "".join(f"{took[m.id]:6.1f} s {m.id}\n" for m in mutants)
    report += (f"{time.monotonic() - t0:6.1f} s wall for {len(mutants)} "
               f"mutants, {parallel} at a time\n")
    last.update(took)
    times_file.parent.mkdir(parents=True, exist_ok=True)
    times_file.write_text("".join(f"{t:6.1f} s {i}\n" for i, t in
                                  sorted(last.items())) + report.splitlines()[-1] + "\n")
    return problems, report


def test_the_next_mutant_is_of_a_lesson_not_already_graded_twice():
    class M:
        def __init__(self, num):
            self.num = num
    todo = [M("08"), M("08"), M("05"), M("08")]
    assert _next(todo, []) == 0
    assert _next(todo, [(M("08"), 0)]) == 0
    assert _next(todo, [(M("08"), 0), (M("08"), 0)]) == 2
    # every lesson left is busy: the slowest, rather than a core idle
    assert _next(todo[:2], [(M("08"), 0), (M("08"), 0)]) == 0


def test_host_mutants_prove_their_symptoms(tmp_path):
    """The mutants of lessons graded without a device, graded here."""
    mutants = [m for m in all_mutants() if not m.device]
    if not mutants:
        return
    for m in mutants:
        m.make_tree()
    # One at a time: fast (no waits), and nothing shares the host's sandbox
    # set-up with another grading.
    problems, report = _grade_all(mutants, tmp_path, 1)
    assert not problems, "\n".join(problems) + "\n" + report


@pytest.mark.device
# A backstop for a hang, not a speed: each mutant's grading has its own
# waits. The whole set took 540-718 s in fresh-clone make tests; 1200 s
# left less than 2x for a slower machine.
@pytest.mark.timeout(2700)
def test_device_mutants_prove_their_symptoms(tmp_path):
    if not os.environ.get("RDMA_DEVICE"):
        pytest.fail("no RDMA device: run through vm-setup/with-rxe "
                    "(make test does)")
    only = os.environ.get("MUTANTS", "")     # e.g. MUTANTS=05,08/never-acked
    mutants = [m for m in all_mutants() if m.device and (
        not only or any(m.id.startswith(o) for o in only.split(",")))]
    if not mutants:
        return      # (MUTANTS=16: a lesson graded on the host has none)
    problems, report = _grade_all(mutants, tmp_path, PARALLEL)
    print(report)
    assert not problems, "\n".join(problems) + "\n" + report
