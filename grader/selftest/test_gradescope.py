"""make gradescope: the autograder zip, unpacked into a temporary
AUTOGRADER_ROOT, set up (packages only checked) and run on a solution
(full marks), an empty submission (0, with a message), one that does not
compile (its own visible test), and with a VM that cannot start ("autograder
error", no score). Lesson 04 needs no device, lesson 01's VM never boots:
no VM runs here (INSTRUCTORS.md has the measured run in 768 MB, one CPU)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from conftest import COURSE

sys.path.insert(0, str(COURSE))
from grader.classroom import gradescope  # noqa: E402

pytestmark = pytest.mark.instructor


@pytest.fixture
def world_readable():
    """A directory the sandbox's unprivileged user can traverse, as
    /autograder is (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="rdma-gradescope."))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def unpack(tmp_path, lesson):
    z = tmp_path / "autograder.zip"
    res = subprocess.run([sys.executable, "-m", "grader", "gradescope",
                          f"--lesson={lesson}", f"--out={z}"], cwd=COURSE,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    root = tmp_path / "autograder"
    with zipfile.ZipFile(z) as f:
        names = f.namelist()
        f.extractall(root / "source")
        for info in f.infolist():       # as unzip does: the files' modes
            if info.external_attr >> 16:
                os.chmod(root / "source" / info.filename,
                         (info.external_attr >> 16) & 0o7777)
    for name in ("setup.sh", "run_autograder"):
        assert name in names
        assert os.access(root / "source" / name, os.X_OK), name
    # Of solutions/, only what grading needs: lesson 05's rc.c and lesson
    # 09's key.
    assert sorted(n for n in names if n.startswith("course/solutions/")) \
        == sorted("course/" + f for f in gradescope.REFERENCE)
    assert "course/vm-setup/microvm/kernel.lock" in names   # setup.sh's pin
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    return root


def run_autograder(root, files, env=None):
    sub = root / "submission"
    shutil.rmtree(sub, ignore_errors=True)
    sub.mkdir()
    for name, text in files.items():
        (sub / name).parent.mkdir(parents=True, exist_ok=True)
        (sub / name).write_text(text)
    res = subprocess.run([str(root / "run_autograder")], capture_output=True,
                         text=True, timeout=600,
                         env=dict(os.environ, AUTOGRADER_ROOT=str(root),
                                  **(env or {})))
    path = root / "results" / "results.json"
    data = json.loads(path.read_text())
    path.unlink()
    return res, data


@pytest.fixture(scope="module")
def root04():
    top = Path(tempfile.mkdtemp(prefix="rdma-gradescope."))
    os.chmod(top, 0o755)
    root = unpack(top, "04")
    res = subprocess.run([str(root / "source" / "setup.sh")],
                         cwd=root / "source", capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, SETUP_NO_APT="1",
                                               AUTOGRADER_ROOT=str(root)))
    assert res.returncode == 0, res.stdout + res.stderr
    yield root
    shutil.rmtree(top, ignore_errors=True)


SOLUTION = (COURSE / "solutions/04-work-requests/worksheet.c")


def test_a_solution_gets_full_marks(root04):
    res, data = run_autograder(root04, {"worksheet.c": SOLUTION.read_text()})
    assert res.returncode == 0, res.stdout + res.stderr
    assert data["score"] == 14, res.stdout + res.stderr
    assert data["output"].startswith("Score: 14/14")
    assert data["output_format"] == "text" and "execution_time" in data
    for t in data["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output",
                          "visibility"}, t
        assert (t["status"], t["visibility"]) == ("passed", "visible")
    assert sum(t["max_score"] for t in data["tests"]) == 14


def test_a_whole_repository_is_graded_too(root04):
    res, data = run_autograder(root04, {
        "skeletons/04-work-requests/worksheet.c": SOLUTION.read_text(),
        "README.md": "mine\n"})
    assert data["score"] == 14, data["output"]


def test_an_empty_submission_gets_0_with_a_message(root04):
    res, data = run_autograder(root04, {"notes.txt": "nothing\n"})
    assert res.returncode == 0
    assert data["score"] == 0
    assert "No lesson files found" in data["output"]
    assert "skeletons/04-work-requests/worksheet.c" in data["output"]
    assert data["tests"][0]["visibility"] == "visible"


def test_a_compile_error_is_a_visible_test_of_its_own(root04):
    res, data = run_autograder(root04, {
        "worksheet.c": SOLUTION.read_text() + "\nint broken(void) { return }\n"})
    assert res.returncode == 0
    first = data["tests"][0]
    assert first["name"] == "04-work-requests: compiles"
    assert first["status"] == "failed" and first["visibility"] == "visible"
    assert "error" in first["output"] and "worksheet.c" in first["output"]
    assert str(root04) not in first["output"]
    assert data["score"] == 0


def test_a_vm_that_cannot_start_is_an_autograder_error(world_readable):
    tmp_path = world_readable
    root = unpack(tmp_path, "01")
    files = {f"skeletons/01-devices/{f.name}": f.read_text() for f in
             (COURSE / "solutions/01-devices").glob("*.c")}
    res, data = run_autograder(root, files, env={
        "RXE_BACKEND": "vm", "RXE_VM_KERNEL_DEB": str(tmp_path / "none.deb")})
    assert res.returncode == 1
    assert "score" not in data
    assert data["output"].startswith("autograder error")
    assert data["tests"][0]["name"] == "autograder error"
    assert "attempt 2" in res.stderr
