"""verbs_spy.so: the interposer the grader preloads into a student's program
(see verbs_spy.c), and what the tests read back from it.

build_interposer(course) compiles it on demand into build/grader/, once per
content (a hash stamp, as grader/core/build.py does for lessons): `python3 -m
grader build` can call it on the host, where gcc is about ten times faster
than under the micro-VM's emulation; the grader in the VM reuses the result.
"""

import os
import re
import shlex
import tempfile
from pathlib import Path

from grader.core.build import grader_program
from grader.core import harness
from grader.core.harness import GradeFailure

SOURCE = Path(__file__).resolve().parent / "verbs_spy.c"


def build_interposer(course):
    """Path of build/grader/verbs_spy.so, compiled when the source changed
    (grader/core/build.py's grader_program)."""
    try:
        return grader_program(Path(course), "evidence/interpose/verbs_spy.c",
                              flags=("-shared", "-fPIC"),
                              libs=("-libverbs", "-ldl"), name="verbs_spy.so")
    except RuntimeError as e:
        raise GradeFailure(f"the grader's interposer does not compile (a "
                           f"grader problem):\n{e}") from e


class Spy:
    """One preloaded run's record: `env` for build.run(), then `calls()`."""

    def __init__(self, lib, **extra):
        self.dir = tempfile.mkdtemp(prefix="verbs-spy-")
        os.chmod(self.dir, 0o777)       # the program may run as another user
        self.log = Path(self.dir) / "calls.log"
        self.env = {"LD_PRELOAD": str(lib), "VERBS_SPY_LOG": str(self.log),
                    **{f"VERBS_SPY_{k.upper()}": str(v)
                       for k, v in extra.items()}}
        # The test's transcript keeps the record: a failure's symptoms can
        # name what the program called (lesson.toml: `calls = '...'`).
        harness.current_transcript().spies.append(self)

    def text(self):
        """The record as the interposer wrote it ("" before the run ends)."""
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def calls(self, kind=None):
        """[(kind, {field: value})] in call order."""
        text = self.text()
        out = []
        for line in text.splitlines():
            name, *fields = line.split()
            if kind and name != kind:
                continue
            out.append((name, dict(f.split("=", 1) for f in fields
                                   if "=" in f)))
        return out

    def describe(self):
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())


def parse_int(v):
    return int(v, 0) if re.match(r"^(0x)?[0-9a-fA-F]+$", v) else int(v)
