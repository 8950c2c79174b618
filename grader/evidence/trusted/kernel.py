"""The kernel's view of QPs (`rdma -j resource show qp`, `... srq`), for the
reference peers: who owns the program's QP, in which state it is, and the
SRQ it takes its receives from, asked of the program's host (which is not
the peer's on a pair of hosts). Standard
library only: grader/evidence/remote.py loads it as a plain module."""

import json
import os
import re
import subprocess
import time
from pathlib import Path

# One `rdma -j resource show` run, a backstop for a hang: it takes a fraction
# of a second quiet, and over 10 s (the bound before) beside a second make
# test, where a correct kv_client lost 6 points to the timeout (fresh-clone
# run 80). Host B of a pair waits this long and 15 s more for host A's answer.
RDMA_TIMEOUT = 60


def kernel_qps(qpns, device):
    """What `rdma -j resource show qp` says about each QP in `qpns` of
    `device` (its ifname), from one `rdma` run: {qpn: {lqpn, pid, comm,
    state, type, ifname} or None (no such QP), or {"error": why}}.
    A QP number names a QP of one device only: with a device per shard
    (grader/session/shards.py) the same number is another lesson's QP on
    the next device (a correct kv_server lost 6 points to a 'bw' of lesson
    13, asked without the device)."""
    found = dict.fromkeys(qpns)
    try:
        out = subprocess.run(["rdma", "-j", "resource", "show", "qp"],
                             capture_output=True, text=True,
                             timeout=RDMA_TIMEOUT).stdout
        for q in json.loads(out or "[]"):
            if q.get("lqpn") in found and q.get("ifname") == device:
                found[q["lqpn"]] = {k: q.get(k) for k in (
                    "lqpn", "pid", "comm", "state", "type", "ifname")}
    except (OSError, ValueError, subprocess.TimeoutExpired) as err:
        return {qpn: {"error": str(err)} for qpn in qpns}
    return found


def kernel_qp(qpn, device):
    """kernel_qps() for one QP."""
    return kernel_qps([qpn], device)[qpn]


def program_qp(qpn, device):
    """What the kernel of the program's host says about QP `qpn`. The same
    host: kernel_qp() on `device`, the peer's own (the program's QP is
    connected to the peer's: the same device). On host B of a pair
    (grader/evidence/remote.py runs this peer, RXE_JOB_DIR set), the
    program's QP is on host A: ask there. The peer prints `peer-asks-qp ID
    QPN` and waits; remote.py on A answers in the job directory with
    answer(), from A's device, which B reads."""
    job = os.environ.get("RXE_JOB_DIR")
    if not job:
        return kernel_qp(qpn, device)
    global _asked
    _asked += 1
    path = Path(job) / f"qp-{_asked}.json"
    print(f"peer-asks-qp {_asked} {qpn}", flush=True)
    deadline = time.monotonic() + RDMA_TIMEOUT + 15
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.02)
    return {"error": "host A did not answer the peer's QP question in "
                     f"{RDMA_TIMEOUT + 15} s"}


def program_qps(qpns, device):
    """program_qp() for several QPs: one `rdma` run on the same host."""
    if not os.environ.get("RXE_JOB_DIR"):
        return kernel_qps(qpns, device)
    return {qpn: program_qp(qpn, device) for qpn in qpns}


def _qpn_ranges(items):
    """`rdma -j resource show srq`'s lqpn: ["19-20", "23"] -> [19, 20, 23]."""
    out = []
    for item in items if isinstance(items, list) else [items]:
        for part in str(item).split(","):
            lo, _, hi = part.partition("-")
            if lo.strip().isdigit():
                out += range(int(lo), int(hi or lo) + 1)
    return out


def kernel_srq_of(qpn, device):
    """What `rdma -j resource show srq` says about the SRQ that QP `qpn`
    of `device` takes its receives from: {srqn, pid, lqpn: [...]}, None
    (no SRQ has it), or {"error": why}. Asked of this host: on host B of a
    pair the program's QPs are on host A, so nothing is asked there. (QP
    numbers are per device: kernel_qps.)"""
    if os.environ.get("RXE_JOB_DIR"):
        return {"error": "not asked on host B of a pair"}
    try:
        out = subprocess.run(["rdma", "-j", "resource", "show", "srq"],
                             capture_output=True, text=True,
                             timeout=RDMA_TIMEOUT).stdout
        for srq in json.loads(out or "[]"):
            qpns = _qpn_ranges(srq.get("lqpn", []))
            if qpn in qpns and srq.get("ifname") == device:
                return {"srqn": srq.get("srqn"), "pid": srq.get("pid"),
                        "lqpn": qpns}
    except (OSError, ValueError, subprocess.TimeoutExpired) as err:
        return {"error": str(err)}
    return None


_asked = 0
ASK = re.compile(rb"^peer-asks-qp (\d+) (\d+)$", re.M)


def answer(job, line):
    """remote.py's side: answer one `peer-asks-qp` line from this host's
    kernel, about the device of this host's session (the program's),
    into the job directory."""
    m = ASK.match(line)
    if not m:
        return
    ask_id, qpn = int(m.group(1)), int(m.group(2))
    tmp = Path(job) / f".qp-{ask_id}.json"
    tmp.write_text(json.dumps(kernel_qp(qpn, os.environ.get("RDMA_DEVICE",
                                                         "rxe0"))))
    tmp.rename(Path(job) / f"qp-{ask_id}.json")
