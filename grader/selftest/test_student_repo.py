"""make student-repo: the students' repository holds no solution code and
no instructor-only test, works (make grade, the self-check's collection, the
GitHub workflow's grading command), and its workflow names only what exists.
Host only: lesson 04 needs no device."""

import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from conftest import COURSE

pytestmark = pytest.mark.instructor
sys.path.insert(0, str(COURSE))
from grader.classroom import studentrepo  # noqa: E402

WORKFLOW = ".github/workflows/grade.yml"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "repo"
    res = subprocess.run([sys.executable, "-m", "grader", "student-repo",
                          str(out)], cwd=COURSE, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return out


def release_files(repo):
    res = subprocess.run(["git", "-C", str(repo), "ls-files"],
                         capture_output=True, text=True, check=True)
    return res.stdout.split()


def lines(path):
    try:
        return {x.strip() for x in path.read_text().splitlines()}
    except (UnicodeDecodeError, OSError):
        return set()


def secret_lines():
    """{line: solution file} for every line of a solution that is neither
    in its skeleton nor anywhere in the course outside the instructor's
    files: what only a solution holds."""
    public = set()
    for f in studentrepo.tracked_files(COURSE):
        if not studentrepo.instructor_only(f):
            public |= lines(COURSE / f)
    secret = {}
    for sol in sorted((COURSE / "solutions").rglob("*")):
        if not sol.is_file():
            continue
        skel = COURSE / "skeletons" / sol.relative_to(COURSE / "solutions")
        for line in lines(sol) - lines(skel) - public:
            if len(line) > 3:
                secret[line] = str(sol.relative_to(COURSE))
    return secret


def leaks(root, files, secret):
    found = []
    for f in files:
        for line in lines(root / f) & secret.keys():
            found.append(f"{f}: {line!r} (from {secret[line]})")
    return found


def test_the_instructors_files_are_not_released(repo):
    files = release_files(repo)
    assert files and not any(studentrepo.instructor_only(f) and f not in
                             studentrepo.GENERATED for f in files), files
    assert not (repo / "solutions").exists()
    assert not list((repo / "grader").rglob("*.patch"))
    assert "SRC=solutions" not in (repo / "README.md").read_text()
    assert "| [05-send-recv]" in (repo / "README.md").read_text()
    assert (repo / WORKFLOW).is_file()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                            capture_output=True, text=True).stdout
    assert status == "", status


def test_every_released_file_is_the_courses(repo):
    for f in release_files(repo):
        if f not in studentrepo.GENERATED:
            assert (repo / f).read_bytes() == (COURSE / f).read_bytes(), f


def test_no_solution_code_leaks(repo):
    secret = secret_lines()
    # Most of what the solutions add is theirs alone: the check has teeth.
    assert len(secret) > 100, len(secret)
    assert leaks(repo, release_files(repo), secret) == []
    # And it finds a solution file planted among the released ones.
    planted = leaks(COURSE, ["solutions/05-send-recv/pingpong.c"], secret)
    assert len(planted) > 10, planted


def test_make_grade_works_in_it(repo):
    res = subprocess.run(["make", "--no-print-directory", "grade",
                          "LESSON=04"], cwd=repo, capture_output=True,
                         text=True, timeout=300)
    assert "Score: 0/14" in res.stdout, res.stdout + res.stderr
    assert "differ from the checkout" not in res.stderr
    assert res.returncode != 0


def test_its_self_check_collects_no_instructor_test(repo):
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "grader/pytest.ini",
         "--rootdir", ".", "grader/selftest", "--collect-only", "-q"],
        cwd=repo, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    ids = res.stdout
    assert "test_skeleton_has_numbered_todos" in ids
    assert "test_skeleton_does_not_reach_full_marks" in ids
    for gone in ("solutions", "test_solution_reaches_full_marks",
                 "test_cheats", "test_class"):
        assert gone not in ids, gone
    assert "deselected" in ids


def workflow(repo):
    return yaml.safe_load((repo / WORKFLOW).read_text())


def test_the_workflow_runs_only_what_exists(repo):
    wf = workflow(repo)
    # PyYAML reads the key `on` as True.
    assert "push" in (wf.get("on") or wf.get(True))
    steps = wf["jobs"]["grade"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    uses = [s["uses"] for s in steps if "uses" in s]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    assert any("/dev/kvm" in r and "udev" in r for r in runs)
    assert any("GITHUB_STEP_SUMMARY" in r for r in runs)
    verbs = set(re.findall(r'verb == "([\w-]+)"',
                           (repo / "grader/__main__.py").read_text()))
    targets = set(re.findall(r"^([\w-]+):", (repo / "Makefile").read_text(),
                             re.M))
    checked = 0
    for script in runs:
        for line in script.splitlines():
            words = shlex.split(line, comments=True) if line.strip() else []
            for i, w in enumerate(words):
                if re.match(r"^(vm-setup|grader|lessons|skeletons)/", w):
                    assert (repo / w).exists(), f"{w} (in: {line})"
                    checked += 1
                if w == "-m" and words[i + 1:i + 2] == ["grader"]:
                    assert words[i + 2] in verbs, line
                    checked += 1
                if w == "make" and i + 1 < len(words):
                    assert words[i + 1] in targets, line
                    checked += 1
    assert checked >= 2
    artifacts = steps[-1]["with"]["path"].split()
    assert "build/ci/result.json" in artifacts


def test_the_workflows_grading_command_runs_here(repo, tmp_path):
    """The workflow's Grade step, lesson 04 (no device), as GitHub would
    run it in the checkout."""
    step = next(s for s in workflow(repo)["jobs"]["grade"]["steps"]
                if s.get("name") == "Grade")
    env = {"LESSON": "04", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "GITHUB_REPOSITORY": "uni/rdma-alice", "GITHUB_SHA": "abc123",
           "ASSIGNMENT": "rdma-course"}
    res = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo,
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = repo / "build" / "ci"
    result = json.loads((out / "result.json").read_text())
    assert result["schema"] == "classroom50/result/v1"
    assert result["commit"] == "https://github.com/uni/rdma-alice/commit/abc123"
    assert (result["score"], result["max-score"]) == (0, 14)
    assert len(result["tests"]) >= 3 and all(
        set(t) == {"test-name", "passed", "score", "max-score"}
        for t in result["tests"])
    assert "| ❌ 04-work-requests | 0/14 |" in (out / "summary.md").read_text()
    assert (out / "junit.xml").is_file() and (out / "results.json").is_file()
