"""The grader against programs that skip the real work but print what the
tests look for (grader/selftest/cheats/CLASS/NN-topic/, each a copy of the
solution with the fake marked CHEAT). Each cheat must lose exactly the
points it fakes - the tests named in EXPECTED - and keep the rest.

To spend the VM's time once, every cheated lesson is graded in one pytest
run over one tree, build/selftest-cheats/, whose NN-topic entries link to
the cheats (no lesson is faked by two classes); the non-device test below
compiles it on the host first.
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import COURSE

CHEATS = COURSE / "grader" / "selftest" / "cheats"
TREE = COURSE / "build" / "selftest-cheats"

# class -> lesson -> the tests it must fail (module: test function). Of the
# lesson's tests only the reference-peer module and these are run.
EXPECTED = {
    # The pair agrees with itself: the server never compares, the client
    # WRITEs zeros of the right length.
    "self-agreeing": {
        "06-rdma-write": {
            "test_06_rdma_write.py::test_short_write",
            "test_06_rdma_write_peer.py::test_peer_server_memory",
            "test_06_rdma_write_peer.py::test_peer_client_corrupt",
        },
        # The verdict travels inside DONE; the server never READs.
        "08-rdma-cm": {
            "test_08_rdma_cm.py::test_one_sided_counters",
            "test_08_rdma_cm_peer.py::test_peer_client_corrupt",
        },
    },
    # The READ carries filler, the payload crosses the TCP side channel.
    "tcp-payload": {
        "07-rdma-read": {
            "test_07_rdma_read_peer.py::test_peer_changed_byte",
            "test_07_rdma_read_peer.py::test_peer_read_from_client_qp",
            "test_07_rdma_read_peer.py::test_peer_client_reads",
        },
    },
}
# Tests of the student-with-student run the cheats pass on purpose (they
# show the fake is convincing): run them too.
CONVINCED = {
    "06-rdma-write": ["test_06_rdma_write.py::test_server_memcmp",
                      "test_06_rdma_write.py::test_one_sided"],
    "07-rdma-read": ["test_07_rdma_read.py::test_client_memcmp",
                     "test_07_rdma_read.py::test_one_sided"],
    "08-rdma-cm": ["test_08_rdma_cm.py::test_server_detects_corruption"],
}


def make_tree():
    """build/selftest-cheats/NN-topic -> cheats/CLASS/NN-topic."""
    TREE.mkdir(parents=True, exist_ok=True)
    lessons = {}
    for cls, per in EXPECTED.items():
        for lesson in per:
            assert lesson not in lessons, (f"{lesson} is faked by both "
                                           f"{lessons[lesson]} and {cls}")
            assert (CHEATS / cls / lesson).is_dir(), f"no cheats/{cls}/{lesson}"
            lessons[lesson] = cls
            link = TREE / lesson
            target = os.path.relpath(CHEATS / cls / lesson, TREE)
            if not link.is_symlink() or os.readlink(link) != target:
                if link.is_symlink():
                    link.unlink()
                link.symlink_to(target)
    return lessons


def test_every_cheat_class_has_its_tree():
    classes = {p.name for p in CHEATS.iterdir() if p.is_dir()}
    assert classes == set(EXPECTED), "cheats/ and EXPECTED disagree"
    for cls, per in EXPECTED.items():
        for lesson in per:
            for c in (CHEATS / cls / lesson).glob("*.c"):
                assert "CHEAT" in c.read_text(), f"{c}: mark the fake CHEAT"


def test_cheats_compile():
    """Compile the cheats here (on the host: fast); the device test's grader
    reuses the builds."""
    from grader.build import compile_lesson
    for lesson in make_tree():
        rc, out, err, cmd = compile_lesson(COURSE, TREE, lesson)
        assert rc == 0, f"{cmd}\n{out}{err}"


def _node(lesson, test):
    return f"grader/lessons/{test}"


@pytest.mark.device
@pytest.mark.timeout(900)
def test_each_cheat_loses_exactly_what_it_fakes(tmp_path):
    if not os.environ.get("RDMA_DEVICE"):
        pytest.fail("no RDMA device: run through vm-setup/with-rxe "
                    "(make test does)")
    lessons = make_tree()
    nodes = []
    for lesson, cls in lessons.items():
        num = lesson[:2]
        nodes += sorted(str(p.relative_to(COURSE)) for p in
                        (COURSE / "grader/lessons").glob(f"test_{num}_*_peer.py"))
        nodes += [_node(lesson, t) for t in
                  sorted(EXPECTED[cls][lesson] | set(CONVINCED.get(lesson, [])))
                  if "_peer.py" not in t]
    junit = tmp_path / "junit.xml"
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "grader/pytest.ini",
         "--rootdir", ".", "-p", "grader.plugin", "-qq", "--tb=no", "-rN",
         "--color=no", *nodes, f"--src={TREE}", f"--junitxml={junit}",
         f"--transcripts={tmp_path}/transcripts"],
        cwd=COURSE, capture_output=True, text=True, timeout=850)
    assert junit.exists(), f"no results:\n{res.stdout}\n{res.stderr}"
    failed, ran = {}, {}
    for case in ET.parse(junit).iter("testcase"):
        mod = case.get("classname").rsplit(".", 1)[-1] + ".py"
        name = f"{mod}::{case.get('name')}"
        lesson = next(l for l in lessons if mod.startswith(f"test_{l[:2]}_"))
        ran.setdefault(lesson, set()).add(name)
        if case.find("failure") is not None or case.find("error") is not None:
            failed.setdefault(lesson, set()).add(name)
    problems = []
    for lesson, cls in lessons.items():
        want = EXPECTED[cls][lesson]
        got = failed.get(lesson, set())
        if got != want:
            problems.append(
                f"cheat {cls}/{lesson}:\n  must fail:     {sorted(want)}\n"
                f"  failed:        {sorted(got)}\n"
                f"  unexpected:    {sorted(got - want)}\n"
                f"  not caught:    {sorted(want - got)}")
        convinced = set(CONVINCED.get(lesson, []))
        if not convinced <= ran.get(lesson, set()):
            problems.append(f"{lesson}: {sorted(convinced)} did not run")
    assert not problems, "\n".join(problems) + "\n" + res.stdout[-6000:]
