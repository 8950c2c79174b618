"""Fixtures for the grader's own tests."""

import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
COURSE = HERE.parent.parent


@pytest.fixture(scope="session")
def badprogs(tmp_path_factory):
    """The programs in badprogs/, compiled; name -> path."""
    out = tmp_path_factory.mktemp("badprogs")
    progs = {}
    for src in sorted((HERE / "badprogs").glob("*.c")):
        exe = out / src.stem
        subprocess.run(["cc", "-O0", "-w", "-o", str(exe), str(src)],
                       check=True)
        progs[src.stem] = exe
    return progs
