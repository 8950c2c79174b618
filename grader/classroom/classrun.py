"""python3 -m grader grade-class (make grade-class): grade every submission
of a class into a gradebook (gradebook.py).

    python3 -m grader grade-class --submissions DIR --out DIR [--jobs N]
        [--lesson L] [--deadline ISO-TIME] [--prelab NN=ISO-TIME ...]
        [--force] [--roster FILE] [--batch N] [--timeout S] [--similarity]

A submission is a subdirectory of DIR per student: a tree shaped like
skeletons/, or a clone of the student repository (its skeletons/ is graded;
with --deadline, at its last commit before the deadline). A lesson with a
pre-lab (lesson.toml: prelab, the files of the part to be done first: lesson
09's predictions.c) can be given its own, earlier deadline, --prelab
09=ISO-TIME: those files are graded as they were at the student's last
commit before it (written into the lesson's build, prelab/, where the
lesson's tests read them).

Built on grade.py's way of grading: the integrity check, compiling every
lesson on the host (grader/core/build.py), then pytest with the grader plugin and
--prebuilt where a device exists. What this adds is amortising the VM:

  - a batch of up to --batch submissions is graded in one micro-VM boot by
    `python3 -m grader class-run SPEC` (run_batch below), which imports pytest
    and the grader once and forks one fresh pytest session per submission:
    a submission's programs, its sandbox and its time budget are its own,
    and whatever it left is killed before the next one starts;
  - --jobs VMs run side by side, each taking the next batch.

Per student, OUT/<student>/ holds results.json (Gradescope's shape),
junit.xml, summary.json, console.log (what make grade would have printed),
transcripts/ and row.json; OUT/gradebook.csv has one row per student and
OUT/report.html the class report (report.py); with --similarity,
OUT/similarity.html lists similar submissions (similarity.py). A
re-run keeps rows already graded (same commit) unless --force. An
infrastructure failure (the VM did not boot, the grader died) is retried
once, then marked infra-error: never scored as the student's 0.
"""

import argparse
import collections
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote, unquote

import tomllib

from grader.core.build import PRELAB, build_dir, compile_lesson
from grader.core.course import (COURSE, lesson_names, needs_device,
                                parse_lessons)
from grader.core import procs
from grader.session import forked
from grader.run.grade import (integrity_ok, prepare_grader,
                    pytest_args)

from grader.classroom.gradebook import Gradebook

STATUSES = ("graded", "build-failed", "timed-out", "infra-error", "empty")
DONE = {"graded", "build-failed", "timed-out", "empty"}   # not graded again
DEFAULT_TIMEOUT = 1200      # seconds for one submission's whole grading


# ---- a submission: which tree, which commit ----------------------------------

def _git(repo, *args, timeout=60):
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo),
                           *args], capture_output=True, text=True,
                          timeout=timeout)


def resolve(sub, work, deadline):
    """(tree to grade or None, commit, commit time, note) of submission
    directory `sub`. A git clone with a deadline is exported at its last
    commit before it into `work`."""
    if (sub / ".git").exists():
        spec = ["-1", "--format=%H %cI"] + ([f"--before={deadline}"]
                                            if deadline else []) + ["HEAD"]
        res = _git(sub, "log", *spec)
        line = res.stdout.strip()
        if res.returncode != 0 or not line:
            if deadline:
                return None, "", "", f"no commit before {deadline}"
            return None, "", "", "a git repository without commits"
        commit, when = line.split(" ", 1)
        tree = sub
        if deadline:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            arch = subprocess.run(
                f"git -c safe.directory='*' -C '{sub}' archive --format=tar "
                f"{commit} | tar -x -C '{work}'", shell=True,
                capture_output=True, text=True, timeout=300)
            if arch.returncode != 0:
                return None, commit, when, "git archive failed: " + \
                    arch.stderr.strip()[-200:]
            tree = work
        src = tree / "skeletons" if (tree / "skeletons").is_dir() else tree
        return src, commit, when, ""
    note = "no git history: DEADLINE not applied" if deadline else ""
    src = sub / "skeletons" if (sub / "skeletons").is_dir() else sub
    return src, "", "", note


# A tree whose path has another character (a space: "ann lee/") is graded
# from a copy: the build reads the compiler's dependency lists, which
# split at spaces, and names its directory after the path.
SAFE_PATH = re.compile(r"[A-Za-z0-9._/+-]+")


def safe_copy(src, dst):
    """@src's lesson directories (NN-topic/) copied to @dst (a path of
    SAFE_PATH's characters); @dst."""
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for d in sorted(src.glob("[0-9][0-9]-*")):
        if d.is_dir() and not d.is_symlink():
            shutil.copytree(d, dst / d.name, symlinks=True)
    return dst


def changed_lessons(src, names):
    """The lessons of `names` for which SRC has a .c/.h file that is not
    byte for byte the course's skeleton."""
    changed = []
    for name in names:
        d = src / name
        if not d.is_dir():
            continue
        for f in d.iterdir():
            if f.suffix not in (".c", ".h") or not f.is_file():
                continue
            skel = COURSE / "skeletons" / name / f.name
            if not skel.is_file() or skel.read_bytes() != f.read_bytes():
                changed.append(name)
                break
    return changed

def write_prelab(sub, name, deadline):
    """The pre-lab's files of lesson @name as they were at the
    submission's last commit before its pre-lab deadline, into the
    lesson's build (prelab/), with prelab.json: commit, when,
    deadline, note (commit empty: nothing to grade)."""
    files = tomllib.loads((COURSE / "lessons" / name / "lesson.toml")
                          .read_text()).get("prelab", [])
    d = build_dir(COURSE, sub.src, name) / PRELAB
    d.mkdir(parents=True, exist_ok=True)
    info = {"deadline": deadline, "commit": "", "when": "", "note": ""}
    if not (sub.path / ".git").exists():
        # No history: the tree's own files, as DEADLINE does.
        for f in files:
            if (sub.src / name / f).is_file():
                shutil.copyfile(sub.src / name / f, d / f)
        info.update(commit="(no git history)", note="no git history: "
                    "the pre-lab deadline was not applied")
    else:
        res = _git(sub.path, "log", "-1", "--format=%H %cI",
                   f"--before={deadline}", "HEAD")
        line = res.stdout.strip()
        if res.returncode != 0 or not line:
            info["note"] = f"no commit before {deadline}"
        else:
            commit, when = line.split(" ", 1)
            prefix = "skeletons/" if (sub.path / "skeletons").is_dir() \
                else ""
            for f in files:
                shown = _git(sub.path, "show",
                             f"{commit}:{prefix}{name}/{f}")
                if shown.returncode == 0:
                    (d / f).write_text(shown.stdout)
            info.update(commit=commit, when=when)
    (d / "prelab.json").write_text(json.dumps(info, indent=2) + "\n")
    sub.note = "; ".join(x for x in (sub.note, (
        f"pre-lab {name[:2]}: " + (f"commit {info['commit'][:12]} "
                                   f"({info['when']})" if info["when"]
                                   else info["note"]))) if x)


# ---- in the VM: grading a batch, one pytest session per submission -----------

BUILD_WAIT = 1800           # seconds the runner waits for a submission's build


def _wait_for(path, secs):
    deadline = time.monotonic() + secs
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def run_batch(spec_path):
    """python3 -m grader class-run SPEC: grade the batch SPEC describes,
    printing `class-run: begin NAME` and `class-run: end NAME rc=N
    killed=0|1 secs=S` for each (NAME %-quoted: a student's directory
    may have spaces): one session forked per submission
    (grader/session/forked.py)."""
    spec = json.loads(Path(spec_path).read_text())
    os.chdir(COURSE)
    forked.warm_imports()
    print("class-run: ready", flush=True)
    group = f"rdma-class.{os.getpid()}"
    for n, item in enumerate(spec["items"]):
        out = Path(item["out"])
        out.mkdir(parents=True, exist_ok=True)
        if not _wait_for(Path(item["built"]), BUILD_WAIT):
            print(f"class-run: lost {quote(item['name'])}: its builds did not "
                  f"come within {BUILD_WAIT} s", flush=True)
            continue
        args = pytest_args(item["src"], out / "results.json",
                           lesson=item["lesson"], junit=out / "junit.xml",
                           transcripts=out / "transcripts")
        args.append(f"--summary={out / 'summary.json'}")
        print(f"class-run: begin {quote(item['name'])}", flush=True)
        cg = forked.session_cgroup(group, f"s{n}")
        t0 = time.monotonic()
        pid = forked.fork_session(args, cgroup=cg,
                                  log=out / "console.log")
        rc, killed = forked.wait_session(
            pid, float(spec.get("timeout", DEFAULT_TIMEOUT)), cg)
        killed = int(killed)
        forked.end_session(pid, cg)
        print(f"class-run: end {quote(item['name'])} rc={rc} killed={killed} "
              f"secs={time.monotonic() - t0:.1f}", flush=True)
    root = procs.cgroup2_root()
    if os.geteuid() == 0 and root is not None:
        procs.kill_cgroup(root / group)
    return 0


# ---- on the host: the class ----------------------------------------------------

class Sub:
    def __init__(self, name, path):
        self.name, self.path = name, path
        self.src = None
        self.commit = self.when = self.note = ""
        self.lessons = []           # lessons with work in them
        self.compiled = {}          # lesson -> compile_lesson() dict
        self.attempts = 0
        self.requeued = 0



class ClassRun:
    """Grading a class into a Gradebook: the submissions resolved, compiled
    on the host, graded in batches, --jobs VMs side by side, an
    infrastructure failure retried once."""

    def __init__(self, args):
        self.args = args
        self.subdir = Path(args.submissions).resolve()
        self.names = (parse_lessons(args.lesson) if args.lesson
                      else lesson_names(COURSE, COURSE))
        self.exercises = [n for n in self.names
                          if (COURSE / "skeletons" / n).is_dir()]
        self.book = Gradebook(args.out, self.names,
                              getattr(args, "timeout", DEFAULT_TIMEOUT))
        self.out = self.book.out
        self.lock = threading.Lock()
        self.queue = collections.deque()
        self.work = None
        self.live = set()
        # lesson number -> its pre-lab deadline (--prelab 09=TIME)
        self.prelabs = dict(x.split("=", 1) for x in args.prelab or [])

    def run_batch(self, batch, jobno):
        where = Path(tempfile.mkdtemp(prefix=f"class.{jobno}.",
                                      dir=self.work))
        os.chmod(where, 0o755)
        items = [{"name": s.name, "src": str(s.src), "out": str(where / s.name),
                  "lesson": ",".join(s.lessons),
                  "built": str(where / f"{s.name}.built")} for s in batch]
        spec = where / "spec.json"
        spec.write_text(json.dumps({"items": items,
                                    "timeout": self.args.timeout}))
        needs_vm = any(needs_device(n) for s in batch for n in s.lessons)
        cmd = ([str(COURSE / "vm-setup" / "with-rxe")] if needs_vm else []) + \
            [sys.executable, "-m", "grader", "class-run", str(spec)]
        env = dict(os.environ, RXE_VM_TIMEOUT=str(
            len(batch) * self.args.timeout + 300))
        ended, begun, ready = {}, None, False
        self_infra = []
        log = where / "vm.log"
        with open(log, "w") as logf:
            proc = subprocess.Popen(cmd, cwd=COURSE, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=logf,
                                    stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            with self.lock:
                self.live.add(proc)
            # The VM boots while the host compiles: each submission's
            # marker file tells the runner its builds are there.
            compiler = threading.Thread(target=self.compile_batch,
                                        args=(batch, items), daemon=True)
            compiler.start()
            byname = {s.name: s for s in batch}
            for line in proc.stdout:
                logf.write(line)
                logf.flush()
                w = line.split()
                if line.startswith("class-run: ready"):
                    ready = True
                elif line.startswith("class-run: begin") and len(w) >= 3:
                    begun = unquote(w[2])
                elif line.startswith("class-run: end") and len(w) >= 5:
                    kv = dict(x.split("=", 1) for x in w[3:] if "=" in x)
                    ended[unquote(w[2])] = kv
                    begun = None
                    sub = byname[unquote(w[2])]
                    if not self.book.finish(sub, where / sub.name,
                                       kv.get("rc"), kv.get("killed") == "1"):
                        self_infra.append(sub)
                        self.retry(sub, "the grader wrote no results "
                                   f"(exit {kv.get('rc')})")
            rc = proc.wait()
            compiler.join()
            with self.lock:
                self.live.discard(proc)
        for sub in batch:
            if sub.name in ended:
                continue
            if sub.name == begun or not ready:
                why = (f"the VM stopped while grading it (exit {rc})"
                       if ready else f"the VM did not start (exit {rc})")
                self_infra.append(sub)
                self.retry(sub, why)
            else:                       # not started: no fault of its own
                sub.requeued += 1
                if sub.requeued > 3:
                    self_infra.append(sub)
                    self.retry(sub, "its batch never reached it")
                    continue
                with self.lock:
                    self.queue.append(sub)
        if self_infra:
            dest = self.out / "infra-logs"
            dest.mkdir(exist_ok=True)
            shutil.copyfile(log, dest / f"{where.name}.log")
        if os.environ.get("GRADE_CLASS_KEEP") != "1":
            shutil.rmtree(where, ignore_errors=True)

    def compile_batch(self, batch, items):
        for sub, item in zip(batch, items):
            try:
                for name in sub.lessons:
                    sub.compiled[name] = compile_lesson(COURSE, sub.src, name)
                    if name[:2] in self.prelabs:
                        write_prelab(sub, name, self.prelabs[name[:2]])
            finally:
                Path(item["built"]).write_text("")

    def retry(self, sub, why):
        sub.attempts += 1
        if sub.attempts < 2:
            with self.lock:
                self.queue.append(sub)
            return
        self.book.write_row(sub, "infra-error", {}, {},
                       f"{why}; tried twice, not scored "
                       f"(see {self.out / 'infra-logs'})")

    def similarity(self, subs):
        """SIMILARITY=1: the list of similar submissions, into OUT (the
        report links it). Never a reason to fail the grading."""
        from grader.classroom import similarity
        try:
            similarity.run({s.name: s.src for s in subs}, self.exercises,
                           self.out)
        except Exception as e:      # noqa: BLE001 - the grades stand
            print(f"similarity: failed ({e!r}): make similarity "
                  f"SUBMISSIONS={self.args.submissions} OUT={self.out} "
                  f"runs it again", file=sys.stderr)

    def report(self):
        """OUT/report.html, rebuilt from everything OUT holds (rows
        kept from an earlier run too)."""
        from grader.classroom import report
        try:
            report.build(self.out)
        except Exception as e:      # noqa: BLE001 - the grades stand
            print(f"class report: failed ({e!r}): make class-report "
                  f"OUT={self.out} builds it again", file=sys.stderr)

    def worker(self, jobno):
        while True:
            with self.lock:
                if not self.queue:
                    return
                left = len(self.queue)
                n = min(self.args.batch, max(1, -(-left // self.args.jobs)))
                batch = [self.queue.popleft() for _ in range(min(n, left))]
            try:
                self.run_batch(batch, jobno)
            except Exception as e:      # noqa: BLE001 - the class goes on
                for sub in batch:
                    if sub.name not in self.book.rows:
                        self.retry(sub, f"the batch failed: {e!r}")

    def run(self):
        if not self.subdir.is_dir():
            print(f"SUBMISSIONS={self.args.submissions}: no such directory",
                  file=sys.stderr)
            return 2
        if self.out.is_relative_to(self.subdir) or \
                self.subdir.is_relative_to(self.out):
            print(f"OUT={self.args.out} and SUBMISSIONS="
                  f"{self.args.submissions} must be apart (neither inside "
                  f"the other): a student's directory in OUT is made afresh",
                  file=sys.stderr)
            return 2
        if not integrity_ok():
            return 2
        prepare_grader()
        self.out.mkdir(parents=True, exist_ok=True)
        outs = COURSE / "build" / "grade-out"
        outs.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="class.", dir=outs))
        os.chmod(self.work, 0o755)
        subs = [Sub(p.name, p) for p in sorted(self.subdir.iterdir())
                if p.is_dir() and not p.name.startswith(".")]
        self.book.total = len(subs)
        skipped = 0
        try:
            for n, sub in enumerate(subs):
                old = self.book.old_row(sub.name)
                sub.src, sub.commit, sub.when, sub.note = resolve(
                    sub.path, self.work / "trees" / sub.name,
                    self.args.deadline)
                if sub.src and not SAFE_PATH.fullmatch(str(sub.src)):
                    try:
                        sub.src = safe_copy(sub.src, self.work / "safe" / (
                            f"{n:04d}-" + re.sub(r"[^A-Za-z0-9._+-]", "_",
                                                 sub.name)))
                    except OSError as e:    # (shutil.Error is one)
                        sub.note = "; ".join(x for x in (
                            sub.note, f"not copied to a path without "
                            f"spaces ({str(e)[:200]})") if x)
                if old and not self.args.force and old["status"] in DONE \
                        and old.get("commit", "") == sub.commit:
                    self.book.keep(sub.name, old)
                    skipped += 1
                    continue
                sub.lessons = (changed_lessons(sub.src, self.exercises)
                               if sub.src else [])
                # Lessons without a skeleton (00: the device) are graded
                # with any submission that has work.
                # What an earlier grading of this student left goes.
                shutil.rmtree(self.out / sub.name, ignore_errors=True)
                if sub.lessons:
                    sub.lessons = sorted(set(sub.lessons) | {
                        n for n in self.names if n not in self.exercises})
                    self.queue.append(sub)
                else:
                    self.book.write_row(sub, "empty", {}, {}, "" if sub.src else
                                   "nothing to grade")
            self.book.started_n = len(self.queue)
            if skipped:
                print(f"grade-class: {skipped} already graded, kept (FORCE=1 "
                      f"grades them again)", file=sys.stderr)
            self.book.progress()
            threads = [threading.Thread(target=self.worker, args=(j,))
                       for j in range(self.args.jobs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if getattr(self.args, "similarity", False):
                # Before the trees exported at the deadline go: the files
                # compared are the ones graded.
                self.similarity(subs)
        except KeyboardInterrupt:
            with self.lock:
                self.queue.clear()
                for p in self.live:
                    try:
                        os.killpg(p.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            raise
        finally:
            if os.environ.get("GRADE_CLASS_KEEP") != "1":
                shutil.rmtree(self.work, ignore_errors=True)
        self.book.progress(final=True)
        self.book.write_gradebook()
        if self.args.roster:
            self.book.write_canvas(Path(self.args.roster))
        self.report()
        bad = sum(1 for r in self.book.rows.values() if r["status"] == "infra-error")
        print(f"gradebook: {self.out / 'gradebook.csv'}"
              + (f" ({bad} infra-error: run again to retry them)" if bad
                 else ""))
        return 1 if bad else 0


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m grader grade-class",
                                 description="grade every submission of a "
                                             "class (make grade-class)")
    ap.add_argument("--submissions", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--lesson", default="")
    ap.add_argument("--deadline", default="")
    ap.add_argument("--prelab", action="append", default=[],
                    metavar="NN=ISO-TIME",
                    help="grade lesson NN's pre-lab files (lesson.toml: "
                         "prelab) at the last commit before ISO-TIME")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--roster", default="")
    ap.add_argument("--batch", type=int, default=8,
                    help="submissions graded per VM boot (default 8)")
    ap.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT,
                    help="seconds for one submission's grading")
    ap.add_argument("--similarity", action="store_true",
                    help="also list similar submissions (similarity.py) "
                         "into OUT/similarity.html")
    args = ap.parse_args(argv)
    if args.deadline:
        try:
            datetime.datetime.fromisoformat(args.deadline)
        except ValueError:
            print(f"DEADLINE={args.deadline}: not an ISO time (e.g. "
                  f"2026-12-01T23:59:00+01:00)", file=sys.stderr)
            return 2
    prelabs = [p for x in args.prelab for p in x.replace(",", " ").split()]
    for p in prelabs:
        num, _, when = p.partition("=")
        try:
            datetime.datetime.fromisoformat(when)
            lesson = parse_lessons(num)[0]
            files = tomllib.loads((COURSE / "lessons" / lesson /
                                   "lesson.toml").read_text()).get("prelab")
        except (ValueError, IndexError, OSError, SystemExit):
            files = None
        if not files:
            print(f"PRELAB={p}: expected NN=ISO-TIME for a lesson with a "
                  f"pre-lab (lesson.toml: prelab), e.g. "
                  f"09=2026-11-20T23:59:00+01:00", file=sys.stderr)
            return 2
    args.prelab = [f"{parse_lessons(p.partition('=')[0])[0][:2]}="
                   f"{p.partition('=')[2]}" for p in prelabs]
    if args.jobs < 1 or args.batch < 1:
        print("JOBS and BATCH must be at least 1", file=sys.stderr)
        return 2
    return ClassRun(args).run()


def class_run_main(argv):
    if len(argv) != 1:
        print("usage: python3 -m grader class-run SPEC", file=sys.stderr)
        return 2
    return run_batch(argv[0])
