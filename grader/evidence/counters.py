"""The device's counters, asked for by meaning.

A test asks for "SENDs sent" or "packets sent", never for rxe's file name:
each kind of device keeps its counters under its own names and in its own
places, and some kinds have no counter at all for a meaning. TABLES says,
per kind, which sysfs file under /sys/class/infiniband/DEV/ports/N/ holds
each meaning. A meaning the device lacks raises NoEvidence (never a 0 that
would let "moved by 0" pass with nothing measured); the test then uses
another source or fails saying it cannot be graded on this device.

The kind comes from the device's driver (DEV/device/driver, a PCI
function's driver: mlx5_core); rxe is a virtual device with no driver link
and its own hw_counters. RDMA_DEVICE_KIND overrides the guess.

rxe (drivers/infiniband/sw/rxe/rxe_hw_counters.c; measured in the course's
micro-VM, Debian 6.1): hw_counters/ holds every counter, both sides' traffic
when one device serves both ends. mlx5 (drivers/infiniband/hw/mlx5/
counters.c, read from the kernel's source, never measured here): hw_counters/
holds the Q counters (rx_write_requests, rx_read_requests,
rx_atomic_requests, out_of_buffer, out_of_sequence, duplicate_request,
rnr_nak_retry_err, packet_seq_err, implied_nak_seq_err,
local_ack_timeout_err, and since Linux 6.11 req_rnr_retries_exceeded and
req_transport_retries_exceeded); packet counts are the port's PMA counters
in counters/ (port_xmit_packets, port_rcv_packets). mlx5 counts no SEND
work requests and no consumed receives: those meanings are missing there.
"""

import os
import sys
from pathlib import Path

from grader.core.harness import GradeFailure

# Each meaning, and what it counts (the words the failure messages use).
MEANINGS = {
    "packets sent": "RoCE packets the device sent",
    "packets received": "RoCE packets the device received",
    "SENDs sent": "SEND work requests completed at the requester",
    "receives consumed": "posted receives consumed by an incoming SEND or "
                         "WRITE WITH IMMEDIATE",
    "WRITEs received": "RDMA WRITE requests the responder received",
    "READs received": "RDMA READ requests the responder received",
    "atomics received": "atomic requests the responder received",
    "RNR NAKs sent": "RNR NAKs the responder sent (no receive posted)",
    "RNR NAKs received": "RNR NAKs the requester received",
    "RNR retries exceeded": "requests failed with RNR retries exceeded",
    "transport retries exceeded": "requests failed with transport retries "
                                  "exceeded",
    "retransmissions": "requester timeouts that retransmitted",
    "duplicate requests": "duplicate requests the responder received",
    "out-of-sequence requests": "requests with a PSN ahead of the expected "
                                "one",
    "sequence-error NAKs received": "PSN sequence error NAKs received",
}

# kind -> meaning -> file under ports/N/ (a bare name is hw_counters/NAME).
TABLES = {
    "rxe": {
        "packets sent": "sent_pkts",
        "packets received": "rcvd_pkts",
        "SENDs sent": "rdma_sends",
        "receives consumed": "rdma_recvs",
        "RNR NAKs sent": "send_rnr_err",
        "RNR NAKs received": "rcvd_rnr_err",
        "RNR retries exceeded": "retry_rnr_exceeded_err",
        "transport retries exceeded": "retry_exceeded_err",
        "retransmissions": "completer_retry_err",
        "duplicate requests": "duplicate_request",
        "out-of-sequence requests": "out_of_seq_request",
        "sequence-error NAKs received": "rcvd_seq_err",
    },
    "mlx5": {
        "packets sent": "counters/port_xmit_packets",
        "packets received": "counters/port_rcv_packets",
        "WRITEs received": "rx_write_requests",
        "READs received": "rx_read_requests",
        "atomics received": "rx_atomic_requests",
        # out_of_buffer: receives dropped for lack of a receive WQE; on an
        # RC QP each is answered with an RNR NAK.
        "RNR NAKs sent": "out_of_buffer",
        "RNR NAKs received": "rnr_nak_retry_err",
        "RNR retries exceeded": "req_rnr_retries_exceeded",
        "transport retries exceeded": "req_transport_retries_exceeded",
        "retransmissions": "local_ack_timeout_err",
        "duplicate requests": "duplicate_request",
        "out-of-sequence requests": "out_of_sequence",
        "sequence-error NAKs received": "packet_seq_err",
    },
}

# A PCI function's driver -> kind.
DRIVERS = {"mlx5_core": "mlx5"}


class NoEvidence(GradeFailure):
    """The device has no counter for a meaning: nothing was measured. A
    test that has no other source fails with it: it cannot be graded on
    this device."""

    def __init__(self, meaning, kind, device, why="no counter"):
        self.meaning, self.kind, self.device = meaning, kind, device
        where = (f"its table in grader/evidence/counters.py has no file "
                 f"for it" if why == "no counter" else why)
        super().__init__(
            f"no evidence: the {kind} device {device} does not count "
            f"'{meaning}' ({MEANINGS.get(meaning, '?')}): {where}; this "
            f"check cannot be graded on this device (grade it on rxe: "
            f"make grade runs the micro-VM with RXE_BACKEND=vm)")


def check_meaning(meaning):
    if meaning not in MEANINGS:
        raise KeyError(f"unknown counter meaning '{meaning}' (known: "
                       f"{', '.join(MEANINGS)})")


def device_kind(dev_dir, env=os.environ):
    """The kind of the device whose sysfs directory is @dev_dir: 'rxe',
    'mlx5', or the driver's name (a kind with no table: every meaning is
    missing there)."""
    forced = env.get("RDMA_DEVICE_KIND")
    if forced:
        return forced
    dev_dir = Path(dev_dir)
    driver = dev_dir / "device" / "driver"
    if driver.exists():
        name = os.path.basename(os.path.realpath(driver))
        return DRIVERS.get(name, name)
    # rxe: a virtual device (no parent PCI function) with rxe's counters.
    if (dev_dir / "ports" / "1" / "hw_counters" / "rdma_sends").exists():
        return "rxe"
    if (dev_dir / "parent").exists():
        return "rxe" if dev_dir.name.startswith("rxe") else "virtual"
    return "unknown"


def needed(tree):
    """The meanings the lessons' tests ask for, per lesson number: every
    string literal in grader/lessons/test_NN_*.py under @tree that is a
    meaning (of("SENDs sent"), expect_own_traffic(..., "SENDs sent", ...),
    a show() list), read from the source (make doctor: which lessons a
    device can grade)."""
    import ast
    import re
    out = {}
    for f in sorted(Path(tree, "grader", "lessons").glob("test_[0-9]*.py")):
        num = re.match(r"test_(\d+)_", f.name).group(1)
        for node in ast.walk(ast.parse(f.read_text())):
            if (isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and node.value in MEANINGS):
                out.setdefault(num, set()).add(node.value)
    return out


def coverage(kind, tree):
    """Per lesson that reads counters: the meanings it asks for that @kind
    lacks (an empty list: its counter evidence is all there)."""
    table = TABLES.get(kind, {})
    return {num: sorted(m for m in ms if m not in table)
            for num, ms in sorted(needed(tree).items())}


def report(device, tree, sysfs=None, env=os.environ):
    """make doctor's lines about @device: its kind and which lessons'
    counter evidence it has. (ok, [lines]): ok when the kind has a
    table."""
    sysfs = Path(sysfs or env.get("SYSFS_IB", "/sys/class/infiniband"))
    kind = device_kind(sysfs / device, env)
    table = TABLES.get(kind)
    if table is None:
        return False, [f"device {device} is of kind '{kind}': the course has "
                       f"no counter table for it (grader/evidence/counters.py "
                       f"knows {', '.join(sorted(TABLES))}); every test that "
                       f"reads counters says 'no evidence' there"]
    full, partial = [], []
    for num, missing in coverage(kind, tree).items():
        if missing:
            partial.append(f"{num} ({', '.join(missing)})")
        else:
            full.append(num)
    lines = [f"device {device} is of kind {kind} (its driver); counter "
             f"table: grader/evidence/counters.py"]
    if full:
        lines.append(f"lessons whose counter evidence it has: "
                     f"{' '.join(full)}")
    if partial:
        lines.append(f"lessons asking for counters it lacks (those checks "
                     f"use another source or fail with 'no evidence'): "
                     f"{'; '.join(partial)}")
    key = "ANSWERS.md" if kind == "rxe" else f"ANSWERS-{kind}.md"
    if not (Path(tree) / "solutions" / "09-failures" / key).is_file():
        lines.append(f"lesson 09's predictions: no answer key for {kind} "
                     f"(solutions/09-failures/{key}; INSTRUCTORS.md)")
    return True, lines


def main(argv):
    """python3 -m grader device-kind DEV: make doctor's report."""
    if len(argv) != 1:
        print("usage: python3 -m grader device-kind DEV", file=sys.stderr)
        return 2
    from grader.core.course import COURSE
    ok, lines = report(argv[0], COURSE)
    print("\n".join(lines))
    return 0 if ok else 1
