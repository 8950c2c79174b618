"""Lesson 02: memory regions - reg_mr (access flags, keys, refusals) and
reg_cost (what registration costs, by size).

The keys reg_mr prints are compared with the kernel's own record of the MR
(`rdma resource show mr`, while reg_mr --hold keeps it registered). The
refusals come from the kernel: REMOTE_WRITE without LOCAL_WRITE (EINVAL), and
a region larger than RLIMIT_MEMLOCK for a process without CAP_IPC_LOCK
(ENOMEM), which is why that test drops root's privileges first.

Every value test runs with the grader's interposer preloaded
(grader/evidence/interpose/verbs_spy.c): the MR line must be the
registration the program really made (the interposer's record of its
address, length, keys and access), a refusal must be the kernel's (the
ibv_reg_mr() call was made and failed with that errno), and reg_cost's CSV
must describe registrations it made, -n per size, with times that are
theirs, and reg_mr --access with a random valid set of flags must register
exactly those flags.

reg_cost's times hold at any speed. The program times the same calls, so
its interval contains the interposer's: a reported median is never below
the real one (half of it leaves room for a coarser clock or an extra
untimed call of that size), while made-up numbers or a timer around nothing
fall below it. Above, the bound is the call's window: the interposer stamps
when each call went in (at=) and how long it took, so the program's two
clock reads around a registration lie between the end of the verbs call
before it and the start of the one after it, however long the machine
stalls in between. (A bound on the call's own time alone failed a correct
program: under load, a prefixed-output solution printed 11788 us for 8 MiB
registrations the interposer timed at 604 us, fresh-clone make test.) A
timer around the deregistration too, or a printed number larger than the
gap, is caught; extra work that is no verbs call inside that gap (a memset
between the two clock reads) is not told from a stall. The growth (the two
largest sizes over twice the two smallest) is the machine's own: a run in
which a loaded machine held up most small registrations is followed by a
fresh one, up to GROWTH_RUNS.
"""

import functools
import math
import json
import secrets
import shutil

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.core.harness import leak_checker, limits_prefix
from grader.evidence.interpose import Spy, build_interposer, parse_int

FLAGS = {"local_write": 1, "remote_write": 2, "remote_read": 4,
         "remote_atomic": 8}
MR_RE = (r"^mr addr 0x([0-9a-f]+) length (\d+) lkey 0x([0-9a-f]{8}) "
         r"rkey 0x([0-9a-f]{8}) access (\S+)$")
NO_SUCH = "nosuchdev0"
COST_HEADER = "size_bytes,reg_us,dereg_us"
COST_ARGS = ("--max-size", "32M", "-n", "5")


def _mr_line(build, res, *args):
    return expect_match(res.stdout, MR_RE,
                        f"stdout of '{build.command('reg_mr', *args)}'")


@pytest.fixture(scope="module")
def spy_lib(build):
    return build_interposer(build.course)


def _spied(build, spy_lib, prog, *args, wrap=(), env=None, rlimits=None):
    """Run @prog under the interposer: (Result, Spy, how to reproduce)."""
    spy = Spy(spy_lib)
    env = dict(env or {})
    env.update(spy.env, LD_PRELOAD=" ".join(
        x for x in (env.get("LD_PRELOAD"), str(spy_lib)) if x))
    how = " ".join([spy.describe(), *limits_prefix(rlimits), *wrap,
                    build.command(prog, *args)])
    return build.run(prog, *args, wrap=wrap, env=env, timeout=120,
                     rlimits=rlimits), spy, how


def _registered(spy, how, ok=True):
    regs = [c for _, c in spy.calls("reg_mr") if (c["ok"] == "1") == ok]
    if not regs:
        raise GradeFailure(f"{how}\nthe interposer saw no "
                           f"{'successful ' if ok else 'refused '}"
                           f"ibv_reg_mr() call")
    return regs[-1]


@points(2, "reg_mr registers: length and access as asked (interposer)")
def test_reg_mr(build, rdma, spy_lib):
    for args, access in ((("-s", "8192"), "local_write"),
                         (("-s", "4096", "--access",
                           "remote_read,local_write,remote_write"),
                          "local_write,remote_write,remote_read")):
        res, spy, how = _spied(build, spy_lib, "reg_mr", *args)
        res.ok(how)
        m = _mr_line(build, res, *args)
        expect(m.group(5), access, f"access printed by '{how}'")
        reg = _registered(spy, how)
        expect((int(m.group(1), 16), int(m.group(2)), int(m.group(3), 16),
                int(m.group(4), 16)),
               (parse_int(reg["addr"]), int(reg["len"]),
                parse_int(reg["lkey"]), parse_int(reg["rkey"])),
               f"(addr, length, lkey, rkey) printed by '{how}' vs the "
               f"ibv_reg_mr() call the interposer saw")
        expect(int(m.group(2)), int(args[1]), "length of the MR vs -s")


@points(3, "lkey, rkey and length are the kernel's (rdma resource show mr)")
def test_keys_are_real(build, rdma):
    if not shutil.which("rdma"):
        raise GradeFailure("the 'rdma' tool (iproute2) is not installed")
    args = ("-s", "12288", "--access", "local_write,remote_read", "--hold", "20")
    with build.start("reg_mr", *args, ready=MR_RE) as proc:
        m = proc.match
        res = build.run_cmd(["rdma", "-j", "resource", "show", "mr"]).ok(
            "rdma -j resource show mr")
        mine = [e for e in json.loads(res.stdout or "[]")
                if e.get("pid") == proc.proc.pid]
        if len(mine) != 1:
            raise GradeFailure(
                f"'rdma resource show mr' lists {len(mine)} MRs of "
                f"'{build.command('reg_mr', *args)}' (pid {proc.proc.pid}) "
                f"while it holds its region; expected 1\n{res.stdout}")
        mr = mine[0]
        expect(int(m.group(2)), mr.get("mrlen"), "length printed vs mrlen")
        expect(int(m.group(2)), 12288, "length printed vs -s 12288")
        # Without CAP_NET_ADMIN the kernel does not show the keys.
        if "lkey" in mr:
            expect(int(m.group(3), 16), int(mr["lkey"], 16), "lkey printed vs "
                   "the kernel's lkey")
        if "rkey" in mr:
            expect(int(m.group(4), 16), int(mr["rkey"], 16), "rkey printed vs "
                   "the kernel's rkey")


@points(3, "REMOTE_WRITE without LOCAL_WRITE is refused (EINVAL), explained")
def test_remote_write_needs_local_write(build, rdma, spy_lib):
    for access in ("remote_write", "remote_read,remote_atomic"):
        args = ("--access", access)
        res, spy, how = _spied(build, spy_lib, "reg_mr", *args)
        res.fails(1, how)
        expect(int(_registered(spy, how, ok=False)["errno"]), 22,
               f"errno of the ibv_reg_mr() call of '{how}' (the kernel's "
               f"refusal, as the interposer saw it: EINVAL)")
        expect_match(res.stderr,
                     rf"^ibv_reg_mr\(4096 bytes, access {access}\) "
                     r"failed: Invalid argument \(EINVAL\): .*local_write",
                     f"stderr of '{build.command('reg_mr', *args)}' (the hint "
                     f"must name local_write)")


# `ulimit -l 64`: set by the sandbox's launcher (prlimit uncontained).
MEMLOCK_64K = {"memlock": 64 * 1024}


def _unprivileged(build):
    """The program must run without CAP_IPC_LOCK (root ignores the memlock
    limit): a wrapper that makes it nobody when it would run as root (an
    uncontained grader run by root; the sandbox drops root itself)."""
    if not build.as_root:
        return ()
    return ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all")


@points(3, "beyond the memlock limit: refused (ENOMEM), names ulimit -l")
def test_memlock_limit(build, rdma, spy_lib):
    wrap = _unprivileged(build)
    small = ("-s", "16K")
    res = build.run("reg_mr", *small, wrap=wrap, rlimits=MEMLOCK_64K)
    res.ok(f"under a 64 KiB memlock limit, 16 KiB must still register: "
           f"{res.command}")
    big = ("-s", "1M")
    res, spy, big_cmd = _spied(build, spy_lib, "reg_mr", *big, wrap=wrap,
                               rlimits=MEMLOCK_64K)
    res.fails(1, big_cmd)
    refused = _registered(spy, big_cmd, ok=False)
    expect((int(refused["len"]), int(refused["errno"])), (1 << 20, 12),
           f"(length, errno) of the ibv_reg_mr() call of '{big_cmd}' (the "
           f"kernel's refusal, as the interposer saw it: ENOMEM)")
    expect_match(res.stderr,
                 r"^ibv_reg_mr\(1048576 bytes, access local_write\) "
                 r"failed: Cannot allocate memory \(ENOMEM\): .*ulimit -l",
                 f"stderr of '{big_cmd}' (the hint must name the limit and "
                 f"'ulimit -l')")


@points(2, "reg_mr releases the MR and the PD (LeakSanitizer, interposer)")
def test_reg_mr_releases(build, rdma, spy_lib):
    wrap, env, how = leak_checker()
    args = ("-s", "64K")
    res, spy, cmd = _spied(build, spy_lib, "reg_mr", *args, wrap=wrap,
                           env=env)
    cmd = f"{how} {cmd}"
    if res.returncode == 23:
        raise GradeFailure("memory leaked: every ibv_reg_mr() needs an "
                           "ibv_dereg_mr(), every ibv_alloc_pd() an "
                           f"ibv_dealloc_pd()\nreproduce: {cmd}\n"
                           + res.describe(lines=30))
    res.ok(cmd)
    _mr_line(build, res, *args)
    lkey = _registered(spy, cmd)["lkey"]
    if not [c for _, c in spy.calls("dereg_mr")
            if c["lkey"] == lkey and c["rc"] == "0"]:
        raise GradeFailure(f"{cmd}\nthe interposer saw no successful "
                           f"ibv_dereg_mr() of the MR it registered "
                           f"(lkey {lkey})")


# A printed median may not be below LOW x the interposer's median of the
# real calls of its size (the timer enclosed the call, so it cannot be
# shorter), nor above the median of their windows: the time from the end of
# the verbs call before each one to the start of the call after it, where a
# correct program's two clock reads must lie whatever the machine's speed
# (a stall between the call's return and the program's clock read, which
# a bound on the call alone reads as a lie, stays inside). 0.01: the CSV's
# two decimals; SLACK_US: the two clock reads themselves.
LOW, SLACK_US = 0.5, 2.0


@functools.lru_cache(maxsize=None)
def _reg_cost(build, spy_lib, run=0):
    """reg_cost's run number @run (each a fresh one, kept for every test
    that asks for it): (Result, Spy, command)."""
    res, spy, how = _spied(build, spy_lib, "reg_cost", *COST_ARGS)
    return res, spy, how


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1]
                                                 + xs[len(xs) // 2]) / 2


def _real_times(build, spy_lib, run=0):
    """{(kind, size): [(microseconds, window microseconds)]} of the
    registrations and deregistrations reg_cost made, as the interposer
    timed them: each call's own time, and the window from the end of the
    call recorded before it to the start of the one after it (inf at
    either end of the record)."""
    calls = [(kind, c) for kind, c in _reg_cost(build, spy_lib, run)[1].calls()
             if kind in ("reg_mr", "dereg_mr")]
    seen = {}
    for i, (kind, c) in enumerate(calls):
        before = calls[i - 1][1] if i else None
        after = calls[i + 1][1] if i + 1 < len(calls) else None
        if before is None or after is None or "at" not in c:
            window = math.inf
        else:
            window = (int(after["at"]) - int(before["at"])
                      - int(before["ns"])) / 1000
        seen.setdefault((kind, int(c["len"])), []).append(
            (int(c["ns"]) / 1000, window))
    return seen


def _rows(build, spy_lib, run=0):
    res, spy, cmd = _reg_cost(build, spy_lib, run)
    res.ok(cmd)
    lines = [x.strip() for x in res.stdout.strip().splitlines()]
    expect(lines[0] if lines else "(no output)", COST_HEADER,
           f"CSV header printed by '{cmd}'")
    rows = []
    for line in lines[1:]:
        f = line.split(",")
        try:
            if len(f) != 3:
                raise ValueError
            rows.append((int(f[0]), float(f[1]), float(f[2])))
        except ValueError:
            raise GradeFailure(f"'{cmd}': a CSV row is not "
                               f"'size_bytes,reg_us,dereg_us': {line!r}")
    # Each row describes registrations of its size the program made.
    seen, n = _real_times(build, spy_lib, run), int(COST_ARGS[-1])
    missing = [f"size {r[0]}: {len(seen.get((k, r[0]), []))} ibv_{k}()"
               for r in rows for k in ("reg_mr", "dereg_mr")
               if len(seen.get((k, r[0]), [])) < n]
    if missing:
        raise GradeFailure(f"'{cmd}': each row must describe -n {n} "
                           f"registrations and deregistrations of its size; "
                           f"the interposer saw:\n  " + "\n  ".join(missing))
    return rows, cmd


def _outside_bounds(rows, seen, kinds):
    """The rows whose printed median of @kinds ('reg_mr', 'dereg_mr') lies
    outside [LOW x the interposer's median of the real calls of that size,
    the median of their windows], one line each."""
    off = []
    for size, reg_us, dereg_us in rows:
        for kind, printed in (("reg_mr", reg_us), ("dereg_mr", dereg_us)):
            if kind not in kinds:
                continue
            real = _median([t for t, _ in seen[(kind, size)]])
            window = _median([w for _, w in seen[(kind, size)]])
            if not real * LOW - 0.01 <= printed <= window + SLACK_US + 0.01:
                off.append(f"size {size}: printed {kind[:-3]}_us "
                           f"{printed:.1f}, the real calls took {real:.1f} "
                           f"us (median of {len(seen[(kind, size)])}), "
                           f"{window:.1f} us from the call before to the "
                           f"call after each")
    return off


@points(2, "reg_cost writes the CSV: every size 4 KiB .. --max-size, registered")
def test_reg_cost_csv(build, rdma, spy_lib):
    rows, cmd = _rows(build, spy_lib)
    sizes = [4096 << i for i in range(14)]          # 4 KiB .. 32 MiB
    expect([r[0] for r in rows], sizes, f"size_bytes column of '{cmd}'")
    bad = [r for r in rows if not (r[1] > 0 and r[2] > 0)]
    if bad:
        raise GradeFailure(f"'{cmd}': times must be positive microseconds; "
                           f"got rows {bad}")


# Runs of reg_cost test_reg_cost_grows may look at: a run whose smallest
# sizes' medians a loaded machine inflated (three of five 4 KiB
# registrations held up past 1.5 ms, beside stress-ng on both cores) is
# followed by a fresh one.
GROWTH_RUNS = 3


@points(2, "registration cost grows with size (as measured)")
def test_reg_cost_grows(build, rdma, spy_lib):
    seen = []
    for run in range(GROWTH_RUNS):
        rows, cmd = _rows(build, spy_lib, run)
        # The growth printed must be the registrations': each reg_us
        # within the bounds of the interposer's median for its size.
        off = _outside_bounds(rows, _real_times(build, spy_lib, run),
                              ("reg_mr",))
        if off:
            raise GradeFailure(f"'{cmd}': the times printed are not the "
                               f"registrations' (the interposer timed each "
                               f"real ibv_reg_mr()):\n  " + "\n  ".join(off))
        if len(rows) < 4:
            raise GradeFailure(f"'{cmd}' printed {len(rows)} rows; need 4 "
                               f"or more")
        small = sum(r[1] for r in rows[:2]) / 2
        large = sum(r[1] for r in rows[-2:]) / 2
        # Pinning 8192 pages costs far more than pinning 1 or 2 (about
        # 10-30x on rxe); a factor of 2 leaves room for a noisy machine.
        if large > 2 * small:
            return
        seen.append(f"run {run + 1}: smallest two: {rows[0]}, {rows[1]} -> "
                    f"mean reg_us {small:.2f}\n    largest two:  {rows[-2]}, "
                    f"{rows[-1]} -> mean reg_us {large:.2f}")
    raise GradeFailure(
        f"'{cmd}': registering the two largest sizes should take well over "
        f"twice as long as the two smallest (pinning is per page); not so "
        f"in {GROWTH_RUNS} runs:\n  " + "\n  ".join(seen)
        + "\n  is the timer around ibv_reg_mr() alone?")


def _random_access():
    rng = secrets.SystemRandom()
    names = [n for n in FLAGS if n != "local_write" and rng.random() < 0.5]
    names.append("local_write")     # remote write/atomic need it
    rng.shuffle(names)
    return names


@points(2, "reg_mr registers exactly the access flags asked for (interposer)")
def test_access_registered(build, rdma, spy_lib):
    names = _random_access()
    size = 4096 * (1 + secrets.randbelow(8))
    args = ("-s", str(size), "--access", ",".join(names))
    res, spy, how = _spied(build, spy_lib, "reg_mr", *args)
    res.ok(how)
    regs = [c for k, c in spy.calls("reg_mr") if c.get("ok") == "1"]
    if len(regs) != 1:
        raise GradeFailure(f"{how}\nthe interposer saw {len(regs)} successful "
                           f"ibv_reg_mr() calls; expected 1: {regs}")
    want = sum(FLAGS[n] for n in names)
    expect((int(regs[0]["len"]), parse_int(regs[0]["access"])), (size, want),
           f"(length, access flags) of the ibv_reg_mr() call for "
           f"--access {','.join(names)} (reproduce: {how})")


@points(2, "reg_cost's numbers are the registrations it really timed (interposer)")
def test_reg_cost_timed(build, rdma, spy_lib):
    rows, cmd = _rows(build, spy_lib)
    off = _outside_bounds(rows, _real_times(build, spy_lib),
                          ("reg_mr", "dereg_mr"))
    if not rows or off:
        raise GradeFailure(
            f"{cmd}\nthe interposer timed the program's own ibv_reg_mr()/"
            f"ibv_dereg_mr() calls; each printed median must be at least "
            f"{LOW:g} times theirs, and no more than the time from the end "
            f"of the verbs call before each to the start of the call after "
            f"it (the program's clock reads lie in between):\n  "
            + "\n  ".join(off or ["no rows printed"]))


@points(1, "bad command line: usage, exit 2")
def test_usage(build):
    for prog, args in (("reg_mr", ["--bogus"]), ("reg_mr", ["--access", "rw"]),
                       ("reg_mr", ["--access"]), ("reg_cost", ["--bogus"]),
                       ("reg_cost", ["--max-size", "1K"])):
        res = build.run(prog, *args).fails(2, build.command(prog, *args))
        expect_match(res.stderr, r"^usage: ",
                     f"stderr of '{build.command(prog, *args)}' should have a "
                     f"usage line")


@points(1, "unknown device: message, exit 1")
def test_bad_device(build, rdma):
    for prog in ("reg_mr", "reg_cost"):
        res = build.run(prog, "-d", NO_SUCH).fails(
            1, build.command(prog, "-d", NO_SUCH))
        expect_match(res.stderr, rf"{NO_SUCH}.*not found",
                     f"stderr of '{build.command(prog, '-d', NO_SUCH)}'")
