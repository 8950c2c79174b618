"""Lesson 02, checked from inside the program: the grader preloads its
interposer (grader/evidence/interpose/verbs_spy.c), which records every
ibv_reg_mr()/ibv_dereg_mr() the program makes - its length, its access
flags, and how long the real call took.

- reg_mr: the one registration has the length and exactly the access flags
  asked for (a random valid set, fresh per run).
- reg_cost: it made the registrations its CSV describes, and each reported
  median lies between half and 3 times (plus HIGH_US) the median the
  interposer measured around the real calls of that size.

Both sides hold at any speed. The program times the same calls, so its
interval contains the interposer's: a reported median is never below the
real one (half of it leaves room for a coarser clock or an extra untimed
call of that size), while made-up numbers or a timer around nothing fall
below it at the small sizes. Above it, the interposer's own two clock reads
and its record sit inside the program's interval: 3-5 us a call in the
micro-VM, but a clock read there is an emulated HPET access that can wait
tens of microseconds for QEMU's lock (a solution's 8 KiB dereg printed
84 us for 14.6 us real, the host loaded, in 2 of 3 calls; with three
micro-VMs on two loaded cores a 4 KiB registration printed 887 us for
74 us real). HIGH_US, 2 ms, holds that twice over; -n 5 calls per size
make the median need 3 such calls. The upper side still catches a timer
around more than the call where it matters, at the large sizes (a 32 MiB
memset or page-touching loop takes tens of milliseconds).
"""

import secrets

import pytest

from grader import GradeFailure, expect, points
from grader.evidence.interpose import Spy, build_interposer, parse_int

FLAGS = {"local_write": 1, "remote_write": 2, "remote_read": 4,
         "remote_atomic": 8}
COST_ARGS = ("--max-size", "4M", "-n", "5")
LOW, FACTOR, HIGH_US = 0.5, 3.0, 2000.0


@pytest.fixture(scope="module")
def spy_lib(build):
    return build_interposer(build.course)


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
    spy = Spy(spy_lib)
    args = ("-s", str(size), "--access", ",".join(names))
    how = f"{spy.describe()} {build.path('reg_mr')} {' '.join(args)}"
    build.run("reg_mr", *args, env=spy.env).ok(how)
    regs = [c for k, c in spy.calls("reg_mr") if c.get("ok") == "1"]
    if len(regs) != 1:
        raise GradeFailure(f"{how}\nthe interposer saw {len(regs)} successful "
                           f"ibv_reg_mr() calls; expected 1: {regs}")
    want = sum(FLAGS[n] for n in names)
    expect((int(regs[0]["len"]), parse_int(regs[0]["access"])), (size, want),
           f"(length, access flags) of the ibv_reg_mr() call for "
           f"--access {','.join(names)} (reproduce: {how})")


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1]
                                                 + xs[len(xs) // 2]) / 2


@points(2, "reg_cost's numbers are the registrations it really timed (interposer)")
def test_reg_cost_timed(build, rdma, spy_lib):
    spy = Spy(spy_lib)
    how = f"{spy.describe()} {build.path('reg_cost')} {' '.join(COST_ARGS)}"
    res = build.run("reg_cost", *COST_ARGS, env=spy.env, timeout=120).ok(how)
    seen = {}
    for kind, c in spy.calls():
        if kind in ("reg_mr", "dereg_mr"):
            seen.setdefault((kind, int(c["len"])), []).append(
                int(c["ns"]) / 1000)
    rows = [line.split(",") for line in res.stdout.split()[1:]]
    problems = []
    for row in rows:
        try:
            size, reg_us, dereg_us = int(row[0]), float(row[1]), float(row[2])
        except (ValueError, IndexError):
            raise GradeFailure(f"{how}\nnot a CSV row: {row}") from None
        for kind, printed in (("reg_mr", reg_us), ("dereg_mr", dereg_us)):
            calls = seen.get((kind, size), [])
            if len(calls) < int(COST_ARGS[-1]):
                problems.append(f"size {size}: {len(calls)} ibv_{kind}() "
                                f"calls of that size, expected "
                                f"{COST_ARGS[-1]}")
                continue
            real = _median(calls)
            # 0.01: the CSV's two decimals
            if not (real * LOW - 0.01 <= printed
                    <= real * FACTOR + HIGH_US):
                problems.append(f"size {size}: printed {kind[:-3]}_us "
                                f"{printed:.1f}, the real calls took "
                                f"{real:.1f} us (median of {len(calls)})")
    if not rows or problems:
        raise GradeFailure(
            f"{how}\nthe interposer timed the program's own ibv_reg_mr()/"
            f"ibv_dereg_mr() calls; each printed median must lie between "
            f"{LOW:g} and {FACTOR:g} times theirs (plus {HIGH_US:g} us, the "
            f"interposer's own clock reads):\n  "
            + "\n  ".join(problems or ["no rows printed"]))
