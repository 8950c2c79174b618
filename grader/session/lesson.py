"""A lesson as the grader sees it: its lesson.toml (title, hints, symptoms,
timeout), its build from one SRC tree (Build: compile once, run the
student's programs in the sandbox, cut the lesson's waits after a hang),
and what its tests mark themselves with (`points`, `GradedOnSubmission`).
The plugin (plugin.py) makes one Lesson and one Build per lesson graded.
"""

import os
import re
import tomllib
from pathlib import Path

import pytest

from grader.core import harness
from grader.core.build import compile_lesson
from grader.core.harness import GradeFailure
from grader.session import symptoms

HUNG_TIMEOUT = 5            # seconds per wait once a lesson's program hung,
HUNG_AGAIN = 1              # ... and once another one hung too
LESSON_FILE = re.compile(r"test_(\d\d)_")


def points(n, title):
    """Decorate a test with its points and its title."""
    return pytest.mark.points(n, title)


def proven_by(*tests):
    """A test of the student's own pair (their server with their client)
    pays only when these reference-peer tests of the lesson (function
    names) passed in the same grading: the pair agreeing with itself
    proves nothing a pair of fakes could not (plugin.py: confirm)."""
    return pytest.mark.proven_by(*tests)


class GradedOnSubmission(Exception):
    """Raised by a test whose claim can only be graded where the instructor
    grades (lesson 09's predictions, against a key the students'
    repository does not hold): its message says what was checked here.
    The test's points are pending, neither earned nor lost: the Score line
    says `(+N graded on submission)`, results.json marks the test
    `"status": "pending"`."""


# ---- lessons ----------------------------------------------------------------

class Lesson:
    def __init__(self, path):
        self.dir = path
        self.name = path.name                   # "05-send-recv"
        self.number = self.name[:2]             # "05"
        meta = path / "lesson.toml"
        try:
            self.meta = tomllib.loads(meta.read_text())
        except FileNotFoundError:
            self.meta = {}
        except tomllib.TOMLDecodeError as e:
            raise pytest.UsageError(f"{meta}: {e}") from e
        self.title = self.meta.get("title", self.name)
        try:
            self.symptoms = symptoms.load(self.meta, str(meta))
        except ValueError as e:
            raise pytest.UsageError(str(e)) from e
        self.timeout = int(self.meta.get("timeout", harness.DEFAULT_TIMEOUT))
        self.build_log = ""
        self.warnings = ""

    def hints(self, test_name):
        """The test's hints, in tiers: a failure shows the first, `make
        hint` the next ones (lesson.toml: a string, or a list of strings)."""
        h = self.meta.get("hints", {}).get(test_name) or self.meta.get("hint")
        return [h] if isinstance(h, str) else list(h or [])

    def hint(self, test_name):
        tiers = self.hints(test_name)
        return tiers[0] if tiers else None

    def final_line(self, prog):
        """lesson.toml [final_line]: the regex of PROG's last line."""
        return self.meta.get("final_line", {}).get(prog)


def short_test_name(nodeid):
    """grader/lessons/test_05_x.py::test_a[p] -> test_a"""
    return nodeid.split("::")[-1].split("[")[0]


def find_lessons(course):
    """{"05": lessons/05-send-recv, ...}: the directory's own listing says
    which entries are directories (a stat each is 4 ms on the VM's 9p
    share, 0.1 s for the course's lessons)."""
    try:
        with os.scandir(course / "lessons") as it:
            entries = sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    return {e.name[:2]: Path(e.path) for e in entries
            if re.match(r"[0-9][0-9]-", e.name) and e.is_dir()}


def parse_lesson_arg(arg, lessons):
    """'5', '05', '05-send-recv', '05,06', '05 06' -> ['05', '06']."""
    want = []
    for tok in re.split(r"[,\s]+", arg.strip()):
        if not tok:
            continue
        m = re.match(r"^(\d{1,2})(-.*)?$", tok)
        num = m.group(1).zfill(2) if m else None
        if num not in lessons:
            raise pytest.UsageError(
                f"no lesson '{tok}'; the lessons are: "
                + " ".join(f"{n} ({p.name})" for n, p in lessons.items()))
        want.append(num)
    return want


# ---- building a lesson --------------------------------------------------------

class Build:
    """One lesson compiled from one SRC tree (see lessons/common/lesson.mk)."""

    def __init__(self, lesson, src, course, out, prebuilt=False,
                 sandbox=None):
        self.lesson, self.src, self.course, self.out = lesson, src, course, out
        self.sandbox = sandbox
        self.error = None
        self.error_shown = False
        self.hung = None            # the command of a program that hung
        tree = src / lesson.name
        self.repro = f"make build LESSON={lesson.number} SRC={src}"
        built = compile_lesson(course, src, lesson.name, prebuilt=prebuilt)
        if built["missing"]:
            self.error = (f"{tree}/ does not exist: there is nothing to grade "
                          f"for lesson {lesson.name} in SRC={src}")
            return
        rc, out, err = built["rc"], built["stdout"], built["stderr"]
        lesson.build_log = f"$ {built['command']}\n{out}{err}"
        diag = "\n".join(line for line in err.splitlines()
                         if not line.startswith("make"))
        if rc != 0:
            self.error = (f"compile error (reproduce: {self.repro}):\n"
                          + "\n".join("  | " + x for x in
                                      (diag or out + err).splitlines()))
        elif diag.strip():
            lesson.warnings = diag

    def path(self, prog):
        if self.error:
            if self.error_shown:
                raise GradeFailure("not run: does not compile (the "
                                   "compiler's message is in this lesson's "
                                   "first test)")
            self.error_shown = True
            raise GradeFailure(self.error)
        p = self.out / prog
        if not p.exists():
            raise GradeFailure(f"{p} was not built (is {self.src}/"
                               f"{self.lesson.name}/{prog}.c there?)")
        return p

    @property
    def as_root(self):
        """Do the student's programs run as root? (Not in the sandbox.)"""
        return os.geteuid() == 0 and not (self.sandbox and
                                          self.sandbox.contained)

    def _timeout(self, timeout):
        t = self.lesson.timeout if timeout is None else timeout
        # Once a program of the lesson hung, every later wait is short (the
        # harness caps them all, see _saw).
        return harness.capped(t)

    def _saw(self, result, prog=None):
        if prog:
            result.prog = prog
        if result.timed_out and not self.hung:
            self.hung = result.command
            # A hanging lesson costs one full timeout, not one per test:
            # from now on every wait of the lesson - its programs', the
            # reference peers', whatever timeout a test asked for - is cut
            # (the next lesson lifts it, Grader.pytest_runtest_logstart).
            harness.limit_waits(HUNG_TIMEOUT, HUNG_AGAIN)

    def hung_note(self):
        if self.hung:
            return (f"note: a program of this lesson hung ({self.hung}), so "
                    f"the lesson's later waits were cut to {HUNG_TIMEOUT} s "
                    f"(to {HUNG_AGAIN} s once another hung)")
        return None

    @staticmethod
    def _spied(prog, env):
        """The interposer acts in `prog` only, not in a wrapper that execs
        it (verbs_spy.c: VERBS_SPY_TARGET)."""
        if env and "VERBS_SPY_FD" in env:
            env = {**env, "VERBS_SPY_TARGET": Path(prog).name}
        return env

    def _wrapped(self, wrap, prog, *args):
        """[*wrap, prog, *args], where a wrapper can run: not in the
        sandbox, where the program started is the last one (a wrapper's
        exec of `prog` would be refused)."""
        if wrap and self.sandbox and self.sandbox.contained:
            raise GradeFailure(
                f"the grader cannot run '{wrap[0]}' around a program in the "
                f"sandbox: there a program may start no other (a grader "
                f"problem; liblsan missing makes the leak checker valgrind: "
                f"install gcc's liblsan0)")
        return [*wrap, self.path(prog), *args]

    def run(self, prog, *args, timeout=None, input=None, env=None, wrap=(),
            rlimits=None, empty_dirs=()):
        """Run the student's `prog` in the sandbox, to completion.
        `rlimits`, `empty_dirs`: see harness.limits_prefix. `wrap`: a
        command prefix for an uncontained run only (contained, the
        program may start no other: sandbox.py)."""
        env = self._spied(prog, env)
        p = harness.start(self._wrapped(wrap, prog, *args),
                          timeout=self._timeout(timeout), input=input,
                          env=env, sandbox=self.sandbox, rlimits=rlimits,
                          empty_dirs=empty_dirs,
                          final=self.lesson.final_line(prog), watch_idle=True)
        harness.started_program(p.proc.pid, self.path(prog).name)
        res = p.wait()
        self._saw(res, prog)
        return res

    def start(self, prog, *args, ready=r"listening on port (\d+)",
              timeout=None, env=None, wrap=(), input=None, rlimits=None,
              empty_dirs=()):
        """Start the student's `prog` in the sandbox (see harness.start
        and run())."""
        env = self._spied(prog, env)
        p = harness.start(self._wrapped(wrap, prog, *args), ready=ready,
                          timeout=self._timeout(timeout), env=env,
                          input=input, sandbox=self.sandbox,
                          rlimits=rlimits, empty_dirs=empty_dirs,
                          on_result=lambda r: self._saw(r, prog),
                          final=self.lesson.final_line(prog), watch_idle=True)
        harness.started_program(p.proc.pid, self.path(prog).name)
        return p

    def run_cmd(self, cmd, timeout=None, input=None, env=None):
        return harness.run(cmd, timeout=self._timeout(timeout), input=input,
                           env=env, cwd=self.course)

    def command(self, prog, *args):
        """The command line that runs @prog with @args, as a student would
        type it: for failure messages ('reproduce: ...')."""
        return " ".join([str(self.path(prog)), *map(str, args)])
