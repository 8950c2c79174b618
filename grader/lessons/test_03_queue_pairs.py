"""Lesson 03: queue pairs - the RESET -> INIT -> RTR -> RTS walk.

The states checked are the ones qp_states reads back with ibv_query_qp(); the
SEND must carry a message chosen here at random and move packets through the
rxe device (its hw counters), and skipping a state must be refused.

Each runs with the grader's interposer preloaded
(grader/evidence/interpose/verbs_spy.c): the states printed must be, line
by line, what ibv_query_qp() returned; the SEND must be one the program
posted on A and whose RECV completed on B, with the message's length; the
refusal of RESET -> RTR must be the kernel's answer to the program's
ibv_modify_qp().
"""

import random
import re
import string

import pytest

from grader import GradeFailure, expect, expect_line, expect_match, points
from grader.core.harness import prog_prefixed
from grader.evidence.interpose import Spy, build_interposer

PROG = "qp_states"
NO_SUCH = "nosuchdev0"
STATE_RE = re.compile(prog_prefixed(
    r"^([AB]) qpn 0x([0-9a-f]{6}) state (\S+)$"), re.M)
STATES = {0: "RESET", 1: "INIT", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE",
          6: "ERR"}
EINVAL = 22


@pytest.fixture(scope="module")
def spy_lib(build):
    return build_interposer(build.course)


def _spied(build, spy_lib, *args):
    spy = Spy(spy_lib)
    how = f"{spy.describe()} {build.command(PROG, *args)}"
    return build.run(PROG, *args, env=spy.env), spy, how


def _queried(res, spy, how):
    """The printed (qpn, state) lines must be the ibv_query_qp() answers."""
    printed = [(int(q, 16), st) for _, q, st in STATE_RE.findall(res.stdout)]
    queried = [(int(c["qpn"]), STATES.get(int(c["state"]), c["state"]))
               for _, c in spy.calls("query_qp")]
    expect(printed, queried[:len(printed)] if len(queried) >= len(printed)
           else queried, f"(qpn, state) printed, line by line, vs what "
           f"ibv_query_qp() returned to the program, call by call "
           f"(reproduce: {how})")


def _states(text):
    """{"A": [states...], "B": [...]}, and {"A": {qpns}, "B": {qpns}}."""
    seq, qpns = {"A": [], "B": []}, {"A": set(), "B": set()}
    for m in STATE_RE.finditer(text):
        seq[m.group(1)].append(m.group(3))
        qpns[m.group(1)].add(m.group(2))
    return seq, qpns


@points(4, "each QP goes RESET -> INIT -> RTR -> RTS (ibv_query_qp, interposer)")
def test_state_sequence(build, rdma, spy_lib):
    # The states are printed before the SEND: they are graded even when
    # the SEND fails afterwards (test_send grades that), not after a crash.
    args = ("-t", "3")
    res, spy, how = _spied(build, spy_lib, *args)
    if res.signal or res.timed_out:
        res.ok(how)
    seq, qpns = _states(res.stdout)
    for qp in "AB":
        if seq[qp] != ["RESET", "INIT", "RTR", "RTS"]:
            raise GradeFailure(
                f"states of QP {qp} in the lines '{qp} qpn 0xQPN state STATE' "
                f"of '{build.command(PROG, *args)}'\n  expected: RESET INIT RTR RTS\n"
                f"  got:      {' '.join(seq[qp]) or '(none)'}\n"
                + res.describe())
        expect(len(qpns[qp]), 1, f"QP {qp} should keep one qpn in every line")
    if qpns["A"] == qpns["B"]:
        raise GradeFailure(f"A and B print the same qpn {qpns['A']}: they are "
                           f"two different queue pairs")
    _queried(res, spy, how)


@points(4, "a SEND moves through the connected QPs (completions, rxe counters)")
def test_send(build, rdma, spy_lib):
    msg = "rts-" + "".join(random.choices(string.ascii_lowercase
                                          + string.digits, k=12))
    before = rdma.counters()
    res, spy, how = _spied(build, spy_lib, "--msg", msg)
    res.ok(how)
    delta = rdma.counters() - before
    qps = [int(c["qpn"]) for _, c in spy.calls("create_qp")]
    sends = [c for _, c in spy.calls("post_send")
             if int(c["opcode"]) == 2 and int(c["len"]) == len(msg)
             and c["rc"] == "0"]
    recvs = [c for _, c in spy.calls("poll_cq") if int(c["opcode"]) == 128
             and c["status"] == "0" and int(c["len"]) == len(msg)]
    if len(qps) != 2 or not sends or int(sends[0]["qpn"]) != qps[0] or \
            not recvs or int(recvs[0]["qpn"]) != qps[1]:
        raise GradeFailure(
            f"{how}\nthe interposer must see a SEND of {len(msg)} bytes "
            f"posted on A's QP and its RECV completed on B's; it saw QPs "
            f"{qps}, SENDs {sends}, RECV completions {recvs}")
    expect_line(res.stdout, f"A sent {len(msg)} bytes",
                f"stdout of '{build.command(PROG, '--msg', msg)}'")
    expect_line(res.stdout, f"B received {len(msg)} bytes: {msg}",
                f"stdout of '{build.command(PROG, '--msg', msg)}'")
    if delta.of("packets sent") < 1 or delta.of("packets received") < 1:
        raise GradeFailure(
            f"the {delta.kind} device moved no packets while '{build.command(PROG, '--msg', msg)}' "
            f"ran (counters: {delta.show(['packets sent', 'packets received'])}): the "
            f"message did not go through the queue pairs")


@points(3, "--skip-state: RESET -> RTR is refused with EINVAL, QP stays RESET")
def test_skip_state(build, rdma, spy_lib):
    res, spy, how = _spied(build, spy_lib, "--skip-state")
    res.ok(how)
    tries = [c for _, c in spy.calls("modify_qp") if int(c["state"]) == 2]
    if not tries or int(tries[0]["rc"]) != EINVAL:
        raise GradeFailure(f"{how}\nthe interposer must see the program "
                           f"ask for RTR (ibv_modify_qp) and the kernel "
                           f"refuse it with EINVAL; it saw {tries}")
    _queried(res, spy, how)
    expect_line(res.stdout, "A RESET -> RTR refused: Invalid argument (EINVAL)",
                f"stdout of '{build.command(PROG, '--skip-state')}'")
    seq, _ = _states(res.stdout)
    expect(seq["A"], ["RESET", "RESET"],
           f"states of QP A printed by '{build.command(PROG, '--skip-state')}' (before "
           f"and after the refused step)")
    if "A sent" in res.stdout:
        raise GradeFailure("--skip-state should stop after the refused step")


@points(1, "bad command line: usage, exit 2")
def test_usage(build):
    for args in (["--bogus"], ["--msg"], ["--skip-state=yes"], ["-t", "x"]):
        res = build.run(PROG, *args).fails(2, build.command(PROG, *args))
        expect_match(res.stderr, r"^usage: ",
                     f"stderr of '{build.command(PROG, *args)}' should have a usage line")


@points(1, "unknown device: message, exit 1")
def test_bad_device(build, rdma):
    res = build.run(PROG, "-d", NO_SUCH).fails(1, build.command(PROG, "-d", NO_SUCH))
    expect_match(res.stderr, rf"{NO_SUCH}.*not found",
                 f"stderr of '{build.command(PROG, '-d', NO_SUCH)}'")
