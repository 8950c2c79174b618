"""Compiling a lesson from a SRC tree, once.

gcc under the micro-VM's CPU emulation is about ten times slower than on the
host, so `make grade` compiles every lesson on the host first
(`python3 -m grader build`), and the grader in the VM reuses that result while
the sources are unchanged. Either way the compiler's output is kept: warnings
are shown, and an error costs only that lesson.
"""

import hashlib
import json
import shlex
import sys
from pathlib import Path

from . import harness

COURSE = Path(__file__).resolve().parent.parent


def build_dir(course, src, lesson_name):
    """build/grade/<SRC relative to the course, or ext/abs/path>/<lesson>."""
    tag = (str(src.relative_to(course)) if src.is_relative_to(course)
           else "ext" + str(src))
    return course / "build" / "grade" / tag.replace("/", "_") / lesson_name


def _inputs_key(course, src, name):
    h = hashlib.sha256()
    files = sorted((src / name).glob("*")) + sorted((course / "lessons" / name).glob("*")) \
        + sorted((course / "lessons" / "common").glob("*"))
    for f in files:
        if f.is_file():
            h.update(str(f).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def compile_lesson(course, src, name):
    """Compile lesson `name` of `src` unless an identical build exists.
    Returns (returncode, stdout, stderr, command): make echoes the compile
    commands on stdout; the compiler's diagnostics are on stderr."""
    out = build_dir(course, src, name)
    stamp = out / ".build.json"
    key = _inputs_key(course, src, name)
    try:
        saved = json.loads(stamp.read_text())
        if saved["key"] == key:
            return saved["rc"], saved["stdout"], saved["stderr"], saved["command"]
    except (OSError, ValueError, KeyError):
        pass
    cmd = ["make", "-B", "--no-print-directory", "-f", "lessons/common/lesson.mk",
           f"L={name}", f"S={src}", f"OUT={out}"]
    res = harness.run(cmd, timeout=300, cwd=course)
    rc = 1 if res.timed_out else res.returncode
    out.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"key": key, "rc": rc, "stdout": res.stdout,
                                 "stderr": res.stderr,
                                 "command": shlex.join(cmd)}))
    return rc, res.stdout, res.stderr, shlex.join(cmd)


def main(argv):
    """python3 -m grader build SRC [NN-topic ...] - compile ahead."""
    if not argv:
        print("usage: python3 -m grader build SRC [NN-topic ...]", file=sys.stderr)
        return 2
    src = Path(argv[0]).resolve()
    names = argv[1:] or sorted(p.name for p in src.glob("[0-9][0-9]-*") if p.is_dir())
    for name in names:
        if (src / name).is_dir() and (COURSE / "lessons" / name).is_dir():
            compile_lesson(COURSE, src, name)
    return 0

