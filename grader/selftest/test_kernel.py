"""grader/evidence/trusted/kernel.py: the kernel's view the reference peers
ask for is of the program's device only.

QP numbers are per device: with a device per shard (make grade, make
test's whole-tree gradings) the number of the program's QP is also another
lesson's QP on the next device, and asking without the device once gave a
correct kv_server's QP to lesson 13's `bw` (6 points lost). A stand-in
`rdma` prints what the real one printed then.
"""

import json

import pytest

from grader.evidence.trusted import kernel

QPS = [
    {"ifindex": 0, "ifname": "rxe1", "port": 1, "lqpn": 31, "type": "RC",
     "state": "RTS", "pid": 288, "comm": "kv_server"},
    {"ifindex": 1, "ifname": "rxe0", "port": 1, "lqpn": 31, "type": "RC",
     "state": "INIT", "pid": 285, "comm": "bw"},
    {"ifindex": 0, "ifname": "rxe1", "port": 1, "lqpn": 32, "type": "RC",
     "state": "RTS", "pid": 288, "comm": "kv_server"},
]
SRQS = [
    {"ifindex": 1, "ifname": "rxe0", "srqn": 1, "type": "BASIC",
     "lqpn": ["19-20", "23"], "pid": 300, "comm": "other"},
    {"ifindex": 0, "ifname": "rxe1", "srqn": 2, "type": "BASIC",
     "lqpn": ["17-19"], "pid": 301, "comm": "srq"},
]


@pytest.fixture
def fake_rdma(tmp_path, monkeypatch):
    rdma = tmp_path / "rdma"
    rdma.write_text(
        "#!/bin/sh\n"
        f"[ \"$4\" = qp ] && echo '{json.dumps(QPS)}'\n"
        f"[ \"$4\" = srq ] && echo '{json.dumps(SRQS)}'\n"
        "exit 0\n")
    rdma.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("RXE_JOB_DIR", raising=False)


def test_a_qp_number_is_looked_up_on_the_programs_device(fake_rdma):
    got = kernel.program_qps([31, 32], "rxe1")
    assert got[31]["comm"] == "kv_server" and got[31]["pid"] == 288
    assert got[32]["ifname"] == "rxe1"
    assert kernel.program_qp(31, "rxe0")["comm"] == "bw"
    assert kernel.program_qp(32, "rxe0") is None


def test_an_srq_is_looked_up_on_the_programs_device(fake_rdma):
    assert kernel.kernel_srq_of(19, "rxe1") == {
        "srqn": 2, "pid": 301, "lqpn": [17, 18, 19]}
    assert kernel.kernel_srq_of(19, "rxe0")["pid"] == 300
    assert kernel.kernel_srq_of(23, "rxe1") is None


def test_host_a_answers_about_its_sessions_device(fake_rdma, tmp_path,
                                                  monkeypatch):
    monkeypatch.setenv("RDMA_DEVICE", "rxe1")
    kernel.answer(tmp_path, b"peer-asks-qp 7 31")
    assert json.loads((tmp_path / "qp-7.json").read_text())["pid"] == 288
