"""Hostile submissions (grader/selftest/hostile/) graded the way `make grade`
grades: none may score more than the untouched skeleton, change the
results, or leave anything behind in the checkout."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import COURSE

HERE = COURSE / "grader" / "selftest" / "hostile"
APPENDED = ["daemon", "plant", "tamper", "escape"]


def lesson_of(attack):
    first = (HERE / f"{attack}.c").read_text().splitlines()[0]
    return re.match(r"/\* lesson: (\S+) \*/", first).group(1)


def git_status():
    return subprocess.run(["git", "-C", COURSE, "status", "--porcelain",
                          "--untracked-files=all", "--ignored"],
                         capture_output=True, text=True, check=True).stdout


def grade(src, lessons, out):
    res = subprocess.run(
        [sys.executable, "-m", "grader", "grade", f"--src={src}",
         f"--lesson={','.join(lessons)}", f"--results={out}"],
        cwd=COURSE, capture_output=True, text=True, timeout=900)
    per = {}
    if out.exists():
        for t in json.loads(out.read_text())["tests"]:
            lesson = t["name"].split(":")[0]
            got, total = per.get(lesson, (0, 0))
            per[lesson] = (got + t["score"], total + t["max_score"])
    return res, per


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    tree = tmp / "tree"
    common = (HERE / "common.h").read_text()
    lessons = []
    for attack in APPENDED:
        lesson = lesson_of(attack)
        if lesson not in lessons:
            lessons.append(lesson)
            shutil.copytree(COURSE / "skeletons" / lesson, tree / lesson)
            for c in (tree / lesson).glob("*.c"):
                c.write_text(c.read_text() + "\n" + common)
        for c in (tree / lesson).glob("*.c"):
            c.write_text(c.read_text() + (HERE / f"{attack}.c").read_text())
    inc = lesson_of("include")
    lessons.append(inc)
    (tree / inc).mkdir(parents=True)
    prog = next((COURSE / "skeletons" / inc).glob("*.c")).name
    (tree / inc / prog).write_text(
        (HERE / "include.c").read_text().replace("COURSE", str(COURSE)))
    before = git_status()
    res, per = grade(tree, lessons, tmp / "hostile.json")
    skel_res, skel = grade(COURSE / "skeletons", lessons, tmp / "skel.json")
    after = git_status()
    return {"res": res, "per": per, "skel": skel, "skel_res": skel_res,
            "before": before, "after": after, "json": tmp / "hostile.json"}


@pytest.mark.parametrize("attack", APPENDED + ["include"])
def test_attack_scores_no_more_than_the_skeleton(graded, attack):
    lesson = lesson_of(attack)
    assert lesson in graded["skel"], graded["skel_res"].stdout[-3000:]
    assert lesson in graded["per"], graded["res"].stdout[-3000:]
    got, total = graded["per"][lesson]
    skel, _ = graded["skel"][lesson]
    assert got <= skel, (f"{attack}: {got}/{total} against the skeleton's "
                         f"{skel}\n" + graded["res"].stdout[-3000:])


def test_results_agree_with_the_console(graded):
    data = json.loads(graded["json"].read_text())
    last = graded["res"].stdout.rstrip().splitlines()[-1]
    assert last == f"Score: {data['score']}/{data['max_score']}", last
    assert data["score"] == sum(t["score"] for t in data["tests"])
    assert data["max_score"] == sum(t["max_score"] for t in data["tests"])


def test_the_checkout_is_left_as_it_was(graded):
    # Only ignored build products may appear (build/, .grade/, __pycache__).
    new = [line for line in graded["after"].splitlines()
           if line not in graded["before"].splitlines()
           and not line.startswith("!! build/")
           and not line.startswith("!! .grade/")
           and "__pycache__" not in line]
    assert not new, "\n".join(new)
    for planted in ("PLANTED", "ESCAPED", "build/ESCAPED", ".grade/ESCAPED",
                    "grader/lessons/conftest.py"):
        assert not (COURSE / planted).exists(), planted


def test_an_include_of_the_solution_is_refused(graded):
    out = graded["res"].stdout
    lesson = lesson_of("include")
    assert re.search(rf"includes {re.escape(str(COURSE))}/solutions/{lesson}/"
                     rf"\S+: refused", out), out[-3000:]


def test_planted_grader_files_stop_the_grading():
    planted = COURSE / "grader" / "lessons" / "test_99_planted.py"
    planted.write_text("# planted\n")
    try:
        env = {k: v for k, v in os.environ.items()
               if k != "ALLOW_MODIFIED_GRADER"}
        res = subprocess.run([sys.executable, "-m", "grader", "grade",
                              "--lesson=04"], cwd=COURSE, env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        planted.unlink()
    assert res.returncode == 2, res.stdout + res.stderr
    assert "?? grader/lessons/test_99_planted.py" in res.stderr
    assert "will not grade" in res.stderr
