"""Lesson 04: the work-request worksheet, run as code.

No device is involved: the lesson's driver (worksheet_check) runs the
student's worksheet.c functions on cases it reads from stdin and prints what
they returned; the expected values are computed here, independently, on
fresh random inputs each run plus the worksheet's own numbers.
"""

import os
import random
import shlex

from grader import GradeFailure, points

PROG = "worksheet_check"

FUNCS = {
    "A.pages": "ws_pages",
    "A.table": "ws_table_bytes",
    "A.max": "ws_max_registrable",
    "B.qp": "ws_qp_memory",
    "C.write": "ws_fill_rdma_write",
    "D.rtt": "ws_round_trips",
}

GiB = 1 << 30
PAGE_SIZES = [4096, 65536, 2 << 20, GiB]


def _rng():
    return random.Random()


def _run(build, cases):
    """Run the driver on @cases ([(line, expected dict)]); compare; raise."""
    text = "".join(line + "\n" for line, _ in cases)
    result = build.run(PROG, "--cases", input=text)
    got = {}
    for out in result.stdout.splitlines():
        if " -> " not in out:
            continue
        line, _, fields = out.partition(" -> ")
        got[line.strip()] = dict(f.split("=", 1) for f in fields.split() if "=" in f)

    wrong = []
    for line, want in cases:
        have = got.get(line)
        if have is None:
            wrong.append((line, None, None, None))
            continue
        for key, value in want.items():
            if not _same(have.get(key), value):
                wrong.append((line, key, value, have.get(key)))
                break
    if not wrong:
        # A crash after the last case still deserves a failure.
        result.ok()
        return
    line, key, value, have = wrong[0]
    kind, *args = line.split()
    call = "%s(%s)" % (FUNCS[kind], ", ".join(args))
    bad_cases = len({w[0] for w in wrong})
    prog = os.path.relpath(build.path(PROG), build.course)
    how = "  reproduce: printf '%s\\n' | %s --cases" % (line, shlex.quote(prog))
    if key is None:
        if result.returncode != 0 or result.timed_out:
            raise GradeFailure("%s: worksheet_check %s before printing this case's result\n%s\n%s"
                               % (call, result.status(), how, result.describe()))
        raise GradeFailure("%s: no result line for this case (%d of %d cases wrong)\n%s"
                           % (call, bad_cases, len(cases), how))
    raise GradeFailure("%s -> %s  (%d of %d cases wrong)\n  expected: %s\n  got:      %s\n%s"
                       % (call, key, bad_cases, len(cases), _show(value),
                          have if have is not None else "(nothing)", how))


def _same(have, want):
    if have is None:
        return False
    if isinstance(want, float):
        try:
            h = float(have)
        except ValueError:
            return False
        return abs(h - want) <= 1e-5 + 1e-6 * abs(want)
    if isinstance(want, int):
        try:
            return int(have, 0) == want
        except ValueError:
            return False
    return have == want


def _show(value):
    if isinstance(value, float):
        return "%.6f" % value
    return str(value)


# ---- the reference arithmetic (independent of the C code) -----------------

def pages(addr, length, page):
    if length == 0:
        return 0
    return (addr + length - 1) // page - addr // page + 1


def _a_inputs(rng, n):
    """(addr, len, page) tuples: aligned, unaligned, empty, boundary-crossing."""
    out = [
        (0x7F0000000000, GiB, 4096),
        (0x1800, 4096, 4096),
        (0x7F0000000FFF, 2, 4096),
        (0x7F0000000000, 0, 4096),
        # Empty at an unaligned address: (addr + len - 1) / page then
        # names the page addr is in, and an unguarded formula counts 1.
        (0x7F0000000FFF, 0, 4096),
        (0x7F0000000000, GiB, 2 << 20),
    ]
    for _ in range(n):
        page = rng.choice(PAGE_SIZES)
        addr = rng.randrange(1 << 20, 1 << 47)
        if rng.random() < 0.3:
            addr -= addr % page
        length = rng.choice([
            0, 1, page - 1, page, page + 1,
            rng.randrange(1, 1 << 34),
            page - addr % page,          # exactly up to the next boundary
            page - addr % page + 1,      # one byte past it
        ])
        out.append((addr, length, page))
    return out


@points(3, "A: pages a registration pins (aligned and unaligned buffers)")
def test_a_pages(build):
    rng = _rng()
    cases = [("A.pages %#x %d %d" % (a, l, p), {"pages": pages(a, l, p)})
             for a, l, p in _a_inputs(rng, 40)]
    _run(build, cases)


@points(2, "A: translation table size and the largest registrable region")
def test_a_table_and_max(build):
    rng = _rng()
    cases = []
    for a, l, p in _a_inputs(rng, 20):
        e = rng.choice([8, 8, 16])
        cases.append(("A.table %#x %d %d %d" % (a, l, p, e),
                      {"bytes": pages(a, l, p) * e}))
    maxes = [(1 << 20, 4096, 8), (16 << 20, 4096, 8), (1 << 20, 2 << 20, 8)]
    for _ in range(20):
        maxes.append((rng.choice([1 << 20, 16 << 20, rng.randrange(64, 1 << 30)]),
                      rng.choice(PAGE_SIZES[:3]), rng.choice([8, 16, 12])))
    for cap, p, e in maxes:
        cases.append(("A.max %d %d %d" % (cap, p, e), {"bytes": cap // e * p}))
    _run(build, cases)


@points(3, "B: send queue, receive queue and completion queue memory")
def test_b_queue_memory(build):
    rng = _rng()
    inputs = [(128, 64, 64, 32), (1, 1, 64, 64)]
    for _ in range(30):
        inputs.append((rng.randrange(1, 32769), rng.randrange(1, 32769),
                       rng.choice([64, 128, 256, 512, 1024]),
                       rng.choice([32, 64, 128])))
    # Bigger than any real queue, but it shows 32-bit arithmetic overflowing.
    inputs.append((1 << 22, 1 << 22, 1024, 64))
    cases = []
    for s, r, w, c in inputs:
        cases.append(("B.qp %d %d %d %d" % (s, r, w, c), {
            "sq_bytes": s * w,
            "rq_bytes": r * w,
            "qp_bytes": (s + r) * w,
            "cq_entries": s + r,
            "cq_bytes": (s + r) * c,
        }))
    _run(build, cases)


@points(4, "C: an RDMA WRITE work request and its scatter/gather entry")
def test_c_rdma_write_wr(build):
    rng = _rng()
    inputs = [(1, 0x7F0000000000, 0x1234, 0x7F0010000000, 0x5678, 4096)]
    for _ in range(10):
        inputs.append((rng.randrange(1 << 64), rng.randrange(1 << 47),
                       rng.randrange(1, 1 << 32), rng.randrange(1 << 47),
                       rng.randrange(1, 1 << 32), rng.randrange(1, 1 << 31)))
    cases = []
    for wr_id, laddr, lkey, raddr, rkey, length in inputs:
        # Checked in this order: the first wrong field is the one reported.
        want = {
            "opcode": "IBV_WR_RDMA_WRITE",
            "num_sge": 1,
            "sg_list": "sge",
            "sge.addr": laddr,
            "sge.length": length,
            "sge.lkey": lkey,
            "remote_addr": raddr,
            "rkey": rkey,
            "wr_id": wr_id,
            "send_flags": "IBV_SEND_SIGNALED",
            "next": "NULL",
        }
        cases.append(("C.write %#x %#x %#x %#x %#x %d"
                      % (wr_id, laddr, lkey, raddr, rkey, length), want))
    _run(build, cases)


@points(2, "D: round trip over sockets vs one-sided RDMA, and the speedup")
def test_d_round_trips(build):
    rng = _rng()
    inputs = [(25, 25, 0.5, 0.5, 5)]
    for _ in range(15):
        inputs.append(tuple(round(rng.uniform(lo, hi), 3) for lo, hi in
                            [(1, 60), (1, 60), (0.05, 2), (0.05, 2), (0.5, 30)]))
    cases = []
    for send, recv, post, poll, net in inputs:
        sock = 2 * (send + recv) + net
        rdma = post + poll + net
        cases.append(("D.rtt %s %s %s %s %s" % (send, recv, post, poll, net), {
            "socket_us": float(sock),
            "rdma_us": float(rdma),
            "speedup": float(sock / rdma),
        }))
    _run(build, cases)
