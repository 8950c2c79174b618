"""pytest plugin: gradelib-style grading of the course's lessons.

    python3 -m pytest -c grader/pytest.ini -p grader.session.plugin grader/lessons \
        --src=skeletons [--lesson=05,06] [--results=results.json]

One line per test (`title ... OK (0.8s)`), a subtotal per lesson, `Score: N/M`
last; pytest exits non-zero when points are missing. A failing test's
transcript is saved under .grade/transcripts/ and its path printed with the
lesson's hint. `make grade` runs this inside vm-setup/with-rxe.
"""

import os
import re
import resource
import time
from pathlib import Path

import pytest

from grader.core import harness
from grader.session import forked, records, report, symptoms
from grader.session.lesson import (LESSON_FILE, Build, GradedOnSubmission,
                                   Lesson, find_lessons, parse_lesson_arg,
                                   short_test_name)
from grader.core.build import build_dir
from grader.core.course import COURSE as COURSE_DEFAULT
from grader.core.harness import GradeFailure
from grader.evidence.rxe import Rdma
from grader.evidence.trusted import run as peers
from grader.evidence.sandbox import Sandbox

# ---- the plugin ---------------------------------------------------------------

def own_words(transcript, msg, lines=3):
    """When the submission's last program ended in failure and the failure
    message does not show why in its words (a reference peer's verdict, a
    closed connection), its last lines of stderr: the program's own error
    is often the cause ('reply: completion error: RNR retry counter
    exceeded'). "" otherwise."""
    runs = [r for r, student in transcript.runs if student]
    if not runs:
        return ""
    r = runs[-1]
    if not (r.timed_out or r.signal or r.returncode not in (0, None)):
        return ""
    tail = [x for x in r.stderr.rstrip("\n").splitlines() if x.strip()]
    tail = tail[-lines:]
    if not tail or all(x in msg for x in tail):
        return ""
    progs = [str(c) for c in r.cmd if "/build/grade/" in str(c)]
    name = os.path.basename(progs[0] if progs else str(r.cmd[0]))
    return (f"\n{name} {r.status()}; its stderr ended:\n"
            + "\n".join(f"  | {x}" for x in tail))


def pytest_addoption(parser):
    g = parser.getgroup("rdma-course grader")
    g.addoption("--src", default="skeletons",
                help="tree shaped like skeletons/ to grade (default: skeletons)")
    g.addoption("--lesson", default="",
                help="grade only these lessons: 05 or 05,06")
    g.addoption("--results", default="",
                help="write Gradescope's results.json here")
    g.addoption("--transcripts", default=".grade/transcripts",
                help="where failed tests' transcripts go")
    g.addoption("--course-root", default=str(COURSE_DEFAULT),
                help="the course tree (default: the one holding this grader)")
    g.addoption("--test", default="",
                help="run only the tests whose function name or title "
                     "contains this (make grade TEST=...)")
    g.addoption("--status", default="",
                help="record each lesson's points here for make status "
                     "(.grade/status.json)")
    g.addoption("--verbose-failures", action="store_true",
                help="show every failure in full, not only each lesson's "
                     "first (make grade V=1)")
    g.addoption("--summary", default="",
                help="write each lesson's points, whether it compiled and "
                     "whether a program hung, as JSON (make grade-class)")
    g.addoption("--no-score", action="store_true",
                help="a shard of a grading: every lesson in full, no next: "
                     "and Score lines (grader/session/shards.py prints "
                     "the whole's)")
    g.addoption("--first-loss", action="store_true",
                help="the rest of a lesson is not run once it lost a point "
                     "(the self-check's skeletons: they need only fall "
                     "short of full marks; the rest earns nothing)")
    g.addoption("--prebuilt", action="store_true",
                help="use the builds `python3 -m grader build SRC` made; "
                     "never read SRC (make grade compiles on the host)")


def _raise_memlock():
    """As much of RLIMIT_MEMLOCK as this process may have."""
    inf = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    for want in ((inf, inf), (hard, hard)):
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, want)
            return
        except (ValueError, OSError):
            pass


class Grader:
    def __init__(self, config):
        self.config = config
        self.course = Path(config.getoption("course_root")).resolve()
        src = Path(config.getoption("src"))
        self.src = (src if src.is_absolute() else Path.cwd() / src).resolve()
        self.prebuilt = config.getoption("prebuilt")
        if not self.prebuilt and not self.src.is_dir():
            raise pytest.UsageError(f"SRC={config.getoption('src')}: no such "
                                    f"directory (expected a tree shaped like "
                                    f"skeletons/)")
        self.lessons = find_lessons(self.course)
        arg = config.getoption("lesson")
        self.only = parse_lesson_arg(arg, self.lessons) if arg else None
        self.transcripts = Path(config.getoption("transcripts"))
        self.results_path = config.getoption("results")
        self.loaded = {}            # number -> Lesson
        self.builds = {}            # number -> Build
        self.items = {}             # nodeid -> (lesson number, points, title)
        self.last_of_lesson = set()
        self.outcome = {}           # nodeid -> dict(passed, duration, output)
        self.causes = {}            # nodeid -> ids of the symptoms shown
        self.started = time.monotonic()
        self.tr = None
        self.test_filter = config.getoption("test")
        self.status_path = config.getoption("status")
        self.verbose = config.getoption("verbose_failures")
        self.first_loss = config.getoption("first_loss")
        self.shown_in_full = set()  # lessons whose first failure was shown
        self.hint_shown = set()     # nodeids whose failure showed its hint
        self.unfinished = None      # the first lesson short of full marks
        self.compact = set()        # lessons shown as their subtotal only
        self.all_tests = {}         # number -> {test: (points, title)}
        self.sandbox = None
        self.trusted = set()
        self.provers = {}           # nodeid -> nodeids that must confirm it
        self.finished = set()       # nodeids whose run is over
        self.held = []              # ... whose line waits for its provers
        self.unconfirmed = set()    # ... that passed, refused by confirm()

    # -- helpers --
    def lesson(self, num):
        if num not in self.loaded:
            self.loaded[num] = Lesson(self.lessons[num])
        return self.loaded[num]

    def build(self, num):
        if num not in self.builds:
            lesson = self.lesson(num)
            out = build_dir(self.course, self.src, lesson.name)
            self.builds[num] = Build(lesson, self.src, self.course, out,
                                     prebuilt=self.prebuilt,
                                     sandbox=self.get_sandbox())
            if lesson.warnings and num not in self.compact:
                self.write("  compiler warnings (reproduce: "
                           f"{self.builds[num].repro}):")
                for line in lesson.warnings.splitlines():
                    self.write("  | " + line)
        return self.builds[num]

    def write(self, line=""):
        if self.tr is None:
            self.tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.tr:
            self.tr.write_line(line)
        else:
            print(line, flush=True)

    def get_sandbox(self):
        """The sandbox student programs run in, made on first use."""
        if self.sandbox is None:
            # Inherited by every program: RDMA pins memory.
            _raise_memlock()
            outputs = [Path(p).resolve().parent for p in
                       (self.results_path,
                        self.config.getoption("xmlpath", None)) if p]
            self.sandbox = Sandbox(self.course, read_only=outputs)
            self.sandbox.trusted = self.trusted
            harness.track_trusted(self.trusted)
            if not self.sandbox.contained:
                self.write(f"note: {self.sandbox.why_not}")
        return self.sandbox

    # -- collection --
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        keep, dropped = [], []
        for item in items:
            m = LESSON_FILE.match(item.path.name)
            if not m or m.group(1) not in self.lessons:
                raise pytest.UsageError(f"{item.path}: a grader test file is "
                                        f"named test_NN_topic.py after a lesson "
                                        f"lessons/NN-*")
            num = m.group(1)
            if self.only and num not in self.only:
                dropped.append(item)
                continue
            mark = item.get_closest_marker("points")
            if not mark or len(mark.args) != 2:
                raise pytest.UsageError(f"{item.nodeid}: every grader test "
                                        f"needs @points(N, 'title')")
            self.all_tests.setdefault(num, {})[short_test_name(item.nodeid)] = \
                tuple(mark.args)
            if self.test_filter and not self.selected(item, mark.args[1]):
                dropped.append(item)
                continue
            self.items[item.nodeid] = (num, mark.args[0], mark.args[1])
            t = self.lesson(num).meta.get("test_timeout")
            if t and not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(int(t)))
            keep.append(item)
        if self.test_filter and not keep:
            raise pytest.UsageError(
                f"no test matches TEST={self.test_filter}; the tests "
                f"(function name: title) are:\n" + "\n".join(
                    f"  {i.originalname or i.name}: "
                    f"{i.get_closest_marker('points').args[1]}"
                    for i in items if i.get_closest_marker("points")))
        if self.only and not self.test_filter:
            missing = set(self.only) - {self.items[i.nodeid][0] for i in keep}
            if missing:
                raise pytest.UsageError("no grader tests for lesson(s) "
                                        + ", ".join(sorted(missing)))
        keep.sort(key=lambda i: self.items[i.nodeid][0])
        # A test of the student's pair that reference peers' tests must
        # confirm (@proven_by): its verdict waits for theirs.
        for item in keep:
            mark = item.get_closest_marker("proven_by")
            if mark:
                self.provers[item.nodeid] = [
                    n for n in self.items if self.items[n][0] ==
                    self.items[item.nodeid][0] and
                    n.rpartition("::")[2].split("[")[0] in mark.args]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        for a, b in zip(keep, keep[1:] + [None]):
            if b is None or self.items[a.nodeid][0] != self.items[b.nodeid][0]:
                self.last_of_lesson.add(a.nodeid)

    def pytest_collection_finish(self, session):
        # A warm grader's session: its tests wait for the grader's word
        # that no grader file changed (server.py). A session it made ready
        # ahead of the request gets the request's own output file too, and
        # its time starts now.
        word = forked.pass_gate()
        if word is not None:
            self.results_path = word.get("results") or self.results_path
            self.started = time.monotonic()

    def selected(self, item, title):
        """TEST=NAME: the tests whose name or title has NAME; TEST='!NAME':
        all the others (lesson 09's lab without its predictions)."""
        want = self.test_filter.lower()
        negate = want.startswith("!")
        want = want.lstrip("!")
        hit = (want in (item.originalname or item.name).lower()
               or want in title.lower())
        return hit != negate

    # -- running --
    def pytest_runtest_logstart(self, nodeid, location):
        num = self.items[nodeid][0]
        first = not any(self.items[n][0] == num for n in self.outcome)
        if first:
            # A hang in the last lesson cut its waits, not this one's.
            harness.limit_waits()
            lesson = self.lesson(num)
            if (self.unfinished and not self.verbose
                    and not self.config.getoption("no_score")):
                # Several lessons short of full marks: the first one in
                # detail, the others as their subtotal (make grade
                # LESSON=NN shows one, V=1 all).
                if not self.compact:
                    self.write(report.compact_note(self.unfinished))
                self.compact.add(num)
                return
            self.write(f"== {lesson.name}: {lesson.title} ==")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        if self.first_loss:
            num = self.items[item.nodeid][0]
            if any(self.items[n][0] == num and not r["passed"]
                   for n, r in self.outcome.items() if n != item.nodeid):
                pytest.skip("--first-loss: the lesson lost a point already")
        harness.new_transcript()
        self.get_sandbox().begin_test(item.name)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        yield
        left = self.sandbox.end_test() if self.sandbox else 0
        if left:
            harness.current_transcript().add(
                f"# the grader killed {left} process(es) the test's programs "
                f"had left running\n")

    def pytest_report_teststatus(self, report, config):
        # Our own lines replace pytest's progress letters.
        if report.when == "call" or (report.when == "setup" and report.failed):
            return report.outcome, "", ""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        nodeid = item.nodeid
        rec = self.outcome.setdefault(nodeid, {"passed": True, "duration": 0.0,
                                               "output": ""})
        rec["duration"] += report.duration
        if call.excinfo and call.excinfo.errisinstance(GradedOnSubmission):
            rec.update(passed=False, pending=True,
                       output=str(call.excinfo.value))
        elif report.failed:
            rec["passed"] = False
            if not rec["output"]:
                rec["output"] = self.failure_text(item, call, report)
        elif report.skipped:
            # A graded test that could not check anything earns nothing.
            rec["passed"] = False
            reason = (call.excinfo.value.msg if call.excinfo and
                      hasattr(call.excinfo.value, "msg") else "skipped")
            rec["output"] = f"not checked (skipped: {reason}): no points"

    def confirm(self, nodeid, rec):
        """The student's server with the student's client agree with each
        other: that pays only when the reference peers proved the same
        claim in this grading (their tests, @proven_by: its line waits
        for theirs). A reference test not graded this time (TEST=) is not
        held against it."""
        if not rec["passed"]:
            return
        failed = [n for n in self.provers[nodeid]
                  if not self.outcome.get(n, {}).get("passed", True)]
        if failed:
            n = failed[0]
            why = (self.outcome[n]["output"].splitlines() or [""])[0]
            self.unconfirmed.add(nodeid)
            rec["passed"] = False
            rec["output"] = (
                f"the program's server and client agree with each other, "
                f"but the reference peers do not confirm it: "
                f"'{self.items[n][2]}' failed in this grading ({why})\n"
                f"(that test's failure says what the reference peer found; "
                f"a pair that passes only with itself earns nothing here)")

    def failure_text(self, item, call, report):
        exc = call.excinfo
        if exc and isinstance(exc.value, GradeFailure):
            msg = str(exc.value)
        elif exc and exc.typename == "Failed" and "Timeout" in str(exc.value):
            msg = (f"the test did not finish within its time limit and was "
                   f"stopped: {str(exc.value).splitlines()[0]}")
        elif exc:
            msg = (f"{exc.typename}: {exc.value}\n(grader traceback)\n"
                   + str(report.longreprtext)[-2000:])
        else:
            msg = str(report.longreprtext)[-2000:]
        num = self.items[item.nodeid][0]
        lesson = self.lesson(num)
        build = self.builds.get(num)
        note = build.hung_note() if build else None
        if note:
            msg += "\n" + note
        transcript = harness.current_transcript()
        if not re.search(r"^\s*(command|reproduce):", msg, re.M):
            # Every failure says how to reproduce it: the last program of
            # the submission the test ran.
            runs = [r for r, student in transcript.runs if student]
            if runs:
                msg += f"\ncommand: {runs[-1].command}"
        test = item.originalname or item.name
        causes = symptoms.diagnose(lesson.symptoms, test,
                                   symptoms.evidence(transcript, msg))
        msg += own_words(transcript, msg)
        path = self.save_transcript(item, lesson, msg)
        lines = [msg, f"transcript: {path}"]
        self.causes[item.nodeid] = [s.id for s in causes]
        if causes:
            # What the run printed names the cause: most specific first.
            lines.append(f"likely cause: {causes[0].cause}")
            lines += [f"  or: {s.cause}" for s in causes[1:]]
        else:
            hint = lesson.hint(test)
            if hint:
                lines.append(f"hint: {hint}")
        return "\n".join(lines)

    def save_transcript(self, item, lesson, msg):
        d = self.transcripts / lesson.name
        d.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", item.name)
        path = d / f"{safe}.log"
        num, pts, title = self.items[item.nodeid]
        path.write_text(f"test: {title} ({pts} points)\nlesson: {lesson.name}\n"
                        f"src: {self.src}\n\n== failure ==\n{msg}\n\n"
                        f"== build ==\n{lesson.build_log}\n"
                        f"== commands ==\n{harness.current_transcript().text()}\n")
        return path

    def pytest_runtest_logfinish(self, nodeid, location):
        self.finished.add(nodeid)
        if any(n not in self.finished for n in self.provers.get(nodeid, ())):
            self.held.append(nodeid)
            return
        self.show(nodeid)
        last = nodeid in self.last_of_lesson
        for h in [h for h in self.held if last or
                  all(n in self.finished for n in self.provers[h])]:
            self.held.remove(h)
            self.show(h)
        if last:
            self.show_subtotal(self.items[nodeid][0])

    def show_subtotal(self, num):
        got, total = self.subtotal(num)
        b = self.builds.get(num)
        self.write(report.subtotal_line(
            self.lesson(num).name, got, total, self.pending(num),
            compiled=not (num in self.compact and b and b.error)))

    def show(self, nodeid):
        """The test's line (and its failure), once its verdict is final."""
        num, pts, title = self.items[nodeid]
        if nodeid in self.provers:
            self.confirm(nodeid, self.outcome[nodeid])
        rec = self.outcome[nodeid]
        if (not rec["passed"] and not rec.get("pending")
                and self.unfinished is None):
            self.unfinished = num
        if num in self.compact:
            return
        verdict = ("OK" if rec["passed"] else
                   "graded on submission" if rec.get("pending") else "FAIL")
        self.write(f"  {title} ... {verdict} ({rec['duration']:.1f}s)")
        if rec.get("pending"):
            for line in rec["output"].splitlines()[:1] + \
                    rec["output"].splitlines()[-1:]:
                self.write("      " + line)
        elif not rec["passed"]:
            lines = rec["output"].splitlines() or [""]
            if self.verbose or num not in self.shown_in_full:
                self.shown_in_full.add(num)
                self.hint_shown.add(nodeid)
            else:
                # Later failures of a lesson: one line (V=1 shows them all).
                lines = [report.one_line(lines)] + [x for x in lines
                                             if x.startswith("transcript: ")]
            for line in lines:
                self.write("      " + line)

    def subtotal(self, num):
        got = total = 0
        for nodeid, (n, pts, _) in self.items.items():
            if n == num:
                total += pts
                if self.outcome.get(nodeid, {}).get("passed"):
                    got += pts
        return got, total

    def score(self):
        got = sum(p for nid, (_, p, _) in self.items.items()
                  if self.outcome.get(nid, {}).get("passed"))
        return got, sum(p for _, p, _ in self.items.values())

    def pending(self, num=None):
        """Points graded on submission (of lesson @num, or all)."""
        return sum(p for nid, (n, p, _) in self.items.items()
                   if (num is None or n == num)
                   and self.outcome.get(nid, {}).get("pending"))

    def score_line(self):
        return report.score_line(*self.score(), self.pending())

    # -- the end --
    def pytest_sessionfinish(self, session, exitstatus):
        # Results are written once no program of the submission is left.
        peers.stop()
        if self.sandbox:
            self.sandbox.close()
            harness.track_trusted(None)
        got, total = self.score()
        if self.results_path:
            records.write_results(self, Path(self.results_path))
        if self.status_path:
            records.save_status(self, Path(self.status_path))
        if self.config.getoption("summary"):
            records.write_summary(self, Path(self.config.getoption("summary")))
        # Points graded on submission are not missing here: a session
        # whose only "failures" are those ends well.
        if self.items and got + self.pending() < total and \
                session.exitstatus == 0:
            session.exitstatus = 1
        elif self.items and self.pending() and \
                got + self.pending() == total and \
                session.exitstatus == pytest.ExitCode.TESTS_FAILED:
            session.exitstatus = pytest.ExitCode.OK

    def next_step(self):
        """The command to run next, when points are missing."""
        if self.unfinished is None:
            return None
        src = "" if self.src == self.course / "skeletons" else \
            f" SRC={self.src}"
        return report.next_step(self.unfinished, src,
                                len({n for n, _, _ in self.items.values()}) > 1)

    def fix_junit(self, path):
        """pytest's JUnit file took a pair test that confirm() refused for
        passed (its call had passed before its reference tests ran): make
        it the failure the grade counts."""
        import xml.etree.ElementTree as ET
        try:
            tree = ET.parse(path)
        except (OSError, ET.ParseError):
            return
        want = {}
        for nodeid in self.unconfirmed:
            file, _, name = nodeid.partition("::")
            cls = file[:-3].replace("/", ".") if file.endswith(".py") else file
            want[(cls, name)] = self.outcome[nodeid]["output"]
        for suite in tree.iter("testsuite"):
            for case in suite.iter("testcase"):
                key = (case.get("classname"), case.get("name"))
                if key in want and case.find("failure") is None:
                    fail = ET.SubElement(case, "failure",
                                         message=want[key].splitlines()[0])
                    fail.text = want[key]
                    suite.set("failures",
                              str(int(suite.get("failures", "0")) + 1))
        tree.write(path, encoding="utf-8", xml_declaration=True)

    def pytest_unconfigure(self, config):
        xml = config.getoption("xmlpath", None)
        if self.unconfirmed and xml:
            self.fix_junit(xml)
        if self.items and not config.getoption("no_score"):
            step = self.next_step()
            if step:
                self.write(step)
            self.write(self.score_line())


def pytest_configure(config):
    config.addinivalue_line("markers", "points(n, title): a graded test")
    config.addinivalue_line("markers", "proven_by(*tests): this test of the "
                            "student's pair pays only when those reference "
                            "peer tests of the lesson passed too")
    if config.getoption("help", False):
        return
    config.pluginmanager.register(Grader(config), "rdma-course-grader")


def _grader(request):
    return request.config.pluginmanager.get_plugin("rdma-course-grader")


def _lesson_num(request):
    return LESSON_FILE.match(request.path.name).group(1)


@pytest.fixture(scope="module")
def lesson(request):
    return _grader(request).lesson(_lesson_num(request))


@pytest.fixture(scope="module")
def build(request):
    return _grader(request).build(_lesson_num(request))


@pytest.fixture(scope="session")
def rdma():
    r = Rdma()
    if not r.available():
        raise GradeFailure(
            "no RDMA device to grade on: RDMA_DEVICE is not set or does not "
            "exist. Run the grader through vm-setup/with-rxe (make grade does).")
    return r
