"""The RDMA device the grader runs on, and its counters (by meaning:
grader/evidence/counters.py maps each meaning to a file per device kind).

vm-setup/with-rxe exports RDMA_DEVICE, RDMA_GID_INDEX, RDMA_IP, RDMA_NETDEV
and RDMA_BACKEND (and, on host A of a pair, RDMA_PEER_IP and RDMA_PEER_JOBS:
the pair's jobs directory, or ssh://HOST/COURSE for another machine,
grader/evidence/remote.py); outside it there is no device to grade on.
"""

import os
from pathlib import Path

from grader.evidence.counters import (NoEvidence, TABLES, check_meaning,
                                      device_kind)

SYSFS_IB = Path(os.environ.get("SYSFS_IB", "/sys/class/infiniband"))


class Counters(dict):
    """A snapshot of ports/N/hw_counters (and of the ports/N/counters/
    files the kind's table names, as counters/NAME); `after - before` is
    the deltas. Ask by meaning: of("SENDs sent"); a meaning the device
    lacks raises NoEvidence, never reads as 0."""

    def __init__(self, values=(), kind="rxe", device="?"):
        super().__init__(values)
        self.kind, self.device = kind, device

    def __sub__(self, other):
        delta = Counters({k: v - other.get(k, 0) for k, v in self.items()},
                         self.kind, self.device)
        # The test's counter deltas are evidence for the failure's symptoms.
        from grader.core.harness import current_transcript
        current_transcript().counters.append(delta)
        return delta

    def _name(self, meaning):
        check_meaning(meaning)
        name = TABLES.get(self.kind, {}).get(meaning)
        if name is None:
            raise NoEvidence(meaning, self.kind, self.device)
        if name not in self:
            raise NoEvidence(meaning, self.kind, self.device,
                             f"its file ports/N/{self.label(meaning)} is "
                             f"not there (an older kernel or firmware)")
        return name

    def has(self, meaning):
        """The device counts @meaning (and its file was read)."""
        try:
            self._name(meaning)
        except NoEvidence:
            return False
        return True

    def of(self, meaning):
        """The counter (or delta) for @meaning; NoEvidence if the device
        has none."""
        return self[self._name(meaning)]

    def label(self, meaning):
        """Where @meaning is read, for messages: hw_counters/rdma_sends."""
        check_meaning(meaning)
        name = TABLES.get(self.kind, {}).get(meaning, meaning)
        return name if "/" in name else f"hw_counters/{name}"

    def show(self, names=None):
        """NAME VALUE pairs: @names are file names or meanings (a meaning
        the device lacks is left out); by default the ones that moved."""
        if names:
            table = TABLES.get(self.kind, {})
            names = [table.get(n, n) for n in names
                     if n in self or table.get(n) in self]
        else:
            names = sorted(k for k, v in self.items() if v)
        return ", ".join(f"{k} {self.get(k, 0)}" for k in names) or "(none moved)"


class Rdma:
    def __init__(self, env=os.environ):
        self.device = env.get("RDMA_DEVICE")
        self.gid_index = int(env.get("RDMA_GID_INDEX", "-1"))
        self.ip = env.get("RDMA_IP")
        self.netdev = env.get("RDMA_NETDEV")
        self.backend = env.get("RDMA_BACKEND")
        self.ib_port = 1
        # A linked pair (with-rxe --pair): the other host's address, and
        # the jobs directory through which it runs the grader's commands
        # (grader/evidence/remote.py) when it serves.
        self.peer_ip = env.get("RDMA_PEER_IP")
        self.peer_jobs = env.get("RDMA_PEER_JOBS")

    @property
    def kind(self):
        """rxe, mlx5, ...: whose counter table applies (counters.py)."""
        if not self.device:
            return "unknown"
        return device_kind(SYSFS_IB / self.device)

    def available(self):
        return bool(self.device) and (SYSFS_IB / self.device).exists()

    @property
    def port_dir(self):
        return SYSFS_IB / self.device / "ports" / str(self.ib_port)

    def counters(self):
        kind = self.kind
        snap = Counters(kind=kind, device=self.device)
        d = self.port_dir / "hw_counters"
        files = [(f.name, f) for f in sorted(d.iterdir())] if d.is_dir() else []
        files += [(n, self.port_dir / n) for n in
                  TABLES.get(kind, {}).values() if "/" in n]
        for name, f in files:
            try:
                snap[name] = int(f.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return snap

    def port_state(self):
        return (self.port_dir / "state").read_text().split(":")[-1].strip()
