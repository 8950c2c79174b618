"""Gradescope: python3 -m grader gradescope [--lesson L] (make gradescope)
builds build/gradescope/autograder.zip; python3 -m grader gradescope-run is
what its run_autograder runs for each submission.

The zip (Gradescope's autograder specification) holds at its root:
  setup.sh         installs the course's packages on Gradescope's Ubuntu
                   22.04 image and prepares the micro-VM (the kernel pinned in
                   vm-setup/microvm/kernel.lock, fetched and checked by
                   build.sh as on every machine, unpacked now: grading never
                   downloads)
  run_autograder   grades /autograder/submission into
                   /autograder/results/results.json
  course/          the course as the students have it (make student-repo's
                   files) and gradescope.json (the lessons), plus the two
                   files of solutions/ that grading needs (REFERENCE): lesson
                   05's rc.c, which the later lessons link so that their
                   points do not depend on lesson 05's, and lesson 09's
                   answer key, which grades the predictions. The zip is the
                   instructor's: Gradescope never shows it to students, and
                   the sandbox hides solutions/ from their programs.
AUTOGRADER_ROOT (default /autograder) moves all of it, for a local run.

A submission may be a whole student repository, a skeletons/-shaped tree,
or just the lesson's .c files. Each lesson that does not compile is a
visible test of its own, holding the compiler's message. When the grading
infrastructure fails (the VM does not start), after one retry results.json
says "autograder error", holds no score and run_autograder exits 1: the
submission is to be regraded, it did not earn a 0.
"""

import argparse
import datetime
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

from grader.run import grade
from grader.classroom import studentrepo
from grader.core.build import compile_lesson
from grader.core.course import (COURSE, lesson_names, needs_device,
                                parse_lessons)

FILES = Path("grader") / "classroom" / "gradescope-files"
# What of solutions/ the autograder grades with (and nothing else of it).
REFERENCE = ["solutions/05-send-recv/rc.c", "solutions/09-failures/ANSWERS.md"]


# ---- building the zip -----------------------------------------------------------

def build_zip(lesson, out, test=""):
    names = parse_lessons(lesson) if lesson else lesson_names(COURSE,
                                                                     COURSE)
    config = {"lesson": ",".join(names), "test": test,
              "device": any(needs_device(n) for n in names),
              "built": datetime.datetime.now(datetime.timezone.utc)
              .strftime("%Y-%m-%dT%H:%M:%SZ")}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o100755 << 16
            z.writestr(info, (COURSE / FILES / name).read_bytes(),
                       zipfile.ZIP_DEFLATED)
        for f in studentrepo.released_files(COURSE):
            z.write(COURSE / f, "course/" + f)
        for f in REFERENCE:
            z.write(COURSE / f, "course/" + f)
        z.writestr("course/gradescope.json", json.dumps(config, indent=2))
    os.replace(tmp, out)
    return config


# ---- grading one submission (run_autograder) --------------------------------------

def gather(sub, names, tree):
    """Copy the submission's files of lessons `names` into tree/NN-topic/:
    from SUB/skeletons/NN-topic/, SUB/NN-topic/, or loose files named as
    one lesson's skeleton files. Returns the lessons that got files."""
    shutil.rmtree(tree, ignore_errors=True)
    got = set()
    owners = {}
    for n in names:
        for f in (COURSE / "skeletons" / n).glob("*.[ch]"):
            owners.setdefault(f.name, []).append(n)
    for n in names:
        for d in (sub / "skeletons" / n, sub / n):
            if d.is_dir():
                for f in d.iterdir():
                    if f.suffix in (".c", ".h") and f.is_file() \
                            and not f.is_symlink():
                        (tree / n).mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(f, tree / n / f.name)
                        got.add(n)
    if not got:
        for f in sorted(sub.rglob("*.[ch]")):
            if ".git" in f.parts or f.is_symlink() or not f.is_file():
                continue
            lessons = owners.get(f.name, [])
            if len(lessons) == 1:
                (tree / lessons[0]).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, tree / lessons[0] / f.name)
                got.add(lessons[0])
    return sorted(got), owners


def _write(results_path, data):
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(data, indent=2) + "\n")


def run(root):
    t0 = time.monotonic()
    config = json.loads((COURSE / "gradescope.json").read_text())
    names = [n for n in config["lesson"].split(",") if n]
    results_path = root / "results" / "results.json"
    sub = root / "submission"
    tree = root / "work" / "tree"
    got, owners = gather(sub, names, tree) if sub.is_dir() else ([], {})
    expected = ", ".join(f"skeletons/{owners[f][0]}/{f}" for f in
                         sorted(owners))
    if not got:
        msg = (f"No lesson files found in your submission. Expected the "
               f"lesson's files, in a copy of your repository or on their "
               f"own: {expected}.")
        print(msg)
        _write(results_path, {
            "score": 0, "execution_time": round(time.monotonic() - t0, 1),
            "output": msg, "output_format": "text", "visibility": "visible",
            "tests": [{"name": "submission has the lesson's files",
                       "score": 0, "max_score": 0, "status": "failed",
                       "output": msg, "visibility": "visible"}]})
        return 0
    # Lessons without a skeleton (00: the device) come with any work.
    got = sorted(set(got) | {n for n in names
                             if not (COURSE / "skeletons" / n).is_dir()})
    tmp = root / "work" / "grade-results.json"
    rc = None
    for attempt in (1, 2):
        tmp.unlink(missing_ok=True)
        rc = grade.main(["--src", str(tree), "--results", str(tmp),
                         "--lesson", ",".join(got)]
                        + (["--test", config["test"]]
                           if config.get("test") else []))
        if tmp.exists():
            break
        print(f"run_autograder: grading did not run to its end (exit {rc}, "
              f"attempt {attempt})", file=sys.stderr)
    if not tmp.exists():
        msg = (f"autograder error: the grading infrastructure failed (the "
               f"RDMA micro-VM did not run, exit {rc}). This is not a grade "
               f"of your work: your instructor will regrade the submission.")
        _write(results_path, {
            "execution_time": round(time.monotonic() - t0, 1),
            "output": msg, "output_format": "text", "visibility": "visible",
            "tests": [{"name": "autograder error", "status": "failed",
                       "output": msg, "visibility": "visible"}],
            "extra_data": {"autograder_error": True}})
        return 1
    graded = json.loads(tmp.read_text())
    tests = []
    for n in got:
        built = compile_lesson(COURSE, tree, n)     # the build's record
        if built["rc"] and not built["missing"]:
            tests.append({
                "name": f"{n}: compiles", "score": 0, "max_score": 0,
                "status": "failed", "visibility": "visible",
                "output": "\n".join(
                    line for line in (built["stderr"] or built["stdout"])
                    .replace(str(tree), "submission").splitlines()
                    if not line.startswith("make"))[-8000:]})
    for t in graded["tests"]:
        tests.append({"name": t["name"], "score": t["score"],
                      "max_score": t["max_score"], "status": t["status"],
                      "output": t["output"].replace(str(tree), "submission"),
                      "visibility": "visible"})
    missing = [n for n in names if n not in got]
    output = f"Score: {graded['score']}/{graded['max_score']}"
    if missing:
        output += ("\nNot in your submission (not graded): "
                   + ", ".join(missing))
    _write(results_path, {
        "score": graded["score"],
        "execution_time": round(time.monotonic() - t0, 1),
        "output": output, "output_format": "text", "visibility": "visible",
        "tests": tests})
    print(output)
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m grader gradescope")
    ap.add_argument("--lesson", default="")
    ap.add_argument("--test", default="",
                    help="only the tests whose name or title has this "
                         "('!NAME': all others): an assignment of a part "
                         "of a lesson, e.g. lesson 09's predictions")
    ap.add_argument("--out", default=str(COURSE / "build" / "gradescope" /
                                         "autograder.zip"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    config = build_zip(args.lesson, out, args.test)
    print(f"{out} ({out.stat().st_size // 1024} KiB): lessons "
          f"{config['lesson']}"
          + (f", tests matching {args.test!r}" if args.test else "")
          + "; upload it as the assignment's autograder "
          "(see INSTRUCTORS.md: base image, container size)")
    return 0


def run_main(argv):
    root = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    if argv:
        print("usage: python3 -m grader gradescope-run (AUTOGRADER_ROOT)",
              file=sys.stderr)
        return 2
    return run(root)
