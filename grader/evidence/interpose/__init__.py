"""verbs_spy.so: the interposer the grader preloads into a student's program
(see verbs_spy.c), and what the tests read back from it.

build_interposer(course) compiles it on demand into build/grader/, once per
content (a hash stamp, as grader/core/build.py does for lessons): `python3 -m
grader build` can call it on the host, where gcc is about ten times faster
than under the micro-VM's emulation; the grader in the VM reuses the result.
"""

import hashlib
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


END = re.compile(rb"end bytes=(\d+) mac=([0-9a-f]{64})\n")


def seal(content, key):
    """`content` (bytes) as the interposer writes it: the record, then its
    end line, BLAKE2s-256 keyed with `key` (verbs_spy.c's flush_log)."""
    mac = hashlib.blake2s(content, key=key).hexdigest()
    return content + f"end bytes={len(content)} mac={mac}\n".encode()


class Spy:
    """One preloaded run's record: `env` for build.run(), then `calls()`.

    The record reaches the grader through a descriptor the program inherits
    without being told (VERBS_SPY_FD and VERBS_SPY_KEY are read by the
    interposer and removed from the environment before main(), and the
    descriptor moved), into a file in a directory only the grader may
    enter, each process's record sealed with a key the program is not
    given. Only sealed records count: anything else in the file (a line
    the program wrote, a record it made up) makes calls() fail, saying so.
    """

    def __init__(self, lib, **extra):
        self.dir = tempfile.mkdtemp(prefix="verbs-spy-")     # 0700, ours
        self.log = Path(self.dir) / "calls.log"
        self.fd = os.open(self.log, os.O_RDWR | os.O_CREAT | os.O_APPEND |
                          os.O_CLOEXEC, 0o600)
        self.key = os.urandom(32)
        self.problem = None
        self.lib = lib
        self.extra = {f"VERBS_SPY_{k.upper()}": str(v)
                      for k, v in extra.items()}
        # (harness.Proc passes the descriptor VERBS_SPY_FD names.)
        self.env = {"LD_PRELOAD": str(lib), "VERBS_SPY_FD": str(self.fd),
                    "VERBS_SPY_KEY": self.key.hex(), **self.extra}
        # The test's transcript keeps the record: a failure's symptoms can
        # name what the program called (lesson.toml: `calls = '...'`).
        harness.current_transcript().spies.append(self)

    def __del__(self):
        try:
            os.close(self.fd)
        except (OSError, AttributeError):
            pass

    def text(self):
        """The sealed records the interposer wrote ("" before the run
        ends); what is not sealed by it is left out, and said in
        self.problem."""
        try:
            raw = self.log.read_bytes()
        except OSError:
            return ""
        good, pos, bad = [], 0, 0
        while pos < len(raw):
            m = END.search(raw, pos)
            if not m:
                bad += len(raw) - pos
                break
            n = int(m.group(1))
            start = m.start() - n
            content = raw[start:m.start()] if start >= pos else None
            if content is not None and \
                    seal(content, self.key)[-len(m.group(0)):] == m.group(0):
                bad += start - pos
                good.append(content)
            else:
                bad += m.end() - pos
            pos = m.end()
        if bad:
            self.problem = (f"the interposer's record holds {bad} bytes it "
                            f"did not write (a program that writes into the "
                            f"grader's record, or forges it, earns nothing "
                            f"from it)")
        return b"".join(good).decode(errors="replace")

    def calls(self, kind=None):
        """[(kind, {field: value})] in call order. Fails when the record
        holds anything the interposer did not seal."""
        text = self.text()
        if self.problem:
            raise GradeFailure(self.problem)
        out = []
        for line in text.splitlines():
            name, *fields = line.split()
            if kind and name != kind:
                continue
            out.append((name, dict(f.split("=", 1) for f in fields
                                   if "=" in f)))
        return out

    def describe(self):
        """The same run by hand: the record in calls.log (no seal)."""
        env = {"LD_PRELOAD": str(self.lib), "VERBS_SPY_LOG": "calls.log",
               **self.extra}
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())


def parse_int(v):
    return int(v, 0) if re.match(r"^(0x)?[0-9a-fA-F]+$", v) else int(v)
