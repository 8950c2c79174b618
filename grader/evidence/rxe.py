"""The RDMA device the grader runs on, and its rxe hardware counters.

vm-setup/with-rxe exports RDMA_DEVICE, RDMA_GID_INDEX, RDMA_IP, RDMA_NETDEV
and RDMA_BACKEND (and, on host A of a pair, RDMA_PEER_IP and RDMA_PEER_JOBS);
outside it there is no device to grade on.
"""

import os
from pathlib import Path

SYSFS_IB = Path(os.environ.get("SYSFS_IB", "/sys/class/infiniband"))


class Counters(dict):
    """A snapshot of ports/N/hw_counters; `after - before` is the deltas."""

    def __sub__(self, other):
        delta = Counters({k: v - other.get(k, 0) for k, v in self.items()})
        # The test's counter deltas are evidence for the failure's symptoms.
        from grader.core.harness import current_transcript
        current_transcript().counters.append(delta)
        return delta

    def show(self, names=None):
        names = names or sorted(k for k, v in self.items() if v)
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

    def available(self):
        return bool(self.device) and (SYSFS_IB / self.device).exists()

    @property
    def port_dir(self):
        return SYSFS_IB / self.device / "ports" / str(self.ib_port)

    def counters(self):
        snap = Counters()
        d = self.port_dir / "hw_counters"
        for f in sorted(d.iterdir()) if d.is_dir() else []:
            try:
                snap[f.name] = int(f.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return snap

    def port_state(self):
        return (self.port_dir / "state").read_text().split(":")[-1].strip()
