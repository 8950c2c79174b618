"""Lesson 09: the failure lab - predict, provoke, observe.

`failures EXPERIMENT` breaks one thing in a working pair of RC QPs and prints
one line saying what it observed. Each experiment is run once (the `lab`
fixture, when a test first needs it), under LeakSanitizer and with --hold,
which makes the program stop itself after its line: while it is stopped
the grader asks the kernel for the program's QPs and MRs (`rdma -j
resource show qp|mr`), then lets it finish and reads the rxe hw counters'
deltas.

What each line must say is what rxe really does (measured in the micro-VM,
Debian 6.1 kernel; solutions/09-failures/ANSWERS.md, the answer key,
explains each). The grader keeps that key only as hashes (KEY), so that reading this
file does not answer the predictions. The evidence is gathered afresh at
every grading, not taken from the line:

  - a completion error on side X: the kernel must show X's QP in ERR (an
    error completion moves its QP to the error state); no completion error
    reported: no QP of the program is in ERR;
  - an IBV_WC_* name and number: the grader reads enum ibv_wc_status from
    <infiniband/verbs.h> and calls ibv_wc_status_str() itself;
  - rnr-retry-N: B's responder sent N + 1 RNR NAKs (send_rnr_err) and the
    requester gave up once (retry_rnr_exceeded_err);
  - a refused post: nothing left the device (sent_pkts +0);
  - unaligned's success: B's receive completed (rdma_recvs +1);
  - memlock: the kernel holds no 1 MiB MR of the program;
  - munmap-remap: the READ crossed the device (request and response).

The predictions (`failures --predictions`, predictions.c) are scored
against the same key, apart from the experiments.
"""

import ctypes
import ctypes.util
import functools
import hashlib
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from grader import GradeFailure, expect, points
from grader.core.harness import capped, leak_checker, run

PROG = "failures"
T = "5"                     # --timeout: an experiment's waits

EXPERIMENTS = ["dereg-mr", "sge-past-mr", "wrong-rkey", "no-remote-write",
               "write-past-end", "rnr-retry-0", "rnr-retry-2",
               "post-before-rts", "num-sge", "cq-overrun", "unaligned",
               "memlock", "munmap-remap"]


def _digest(exp, outcome):
    return hashlib.sha256(f"rdma-course 09 {exp}: {outcome}".encode()
                          ).hexdigest()[:20]


# sha256("rdma-course 09 EXP: OUTCOME")[:20] of the outcome rxe gives.
KEY = {
    "dereg-mr": "71e97ff1283a2c9d624c",
    "sge-past-mr": "3abf51182f75210a3722",
    "wrong-rkey": "e5748a92d09f4fa5c359",
    "no-remote-write": "757dc6661ee9706e7705",
    "write-past-end": "85e4651680b3a8bf9579",
    "rnr-retry-0": "a89058dac8114b372dcd",
    "rnr-retry-2": "a9f5e8129fd4e29ab618",
    "post-before-rts": "00476e14949423bd5a01",
    "num-sge": "646a25d7e6e0f4aa6882",
    "cq-overrun": "e55032f7f1be4dbcd001",
    "unaligned": "d84fad7d60003c3886ba",
    "memlock": "4ff10bc441ef5669e42f",
    "munmap-remap": "24756563e7fea50e52f1",
}

# The experiments whose test looks at the kernel's MRs too.
MR_EVIDENCE = {"dereg-mr", "memlock"}

LINE_RE = re.compile(r"^(?P<exp>[a-z0-9-]+): (?P<outcome>[^(\n]*?)"
                     r"(?: \((?P<detail>[^\n]*)\))?$", re.M)
WC_RE = re.compile(r"^completion on (?P<side>[AB]): (?P<name>\S+)$")
WC_DETAIL_RE = re.compile(r"^(?P<words>.*), status (?P<num>\d+), "
                          r"vendor_err 0x[0-9a-f]+$")


class LabRun:
    """One experiment's run: its Result, the outcome and detail of its
    line (or None), the kernel's QPs and MRs of its pid while it was held
    (None when it never stopped), the counter deltas."""

    def __init__(self, exp, res, qps, mrs, delta, cmd):
        self.exp, self.res, self.qps, self.mrs = exp, res, qps, mrs
        self.delta, self.cmd = delta, cmd
        self.outcome = self.detail = None
        for m in LINE_RE.finditer(res.stdout):
            if m.group("exp") == exp:
                self.outcome = m.group("outcome").strip()
                self.detail = m.group("detail")
                break

    def states(self):
        """(A's state, B's state): A is the QP created first (lower QPN)."""
        return tuple(q["state"] for q in sorted(self.qps,
                                                key=lambda q: q["lqpn"]))


def _stopped(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def _kernel(kind, pid):
    res = run(["rdma", "-j", "resource", "show", kind])
    try:
        return [e for e in json.loads(res.stdout or "[]")
                if e.get("pid") == pid]
    except ValueError:
        raise GradeFailure(f"'rdma -j resource show {kind}' printed no "
                           f"JSON:\n{res.describe()}")


def _run_one(build, rdma, exp, wrap, env, how):
    args = ("--hold", "-t", T, exp)
    cmd = f"{how} {build.command(PROG, '-t', T, exp)}"
    before = rdma.counters()
    qps = mrs = None
    with build.start(PROG, *args, ready=None, env=env, wrap=wrap,
                     timeout=40) as proc:
        pid = proc.proc.pid
        # capped: once a program of the lesson hung, this wait is short too
        limit = capped(30)
        deadline = time.monotonic() + limit
        while proc.proc.poll() is None and time.monotonic() < deadline:
            if _stopped(pid):
                qps = _kernel("qp", pid)
                mrs = _kernel("mr", pid) if exp in MR_EVIDENCE else []
                os.kill(pid, signal.SIGCONT)
                break
            time.sleep(0.02)
        # Neither stopped nor ended within the limit: it hung (killed now).
        hung = qps is None and proc.proc.poll() is None
        res = proc.wait(timeout=0, waited=limit) if hung else proc.wait()
    return LabRun(exp, res, qps, mrs, rdma.counters() - before, cmd)


class Lab(dict):
    """{name: LabRun}: each experiment run once, when a test first asks
    for it (a test graded alone runs only its own experiment)."""

    def __init__(self, build, rdma):
        super().__init__()
        self.build, self.rdma = build, rdma
        self.wrap, self.env, self.how = leak_checker()

    def __missing__(self, exp):
        self[exp] = _run_one(self.build, self.rdma, exp, self.wrap,
                             self.env, self.how)
        return self[exp]

    def lines(self, exps):
        """The runs of @exps for a test that reads only their lines: the
        lab's own where it has them (a whole grading has them all), else
        plain runs, three at a time (no --hold, no counters: nothing of
        theirs but the line is used), not kept for other tests."""
        from concurrent.futures import ThreadPoolExecutor

        def plain(exp):
            res = self.build.run(PROG, "-t", T, exp)
            return LabRun(exp, res, None, None, {},
                          self.build.command(PROG, "-t", T, exp))
        todo = [e for e in exps if e not in self]
        with ThreadPoolExecutor(max_workers=3) as pool:
            done = dict(zip(todo, pool.map(plain, todo)))
        return [self[e] if e in self else done[e] for e in exps]


@pytest.fixture(scope="module")
def lab(build, rdma):
    return Lab(build, rdma)


# ---- the header's names, read at grading time --------------------------------

@functools.lru_cache(maxsize=None)
def _wc_status_names():
    """enum ibv_wc_status from the installed header: [name, ...] by value."""
    text = Path("/usr/include/infiniband/verbs.h").read_text()
    body = re.search(r"enum ibv_wc_status \{(.*?)\};", text, re.S).group(1)
    names = []
    for item in re.sub(r"/\*.*?\*/", "", body, flags=re.S).split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = item.partition("=")
        if value.strip():
            names += [None] * (int(value.strip(), 0) - len(names))
        names.append(name.strip())
    return names


@functools.lru_cache(maxsize=None)
def _wc_status_str(num):
    # (find_library runs ldconfig: seconds under the VM's emulation, once)
    lib = _libibverbs()
    lib.ibv_wc_status_str.restype = ctypes.c_char_p
    lib.ibv_wc_status_str.argtypes = [ctypes.c_int]
    return lib.ibv_wc_status_str(num).decode()


@functools.lru_cache(maxsize=None)
def _libibverbs():
    return ctypes.CDLL(ctypes.util.find_library("ibverbs") or
                       "libibverbs.so.1")


# ---- checks --------------------------------------------------------------------

def _line(run_):
    """The run's outcome, after the checks every experiment shares."""
    r = run_.res
    if r.returncode == 23:
        raise GradeFailure(f"{run_.exp}: memory leaked (LeakSanitizer): "
                           f"every ibv_reg_mr() needs its ibv_dereg_mr(), "
                           f"every rc_open() its rc_close()\n"
                           f"reproduce: {run_.cmd}\n{r.describe(lines=30)}")
    r.ok(f"{run_.exp} (reproduce: {run_.cmd})")
    if run_.outcome is None:
        raise GradeFailure(f"{run_.exp}: no line '{run_.exp}: OUTCOME' on "
                           f"stdout\nreproduce: {run_.cmd}\n{r.describe()}")
    if run_.qps is None:
        raise GradeFailure(f"{run_.exp}: with --hold the program must stop "
                           f"itself (SIGSTOP) after its line, before it "
                           f"cleans up; it never did\n{r.describe()}")
    return run_.outcome


def _check_key(run_):
    outcome = _line(run_)
    if _digest(run_.exp, outcome) != KEY[run_.exp]:
        raise GradeFailure(
            f"{run_.exp}: the program printed\n  {run_.exp}: {outcome}\n"
            f"which is not what rxe does in this experiment (the answer "
            f"key, published after the deadline, explains it)\n"
            f"reproduce: {run_.cmd}\n{run_.res.describe()}")
    return outcome


def _check_states(run_):
    """The kernel's QP states must agree with the line."""
    outcome, states = run_.outcome, run_.states()
    m = WC_RE.match(outcome)
    if m:
        side = "AB".index(m.group("side"))
        if len(states) != 2 or states[side] != "ERR":
            raise GradeFailure(
                f"{run_.exp}: the line reports an error completion on "
                f"{m.group('side')}, so that QP must be in ERR; the kernel "
                f"('rdma resource show qp', by pid, while held) shows "
                f"A, B = {states}")
    elif "ERR" in states:
        raise GradeFailure(
            f"{run_.exp}: the line '{outcome}' reports no error completion, "
            f"but the kernel shows the program's QPs (A, B) in {states}")


def _wrong_names(run_):
    """[(status number, the header's name, the line's name)] when the
    line's IBV_WC_* name is not the header's for its number."""
    m = WC_RE.match(run_.outcome or "")
    d = WC_DETAIL_RE.match(run_.detail or "")
    if not m or not d:
        return []
    num = int(d.group("num"))
    names = _wc_status_names()
    want = names[num] if num < len(names) else "IBV_WC_?"
    return [] if m.group("name") == want else [(num, want, m.group("name"))]


def _shift(wrong):
    """k when every wrong name is the header's name of status N + k (a
    table shifted by k), else None."""
    names = _wc_status_names()
    for k in (1, -1, 2, -2):
        if all(0 <= n + k < len(names) and names[n + k] == got
               for n, _, got in wrong):
            return k
    return None


def _names_failure(rows, what):
    """The failure for wrong names: each expected vs got, in a table."""
    wrong = [(n, want, got) for n, want, got, _ in rows]
    k = _shift(wrong)
    table = "\n".join(f"  {n:>6}  {want:<26}  {got:<26}  {exp}"
                       for n, want, got, exp in rows)
    why = (f"\nevery wrong name is the header's name of status N{k:+d}: "
           f"your table is shifted by {k} (IBV_WC_SUCCESS is 0)"
           if k else "")
    return GradeFailure(
        f"{what}: {len(rows)} completion name(s) are not the header's "
        f"(enum ibv_wc_status in /usr/include/infiniband/verbs.h, numbered "
        f"from 0)\n  {'status':>6}  {'expected':<26}  {'got':<26}  "
        f"experiment\n{table}{why}")


def _check_names(run_):
    """An IBV_WC_* name, number and words that agree with the header and
    with ibv_wc_status_str()."""
    m = WC_RE.match(run_.outcome)
    if not m:
        return
    d = WC_DETAIL_RE.match(run_.detail or "")
    if not d:
        raise GradeFailure(f"{run_.exp}: the completion's details must read "
                           f"'(WORDS, status N, vendor_err 0xV)', got "
                           f"'({run_.detail})'")
    num = int(d.group("num"))
    wrong = _wrong_names(run_)
    if wrong:
        raise _names_failure([(*wrong[0], run_.exp)],
                             f"{run_.exp} (reproduce: {run_.cmd})")
    expect(d.group("words"), _wc_status_str(num),
           f"{run_.exp}: ibv_wc_status_str({num})")


def _delta(run_, name):
    return run_.delta.get(name, 0)


def _experiment(lab, exp, evidence=None):
    run_ = lab[exp]
    _line(run_)
    # A wrong name makes a wrong line: say which part is wrong first.
    _check_names(run_)
    _check_key(run_)
    _check_states(run_)
    if evidence:
        evidence(run_)


# ---- local errors ----------------------------------------------------------------

@points(2, "dereg-mr: a SEND through a deregistered MR's lkey")
def test_dereg_mr(lab):
    def evidence(run_):
        gone = [m for m in run_.mrs if m.get("mrlen") == 8192]
        if gone:
            raise GradeFailure(f"{run_.exp}: A's 8192-byte MR must be "
                               f"deregistered before the SEND; the kernel "
                               f"still holds it while the program is "
                               f"held: {gone}")
    _experiment(lab, "dereg-mr", evidence)


@points(2, "sge-past-mr: a SEND that runs past its MR")
def test_sge_past_mr(lab):
    _experiment(lab, "sge-past-mr")


def _nothing_sent(run_):
    if _delta(run_, "sent_pkts"):
        raise GradeFailure(f"{run_.exp}: a refused post sends nothing, but "
                           f"sent_pkts moved by {_delta(run_, 'sent_pkts')}")


@points(2, "post-before-rts: a post on a QP in INIT")
def test_post_before_rts(lab):
    def evidence(run_):
        _nothing_sent(run_)
        expect(run_.states(), ("INIT", "INIT"),
               f"{run_.exp}: the program's QPs (A, B) per the kernel: the "
               f"lab must not be connected in this experiment")
    _experiment(lab, "post-before-rts", evidence)


@points(2, "num-sge: more scatter/gather entries than max_send_sge")
def test_num_sge(lab):
    _experiment(lab, "num-sge", _nothing_sent)


# ---- remote errors ---------------------------------------------------------------

def _went_out(run_):
    if _delta(run_, "sent_pkts") < 1:
        raise GradeFailure(f"{run_.exp}: the WRITE never left A "
                           f"(sent_pkts +0): it must reach B's NIC to be "
                           f"refused there")


@points(2, "wrong-rkey: a WRITE with an rkey that is not the MR's")
def test_wrong_rkey(lab):
    _experiment(lab, "wrong-rkey", _went_out)


@points(2, "no-remote-write: a WRITE into an MR without REMOTE_WRITE")
def test_no_remote_write(lab):
    _experiment(lab, "no-remote-write", _went_out)


@points(2, "write-past-end: a WRITE past the end of the remote MR")
def test_write_past_end(lab):
    _experiment(lab, "write-past-end", _went_out)


def _rnr(retries):
    def evidence(run_):
        expect(_delta(run_, "send_rnr_err"), retries + 1,
               f"{run_.exp}: RNR NAKs B's responder sent (hw_counters/"
               f"send_rnr_err): the first try and {retries} retries, each "
               f"refused because B has no receive posted")
        expect(_delta(run_, "retry_rnr_exceeded_err"), 1,
               f"{run_.exp}: requests given up after the RNR retries "
               f"(hw_counters/retry_rnr_exceeded_err)")
    return evidence


@points(2, "rnr-retry-0: a SEND with no receive posted, rnr_retry 0")
def test_rnr_retry_0(lab):
    _experiment(lab, "rnr-retry-0", _rnr(0))


@points(2, "rnr-retry-2: a SEND with no receive posted, rnr_retry 2")
def test_rnr_retry_2(lab):
    _experiment(lab, "rnr-retry-2", _rnr(2))


# ---- memory and the CQ -----------------------------------------------------------

@points(2, "cq-overrun: more completions than the CQ holds, not polled")
def test_cq_overrun(lab):
    def evidence(run_):
        if _delta(run_, "sent_pkts") < 4:
            raise GradeFailure(f"{run_.exp}: four WRITEs must cross the "
                               f"device (sent_pkts moved by "
                               f"{_delta(run_, 'sent_pkts')})")
    _experiment(lab, "cq-overrun", evidence)


@points(2, "unaligned: a region at an odd address and length")
def test_unaligned(lab):
    def evidence(run_):
        expect(_delta(run_, "rdma_recvs"), 1,
               f"{run_.exp}: receives completed on the device "
               f"(hw_counters/rdma_recvs): B must have received A's SEND")
    _experiment(lab, "unaligned", evidence)


@points(2, "memlock: a region larger than RLIMIT_MEMLOCK")
def test_memlock(lab):
    def evidence(run_):
        big = [m for m in run_.mrs if m.get("mrlen", 0) >= 1 << 20]
        if big:
            raise GradeFailure(f"{run_.exp}: the kernel holds a 1 MiB MR of "
                               f"the program while it is held: {big}")
    _experiment(lab, "memlock", evidence)


@points(2, "munmap-remap: what the peer reads under a live MR")
def test_munmap_remap(lab):
    def evidence(run_):
        if _delta(run_, "sent_pkts") < 2:
            raise GradeFailure(f"{run_.exp}: B's READ and A's response must "
                               f"cross the device (sent_pkts moved by "
                               f"{_delta(run_, 'sent_pkts')})")
    _experiment(lab, "munmap-remap", evidence)


# ---- the lab itself ---------------------------------------------------------------

@points(2, "completion names are the header's, with ibv_wc_status_str()")
def test_status_names(lab):
    seen, wrong = 0, []
    for run_ in lab.lines(EXPERIMENTS):
        if run_.outcome and WC_RE.match(run_.outcome):
            seen += 1
            wrong += [(*w, run_.exp) for w in _wrong_names(run_)]
    if wrong:
        raise _names_failure(sorted(set(wrong)), "wc_status_name() (TODO 2)")
    for run_ in lab.lines(EXPERIMENTS):
        if run_.outcome and WC_RE.match(run_.outcome):
            _check_names(run_)
    if seen < 4:
        raise GradeFailure(f"only {seen} experiments reported a completion "
                           f"('completion on A: IBV_WC_...'); rxe gives one "
                           f"in more of them")


@points(1, "--list names the experiments; a bad one is refused")
def test_list(build):
    res = build.run(PROG, "--list").ok(build.command(PROG, "--list"))
    names = [line.split()[0] for line in res.stdout.splitlines() if line]
    expect(names, EXPERIMENTS, f"first words of '{build.command(PROG, '--list')}'")
    for args in (["no-such-thing"], []):
        build.run(PROG, *args).fails(2, build.command(PROG, *args))


# ---- the predictions, scored apart from the experiments ---------------------------

def _predictions(build):
    cmd = build.command(PROG, "--predictions")
    res = build.run(PROG, "--predictions").ok(cmd)
    got = {}
    for line in res.stdout.splitlines():
        exp, sep, outcome = line.partition(": ")
        if sep:
            got[exp.strip()] = outcome.strip()
    return got, cmd


def _score_predictions(build, exps):
    got, cmd = _predictions(build)
    wrong = [f"  {e}: {got.get(e, '(none)')}" for e in exps
             if _digest(e, got.get(e, "?")) != KEY[e]]
    if wrong:
        raise GradeFailure(
            f"'{cmd}': {len(wrong)} of these {len(exps)} predictions are not "
            f"what rxe does:\n" + "\n".join(wrong)
            + "\n(a prediction is the experiment's line before the "
            "parenthesis, e.g. 'completion on A: IBV_WC_LOC_LEN_ERR'; run "
            "the experiments, then compare your predictions with their lines)")


@points(2, "predictions: local errors (dereg-mr, sge-past-mr, post-before-rts, num-sge)")
def test_predict_local(build):
    _score_predictions(build, ["dereg-mr", "sge-past-mr", "post-before-rts",
                               "num-sge"])


@points(2, "predictions: remote errors (wrong-rkey, no-remote-write, write-past-end, rnr-retry-*)")
def test_predict_remote(build):
    _score_predictions(build, ["wrong-rkey", "no-remote-write",
                               "write-past-end", "rnr-retry-0",
                               "rnr-retry-2"])


@points(2, "predictions: memory and the CQ (cq-overrun, unaligned, memlock, munmap-remap)")
def test_predict_memory(build):
    _score_predictions(build, ["cq-overrun", "unaligned", "memlock",
                               "munmap-remap"])
