"""Lesson 03, checked against the kernel and from inside the program.

The grader preloads its interposer (grader/evidence/interpose/verbs_spy.c), which

- records every ibv_query_qp() and the state the device reported, and stops
  the program (SIGSTOP) once both QPs have been reported in RTS: the grader
  then asks the kernel (`rdma -j resource show qp`) which QPs the program's
  process owns and in which state, and lets it continue (SIGCONT);
- replaces the bytes of A's SEND with a text chosen here at random: B must
  report those bytes (the README's "wrong bytes arrived" line), not the
  --msg text it was given. The message reaches a receiver only through the
  QPs, and the bytes that arrive are the grader's.
"""

import json
import os
import re
import secrets
import signal
import string
import time

import pytest

from grader import GradeFailure, expect, expect_line, points
from grader.core.harness import Deadline, prog_prefixed, run
from grader.evidence.interpose import Spy, build_interposer

PROG = "qp_states"
STATE_RE = re.compile(prog_prefixed(
    r"^([AB]) qpn 0x([0-9a-f]{6}) state (\S+)$"), re.M)
STATES = {0: "RESET", 1: "INIT", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE",
          6: "ERR"}


def _text(n):
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _stopped(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


@pytest.fixture(scope="module")
def spied_run(build, rdma):
    """One run of qp_states --msg M under the interposer: (result, kernel's
    QPs of its pid while both were in RTS (or None), spy, msg, payload)."""
    lib = build_interposer(build.course)
    n = 12 + secrets.randbelow(8)
    msg, payload = "m-" + _text(n - 2), "g-" + _text(n - 2)
    spy = Spy(lib, stop_at_rts=2, payload=payload)
    kernel = None
    with build.start(PROG, "--msg", msg, ready=None, env=spy.env) as proc:
        pid = proc.proc.pid
        # bounds a hang: short once a program of the lesson hung, longer
        # on a slow machine
        deadline = Deadline(60)
        while proc.proc.poll() is None and not deadline.passed():
            if _stopped(pid):
                res = run(["rdma", "-j", "resource", "show", "qp"])
                kernel = [q for q in json.loads(res.stdout or "[]")
                          if q.get("pid") == pid]
                os.kill(pid, signal.SIGCONT)
                break
            time.sleep(0.02)
        # Neither stopped nor ended within the limit: it hung (killed now).
        hung = kernel is None and proc.proc.poll() is None
        result = proc.hung_at(deadline) if hung else proc.wait()
    return result, kernel, spy, msg, payload


def _how(build, spy, msg):
    return f"{spy.describe()} {build.path(PROG)} --msg {msg}"


@points(3, "printed QP numbers and states are the device's and the kernel's")
def test_states_are_real(build, spied_run):
    res, kernel, spy, msg, payload = spied_run
    how = _how(build, spy, msg)
    if kernel is None:
        raise GradeFailure(f"{how}\nthe program never had two QPs reported "
                           f"in RTS by ibv_query_qp() (the interposer's "
                           f"record: {spy.calls('query_qp')})\n"
                           + res.describe())
    printed = [(int(q, 16), s) for _, q, s in STATE_RE.findall(res.stdout)]
    queried = [(int(c["qpn"]), STATES.get(int(c["state"]), c["state"]))
               for _, c in spy.calls("query_qp")]
    expect(printed, queried, f"(qpn, state) printed, line by line, vs what "
           f"ibv_query_qp() returned to the program, call by call "
           f"(reproduce: {how})")
    mine = sorted((q["lqpn"], q["state"]) for q in kernel)
    want = sorted({(q, "RTS") for q, s in printed if s == "RTS"})
    expect(mine, want, f"(lqpn, state) of the program's QPs per 'rdma "
           f"resource show qp' (by its pid) while both were in RTS, vs the "
           f"QP numbers it printed in state RTS (reproduce: {how})")


@points(2, "B reports the bytes that really crossed the QPs")
def test_message_crossed(build, spied_run):
    res, kernel, spy, msg, payload = spied_run
    how = _how(build, spy, msg)
    if not [c for k, c in spy.calls() if k == "payload"]:
        sends = spy.calls("post_send")
        raise GradeFailure(f"{how}\nthe interposer saw no SEND of "
                           f"{len(msg)} bytes to put its own bytes in "
                           f"(SENDs posted: {sends})\n" + res.describe())
    res.fails(1, what=f"{how} (the grader changed the SEND's bytes)")
    expect_line(res.stderr, f"B received {len(payload)} bytes "
                f"'{payload}', expected {len(msg)} bytes '{msg}'",
                "stderr (the README's 'wrong bytes arrived' line)")
