"""Lesson 03: queue pairs - the RESET -> INIT -> RTR -> RTS walk.

The states checked are the ones qp_states reads back with ibv_query_qp(); the
SEND must carry a message chosen here at random and move packets through the
rxe device (its hw counters), and skipping a state must be refused.
"""

import random
import re
import string

from grader import GradeFailure, expect, expect_line, expect_match, points
from grader.core.harness import prog_prefixed

PROG = "qp_states"
NO_SUCH = "nosuchdev0"
STATE_RE = re.compile(prog_prefixed(
    r"^([AB]) qpn 0x([0-9a-f]{6}) state (\S+)$"), re.M)


def _states(text):
    """{"A": [states...], "B": [...]}, and {"A": {qpns}, "B": {qpns}}."""
    seq, qpns = {"A": [], "B": []}, {"A": set(), "B": set()}
    for m in STATE_RE.finditer(text):
        seq[m.group(1)].append(m.group(3))
        qpns[m.group(1)].add(m.group(2))
    return seq, qpns


@points(4, "each QP goes RESET -> INIT -> RTR -> RTS (ibv_query_qp)")
def test_state_sequence(build, rdma):
    # The states are printed before the SEND: they are graded even when
    # the SEND fails afterwards (test_send grades that), not after a crash.
    args = ("-t", "3")
    res = build.run(PROG, *args)
    if res.signal or res.timed_out:
        res.ok(build.command(PROG, *args))
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


@points(4, "a SEND moves through the connected QPs (content, rxe counters)")
def test_send(build, rdma):
    msg = "rts-" + "".join(random.choices(string.ascii_lowercase
                                          + string.digits, k=12))
    before = rdma.counters()
    res = build.run(PROG, "--msg", msg).ok(build.command(PROG, "--msg", msg))
    delta = rdma.counters() - before
    expect_line(res.stdout, f"A sent {len(msg)} bytes",
                f"stdout of '{build.command(PROG, '--msg', msg)}'")
    expect_line(res.stdout, f"B received {len(msg)} bytes: {msg}",
                f"stdout of '{build.command(PROG, '--msg', msg)}'")
    if delta.get("sent_pkts", 0) < 1 or delta.get("rcvd_pkts", 0) < 1:
        raise GradeFailure(
            f"the rxe device moved no packets while '{build.command(PROG, '--msg', msg)}' "
            f"ran (hw_counters: {delta.show(['sent_pkts', 'rcvd_pkts'])}): the "
            f"message did not go through the queue pairs")


@points(3, "--skip-state: RESET -> RTR is refused with EINVAL, QP stays RESET")
def test_skip_state(build, rdma):
    res = build.run(PROG, "--skip-state").ok(build.command(PROG, "--skip-state"))
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
