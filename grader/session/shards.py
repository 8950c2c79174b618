"""A grading split over the micro-VM's RDMA devices: the lessons in shards,
each shard a pytest session of its own on a device of its own, side by
side on the guest's vCPUs; their output in lesson order, their results as
one results.json, one status and one Score line.

    python3 -m grader.session.shards -- PYTEST_ARG...

What grader/session/client.c runs (cold, or forked by the warm grader).
The devices are $RDMA_DEVICES ("DEV,GID_INDEX,IP,NETDEV ..."; the micro-VM
makes one per vCPU, up to three): each has its own hw counters, its own
netdev (lesson 10 takes its port down) and its own address, so a shard's
evidence is its own lessons' alone. With one device, or one lesson, it is
exactly `pytest.main(PYTEST_ARG...)`.

pytest-xdist would spread tests the same way, but its workers are fresh
interpreters: each would import pytest and the grader again, which the
warm grader exists to avoid. The shards are forks of this process.
"""

import json
import os
import re
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from grader.core.course import COURSE
from grader.session import forked, report

# Seconds a lesson took when last graded by shards (in the course's
# build/): the next grading balances its shards with them.
TIMES = Path("build") / "grade" / "lesson-times.json"
HEADER = re.compile(r"^== (\d\d)-\S+: .* ==$")
DEFAULT_SECONDS = 15.0


def devices(env=os.environ):
    """[(device, gid index, ip, netdev)] of $RDMA_DEVICES."""
    out = []
    for item in env.get("RDMA_DEVICES", "").split():
        f = item.split(",")
        if len(f) == 4:
            out.append(tuple(f))
    return out


def _opt(args, name):
    """The value of --name=VALUE or --name VALUE in args (the last one),
    or None."""
    val = None
    for i, a in enumerate(args):
        if a.startswith(f"--{name}="):
            val = a.split("=", 1)[1]
        elif a == f"--{name}" and i + 1 < len(args):
            val = args[i + 1]
    return val


def _without(args, *names):
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in {f"--{n}" for n in names}:
            skip = True
        elif not any(a.startswith(f"--{n}=") for n in names):
            out.append(a)
    return out


def lessons_of(args):
    """The lessons (numbers) a grading selects: --lesson=, or every lesson
    with tests."""
    course = Path(_opt(args, "course-root") or COURSE)
    chosen = _opt(args, "lesson")
    every = sorted({f.name[5:7] for f in (course / "grader" / "lessons")
                    .glob("test_[0-9][0-9]_*.py")})
    if not chosen:
        return every
    out = []
    for tok in re.split(r"[,\s]+", chosen):
        m = re.match(r"^(\d{1,2})", tok)
        if m and m.group(1).zfill(2) in every:
            out.append(m.group(1).zfill(2))
    return out


def plan(lessons, k, seconds):
    """`lessons` in at most `k` shards of about equal time (longest
    first onto the least loaded), each shard's lessons in order."""
    shards = [[] for _ in range(min(k, len(lessons)))]
    load = [0.0] * len(shards)
    for num in sorted(lessons, key=lambda n: -seconds.get(n, DEFAULT_SECONDS)):
        i = load.index(min(load))
        shards[i].append(num)
        load[i] += seconds.get(num, DEFAULT_SECONDS)
    return [sorted(s) for s in shards if s]


def _times(course):
    try:
        return {k: float(v) for k, v in
                json.loads((course / TIMES).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _save_times(course, results):
    took = _times(course)
    per = {}
    for r in results:
        for t in r.get("tests", []):
            num = t["name"][:2]
            per[num] = per.get(num, 0.0) + t.get("execution_time", 0.0)
    took.update({k: round(v, 1) for k, v in per.items()})
    path = course / TIMES
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}")
        tmp.write_text(json.dumps(took, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


class Shard:
    def __init__(self, n, lessons, device, work):
        self.n, self.lessons, self.device = n, lessons, device
        self.out = work / f"shard{n}.out"
        self.results = work / f"shard{n}.json"
        self.junit = work / f"shard{n}.xml"
        self.summary = work / f"shard{n}.summary.json"
        self.pid = None
        self.status = None
        self.pos = 0            # bytes of out already split into blocks
        self.partial = ""
        self.blocks = {}        # lesson -> [lines]
        self.current = None
        self.pre = []           # lines before its first lesson

    def env(self):
        dev, gid, ip, netdev = self.device
        env = dict(os.environ)
        env.update(RDMA_DEVICE=dev, RDMA_GID_INDEX=gid, RDMA_IP=ip,
                   RDMA_NETDEV=netdev)
        return env

    def read(self):
        """Split what the shard printed since the last call into its
        lessons' blocks; the lessons whose block is complete."""
        try:
            with open(self.out, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            data = b""
        self.pos += len(data)
        text = self.partial + data.decode("utf-8", "replace")
        lines = text.split("\n")
        self.partial = lines.pop()
        done = []
        for line in lines:
            m = HEADER.match(line)
            if m and m.group(1) in self.lessons:
                if self.current is not None:
                    done.append(self.current)
                self.current = m.group(1)
                self.blocks[self.current] = self.pre + [line]
                self.pre = []
            elif self.current is None:
                self.pre.append(line)
            else:
                self.blocks[self.current].append(line)
        if self.status is not None:
            if self.partial:
                (self.blocks[self.current] if self.current else
                 self.pre).append(self.partial)
                self.partial = ""
            if self.current is not None:
                done.append(self.current)
                self.current = None
        return done


def score_line(data):
    """The plugin's Score line, of merged results."""
    return report.score_line(data["score"], data["max_score"],
                             data.get("graded_on_submission", 0))


class Compactor:
    """The lessons' blocks as one session shows them: after the first
    lesson short of full marks, the others as their subtotal line only
    (unless V=1), then the command to run next."""

    def __init__(self, args, course):
        self.full = "--verbose-failures" in args
        self.unfinished = None
        self.noted = False
        src = _opt(args, "src")
        self.src_arg = ("" if not src or Path(src).resolve()
                        == (course / "skeletons").resolve() else f" SRC={src}")

    def lines(self, block):
        subtotals = [x for x in block if report.SUBTOTAL.match(x)]
        if self.unfinished is not None and not self.full and subtotals:
            note = [] if self.noted else [report.compact_note(
                self.unfinished)]
            self.noted = True
            short = subtotals[-1]
            if any("does not compile" in x for x in block):
                short += " (does not compile)"
            block = note + [short]
        if self.unfinished is None and subtotals:
            self.unfinished = report.short_of_full(subtotals[-1])
        return block

    def next_step(self):
        if self.unfinished is None:
            return None
        # (a sharded grading has two lessons or more)
        return report.next_step(self.unfinished, self.src_arg, True)


def _merge_results(shards, path):
    data = {"score": 0, "max_score": 0, "execution_time": 0.0,
            "tests": []}
    got = []
    for s in shards:
        try:
            r = json.loads(s.results.read_text())
        except (OSError, ValueError):
            continue
        got.append(r)
        data["score"] += r["score"]
        data["max_score"] += r["max_score"]
        data["execution_time"] = max(data["execution_time"],
                                     r.get("execution_time", 0))
        data["tests"] += r["tests"]
        data["output"] = r.get("output", "")
        if r.get("graded_on_submission"):
            data["graded_on_submission"] = (data.get("graded_on_submission", 0)
                                            + r["graded_on_submission"])
    order = {n: i for i, n in enumerate(sorted({t["name"][:2] for t in
                                                 data["tests"]}))}
    data["tests"].sort(key=lambda t: order[t["name"][:2]])
    src = (data.get("output") or "").rsplit("(", 1)[-1].rstrip(")")
    data["output"] = f"{score_line(data)} ({src})"
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
    return data, got


def _merge_junit(shards, path):
    suites = ET.Element("testsuites")
    for s in shards:
        try:
            root = ET.parse(s.junit).getroot()
        except (OSError, ET.ParseError):
            continue
        for suite in ([root] if root.tag == "testsuite" else list(root)):
            suites.append(suite)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def _merge_summary(shards, path):
    lessons = {}
    for s in shards:
        try:
            lessons.update(json.loads(s.summary.read_text())["lessons"])
        except (OSError, ValueError, KeyError):
            pass
    Path(path).write_text(json.dumps({"lessons": dict(sorted(
        lessons.items()))}, indent=2) + "\n")


def run(args):
    """Grade as `pytest.main(args)` would, in shards when there are
    devices for them; the exit status."""
    import pytest
    lessons = lessons_of(args)
    devs = devices()
    if len(devs) < 2 or len(lessons) < 2:
        return int(pytest.main(args))
    course = Path(_opt(args, "course-root") or COURSE)
    shards_of = plan(lessons, len(devs), _times(course))
    # Imported here once, not in every shard (nothing, in a warm grader).
    forked.warm_imports(set(lessons))
    work = Path(tempfile.mkdtemp(prefix="rdma-shards."))
    results, junit = _opt(args, "results"), _opt(args, "junitxml")
    summary = _opt(args, "summary")
    base = _without(args, "lesson", "results", "junitxml", "summary")
    shards = [Shard(i, ls, devs[i], work) for i, ls in enumerate(shards_of)]
    for s in shards:
        shard_args = [*base, f"--lesson={','.join(s.lessons)}",
                      f"--results={s.results}", "--no-score"]
        if junit:
            shard_args.append(f"--junitxml={s.junit}")
        if summary:
            shard_args.append(f"--summary={s.summary}")
        fd = os.open(s.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        s.pid = forked.fork_session(shard_args, stdio=[0, fd, fd],
                                    env=s.env(), setsid=False)
        os.close(fd)
    order = [n for n in lessons]
    owner = {n: s for s in shards for n in s.lessons}
    shown = 0
    complete = set()
    compact = Compactor(args, course)
    try:
        while shown < len(order):
            for s in shards:
                if s.status is None:
                    done, status = os.waitpid(s.pid, os.WNOHANG)
                    if done:
                        s.status = os.waitstatus_to_exitcode(status)
                complete.update(s.read())
            while shown < len(order) and order[shown] in complete:
                s = owner[order[shown]]
                lines = compact.lines(s.blocks.pop(order[shown], []))
                sys.stdout.write("".join(line + "\n" for line in lines))
                sys.stdout.flush()
                shown += 1
            if shown < len(order):
                if all(s.status is not None for s in shards):
                    # A shard ended without some of its lessons' output.
                    for n in order[shown:]:
                        sys.stdout.write("".join(
                            line + "\n" for line in
                            compact.lines(owner[n].blocks.pop(n, []))))
                    break
                time.sleep(0.1)
        for s in shards:
            if s.status is None:
                s.status = os.waitstatus_to_exitcode(os.waitpid(s.pid, 0)[1])
            s.read()
            tail = s.pre + ([s.partial] if s.partial else [])
            if any(line.strip() for line in tail):
                sys.stdout.write("".join(line + "\n" for line in tail))
        data, got = _merge_results(shards, results)
        _save_times(course, got)
        if junit:
            _merge_junit(shards, junit)
        if summary:
            _merge_summary(shards, summary)
        if data["max_score"]:
            step = compact.next_step()
            if step:
                print(step)
            print(score_line(data), flush=True)
        codes = [s.status for s in shards]
        return next((c for c in codes if c not in (0, 1)), max(codes))
    finally:
        for s in shards:
            if s.status is None:
                forked.end_session(s.pid)
        for f in work.iterdir():
            f.unlink()
        work.rmdir()


def main(argv):
    if argv[:1] == ["--"]:
        argv = argv[1:]
    # The plugins are make grade's and no others, as in a session the warm
    # grader forks (forked.PYTEST_ENV): client.c's cold way comes here.
    os.environ.update(forked.PYTEST_ENV)
    return run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
