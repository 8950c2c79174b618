"""Hostile submissions (grader/selftest/hostile/) graded as make grade grades
them in the VM: none may score more than the untouched skeleton, change the
results, or leave anything behind in the checkout. make test builds their
tree on the host (hostile/tree.py) into build/selftest/hostile."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import COURSE, grade_tree, need_device

sys.path.insert(0, str(COURSE / "grader" / "selftest" / "hostile"))
import tree as hostile  # noqa: E402

TREE = "build/selftest/hostile"
ATTACKS = hostile.APPENDED + hostile.REPLACING


def git_status(root=COURSE):
    # Ignored files as git's patterns match them: build/ (a grading's own
    # products) as one line, not walked. Listing each of its files, as
    # --ignored=traditional does, took 7-8 s of the VM's CPU over 9p,
    # twice, for lines the comparison leaves out. Untracked files one by
    # one (--untracked-files=all): a file planted in a directory that was
    # already untracked is a line of its own, not hidden in "?? dir/".
    return subprocess.run(["git", "-C", root, "status", "--porcelain",
                           "--untracked-files=all", "--ignored=matching"],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="session")
def graded():
    need_device()
    assert (COURSE / TREE).is_dir(), \
        f"{TREE} is missing: make test builds it (grader/selftest/run-all.sh)"
    before = git_status()
    per, out, results = grade_tree(TREE, hostile.lessons())
    after = git_status()
    # The skeletons' scores to compare with, in full and in the same VM
    # (the whole-tree skeleton grading stops each lesson at its first lost
    # point, and grades the lessons without a device on the host).
    skel = grade_tree("skeletons", [n[:2] for n in hostile.lessons()],
                      "hostile-lessons")[0]
    return {"per": per, "out": out, "results": results, "before": before,
            "after": after, "skeletons": skel}


@pytest.mark.device
@pytest.mark.timeout(1500)          # the first one grades two whole trees
@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_scores_no_more_than_the_skeleton(graded, attack):
    lesson = hostile.lesson_of(attack)
    assert lesson in graded["per"], graded["out"][-3000:]
    got, total = graded["per"][lesson]
    skel, _ = graded["skeletons"][lesson]
    assert got <= skel, (f"{attack}: {got}/{total} against the skeleton's "
                         f"{skel}\n" + graded["out"][-3000:])


@pytest.mark.device
@pytest.mark.timeout(1500)
def test_results_agree_with_the_console(graded):
    data = json.loads(graded["results"].read_text())
    last = graded["out"].rstrip().splitlines()[-1]
    assert last == f"Score: {data['score']}/{data['max_score']}", last
    assert data["score"] == sum(t["score"] for t in data["tests"])
    assert data["max_score"] == sum(t["max_score"] for t in data["tests"])


@pytest.mark.device
@pytest.mark.timeout(1500)
def test_the_checkout_is_left_as_it_was(graded):
    # Only the grader's own ignored products may appear.
    new = [line for line in graded["after"].splitlines()
           if line not in graded["before"].splitlines()
           and not line.startswith(("!! build/", "!! .grade/"))
           and "__pycache__" not in line]
    assert not new, "\n".join(new)
    for planted in ("PLANTED", "ESCAPED", "build/ESCAPED", ".grade/ESCAPED"):
        assert not (COURSE / planted).exists(), planted
    # The course has a conftest.py there of its own (the wire tests'):
    # plant.c's hook, which passes every test, must not be in it.
    conftest = COURSE / "grader/lessons/conftest.py"
    assert not (conftest.exists() and "outcome = 'passed'" in
                conftest.read_text()), conftest


@pytest.mark.device
@pytest.mark.timeout(1500)
@pytest.mark.instructor
def test_an_include_of_the_solution_is_refused(graded):
    lesson = hostile.lesson_of("include")
    assert re.search(rf"includes {re.escape(str(COURSE))}/solutions/{lesson}/"
                     rf"\S+: refused", graded["out"]), graded["out"][-3000:]


def test_a_file_planted_in_an_untracked_directory_is_a_new_line(tmp_path):
    """The checkout's comparison sees a file a grading adds inside a
    directory that was untracked before it; build/ (ignored) stays one
    line however many files a grading writes there."""
    def git(*args):
        subprocess.run(["git", "-C", tmp_path, *args], check=True,
                       capture_output=True)
    git("init", "-q")
    (tmp_path / ".gitignore").write_text("build/\n")
    git("add", ".gitignore")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("a student's own file\n")
    (tmp_path / "build").mkdir()
    before = git_status(tmp_path)
    (tmp_path / "notes" / "PLANTED").write_text("x\n")
    (tmp_path / "build" / "product.o").write_text("x\n")
    after = git_status(tmp_path)
    new = [line for line in after.splitlines()
           if line not in before.splitlines()]
    assert new == ["?? notes/PLANTED"], (before, after)
    assert "!! build/" in after.splitlines(), after


def test_planted_grader_files_stop_the_grading(tmp_path):
    # In a clone: make test's other parts grade with this checkout meanwhile.
    clone = tmp_path / "course"
    subprocess.run(["git", "clone", "-q", str(COURSE), str(clone)], check=True)
    (clone / "grader" / "lessons" / "test_99_planted.py").write_text("# planted\n")
    env = {k: v for k, v in os.environ.items() if k != "ALLOW_MODIFIED_GRADER"}
    res = subprocess.run([sys.executable, "-m", "grader", "grade",
                          "--lesson=04"], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "?? grader/lessons/test_99_planted.py" in res.stderr
    assert "will not grade" in res.stderr
