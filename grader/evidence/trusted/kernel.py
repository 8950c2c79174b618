"""The kernel's view of QPs (`rdma -j resource show qp`), for the reference
peer: who owns the program's QP, and in which state it is, asked of the
program's host (which is not the peer's on a pair of hosts). Standard
library only: grader/evidence/remote.py loads it as a plain module."""

import json
import os
import re
import subprocess
import time
from pathlib import Path


def kernel_qps(qpns):
    """What `rdma -j resource show qp` says about each local QP in `qpns`,
    from one `rdma` run: {qpn: {lqpn, pid, comm, state, type, ifname} or
    None (no such QP), or {"error": why}}."""
    found = dict.fromkeys(qpns)
    try:
        out = subprocess.run(["rdma", "-j", "resource", "show", "qp"],
                             capture_output=True, text=True, timeout=10).stdout
        for q in json.loads(out or "[]"):
            if q.get("lqpn") in found:
                found[q["lqpn"]] = {k: q.get(k) for k in (
                    "lqpn", "pid", "comm", "state", "type", "ifname")}
    except (OSError, ValueError, subprocess.TimeoutExpired) as err:
        return {qpn: {"error": str(err)} for qpn in qpns}
    return found


def kernel_qp(qpn):
    """kernel_qps() for one QP."""
    return kernel_qps([qpn])[qpn]


def program_qp(qpn):
    """What the kernel of the program's host says about QP `qpn`. The same
    host: kernel_qp(). On host B of a pair (grader/evidence/remote.py runs this peer,
    RXE_JOB_DIR set), the program's QP is on host A: ask there. The peer
    prints `peer-asks-qp ID QPN` and waits; remote.py on A answers in the
    job directory with answer(), which B reads."""
    job = os.environ.get("RXE_JOB_DIR")
    if not job:
        return kernel_qp(qpn)
    global _asked
    _asked += 1
    path = Path(job) / f"qp-{_asked}.json"
    print(f"peer-asks-qp {_asked} {qpn}", flush=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.02)
    return {"error": "host A did not answer the peer's QP question in 15 s"}


def program_qps(qpns):
    """program_qp() for several QPs: one `rdma` run on the same host."""
    if not os.environ.get("RXE_JOB_DIR"):
        return kernel_qps(qpns)
    return {qpn: program_qp(qpn) for qpn in qpns}


_asked = 0
ASK = re.compile(rb"^peer-asks-qp (\d+) (\d+)$", re.M)


def answer(job, line):
    """remote.py's side: answer one `peer-asks-qp` line from this host's
    kernel, into the job directory."""
    m = ASK.match(line)
    if not m:
        return
    ask_id, qpn = int(m.group(1)), int(m.group(2))
    tmp = Path(job) / f".qp-{ask_id}.json"
    tmp.write_text(json.dumps(kernel_qp(qpn)))
    tmp.rename(Path(job) / f"qp-{ask_id}.json")
