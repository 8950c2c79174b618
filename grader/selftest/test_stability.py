"""The tests whose outcome could depend on the machine's speed keep a
correct program's points on a busy machine: the solutions' timing-sensitive
tests, graded with a busy loop per CPU beside them (the quiet round is the
solutions' full grading, test_course.py). `make bench-stability` does the
same N times quiet, loaded and in half a CPU, for every test; the audit of
what each such test compares is grader/README.md, "Timing".
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import COURSE, need_device

TESTS = [
    "grader/lessons/test_02_memory_regions.py::test_reg_cost_grows",
    "grader/lessons/test_02_memory_regions.py::test_reg_cost_timed",
    "grader/lessons/test_10_events.py::test_lost_wakeup",
    "grader/lessons/test_10_events.py::test_cpu",
    "grader/lessons/test_10_events.py::test_cpu_reported",
    "grader/lessons/test_11_latency.py",
]


@pytest.mark.instructor
@pytest.mark.device
@pytest.mark.timeout(900)
def test_timing_tests_keep_full_marks_beside_busy_loops(tmp_path):
    need_device()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 1)]
    junit = tmp_path / "junit.xml"
    try:
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "-c", "grader/pytest.ini",
             "--rootdir", ".", "-p", "grader.session.plugin", "-qq",
             "--assert=plain",          # as make grade's sessions
             "--tb=no", "-rN", "--color=no", *TESTS, "--src=solutions",
             f"--junitxml={junit}", f"--transcripts={tmp_path}/transcripts"],
            cwd=COURSE, capture_output=True, text=True, timeout=850)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    assert junit.exists(), f"no results:\n{res.stdout}\n{res.stderr}"
    cases = list(ET.parse(junit).iter("testcase"))
    failed = [f"{c.get('classname')}::{c.get('name')}" for c in cases
              if c.find("failure") is not None or c.find("error") is not None]
    assert cases and not failed, (
        f"beside {len(busy)} busy loops the solutions lost {failed}\n"
        + res.stdout[-8000:])
