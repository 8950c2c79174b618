"""The interposer the lesson tests preload (grader/evidence/interpose/verbs_spy.c)
builds warning-free, here on the host, so that the device half reuses it."""

from conftest import COURSE

from grader.evidence.interpose import build_interposer


def test_interposer_builds():
    lib = build_interposer(COURSE)
    assert lib.exists() and lib.stat().st_size > 0
    assert build_interposer(COURSE) == lib      # cached by content


# The record's channel: a program preloaded with the interposer is the
# Python interpreter here (no device needed: the record is sealed at exit
# whatever the program called).
import os  # noqa: E402
import sys  # noqa: E402

from grader.core import harness  # noqa: E402
from grader.core.harness import GradeFailure  # noqa: E402
from grader.evidence.interpose import Spy, seal  # noqa: E402

import pytest  # noqa: E402

SNOOP = """
import os, sys
print(sorted(k for k in os.environ if k.startswith("VERBS_SPY_")))
if sys.argv[1] == "forge":
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").endswith("calls.log"):
                os.write(int(fd), b"post_send qpn=1 opcode=0 rc=0\\n")
        except OSError:
            pass
"""


def _run(spy, mode):
    harness.new_transcript()
    return harness.run([sys.executable, "-c", SNOOP, mode], env=spy.env,
                       timeout=60)


def test_record_is_sealed_and_the_program_is_told_nothing(tmp_path):
    harness.new_transcript()
    spy = Spy(build_interposer(COURSE), node_guid="1234")
    res = _run(spy, "look")
    assert res.returncode == 0, res.describe()
    # Not one VERBS_SPY_ variable is left for main() to read.
    assert res.stdout.strip() == "[]"
    assert spy.text() == "" and spy.problem is None
    assert spy.calls() == []
    assert spy.log.read_bytes().startswith(b"end bytes=0 mac=")


def test_a_line_the_program_adds_to_the_record_fails_the_record():
    harness.new_transcript()
    spy = Spy(build_interposer(COURSE))
    res = _run(spy, "forge")
    assert res.returncode == 0, res.describe()
    assert b"post_send qpn=1" in spy.log.read_bytes()   # it did reach it
    with pytest.raises(GradeFailure, match="did not write"):
        spy.calls()


def test_a_record_sealed_with_another_key_is_not_taken():
    harness.new_transcript()
    spy = Spy(build_interposer(COURSE))
    spy.log.write_bytes(seal(b"post_send qpn=1 opcode=0 rc=0\n",
                             os.urandom(32)))
    assert spy.text() == ""
    with pytest.raises(GradeFailure, match="did not write"):
        spy.calls()
    spy.log.write_bytes(seal(b"post_send qpn=1 opcode=0 rc=0\n", spy.key))
    spy.problem = None
    assert spy.calls() == [("post_send", {"qpn": "1", "opcode": "0",
                                          "rc": "0"})]
