"""Lesson 09: the failure lab - predict, provoke, observe.

`failures EXPERIMENT` breaks one thing in a working pair of RC QPs and prints
one line saying what it observed. Each experiment is run once (the `lab`
fixture, when a test first needs it), under LeakSanitizer, with the
grader's interposer preloaded (grader/evidence/interpose/verbs_spy.c) and
with --hold, which makes the program stop itself after its line: while it
is stopped the grader asks the kernel for the program's QPs and MRs (`rdma
-j resource show qp|mr`) and its memlock limit (/proc/PID/limits), then
lets it finish and reads the rxe hw counters' deltas.

The line is a claim. Each experiment's test proves two things from
evidence the grader gathers itself, and needs no answer key:

  - the experiment broke what it says it breaks: the interposer saw the
    call that breaks it (the deregistration before the SEND that uses the
    lkey, the sge past the MR's end, the flipped rkey, the MR without
    REMOTE_WRITE, the WRITE longer than B's MR, the SEND with no receive
    posted on B, the post on the unconnected QP, the two sges, the four
    unpolled WRITEs, the odd address, the lowered limit, the page unmapped
    and mapped anew under the MR);
  - the line is what the device answered, not what the program believes:
    a completion's status is one ibv_poll_cq() returned on that side, a
    refused call's errno is what the call returned, an async event is one
    ibv_get_async_event() returned, "succeeded" needs the successful
    completions, and the peer's read is compared, by checksums the
    interposer took, with the page before it was unmapped and after;
  - and the kernel and the counters agree: a completion error on side X:
    X's QP in ERR; none: no QP in ERR; rnr-retry-N: B's responder sent
    N + 1 RNR NAKs; a refused post sent nothing; and so on.

The predictions (predictions.c, TODO 1) are claims too, about what rxe will
do. They are graded against the answer key, solutions/09-failures/
ANSWERS.md, which only the instructor's checkout and the Gradescope
autograder have: in the students' repository their form is checked and
they are recorded as graded on submission. With a pre-lab deadline
(make grade-class PRELAB=09=TIME) the predictions graded are the ones of
the last commit before it (build/.../09-failures/prelab/).
"""

import ctypes
import ctypes.util
import errno as errno_mod
import functools
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from grader import GradeFailure, GradedOnSubmission, expect, points
from grader.core.harness import Deadline, leak_checker, run
from grader.evidence.interpose import Spy, build_interposer, parse_int
from grader.evidence.rxe import Rdma

PROG = "failures"
T = "5"                     # --timeout: an experiment's waits

EXPERIMENTS = ["dereg-mr", "sge-past-mr", "wrong-rkey", "no-remote-write",
               "write-past-end", "rnr-retry-0", "rnr-retry-2",
               "post-before-rts", "num-sge", "cq-overrun", "unaligned",
               "memlock", "munmap-remap"]

A_SIZE, B_SIZE, MSG = 8192, 4096, 64     # failures.c
WR_WRITE, WR_SEND, WR_READ = 0, 2, 4     # enum ibv_wr_opcode
LOCAL_WRITE = 1                          # IBV_ACCESS_LOCAL_WRITE
MEMLOCK_LIMIT = 64 << 10                 # TODO 13's limit

# The experiments whose test looks at the kernel's MRs too.
MR_EVIDENCE = {"dereg-mr", "memlock"}

LINE_RE = re.compile(r"^(?P<exp>[a-z0-9-]+): (?P<outcome>[^(\n]*?)"
                     r"(?: \((?P<detail>[^\n]*)\))?$", re.M)
WC_RE = re.compile(r"^completion on (?P<side>[AB]): (?P<name>\S+)$")
WC_DETAIL_RE = re.compile(r"^(?P<words>.*), status (?P<num>\d+), "
                          r"vendor_err 0x[0-9a-f]+$")
CALL_RE = re.compile(r"^(?P<call>ibv_\w+) failed: (?P<err>E[A-Z0-9]+)$")
EVENT_RE = re.compile(r"^async event: (?P<name>IBV_EVENT_[A-Z_]+)$")
READ_RE = re.compile(r"^peer read: (?P<what>old|new|other) contents$")
NO_WC_RE = re.compile(r"^no completion on (?P<side>[AB]) within \d+ s$")


class LabRun:
    """One experiment's run: its Result, the outcome and detail of its
    line (or None), the kernel's QPs and MRs of its pid and its memlock
    limit while it was held (None when it never stopped), the counter
    deltas and the interposer's record."""

    def __init__(self, exp, res, held, delta, calls, cmd):
        self.exp, self.res, self.delta, self.calls = exp, res, delta, calls
        self.cmd = cmd
        self.qps, self.mrs, self.memlock = held or (None, None, None)
        self.outcome = self.detail = None
        for m in LINE_RE.finditer(res.stdout):
            if m.group("exp") == exp:
                self.outcome = m.group("outcome").strip()
                self.detail = m.group("detail")
                break

    def states(self):
        """(A's state, B's state): A is the QP created first."""
        by_qpn = {q["lqpn"]: q["state"] for q in self.qps or []}
        return tuple(by_qpn.get(q, "?") for q in self.qpns())

    def qpns(self):
        """[A's QPN, B's QPN], from the interposer's create_qp records."""
        return [int(c["qpn"]) for _, c in self.of("create_qp")][:2]

    def side(self, name):
        qpns = self.qpns()
        return qpns["AB".index(name)] if len(qpns) == 2 else None

    def of(self, kind):
        return [(i, c) for i, (k, c) in enumerate(self.calls) if k == kind]

    def posts(self, side, opcode=None):
        """[(index, record)] of ibv_post_send() calls on @side's QP."""
        q = self.side(side)
        return [(i, c) for i, c in self.of("post_send")
                if int(c["qpn"]) == q and (opcode is None
                                           or int(c["opcode"]) == opcode)]

    def mrs_of(self, length, ok=True):
        return [(i, c) for i, c in self.of("reg_mr")
                if int(c["len"]) == length and (c["ok"] == "1") == ok]


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


def _memlock_soft(pid):
    """The soft RLIMIT_MEMLOCK of @pid, in bytes (None: unlimited)."""
    try:
        text = Path(f"/proc/{pid}/limits").read_text()
    except OSError:
        return "?"
    m = re.search(r"^Max locked memory\s+(\S+)", text, re.M)
    return None if not m or m.group(1) == "unlimited" else int(m.group(1))


def _run_one(build, rdma, exp, wrap, env, spy_lib):
    spy = Spy(spy_lib)
    preload = " ".join(x for x in (env.get("LD_PRELOAD"), str(spy_lib)) if x)
    env = {**env, **spy.env, "LD_PRELOAD": preload}
    args = ("--hold", "-t", T, exp)
    cmd = " ".join(f"{k}={v}" for k, v in env.items()) + " " + \
        build.command(PROG, "-t", T, exp)
    before = rdma.counters()
    held = None
    with build.start(PROG, *args, ready=None, env=env, wrap=wrap,
                     timeout=40) as proc:
        pid = proc.proc.pid
        # short once a program of the lesson hung, longer on a slow machine
        deadline = Deadline(30)
        while proc.proc.poll() is None and not deadline.passed():
            if _stopped(pid):
                held = (_kernel("qp", pid),
                        _kernel("mr", pid) if exp in MR_EVIDENCE else [],
                        _memlock_soft(pid))
                os.kill(pid, signal.SIGCONT)
                break
            time.sleep(0.02)
        # Neither stopped nor ended within the limit: it hung (killed now).
        hung = held is None and proc.proc.poll() is None
        res = proc.hung_at(deadline) if hung else proc.wait()
    return LabRun(exp, res, held, rdma.counters() - before, spy.calls(), cmd)


class Lab(dict):
    """{name: LabRun}: each experiment run once, when a test first asks
    for it (a test graded alone runs only its own experiment)."""

    def __init__(self, build, rdma):
        super().__init__()
        self.build, self.rdma = build, rdma
        self.wrap, env, _ = leak_checker()
        self.env = env or {}
        self.spy_lib = build_interposer(build.course)

    def __missing__(self, exp):
        self[exp] = _run_one(self.build, self.rdma, exp, self.wrap,
                             self.env, self.spy_lib)
        return self[exp]

    def lines(self, exps):
        """The runs of @exps for a test that reads only their lines: the
        lab's own where it has them (a whole grading has them all), else
        plain runs, three at a time (no --hold, no counters: nothing of
        theirs but the line and the interposer's record is used), not kept
        for other tests."""
        from concurrent.futures import ThreadPoolExecutor

        def plain(exp):
            spy = Spy(self.spy_lib)
            res = self.build.run(PROG, "-t", T, exp, env=spy.env)
            return LabRun(exp, res, None, {}, spy.calls(),
                          f"{spy.describe()} "
                          f"{self.build.command(PROG, '-t', T, exp)}")
        todo = [e for e in exps if e not in self]
        with ThreadPoolExecutor(max_workers=3) as pool:
            done = dict(zip(todo, pool.map(plain, todo)))
        return [self[e] if e in self else done[e] for e in exps]


@pytest.fixture(scope="module")
def lab(build, rdma):
    return Lab(build, rdma)


# ---- the header's names, read at grading time --------------------------------

@functools.lru_cache(maxsize=None)
def _enum(name):
    """enum @name from the installed header: [member, ...] by value."""
    text = Path("/usr/include/infiniband/verbs.h").read_text()
    body = re.search(rf"enum {name} \{{(.*?)\}};", text, re.S).group(1)
    names = []
    for item in re.sub(r"/\*.*?\*/", "", body, flags=re.S).split(","):
        item = item.strip()
        if not item:
            continue
        member, _, value = item.partition("=")
        if value.strip():
            names += [None] * (int(value.strip(), 0) - len(names))
        names.append(member.strip())
    return names


def _wc_status_names():
    return _enum("ibv_wc_status")


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

def _fail(run_, msg):
    raise GradeFailure(f"{run_.exp}: {msg}\nreproduce: {run_.cmd}\n"
                       + run_.res.describe())


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
        _fail(run_, f"no line '{run_.exp}: OUTCOME' on stdout")
    if run_.qps is None:
        _fail(run_, "with --hold the program must stop itself (SIGSTOP) "
              "after its line, before it cleans up; it never did")
    if len(run_.qpns()) != 2:
        _fail(run_, f"the lab must open two QPs, A then B (rc_open()); the "
              f"interposer saw {len(run_.qpns())} created")
    return run_.outcome


def _check_observed(run_):
    """The line must be what the device answered this program."""
    outcome = run_.outcome
    m = WC_RE.match(outcome)
    if m:
        d = WC_DETAIL_RE.match(run_.detail or "")
        if not d:
            _fail(run_, f"the completion's details must read '(WORDS, "
                  f"status N, vendor_err 0xV)', got '({run_.detail})'")
        q, num = run_.side(m.group("side")), int(d.group("num"))
        seen = [int(c["status"]) for _, c in run_.of("poll_cq")
                if int(c["qpn"]) == q]
        if num not in seen or num == 0:
            _fail(run_, f"the line reports status {num} on "
                  f"{m.group('side')}, but ibv_poll_cq() returned the "
                  f"statuses {seen or 'nothing'} on {m.group('side')}'s QP "
                  f"(the interposer's record)")
        return
    m = CALL_RE.match(outcome)
    if m:
        want = getattr(errno_mod, m.group("err"), None)
        call = m.group("call")
        if call == "ibv_post_send":
            got = [int(c["rc"]) for _, c in run_.of("post_send")]
        elif call == "ibv_post_recv":
            got = [int(c["rc"]) for _, c in run_.of("post_recv")]
        elif call == "ibv_reg_mr":
            got = [int(c["errno"]) for _, c in run_.of("reg_mr")
                   if c["ok"] == "0"]
        elif call == "ibv_dereg_mr":
            got = [int(c["rc"]) for _, c in run_.of("dereg_mr")]
        else:
            got = []
        if want is None or want not in got:
            _fail(run_, f"the line says {call} failed with {m.group('err')}, "
                  f"but the interposer saw {call}() return "
                  f"{[errno_mod.errorcode.get(g, g) for g in got if g] or 'no error'}")
        return
    m = EVENT_RE.match(outcome)
    if m:
        names = _enum("ibv_event_type")
        seen = [names[int(c["type"])] if int(c["type"]) < len(names) else "?"
                for _, c in run_.of("async_event")]
        if m.group("name") not in seen:
            _fail(run_, f"the line reports {m.group('name')}, but "
                  f"ibv_get_async_event() returned {seen or 'no event'}")
        return
    m = READ_RE.match(outcome)
    if m:
        done = [c for _, c in run_.of("poll_cq")
                if c.get("sum") and int(c["status"]) == 0]
        old = [c["sum"] for _, c in run_.of("munmap")]
        new = [c["sum"] for _, c in run_.of("read_source")]
        if not done or not old or not new:
            _fail(run_, "the interposer saw no completed READ of the "
                  "remapped page (or no munmap of registered memory)")
        got = done[-1]["sum"]
        truth = ("old" if got == old[-1] else
                 "new" if got == new[-1] else "other")
        expect(m.group("what"), truth, f"{run_.exp}: what B's READ brought, "
               f"by the interposer's checksums: the page before munmap(), "
               f"the new page at the READ, the READ's destination after "
               f"it completed")
        return
    if outcome == "succeeded":
        bad = [c for _, c in run_.of("poll_cq") if int(c["status"])]
        if bad:
            _fail(run_, f"'succeeded', but ibv_poll_cq() returned error "
                  f"completions: {bad}")
        return
    if NO_WC_RE.match(outcome):
        return
    _fail(run_, f"'{outcome}' is none of the lab's line forms (README, "
          f"Output)")


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


def _delta(run_, meaning):
    """The counter for @meaning (grader/evidence/counters.py) over the run;
    NoEvidence on a device that does not count it."""
    return run_.delta.of(meaning)


def _experiment(lab, exp, broke, evidence=None):
    """@broke(run_): the interposer's proof that the experiment broke what
    it says; @evidence(run_): the kernel's or the counters'."""
    run_ = lab[exp]
    _line(run_)
    broke(run_)
    # A wrong name makes a wrong line: say which part is wrong first.
    _check_names(run_)
    _check_observed(run_)
    _check_states(run_)
    if evidence:
        evidence(run_)


# ---- what each experiment breaks, as the interposer saw it ---------------------

def _mr(run_, length, what, access=None):
    """The successful registration of @length bytes (the latest), or fail."""
    regs = [c for _, c in run_.mrs_of(length)
            if access is None or parse_int(c["access"]) == access]
    if not regs:
        _fail(run_, f"the interposer saw no registration of {what}")
    return regs[-1]


def _sge0(post):
    addr, length, lkey = post["sge0"].split(":")
    return int(addr, 16), int(length), int(lkey, 16)


def _one_post(run_, side, opcode, what):
    posts = run_.posts(side, opcode)
    if not posts:
        _fail(run_, f"the interposer saw no {what} posted on {side}'s QP")
    return posts[-1]


def _broke_dereg_mr(run_):
    a_mr = _mr(run_, A_SIZE, "A's buffer")
    lkey = a_mr["lkey"]
    dereg = [i for i, c in run_.of("dereg_mr")
             if c["lkey"] == lkey and c["rc"] == "0"]
    i, post = _one_post(run_, "A", WR_SEND, "SEND")
    if not dereg or dereg[0] > i or post.get("sge0", "").split(":")[-1] != \
            lkey:
        _fail(run_, f"A's MR (lkey {lkey}) must be deregistered before the "
              f"SEND that still uses its lkey; the interposer saw the "
              f"deregistration at call {dereg[0] if dereg else 'never'}, the "
              f"SEND at call {i} with sge {post.get('sge0')}")


def _broke_sge_past_mr(run_):
    a_mr = _mr(run_, A_SIZE, "A's buffer")
    start, end = parse_int(a_mr["addr"]), parse_int(a_mr["addr"]) + A_SIZE
    _, post = _one_post(run_, "A", WR_SEND, "SEND")
    addr, length, _ = _sge0(post)
    if not (start <= addr < end < addr + length):
        _fail(run_, f"the SEND's sge must start inside A's MR "
              f"[0x{start:x}, 0x{end:x}) and end past it; the interposer "
              f"saw [0x{addr:x}, 0x{addr + length:x})")


def _b_mr(run_, access=None):
    return _mr(run_, B_SIZE, "B's buffer", access)


def _broke_wrong_rkey(run_):
    b = _b_mr(run_)
    _, post = _one_post(run_, "A", WR_WRITE, "RDMA WRITE")
    want = parse_int(b["rkey"]) ^ 1
    if parse_int(post["rkey"]) != want or post["raddr"] != b["addr"]:
        _fail(run_, f"the WRITE must go to B's buffer ({b['addr']}) with "
              f"B's rkey, its lowest bit flipped (0x{want:x}); the "
              f"interposer saw raddr {post['raddr']}, rkey {post['rkey']}")


def _broke_no_remote_write(run_):
    b = _b_mr(run_, access=LOCAL_WRITE)
    _, post = _one_post(run_, "A", WR_WRITE, "RDMA WRITE")
    if post["rkey"] != b["rkey"]:
        _fail(run_, f"the WRITE must use the rkey of B's buffer registered "
              f"with LOCAL_WRITE only ({b['rkey']}); it used {post['rkey']}")


def _broke_write_past_end(run_):
    b = _b_mr(run_)
    _, post = _one_post(run_, "A", WR_WRITE, "RDMA WRITE")
    if int(post["len"]) != A_SIZE or post["rkey"] != b["rkey"] or \
            post["raddr"] != b["addr"]:
        _fail(run_, f"the WRITE must carry {A_SIZE} bytes to B's "
              f"{B_SIZE}-byte MR (at {b['addr']}, rkey {b['rkey']}); the "
              f"interposer saw {post['len']} bytes to {post['raddr']} with "
              f"rkey {post['rkey']}")


def _broke_no_recv(run_):
    _one_post(run_, "A", WR_SEND, "SEND")
    q = run_.side("B")
    recvs = [c for _, c in run_.of("post_recv") if int(c["qpn"]) == q]
    if recvs:
        _fail(run_, f"B must have no receive posted; the interposer saw "
              f"{len(recvs)} ibv_post_recv() on B")


def _broke_post_before_rts(run_):
    _, post = _one_post(run_, "A", WR_SEND, "SEND")
    if post["rc"] == "0":
        _fail(run_, "the SEND on the unconnected QP was accepted "
              "(ibv_post_send returned 0)")


def _broke_num_sge(run_):
    _, post = _one_post(run_, "A", WR_SEND, "SEND")
    if post["num_sge"] != "2":
        _fail(run_, f"the SEND must carry two sges on a QP made for one; "
              f"the interposer saw num_sge {post['num_sge']}")


def _broke_cq_overrun(run_):
    writes = run_.posts("A", WR_WRITE)
    if len(writes) != 4:
        _fail(run_, f"four signaled WRITEs must be posted on A; the "
              f"interposer saw {len(writes)}")
    q = run_.side("A")
    polled = [i for i, c in run_.of("poll_cq")
              if int(c["qpn"]) == q and writes[0][0] < i < writes[-1][0]]
    if polled:
        _fail(run_, "A's CQ was polled between the WRITEs: the four must "
              "be posted with none of their completions taken")


def _broke_unaligned(run_):
    regs = [c for _, c in run_.mrs_of(MSG - 1)
            if parse_int(c["addr"]) % 4096 == 1]
    if not regs:
        _fail(run_, f"the interposer saw no registration of {MSG - 1} "
              f"bytes one byte past a page boundary")
    _, post = _one_post(run_, "A", WR_SEND, "SEND")
    if parse_int(post.get("sge0", "0:0:0").split(":")[2]) != \
            parse_int(regs[-1]["lkey"]):
        _fail(run_, "the SEND must carry the odd region (its lkey)")


def _broke_memlock(run_):
    if run_.memlock != MEMLOCK_LIMIT:
        _fail(run_, f"the soft RLIMIT_MEMLOCK must be {MEMLOCK_LIMIT} "
              f"bytes (64 KiB) while the program is held; /proc/PID/limits "
              f"says {run_.memlock if run_.memlock is not None else 'unlimited'}")
    if not [c for _, c in run_.of("reg_mr") if int(c["len"]) >= 1 << 20]:
        _fail(run_, "the interposer saw no registration of 1 MiB")


def _broke_munmap_remap(run_):
    unmaps = run_.of("munmap")
    if not unmaps:
        _fail(run_, "the interposer saw no munmap() of registered memory")
    addr = unmaps[-1][1]["addr"]
    remaps = [c for _, c in run_.of("mmap")
              if c["addr"] == addr and c["ok"] == "1"]
    reads = [c for _, c in run_.posts("B", WR_READ) if c["raddr"] == addr]
    if not remaps or not reads:
        _fail(run_, f"the page at {addr} must be mapped anew there "
              f"(MAP_FIXED) and READ by B through the MR; the interposer "
              f"saw {len(remaps)} such mmap() and {len(reads)} such READ")


# ---- local errors ----------------------------------------------------------------

@points(2, "dereg-mr: a SEND through a deregistered MR's lkey")
def test_dereg_mr(lab):
    def evidence(run_):
        gone = [m for m in run_.mrs if m.get("mrlen") == A_SIZE]
        if gone:
            raise GradeFailure(f"{run_.exp}: A's 8192-byte MR must be "
                               f"deregistered before the SEND; the kernel "
                               f"still holds it while the program is "
                               f"held: {gone}")
    _experiment(lab, "dereg-mr", _broke_dereg_mr, evidence)


@points(2, "sge-past-mr: a SEND that runs past its MR")
def test_sge_past_mr(lab):
    _experiment(lab, "sge-past-mr", _broke_sge_past_mr)


def _nothing_sent(run_):
    if _delta(run_, "packets sent"):
        raise GradeFailure(f"{run_.exp}: a refused post sends nothing, but "
                           f"{run_.delta.label('packets sent')} moved by "
                           f"{_delta(run_, 'packets sent')}")


@points(2, "post-before-rts: a post on a QP in INIT")
def test_post_before_rts(lab):
    def evidence(run_):
        _nothing_sent(run_)
        expect(run_.states(), ("INIT", "INIT"),
               f"{run_.exp}: the program's QPs (A, B) per the kernel: the "
               f"lab must not be connected in this experiment")
    _experiment(lab, "post-before-rts", _broke_post_before_rts, evidence)


@points(2, "num-sge: more scatter/gather entries than max_send_sge")
def test_num_sge(lab):
    _experiment(lab, "num-sge", _broke_num_sge, _nothing_sent)


# ---- remote errors ---------------------------------------------------------------

def _went_out(run_):
    if _delta(run_, "packets sent") < 1:
        raise GradeFailure(f"{run_.exp}: the WRITE never left A "
                           f"({run_.delta.label('packets sent')} +0): it "
                           f"must reach B's NIC to be refused there")


@points(2, "wrong-rkey: a WRITE with an rkey that is not the MR's")
def test_wrong_rkey(lab):
    _experiment(lab, "wrong-rkey", _broke_wrong_rkey, _went_out)


@points(2, "no-remote-write: a WRITE into an MR without REMOTE_WRITE")
def test_no_remote_write(lab):
    _experiment(lab, "no-remote-write", _broke_no_remote_write, _went_out)


@points(2, "write-past-end: a WRITE past the end of the remote MR")
def test_write_past_end(lab):
    _experiment(lab, "write-past-end", _broke_write_past_end, _went_out)


def _rnr(retries):
    def evidence(run_):
        expect(_delta(run_, "RNR NAKs sent"), retries + 1,
               f"{run_.exp}: RNR NAKs B's responder sent ("
               f"{run_.delta.label('RNR NAKs sent')}): the first try and "
               f"{retries} retries, each refused because B has no receive "
               f"posted")
        expect(_delta(run_, "RNR retries exceeded"), 1,
               f"{run_.exp}: requests given up after the RNR retries "
               f"({run_.delta.label('RNR retries exceeded')})")
    return evidence


@points(2, "rnr-retry-0: a SEND with no receive posted, rnr_retry 0")
def test_rnr_retry_0(lab):
    _experiment(lab, "rnr-retry-0", _broke_no_recv, _rnr(0))


@points(2, "rnr-retry-2: a SEND with no receive posted, rnr_retry 2")
def test_rnr_retry_2(lab):
    _experiment(lab, "rnr-retry-2", _broke_no_recv, _rnr(2))


# ---- memory and the CQ -----------------------------------------------------------

@points(2, "cq-overrun: more completions than the CQ holds, not polled")
def test_cq_overrun(lab):
    def evidence(run_):
        if _delta(run_, "packets sent") < 4:
            raise GradeFailure(f"{run_.exp}: four WRITEs must cross the "
                               f"device ({run_.delta.label('packets sent')} "
                               f"moved by {_delta(run_, 'packets sent')})")
    _experiment(lab, "cq-overrun", _broke_cq_overrun, evidence)


@points(2, "unaligned: a region at an odd address and length")
def test_unaligned(lab):
    def evidence(run_):
        if not run_.delta.has("receives consumed"):
            # A device that does not count receives (mlx5): the
            # interposer's record of B's successful RECV completion.
            got = [c for _, c in run_.of("poll_cq")
                   if int(c["opcode"]) == 128 and c["status"] == "0"
                   and len(run_.qpns()) == 2
                   and int(c["qpn"]) == run_.qpns()[1]]
            expect(len(got), 1, f"{run_.exp}: receives completed on B's QP "
                   f"(the interposer's record of ibv_poll_cq(); the "
                   f"{run_.delta.kind} device does not count receives)")
            return
        expect(_delta(run_, "receives consumed"), 1,
               f"{run_.exp}: receives completed on the device "
               f"({run_.delta.label('receives consumed')}): B must have "
               f"received A's SEND")
    _experiment(lab, "unaligned", _broke_unaligned, evidence)


@points(2, "memlock: a region larger than RLIMIT_MEMLOCK")
def test_memlock(lab):
    def evidence(run_):
        big = [m for m in run_.mrs if m.get("mrlen", 0) >= 1 << 20]
        if big:
            raise GradeFailure(f"{run_.exp}: the kernel holds a 1 MiB MR of "
                               f"the program while it is held: {big}")
    _experiment(lab, "memlock", _broke_memlock, evidence)


@points(2, "munmap-remap: what the peer reads under a live MR")
def test_munmap_remap(lab):
    def evidence(run_):
        if _delta(run_, "packets sent") < 2:
            raise GradeFailure(f"{run_.exp}: B's READ and A's response must "
                               f"cross the device ("
                               f"{run_.delta.label('packets sent')} moved by "
                               f"{_delta(run_, 'packets sent')})")
    _experiment(lab, "munmap-remap", _broke_munmap_remap, evidence)


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
            # The names of the statuses the device returned, not of ones
            # the program chose to print.
            _check_observed(run_)
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


# ---- the predictions: graded where the key is ---------------------------------------

KEY_FILE = Path("solutions") / "09-failures" / "ANSWERS.md"
KEY_ROW = re.compile(r"^\| (?P<exp>[a-z0-9-]+) \| `(?P<outcome>[^`]+)` \|$", re.M)
ENTRY_RE = re.compile(r'\{\s*"(?P<exp>[^"\\]*)"\s*,\s*"(?P<outcome>(?:[^"\\]|\\.)*)"\s*\}')
FORMS = [
    re.compile(r"^succeeded$"),
    re.compile(r"^ibv_\w+ failed: (?P<err>E[A-Z0-9]+)$"),
    re.compile(r"^completion on [AB]: (?P<wc>IBV_WC_[A-Z_]+)$"),
    re.compile(r"^async event: (?P<event>IBV_EVENT_[A-Z_]+)$"),
    re.compile(r"^peer read: (?:old|new|other) contents$"),
]


def key_file(kind):
    """The answer key of a device kind: what rxe does is ANSWERS.md; what
    another kind does (mlx5: an unaligned atomic, a post before RTS, a CQ
    overrun differ by provider and rdma-core version) is its own
    ANSWERS-KIND.md, written by the instructor from the reference
    solution's run on that device (INSTRUCTORS.md)."""
    if kind in ("rxe", "unknown"):
        return KEY_FILE
    return KEY_FILE.with_name(f"ANSWERS-{kind}.md")


def answer_key(course, kind="rxe"):
    """{experiment: outcome} from the answer key of the device @kind, or
    None where the course has none (the students' repository)."""
    path = course / key_file(kind)
    if not path.is_file():
        if (course / KEY_FILE).is_file():
            raise GradeFailure(
                f"no answer key for {kind} devices ({key_file(kind)}): the "
                f"predictions are graded against what the device does, and "
                f"rxe's key ({KEY_FILE}) is not what a {kind} device does. "
                f"They cannot be graded on this device until that key is "
                f"written (INSTRUCTORS.md, 'Grading on your own hardware')")
        return None
    key = {m.group("exp"): m.group("outcome")
           for m in KEY_ROW.finditer(path.read_text())}
    missing = set(EXPERIMENTS) - set(key)
    if missing:
        raise GradeFailure(f"{key_file(kind)}: its key table has no row for "
                           f"{sorted(missing)} (a course problem)")
    return key


def _predictions(build):
    """({experiment: prediction} of the predictions.c graded, where it
    came from). The built copy of predictions.c, or with a pre-lab deadline
    the one of the last commit before it (prelab/ in the build)."""
    prelab = build.out / "prelab"
    record = prelab / "prelab.json"
    if record.is_file():
        info = json.loads(record.read_text())
        if not info.get("commit"):
            raise GradeFailure(f"the predictions are graded at your last "
                               f"commit before the pre-lab deadline "
                               f"({info.get('deadline')}): "
                               f"{info.get('note') or 'there is none'}")
        src = prelab / "predictions.c"
        where = (f"predictions.c at commit {info['commit'][:12]} "
                 f"({info.get('when')}), the last before the pre-lab "
                 f"deadline {info.get('deadline')}")
    else:
        src = build.out / "src" / build.lesson.name / "predictions.c"
        where = "predictions.c"
    if not src.is_file():
        build.path(PROG)            # a compile error says why
        raise GradeFailure(f"{where}: not found")
    text = src.read_text()
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    got = {m.group("exp"): m.group("outcome")
           for m in ENTRY_RE.finditer(text)}
    return got, where


def _form_problems(got, exps):
    """The predictions of @exps that are not in one of the forms."""
    wc = set(_wc_status_names()) - {None}
    events = set(_enum("ibv_event_type")) - {None}
    bad = []
    for e in exps:
        p = got.get(e, "?")
        m = next((f.match(p) for f in FORMS if f.match(p)), None)
        if m is None or (m.groupdict().get("err") and
                         not hasattr(errno_mod, m.group("err"))) or \
                (m.groupdict().get("wc") and m.group("wc") not in wc) or \
                (m.groupdict().get("event") and
                 m.group("event") not in events):
            bad.append(f"  {e}: {p}")
    return bad


def _score_predictions(build, exps):
    got, where = _predictions(build)
    bad = _form_problems(got, exps)
    if bad:
        raise GradeFailure(
            f"{where}: {len(bad)} of these {len(exps)} predictions are not in "
            f"one of the forms of predictions.h (succeeded, CALL failed: "
            f"ERRNAME, completion on A|B: IBV_WC_NAME, async event: "
            f"IBV_EVENT_NAME, peer read: old|new|other contents; names from "
            f"the headers):\n" + "\n".join(bad)
            + f"\nreproduce: {build.command(PROG, '--predictions')} "
            f"prints the table")
    kind = Rdma().kind
    key = answer_key(build.course, kind)
    if key is None:
        raise GradedOnSubmission(
            f"{where}: {len(exps)} predictions, each in a form of "
            f"predictions.h:\n" + "\n".join(f"  {e}: {got[e]}" for e in exps)
            + "\nThey are graded when you submit, against what rxe does "
            "(the answer key is not in your repository).")
    wrong = [f"  {e}: {got[e]}" for e in exps if got[e] != key[e]]
    if wrong:
        raise GradeFailure(
            f"{where}: {len(wrong)} of these {len(exps)} predictions are not "
            f"what {'rxe' if kind == 'unknown' else kind} does:\n" + "\n".join(wrong)
            + f"\nreproduce: {build.command(PROG, '--predictions')} "
            f"prints the table")


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
