"""The counters by meaning (grader/evidence/counters.py) on stand-in sysfs
trees: an rxe tree with rxe's names and an mlx5 tree with mlx5's (the
PCI function's driver link, the Q counters in hw_counters/, the port's PMA
counters in counters/), no device needed. A meaning the device lacks is
"no evidence", never a 0: the checks that a counter "moved by 0" cannot
pass with nothing measured, and the lessons' tests that read counters ask
by meaning only."""

import ast
import importlib.util
from collections import namedtuple
from pathlib import Path

import pytest

from grader.core.harness import GradeFailure
from grader.evidence import counters, rxe
from grader.evidence.counters import MEANINGS, TABLES, NoEvidence

COURSE = Path(__file__).resolve().parent.parent.parent
# The lessons' tests are called here as functions, outside the grader's
# session (which registers their marks).
pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnknownMarkWarning")

RXE_NAMES = ["sent_pkts", "rcvd_pkts", "duplicate_request",
             "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
             "rcvd_seq_err", "ack_deferred", "retry_exceeded_err",
             "retry_rnr_exceeded_err", "completer_retry_err", "send_err",
             "link_downed", "rdma_sends", "rdma_recvs"]
# drivers/infiniband/hw/mlx5/counters.c: basic, out-of-sequence, retrans
# and extended error Q counters (req_*_retries_exceeded: Linux 6.11).
MLX5_NAMES = ["rx_write_requests", "rx_read_requests", "rx_atomic_requests",
              "out_of_buffer", "out_of_sequence", "duplicate_request",
              "rnr_nak_retry_err", "packet_seq_err", "implied_nak_seq_err",
              "local_ack_timeout_err", "resp_local_length_error",
              "resp_cqe_error", "req_cqe_error", "req_remote_invalid_request",
              "req_remote_access_errors", "resp_remote_access_errors",
              "resp_cqe_flush_error", "req_cqe_flush_error",
              "req_transport_retries_exceeded", "req_rnr_retries_exceeded"]
MLX5_PORT = ["port_xmit_packets", "port_rcv_packets", "port_xmit_data",
             "port_rcv_data", "symbol_error", "link_downed"]


def _write(d, names, value=0):
    d.mkdir(parents=True, exist_ok=True)
    for n in names:
        (d / n).write_text(f"{value}\n")


def rxe_tree(root, dev="rxe0"):
    """What the micro-VM's rxe0 shows (measured: devices/virtual, no
    device/ link, no ports/1/counters/)."""
    port = root / dev / "ports" / "1"
    _write(port / "hw_counters", RXE_NAMES)
    (port / "state").write_text("4: ACTIVE\n")
    (root / dev / "parent").write_text("rdma0\n")
    return root


def mlx5_tree(root, dev="mlx5_0", names=MLX5_NAMES):
    """An mlx5 function's tree: device -> a PCI function whose driver is
    mlx5_core; Q counters in hw_counters/, PMA counters in counters/."""
    pci = root / "pci0000:00" / "0000:3b:00.0"
    (root / "drivers" / "mlx5_core").mkdir(parents=True)
    pci.mkdir(parents=True)
    (pci / "driver").symlink_to(root / "drivers" / "mlx5_core")
    (root / dev).mkdir()
    (root / dev / "device").symlink_to(pci)
    port = root / dev / "ports" / "1"
    _write(port / "hw_counters", names)
    _write(port / "counters", MLX5_PORT)
    (port / "state").write_text("4: ACTIVE\n")
    return root


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    monkeypatch.setattr(rxe, "SYSFS_IB", tmp_path)
    monkeypatch.delenv("RDMA_DEVICE_KIND", raising=False)
    return tmp_path


def dev(name):
    return rxe.Rdma({"RDMA_DEVICE": name})


def bump(root, dev, rel, by):
    f = root / dev / "ports" / "1" / rel
    f.write_text(f"{int(f.read_text()) + by}\n")


def test_the_kind_comes_from_the_driver(sysfs):
    rxe_tree(sysfs)
    mlx5_tree(sysfs)
    assert dev("rxe0").kind == "rxe"
    assert dev("mlx5_0").kind == "mlx5"
    assert rxe.Rdma({}).kind == "unknown"


def test_the_kind_can_be_forced(sysfs, monkeypatch):
    rxe_tree(sysfs)
    monkeypatch.setenv("RDMA_DEVICE_KIND", "mlx5")
    assert dev("rxe0").kind == "mlx5"


def test_another_driver_is_a_kind_without_a_table(sysfs):
    mlx5_tree(sysfs)
    (sysfs / "drivers" / "bnxt_en").mkdir()
    link = sysfs / "pci0000:00" / "0000:3b:00.0" / "driver"
    link.unlink()
    link.symlink_to(sysfs / "drivers" / "bnxt_en")
    r = dev("mlx5_0")
    assert r.kind == "bnxt_en"
    with pytest.raises(NoEvidence, match="bnxt_en device mlx5_0 does not "
                       "count 'packets sent'"):
        r.counters().of("packets sent")


def test_rxe_reads_rxe_names(sysfs):
    rxe_tree(sysfs)
    r = dev("rxe0")
    before = r.counters()
    bump(sysfs, "rxe0", "hw_counters/rdma_sends", 20)
    bump(sysfs, "rxe0", "hw_counters/sent_pkts", 60)
    d = r.counters() - before
    assert (d.of("SENDs sent"), d.of("packets sent")) == (20, 60)
    assert d.of("receives consumed") == 0      # rxe counts it: a real 0
    assert d.label("SENDs sent") == "hw_counters/rdma_sends"
    assert d.show(["SENDs sent", "packets sent"]) == \
        "rdma_sends 20, sent_pkts 60"
    assert d.show() == "rdma_sends 20, sent_pkts 60"


def test_mlx5_reads_mlx5_names_and_port_counters(sysfs):
    mlx5_tree(sysfs)
    r = dev("mlx5_0")
    before = r.counters()
    bump(sysfs, "mlx5_0", "counters/port_xmit_packets", 98)
    bump(sysfs, "mlx5_0", "counters/port_rcv_packets", 3)
    bump(sysfs, "mlx5_0", "hw_counters/rx_write_requests", 1)
    bump(sysfs, "mlx5_0", "hw_counters/out_of_buffer", 3)
    d = r.counters() - before
    assert d.of("packets sent") == 98
    assert d.of("packets received") == 3
    assert d.of("WRITEs received") == 1
    assert d.of("RNR NAKs sent") == 3
    assert d.label("packets sent") == "counters/port_xmit_packets"
    assert d.label("RNR NAKs sent") == "hw_counters/out_of_buffer"
    # The port's other PMA counters are not read (only the table's files).
    assert "counters/port_xmit_data" not in d


def test_a_meaning_mlx5_lacks_is_no_evidence_not_zero(sysfs):
    mlx5_tree(sysfs)
    d = dev("mlx5_0").counters()
    for m in ("SENDs sent", "receives consumed"):
        assert not d.has(m)
        with pytest.raises(NoEvidence) as e:
            d.of(m)
        assert f"mlx5 device mlx5_0 does not count '{m}'" in str(e.value)
        assert "cannot be graded on this device" in str(e.value)
        assert isinstance(e.value, GradeFailure)      # a failed test, no pass
    # show() leaves the missing meanings out instead of printing 0.
    assert "rdma_sends" not in d.show(["SENDs sent", "packets sent"])


def test_a_counter_file_missing_from_the_tree_is_no_evidence(sysfs):
    """req_rnr_retries_exceeded came with Linux 6.11: an older kernel's
    mlx5 has no such file, and the meaning is missing there."""
    mlx5_tree(sysfs, names=[n for n in MLX5_NAMES
                            if not n.startswith("req_rnr")])
    d = dev("mlx5_0").counters()
    assert d.has("RNR NAKs received")
    with pytest.raises(NoEvidence, match="req_rnr_retries_exceeded is not "
                       "there"):
        d.of("RNR retries exceeded")


def test_an_unknown_meaning_is_a_grader_bug():
    with pytest.raises(KeyError, match="unknown counter meaning"):
        rxe.Counters({}).of("sends sent")


def test_every_table_file_is_the_drivers_own():
    """Each table names only files its driver creates (the stand-in
    lists above, from rxe_hw_counters.c and mlx5's counters.c)."""
    assert set(TABLES["rxe"].values()) <= set(RXE_NAMES)
    assert set(TABLES["mlx5"].values()) <= set(MLX5_NAMES) | {
        f"counters/{n}" for n in MLX5_PORT}
    for table in TABLES.values():
        assert set(table) <= set(MEANINGS)


def test_rxe_has_every_meaning_the_lessons_ask_for():
    """rxe grades every lesson as before: no test asks for a meaning the
    rxe table lacks."""
    need = counters.needed(COURSE)
    assert {"03", "05", "06", "07", "08", "09", "11", "13", "15"} <= set(need)
    assert all(not missing for missing in
               counters.coverage("rxe", COURSE).values())
    mlx5 = counters.coverage("mlx5", COURSE)
    assert mlx5["05"] == ["SENDs sent", "receives consumed"]
    assert mlx5["03"] == [] and mlx5["15"] == []


def test_lessons_ask_by_meaning_not_by_file_name():
    """No lesson test names a counter file as a string of its own (a
    .get("rdma_sends", 0) would read 0 where the file does not exist)."""
    files = {n for t in TABLES.values() for n in t.values()} | set(RXE_NAMES)
    bad = []
    for f in sorted((COURSE / "grader" / "lessons").glob("test_*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and node.value in files:
                bad.append(f"{f.name}:{node.lineno} {node.value!r}")
    assert bad == []


def _lesson(name):
    path = COURSE / "grader" / "lessons" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_h39_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


Run = namedtuple("Run", "server client delta")


@pytest.mark.parametrize("lesson, test", [
    ("test_06_rdma_write", "test_one_sided"),
    ("test_07_rdma_read", "test_one_sided"),
    ("test_05_send_recv", "test_counters"),
])
def test_moved_by_0_does_not_pass_on_mlx5(sysfs, lesson, test):
    """Lesson 06's and 07's 'no SEND crossed' and lesson 05's SEND count
    on an mlx5 tree whose packets moved: no evidence for the SENDs, so the
    test fails saying so (when a missing counter read as 0, 'no SEND'
    passed with nothing measured and the packet minimum failed on rxe's
    name)."""
    mlx5_tree(sysfs)
    r = dev("mlx5_0")
    before = r.counters()
    bump(sysfs, "mlx5_0", "counters/port_xmit_packets", 1000)
    bump(sysfs, "mlx5_0", "counters/port_rcv_packets", 1000)
    run = Run(None, None, r.counters() - before)
    with pytest.raises(NoEvidence, match="does not count 'SENDs sent'"):
        getattr(_lesson(lesson), test)(run)


def test_the_same_check_grades_on_rxe(sysfs):
    """The same lesson 06 check on an rxe tree: passes with the packets and
    no SEND, fails when a SEND moved."""
    rxe_tree(sysfs)
    r = dev("rxe0")
    mod = _lesson("test_06_rdma_write")
    before = r.counters()
    bump(sysfs, "rxe0", "hw_counters/sent_pkts", 100)
    bump(sysfs, "rxe0", "hw_counters/rcvd_pkts", 100)
    mod.test_one_sided(Run(None, None, r.counters() - before))
    bump(sysfs, "rxe0", "hw_counters/rdma_sends", 1)
    with pytest.raises(GradeFailure, match="hw_counters/rdma_sends moved "
                       "by 1: SENDs went through"):
        mod.test_one_sided(Run(None, None, r.counters() - before))


def test_udp_not_rxe_reads_what_mlx5_has(sysfs):
    """Lesson 11's 'nothing went through the device' on mlx5: the packet
    counts (which it has) decide; a moved packet fails it."""
    mlx5_tree(sysfs)
    r = dev("mlx5_0")
    mod = _lesson("test_11_latency")
    mod.summary = lambda run, kind: None
    before = r.counters()
    mod.test_udp_not_rxe({"delta": r.counters() - before})
    bump(sysfs, "mlx5_0", "counters/port_xmit_packets", 2)
    with pytest.raises(GradeFailure, match="--udp moved"):
        mod.test_udp_not_rxe({"delta": r.counters() - before})


def test_no_evidence_in_pairs_of_hosts(sysfs):
    """expect_own_traffic (HOSTS=2, host A's own traffic) asks by meaning:
    on mlx5 the SEND count is no evidence, not a 0 that fails or passes."""
    from grader.evidence.trusted.run import expect_own_traffic
    mlx5_tree(sysfs)
    r = dev("mlx5_0")
    r.peer_jobs = "/jobs"
    v = {"_counters": r.counters() - r.counters()}
    with pytest.raises(NoEvidence):
        expect_own_traffic(r, v, "SENDs sent", 0, "client")
    rxe_tree(sysfs)
    r = dev("rxe0")
    r.peer_jobs = "/jobs"
    v = {"_counters": r.counters() - r.counters()}
    expect_own_traffic(r, v, "SENDs sent", 0, "client")
    with pytest.raises(GradeFailure, match="hw_counters/rdma_sends on the "
                       "client's host"):
        expect_own_traffic(r, v, "SENDs sent", 3, "client")



# ---- what the device decides ----------------------------------------------------

def test_unaligned_atomic_per_kind():
    from grader.evidence import behaviour
    assert behaviour.unaligned_atomic("rxe") == "post"
    assert behaviour.unaligned_atomic("mlx5") == "completion"
    with pytest.raises(GradeFailure, match="no evidence: the course does not "
                       "know where a bnxt_en device refuses"):
        behaviour.unaligned_atomic("bnxt_en")


def test_lesson_09_key_per_kind(tmp_path):
    """rxe's key is ANSWERS.md; an mlx5 device is graded against
    ANSWERS-mlx5.md, and without it the predictions say they cannot be
    graded there (never against rxe's key); the students' repository (no
    key at all) stays graded on submission."""
    mod = _lesson("test_09_failures")
    key = tmp_path / "solutions" / "09-failures"
    assert mod.answer_key(tmp_path, "mlx5") is None       # no key at all
    key.mkdir(parents=True)
    rows = "".join(f"| {e} | `succeeded` |\n" for e in mod.EXPERIMENTS)
    (key / "ANSWERS.md").write_text(rows)
    assert mod.answer_key(tmp_path, "rxe") == dict.fromkeys(mod.EXPERIMENTS,
                                                            "succeeded")
    assert mod.answer_key(tmp_path, "unknown") is not None  # no device: rxe
    with pytest.raises(GradeFailure, match="no answer key for mlx5 devices "
                       r"\(solutions/09-failures/ANSWERS-mlx5.md\)"):
        mod.answer_key(tmp_path, "mlx5")
    (key / "ANSWERS-mlx5.md").write_text(rows.replace(
        "| num-sge | `succeeded` |", "| num-sge | `ibv_post_send failed: "
        "EINVAL` |"))
    assert mod.answer_key(tmp_path, "mlx5")["num-sge"] == \
        "ibv_post_send failed: EINVAL"
