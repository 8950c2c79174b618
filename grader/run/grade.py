"""python3 -m grader grade - what `make grade` runs, on the host.

    python3 -m grader grade [--src DIR] [--lesson 05,06] [--results FILE]
                            [--junit FILE]

1. Checks that the grader's own files are the checkout's (a submission that
   planted or edited one in an earlier run would grade itself).
2. Compiles the lessons from SRC on the host (grader/core/build.py): SRC may be any
   readable directory; the micro-VM never needs to see it.
3. Runs pytest with the grader plugin where an RDMA device exists
   (vm-setup/with-rxe) with a private output directory in build/grade-out/;
   when no lesson asked for needs a device (lesson.toml: device = false),
   right here instead.
4. When that has ended (the VM is off, no program of the submission is left),
   copies results.json and the JUnit file to where they were asked for.
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.core.build import compile_lesson, grader_program
from grader.core.course import (COURSE, lesson_names, needs_device,  # noqa: F401
                                parse_lessons)
from grader.evidence import build_programs
from grader.session.forked import PYTEST_ENV, PYTEST_FLAGS

# What must be exactly the checkout's: the grader, the course's provided code
# and build rules, the VM runner.
GUARDED = ["grader", "lessons", "vm-setup", "Makefile"]


def integrity_problems(course):
    """Lines naming every guarded file that differs from the commit, or
    exists untracked; [] when clean or when the course is not a git
    checkout (nothing to compare with)."""
    try:
        top = subprocess.run(["git", "-C", course, "rev-parse",
                              "--show-toplevel"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != course:
        return []
    res = subprocess.run(["git", "-C", course, "status", "--porcelain",
                          "--untracked-files=all", "--", *GUARDED],
                         capture_output=True, text=True, timeout=120)
    return [line for line in res.stdout.splitlines() if line.strip()]


def integrity_ok(allowed=None):
    """False (after naming the files) when the grader's own files differ
    from the checkout and ALLOW_MODIFIED_GRADER=1 does not allow it."""
    problems = integrity_problems(COURSE)
    if not problems:
        return True
    if allowed is None:
        allowed = os.environ.get("ALLOW_MODIFIED_GRADER") == "1"
    say = "warning" if allowed else "error"
    print(f"{say}: the course's own files differ from the checkout "
          f"(git status):", file=sys.stderr)
    for line in problems:
        print(f"  {line}", file=sys.stderr)
    if not allowed:
        print("The grader will not grade with them: a file a submission "
              "changed or planted would grade it.\nRestore them "
              "(git checkout -- PATH; git clean -n lists untracked "
              "ones), or, editing the course itself, run with "
              "ALLOW_MODIFIED_GRADER=1.", file=sys.stderr)
    return allowed


def prepare_grader():
    """git ignores __pycache__: a planted .pyc could stand in for a grader
    module. The grader's are made afresh each time (a second or so). Then
    the grader's own C programs are compiled, here on the host."""
    for cache in (COURSE / "grader").rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    build_programs(COURSE)


def pytest_args(src, results, lesson="", junit=None, transcripts=None):
    """pytest's arguments (after `python3 -m pytest`) that grade the
    prebuilt lessons of SRC, run from the course directory."""
    # Only the lessons' own test files: importing the others' costs
    # seconds in the guest, under emulation.
    tests = ["grader/lessons"]
    if lesson:
        files = sorted(str(f.relative_to(COURSE)) for n in parse_lessons(lesson)
                       for f in (COURSE / "grader" / "lessons").glob(
                           f"test_{n[:2]}_*.py"))
        tests = files or tests
    args = ["-c", "grader/pytest.ini", "--rootdir", ".", *PYTEST_FLAGS,
            *tests, f"--src={src}", "--prebuilt", f"--results={results}"]
    if lesson:
        args.append(f"--lesson={lesson}")
    if junit:
        args.append(f"--junitxml={junit}")
    if transcripts:
        args.append(f"--transcripts={transcripts}")
    return args


def path_problem(course=COURSE):
    """Why grading cannot run from a checkout at `course`, or None. make
    splits words on white space (the lessons' build rules, the compiler's
    dependency lists), and the micro-VM's shares are named by path: a path
    with white space or a quote is refused here, with the way out, instead
    of failing later as a compile error of the student's."""
    if any(c.isspace() or c in "'\"" for c in str(course)):
        return (f"the course is in {str(course)!r}, a path with white space "
                f"or a quote, where make and the micro-VM cannot work: move "
                f"or clone it to a path without (e.g. ~/rdma-course)")
    return None


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m grader grade",
                                 description="grade a tree shaped like "
                                             "skeletons/ (make grade)")
    ap.add_argument("--src", default="skeletons")
    ap.add_argument("--lesson", default="")
    ap.add_argument("--results", default="")
    ap.add_argument("--junit", default="")
    ap.add_argument("--test", default="",
                    help="only the tests whose name or title contains this")
    ap.add_argument("-v", "--verbose-failures", action="store_true",
                    help="every failure in full, not only each lesson's first")
    ap.add_argument("--hosts", default="1", choices=["1", "2"],
                    help="2: the program under test on host A of a linked "
                         "pair of micro-VMs, the reference peers on host B")
    args = ap.parse_args(argv)

    if path_problem():
        print(f"grader: {path_problem()}", file=sys.stderr)
        return 2
    src = Path(args.src).resolve()
    if not src.is_dir():
        print(f"SRC={args.src}: no such directory (expected a tree shaped "
              f"like skeletons/)", file=sys.stderr)
        return 2
    names = parse_lessons(args.lesson) if args.lesson else []

    if not integrity_ok():
        return 2
    prepare_grader()
    for name in lesson_names(COURSE, src, names):
        compile_lesson(COURSE, src, name)

    # Inside the course tree: a warm VM shares it already, and the
    # sandbox shows it read-only to the submission.
    outs = COURSE / "build" / "grade-out"
    outs.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix="rdma-grade.", dir=outs))
    try:
        os.chmod(out, 0o755)
        # Lessons that need no device (lesson.toml: device = false) are
        # graded right here, without booting the micro-VM.
        # HOSTS=2 asks for the linked pair whatever the lessons: lesson 16
        # (no device) grades a fresh capture of traffic across it there.
        device = args.hosts == "2" or any(needs_device(n) for n in
                                          (names or lesson_names(COURSE, src)))
        where = [str(COURSE / "vm-setup" / "with-rxe")] if device else []
        # Where a device is, through the warm grader when a warm VM runs
        # one (grader/session/client.c falls back to pytest itself).
        # The client's session gets the plugins' environment (PYTEST_ENV)
        # from the warm grader or, the cold way, from shards.main: no `env`
        # before it (a program's start is some 0.1 s under emulation).
        runner = ([str(grader_program(COURSE, "session/client.c")),
                   sys.executable, "--"]
                  if device and args.hosts != "2" else
                  ["env", *(f"{k}={v}" for k, v in PYTEST_ENV.items()),
                   sys.executable, "-m", "pytest"])
        cmd = [*runner,
               *pytest_args(src, out / "results.json", lesson=args.lesson,
                            junit=out / "junit.xml" if args.junit else None),
               f"--status={COURSE / '.grade' / 'status.json'}"]
        if args.test:
            cmd.append(f"--test={args.test}")
        if args.verbose_failures:
            cmd.append("--verbose-failures")
        if device and args.hosts == "2":
            # Host B serves host A: the peers run there (grader/evidence/remote.py).
            # The link between them is recorded on this host, in the output
            # directory (shared into A; the file is 0600: the grader reads
            # it, the sandboxed programs cannot): the wire tests
            # (grader/evidence/wire.py).
            cmd = [*where, "--pair", "--capture", str(out / "wire.pcap"),
                   shlex.join(cmd), ""]
        else:
            cmd = [*where, *cmd]
        rc = subprocess.run(cmd, cwd=COURSE).returncode
        if not (out / "results.json").exists():
            print(f"grader: no results were written (exit {rc}): grading "
                  f"did not run to its end", file=sys.stderr)
            return rc or 1
        keep_capture(out / "wire.pcap")
        for have, want in ((out / "results.json", args.results),
                           (out / "junit.xml", args.junit)):
            if want and have.exists():
                dest = Path(want)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(have, dest)
        return rc
    finally:
        shutil.rmtree(out, ignore_errors=True)


def keep_capture(pcap):
    """A HOSTS=2 grading's capture of the link, for the student to read
    (tshark -r .grade/wire.pcap, or lesson 16's roce_dump): copied once the
    VMs are off. A wire test's failure names frames of this file."""
    if pcap.exists() and pcap.stat().st_size:
        dest = COURSE / ".grade" / "wire.pcap"
        dest.parent.mkdir(exist_ok=True)
        shutil.copyfile(pcap, dest)


def build_main(argv):
    """python3 -m grader build SRC [NN-topic ...] - compile ahead."""
    if not argv:
        print("usage: python3 -m grader build SRC [NN-topic ...]",
              file=sys.stderr)
        return 2
    if path_problem():
        print(f"grader: {path_problem()}", file=sys.stderr)
        return 2
    src = Path(argv[0]).resolve()
    if not src.is_dir():
        print(f"SRC={argv[0]}: no such directory (expected a tree shaped "
              f"like skeletons/)", file=sys.stderr)
        return 2
    build_programs(COURSE)
    for name in lesson_names(COURSE, src, argv[1:]):
        compile_lesson(COURSE, src, name)
    return 0
