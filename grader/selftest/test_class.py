"""make grade-class: a class's submissions into a gradebook.

Lesson 04 needs no device, so most of this runs on the host in seconds; one
test boots the micro-VM's runner for real failures of the infrastructure
(a VM that cannot start): retried once, marked infra-error, never a 0."""

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import COURSE

pytestmark = pytest.mark.instructor
LESSON = "04-work-requests"
DEADLINE = "2026-01-15T12:00:00+00:00"


def grade_class(subs, out, *extra, env=None, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "grader", "grade-class", f"--submissions={subs}",
         f"--out={out}", *extra], cwd=COURSE, capture_output=True, text=True,
        timeout=timeout, env=dict(os.environ, **(env or {})))


def rows(out):
    with open(out / "gradebook.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def git(repo, *args, date=None):
    env = dict(os.environ, GIT_AUTHOR_NAME="s", GIT_AUTHOR_EMAIL="s@x",
               GIT_COMMITTER_NAME="s", GIT_COMMITTER_EMAIL="s@x")
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", "-C", str(repo), *args], env=env,
                          check=True, capture_output=True, text=True).stdout


def spin_first_function(path):
    """The solution, with an endless loop at the start of its first
    function body: the program hangs."""
    text = path.read_text()
    i = text.index("\n{\n") + 3
    path.write_text(text[:i] + "\tfor (volatile int spin = 1; spin;)\n\t\t;\n"
                    + text[i:])


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """Five submissions, graded once: full marks, the untouched skeleton,
    a compile error, a hanging program, and a clone of the student
    repository whose last commit before the deadline is the solution (the
    one after it does not compile)."""
    top = tmp_path_factory.mktemp("class")
    subs = top / "submissions"
    sol, skel = COURSE / "solutions" / LESSON, COURSE / "skeletons" / LESSON
    shutil.copytree(sol, subs / "alice" / LESSON)
    shutil.copytree(skel, subs / "bob" / LESSON)
    shutil.copytree(sol, subs / "carol" / LESSON)
    with open(subs / "carol" / LESSON / "worksheet.c", "a") as f:
        f.write("int broken(void) { return }\n")
    shutil.copytree(sol, subs / "dave" / LESSON)
    spin_first_function(subs / "dave" / LESSON / "worksheet.c")
    erin = subs / "erin"
    shutil.copytree(skel, erin / "skeletons" / LESSON)
    git(erin, "init", "-q")
    git(erin, "add", "-A")
    git(erin, "commit", "-qm", "start", date="2026-01-01T10:00:00+00:00")
    shutil.copy(sol / "worksheet.c", erin / "skeletons" / LESSON)
    git(erin, "commit", "-qam", "solved", date="2026-01-10T10:00:00+00:00")
    solved = git(erin, "rev-parse", "HEAD").strip()
    with open(erin / "skeletons" / LESSON / "worksheet.c", "a") as f:
        f.write("int late(void) { return }\n")
    git(erin, "commit", "-qam", "late", date="2026-01-20T10:00:00+00:00")
    roster = top / "roster.csv"
    roster.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Submission\n"
                      "Alice A,101,s101,alice,S1,alice\n"
                      "Bob B,102,s102,bob,S1,bob\n"
                      "Zed Z,109,s109,zed,S2,zed\n")
    out = top / "out"
    res = grade_class(subs, out, "--lesson=04", f"--deadline={DEADLINE}",
                      f"--roster={roster}", "--jobs=2")
    return {"subs": subs, "out": out, "res": res, "solved": solved,
            "top": top, "roster": roster}


def test_four_kinds_of_submission_four_right_rows(klass):
    res, out = klass["res"], klass["out"]
    assert res.returncode == 0, res.stdout + res.stderr
    r = rows(out)
    assert set(r) == {"alice", "bob", "carol", "dave", "erin"}, r
    expect = {"alice": ("graded", "14"), "bob": ("empty", "0"),
              "carol": ("build-failed", "0")}
    for who, (status, points) in expect.items():
        assert (r[who]["status"], r[who][LESSON]) == (status, points), r[who]
    assert r["dave"]["status"] == "timed-out", r["dave"]
    assert int(r["dave"][LESSON]) < 14 and "hung" in r["dave"]["note"]
    assert "does not compile" in r["carol"]["note"]
    for who in r:
        assert r[who]["max"] == "14", r[who]
    for who in ("alice", "carol", "dave"):
        results = json.loads((out / who / "results.json").read_text())
        assert results["score"] == int(r[who]["total"])
        assert (out / who / "junit.xml").read_text().startswith("<?xml")
        assert "Score:" in (out / who / "console.log").read_text()
    assert "compile error" in (out / "carol" / "console.log").read_text()
    assert list((out / "dave" / "transcripts").rglob("*.log"))


def test_progress_line_counts_to_the_end(klass):
    err = klass["res"].stderr
    assert "grade-class: 5/5 done" in err, err
    assert "timed-out 1" in err and "graded 2" in err, err


def test_a_clone_is_graded_at_its_last_commit_before_the_deadline(klass):
    r = rows(klass["out"])["erin"]
    assert (r["status"], r[LESSON]) == ("graded", "14"), r
    assert r["commit"] == klass["solved"]
    assert r["commit_time"].startswith("2026-01-10T10:00:00")
    assert "DEADLINE not applied" in rows(klass["out"])["alice"]["note"]


def test_no_process_is_left_behind(klass):
    # The submissions' programs run from build/grade/<their path's tag>/.
    top = str(klass["top"])
    for pattern in (top, top.replace("/", "_")):
        res = subprocess.run(["pgrep", "-af", pattern],
                             capture_output=True, text=True)
        assert res.stdout == "", res.stdout
    assert not list((COURSE / "build" / "grade-out").glob("class.*/spec.json"))


def test_canvas_csv_from_the_roster(klass):
    with open(klass["out"] / "canvas.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID",
                        "Section", LESSON]
    assert table[1][0] == "Points Possible" and table[1][-1] == "14"
    body = {row[0]: row for row in table[2:]}
    assert body["Alice A"] == ["Alice A", "101", "s101", "alice", "S1", "14"]
    assert body["Bob B"][-1] == "0"
    assert body["Zed Z"][-1] == ""             # no submission: no score
    assert "not in the roster: carol, dave, erin" in klass["res"].stderr


def test_a_rerun_keeps_graded_rows_and_force_grades_again(klass):
    before = rows(klass["out"])
    res = grade_class(klass["subs"], klass["out"], "--lesson=04",
                      f"--deadline={DEADLINE}", timeout=120)
    assert res.returncode == 0, res.stderr
    assert "5 already graded, kept" in res.stderr
    assert rows(klass["out"]) == before
    # FORCE: alice alone, in a directory of her own.
    one = klass["top"] / "one"
    shutil.copytree(klass["subs"] / "alice", one / "alice")
    first = grade_class(one, klass["top"] / "out1", "--lesson=04")
    again = grade_class(one, klass["top"] / "out1", "--lesson=04", "--force")
    assert "kept" not in again.stderr and "1/1 done (graded 1)" in again.stderr
    assert first.returncode == again.returncode == 0


def test_a_vm_that_cannot_start_is_infra_error_not_zero(tmp_path):
    subs = tmp_path / "subs"
    shutil.copytree(COURSE / "solutions" / "01-devices",
                    subs / "frank" / "01-devices")
    out = tmp_path / "out"
    res = grade_class(subs, out, "--lesson=01", timeout=300, env={
        "RXE_BACKEND": "vm", "RXE_VM_COLD": "1",
        "RXE_VM_CACHE": str(tmp_path / "cache"),
        "RXE_VM_KERNEL_DEB": str(tmp_path / "missing.deb")})
    assert res.returncode == 1, res.stdout + res.stderr
    r = rows(out)["frank"]
    assert r["status"] == "infra-error", r
    assert r["total"] == "" and r["01-devices"] == "", r
    assert "did not start" in r["note"] and "tried twice" in r["note"], r
    assert list((out / "infra-logs").glob("*.log"))
    assert "run again to retry" in res.stdout
    # An infra-error row is not kept: the next run tries again.
    res = grade_class(subs, out, "--lesson=01", timeout=300, env={
        "RXE_BACKEND": "vm", "RXE_VM_COLD": "1",
        "RXE_VM_CACHE": str(tmp_path / "cache"),
        "RXE_VM_KERNEL_DEB": str(tmp_path / "missing.deb")})
    assert "kept" not in res.stderr


def test_out_inside_submissions_is_refused(tmp_path):
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    res = grade_class(tmp_path / "subs", tmp_path / "subs" / "grades",
                      "--lesson=04", timeout=60)
    assert res.returncode == 2 and "must be apart" in res.stderr
    assert (tmp_path / "subs" / "alice").is_dir()


def test_prelab_grades_the_predictions_at_their_own_deadline(tmp_path):
    """PRELAB=09=TIME: lesson 09's predictions.c (its pre-lab, lesson.toml:
    prelab) is taken from the last commit before TIME and the prediction
    tests grade that one; a later commit's right predictions do not count.
    The grading half runs here, on the host: the prediction tests read
    predictions.c and need no device."""
    sys.path.insert(0, str(COURSE))
    from grader.classroom.classrun import Sub, write_prelab
    from grader.core.build import compile_lesson

    repo = tmp_path / "subs" / "frank"
    for lesson in ("05-send-recv", "09-failures"):
        shutil.copytree(COURSE / "skeletons" / lesson,
                        repo / "skeletons" / lesson)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start", date="2026-01-01T10:00:00+00:00")
    # Before the pre-lab deadline: the skeleton's predictions ("?").
    # After it: the right ones, copied from a finished run.
    shutil.copy(COURSE / "solutions/09-failures/predictions.c",
                repo / "skeletons/09-failures/predictions.c")
    git(repo, "commit", "-qam", "late", date="2026-01-12T10:00:00+00:00")

    def grade(prelab):
        sub = Sub("frank", repo)
        sub.src = repo / "skeletons"
        compile_lesson(COURSE, sub.src, "09-failures")
        if prelab:
            write_prelab(sub, "09-failures", prelab[0].split("=", 1)[1])
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "-c", "grader/pytest.ini",
             "--rootdir", ".", "-p", "grader.session.plugin", "-qq",
             "--tb=no", "-rN", "--color=no",
             "grader/lessons/test_09_failures.py", f"--src={sub.src}",
             "--prebuilt", "--test=predict",
             f"--transcripts={tmp_path / 'tr'}"],
            cwd=COURSE, capture_output=True, text=True, timeout=300)
        return res.stdout, sub.note

    out, _ = grade([])
    assert "Score: 6/6" in out, out
    out, note = grade(["09=2026-01-10T00:00:00+00:00"])
    assert "Score: 0/6" in out and "pre-lab deadline" in out, out
    assert "dereg-mr: ?" in out, out
    assert note.startswith("pre-lab 09: commit "), note
    out, note = grade(["09=2025-12-01T00:00:00+00:00"])
    assert "no commit before 2025-12-01" in out and "Score: 0/6" in out, out
