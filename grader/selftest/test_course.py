"""The course checks itself (rustlings-style): every lesson is complete, every
skeleton has TODOs, builds warning-free and does not reach full marks, every
solution reaches full marks, and a skeleton differs from its solution only
inside TODO regions. Grading needs a device: run through vm-setup/with-rxe
(make test does)."""

import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

from conftest import COURSE

LESSONS = sorted(p for p in (COURSE / "lessons").glob("[0-9][0-9]-*") if p.is_dir())
TODO = re.compile(r"\bTODO (\d+):")
END_TODO = re.compile(r"\bEND TODO (\d+)\b")


def meta(lesson):
    path = lesson / "lesson.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


def is_exercise(lesson):
    return meta(lesson).get("exercise", True)


EXERCISES = [p for p in LESSONS if is_exercise(p)]
ids = [p.name for p in LESSONS]
ex_ids = [p.name for p in EXERCISES]


def sources(tree, lesson):
    return sorted(p.name for p in (COURSE / tree / lesson.name).glob("*.c"))


def regions(path):
    """Split a file into (outside lines, [(n, todo line)]), checking markers."""
    outside, todos, inside = [], [], None
    for no, line in enumerate(path.read_text().splitlines(), 1):
        m, e = TODO.search(line), END_TODO.search(line)
        if inside is None:
            if e:
                pytest.fail(f"{path}:{no}: END TODO {e.group(1)} without TODO")
            if m:
                inside = int(m.group(1))
                todos.append((inside, line.strip()))
                outside.append(line)
                continue
            outside.append(line)
        elif e:
            if int(e.group(1)) != inside:
                pytest.fail(f"{path}:{no}: END TODO {e.group(1)} closes TODO {inside}")
            outside.append(line)
            inside = None
        elif m:
            pytest.fail(f"{path}:{no}: TODO {m.group(1)} inside TODO {inside}")
    if inside is not None:
        pytest.fail(f"{path}: TODO {inside} has no END TODO {inside}")
    return outside, todos


def test_there_are_lessons():
    assert len(LESSONS) >= 2


@pytest.mark.parametrize("lesson", LESSONS, ids=ids)
def test_lesson_is_complete(lesson):
    readme = lesson / "README.md"
    assert readme.is_file() and len(readme.read_text()) > 500, f"{readme} missing or empty"
    assert meta(lesson).get("title"), f"{lesson}/lesson.toml has no title"
    tests = list((COURSE / "grader/lessons").glob(f"test_{lesson.name[:2]}_*.py"))
    assert tests, f"expected grader/lessons/test_{lesson.name[:2]}_*.py"
    if is_exercise(lesson):
        assert sources("skeletons", lesson), f"skeletons/{lesson.name}/ has no .c files"
        assert sources("skeletons", lesson) == sources("solutions", lesson), \
            "skeleton and solution must have the same files"


@pytest.mark.parametrize("lesson", EXERCISES, ids=ex_ids)
def test_skeleton_differs_from_solution_only_inside_todos(lesson):
    numbers = []
    for name in sources("skeletons", lesson):
        skel, stodo = regions(COURSE / "skeletons" / lesson.name / name)
        sol, qtodo = regions(COURSE / "solutions" / lesson.name / name)
        assert stodo == qtodo, f"{name}: the TODO lines differ between skeleton and solution"
        if skel != sol:
            diff = next(i for i, (a, b) in enumerate(zip(skel + [""], sol + [""])) if a != b)
            pytest.fail(f"{name}: skeleton and solution differ outside TODO regions "
                        f"near (outside) line {diff + 1}:\n  skeleton: {skel[diff:diff + 1]}\n"
                        f"  solution: {sol[diff:diff + 1]}")
        numbers += [n for n, _ in stodo]
    assert numbers, "the skeleton has no TODO markers"
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), \
        f"TODOs should be numbered 1..{len(numbers)} once each, got {sorted(numbers)}"


@pytest.mark.parametrize("tree", ["skeletons", "solutions"])
@pytest.mark.parametrize("lesson", EXERCISES, ids=ex_ids)
def test_builds_warning_free(lesson, tree, tmp_path):
    res = subprocess.run(
        ["make", "-B", "--no-print-directory", "-f", "lessons/common/lesson.mk",
         f"L={lesson.name}", f"S={tree}", f"OUT={tmp_path}"],
        cwd=COURSE, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    warnings = [l for l in res.stderr.splitlines() if "warning:" in l]
    assert not warnings, "\n".join(warnings)


def grade_tree(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"grade-{tree}")
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "grader/pytest.ini", "--rootdir", ".",
         "-p", "grader.plugin", "-qq", "--tb=no", "-rN", "--color=no",
         "grader/lessons", f"--src={tree}", f"--results={out}/results.json",
         f"--transcripts={out}/transcripts"],
        cwd=COURSE, capture_output=True, text=True, timeout=1200)
    path = out / "results.json"
    assert path.exists(), f"grading {tree} wrote no results:\n{res.stdout}\n{res.stderr}"
    data = json.loads(path.read_text())
    per = {}
    for t in data["tests"]:
        lesson = t["name"].split(":")[0]
        got, total = per.get(lesson, (0, 0))
        per[lesson] = (got + t["score"], total + t["max_score"])
    return per, res.stdout


@pytest.fixture(scope="session")
def solutions_grade(tmp_path_factory):
    if not os.environ.get("RDMA_DEVICE"):
        pytest.fail("no RDMA device: run the self-check through vm-setup/with-rxe (make test does)")
    return grade_tree("solutions", tmp_path_factory)


@pytest.fixture(scope="session")
def skeletons_grade(tmp_path_factory):
    if not os.environ.get("RDMA_DEVICE"):
        pytest.fail("no RDMA device: run the self-check through vm-setup/with-rxe (make test does)")
    return grade_tree("skeletons", tmp_path_factory)


# Grading a whole tree happens in the first of these tests' setup.
@pytest.mark.device
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("lesson", LESSONS, ids=ids)
def test_solution_reaches_full_marks(lesson, solutions_grade):
    per, out = solutions_grade
    assert lesson.name in per, f"no grader results for {lesson.name}"
    got, total = per[lesson.name]
    assert total > 0
    assert got == total, f"{lesson.name}: solutions score {got}/{total}\n{out}"


@pytest.mark.device
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("lesson", EXERCISES, ids=ex_ids)
def test_skeleton_does_not_reach_full_marks(lesson, skeletons_grade):
    per, out = skeletons_grade
    got, total = per[lesson.name]
    assert got < total, f"{lesson.name}: the unsolved skeleton scores {got}/{total}"
