"""python3 -m grader student-repo OUT (make student-repo OUT=DIR): the
repository students get.

OUT becomes a fresh git repository (one commit) holding the course's tracked
files as they are in this checkout, minus what is the instructor's:
solutions/, the cheats (patches of the solutions), the tests that need the
solutions or test the instructor's tools, and the instructor's documents.
README.md is the students' README (grader/classroom/student-repo/README.md with the
lesson table of this README), and .github/workflows/grade.yml grades every
push on GitHub Actions. Every other file is byte for byte the course's.

In OUT, `make grade` grades the skeletons and `make test` checks what a tree
without solutions can: skeletons build and have TODOs, the grader works and
the unsolved skeletons do not reach full marks (tests marked `instructor`
are not collected when solutions/ is absent).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from grader.core.course import COURSE

TEMPLATES = Path("grader") / "classroom" / "student-repo"

# What the students do not get: paths, or directories ending in "/".
INSTRUCTOR_ONLY = [
    "solutions/",
    "grader/selftest/cheats/",          # the solutions, patched
    "grader/selftest/test_cheats.py",
    "grader/selftest/mutants/",         # the solutions, with one mistake
    "grader/selftest/test_mutants.py",
    "grader/selftest/test_class.py",    # the instructor's tools' tests
    "grader/selftest/test_class_report.py",  # (and an answer to lesson 04)
    "grader/selftest/test_student_repo.py",
    "grader/selftest/test_gradescope.py",
    "grader/classroom/bench-class.sh",
    "grader/selftest/bench-grade.sh",            # grades solutions/
    "grader/selftest/bench-stability.sh",        # grades solutions/
    "grader/selftest/stalls/",                   # the solutions, stalled
    "grader/selftest/test_variants.py",          # the solutions, restyled
    "grader/classroom/gradescope-files/",         # make gradescope's templates
    str(TEMPLATES) + "/",
    "INSTRUCTORS.md",
    "README.md",                        # replaced by the students' README
]

# Made here, not copied: (path in OUT, template).
GENERATED = {
    "README.md": TEMPLATES / "README.md",
    ".github/workflows/grade.yml": TEMPLATES / "grade.yml",
}


def instructor_only(path):
    return any(path == x or (x.endswith("/") and path.startswith(x))
               for x in INSTRUCTOR_ONLY)


def tracked_files(course):
    res = subprocess.run(["git", "-C", str(course), "ls-files", "-z"],
                         capture_output=True, text=True, check=True)
    return [f for f in res.stdout.split("\0") if f]


def released_files(course):
    """The course's files that go to the students (relative paths)."""
    return [f for f in tracked_files(course) if not instructor_only(f)
            and (course / f).exists()]


def lesson_table(course):
    """The README's lesson table: its header and one row per lesson."""
    rows = []
    for line in (course / "README.md").read_text().splitlines():
        if line.startswith("| [") or line.startswith("| lesson ") or \
                (rows and line.startswith("|---")):
            rows.append(line)
    return "\n".join(rows)


def student_readme(course):
    text = (course / GENERATED["README.md"]).read_text()
    return text.replace("{{LESSONS}}", lesson_table(course))


def build(course, out):
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"OUT={out}: exists and is not empty (the student "
                         f"repository is made afresh)")
    dirty = subprocess.run(["git", "-C", str(course), "status", "--porcelain",
                            "--untracked-files=no"],
                           capture_output=True, text=True).stdout
    if dirty.strip():
        print("warning: the checkout has uncommitted changes; the student "
              "repository gets the files as they are now", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    files = released_files(course)
    for f in files:
        dest = out / f
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(course / f, dest)
    for dest, template in GENERATED.items():
        (out / dest).parent.mkdir(parents=True, exist_ok=True)
        if dest == "README.md":
            (out / dest).write_text(student_readme(course))
        else:
            shutil.copyfile(course / template, out / dest)
    git = ["git", "-C", str(out), "-c", "user.name=rdma-course",
           "-c", "user.email=rdma-course@localhost", "-c", "init.defaultBranch=main"]
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1")
    for cmd in (["init", "-q"], ["add", "-A"],
                ["commit", "-q", "-m", "rdma-course: the lessons, skeletons "
                 "and grader"]):
        subprocess.run([*git, *cmd], check=True, env=env)
    return len(files) + len(GENERATED)


def main(argv):
    if len(argv) != 1:
        print("usage: python3 -m grader student-repo OUT", file=sys.stderr)
        return 2
    n = build(COURSE, Path(argv[0]).resolve())
    print(f"student repository: {Path(argv[0]).resolve()} ({n} files, one "
          f"commit; no solutions/)")
    print(f"  check it: make -C {argv[0]} grade LESSON=04   (no device needed)")
    return 0
