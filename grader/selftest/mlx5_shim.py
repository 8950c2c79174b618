"""A pytest plugin that grades on rxe through mlx5's counter table:

    vm-setup/with-rxe /usr/bin/python3 -m pytest -c grader/pytest.ini \\
        --rootdir . -p grader.session.plugin -p grader.selftest.mlx5_shim \\
        grader/lessons/test_06_rdma_write.py --src=solutions

The grader's sysfs root (grader/evidence/rxe.py's SYSFS_IB) becomes a
stand-in tree in which each device looks like an mlx5 function: its
`device` is a PCI function whose driver is mlx5_core, its hw_counters/
has mlx5's names and its counters/ the port's PMA counters. Everything
else (ports/1/state, gids, ...) links to the real rxe device. Before every
counter snapshot the shim writes rxe's real counts under the names mlx5
keeps the same count by (AS_MLX5): the grading reads them through the
mlx5 table, the same code path a ConnectX would take.

What the shim cannot show is what rxe does not count: mlx5's
rx_write_requests, rx_read_requests, rx_atomic_requests are left out of
the tree (so "WRITEs received" is missing here, where mlx5 has it), and
rxe's rdma_sends and rdma_recvs are not copied (mlx5 has no such counter:
"SENDs sent" and "receives consumed" are no evidence, as on mlx5).
test_mlx5_shim.py runs lesson 06 this way."""

import os
import tempfile
from pathlib import Path

from grader.evidence import rxe

# rxe's counter -> the file under ports/1/ where mlx5 keeps that count.
AS_MLX5 = {
    "sent_pkts": "counters/port_xmit_packets",
    "rcvd_pkts": "counters/port_rcv_packets",
    "send_rnr_err": "hw_counters/out_of_buffer",
    "rcvd_rnr_err": "hw_counters/rnr_nak_retry_err",
    "retry_rnr_exceeded_err": "hw_counters/req_rnr_retries_exceeded",
    "retry_exceeded_err": "hw_counters/req_transport_retries_exceeded",
    "completer_retry_err": "hw_counters/local_ack_timeout_err",
    "duplicate_request": "hw_counters/duplicate_request",
    "out_of_seq_request": "hw_counters/out_of_sequence",
    "rcvd_seq_err": "hw_counters/packet_seq_err",
}
REAL = rxe.SYSFS_IB


def stand_in(real, root):
    """Build @root: each device of @real as an mlx5 function."""
    (root / "drivers" / "mlx5_core").mkdir(parents=True)
    for dev in sorted(p.name for p in real.iterdir()):
        src, dst = real / dev, root / dev
        dst.mkdir()
        for entry in src.iterdir():
            if entry.name not in ("ports", "device"):
                (dst / entry.name).symlink_to(entry)
        pci = root / "pci" / dev
        pci.mkdir(parents=True)
        (pci / "driver").symlink_to(root / "drivers" / "mlx5_core")
        (dst / "device").symlink_to(pci)
        for port in (src / "ports").iterdir():
            pdst = dst / "ports" / port.name
            pdst.mkdir(parents=True)
            for entry in port.iterdir():
                if entry.name not in ("hw_counters", "counters"):
                    (pdst / entry.name).symlink_to(entry)
            (pdst / "hw_counters").mkdir()
            (pdst / "counters").mkdir()
        refresh(real, root, dev)


def refresh(real, root, dev):
    """Write @dev's rxe counts under mlx5's names (each port)."""
    for port in (real / dev / "ports").iterdir():
        hw = port / "hw_counters"
        for name, where in AS_MLX5.items():
            try:
                value = (hw / name).read_text()
            except OSError:
                continue
            out = root / dev / "ports" / port.name / where
            tmp = out.with_name(out.name + ".new")
            tmp.write_text(value)
            os.replace(tmp, out)


def pytest_configure(config):
    root = Path(tempfile.mkdtemp(prefix="mlx5-shim."))
    root.chmod(0o755)
    stand_in(REAL, root)
    rxe.SYSFS_IB = root
    real_counters = rxe.Rdma.counters

    def counters(self):
        refresh(REAL, root, self.device)
        return real_counters(self)

    rxe.Rdma.counters = counters
    config.mlx5_shim = root
