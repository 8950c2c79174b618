"""make lint, as part of make test: shellcheck (warning level) on every
tracked shell script and clang-format on lessons/common/ find nothing - and
they would find something if it were there."""

import shutil
import subprocess

from conftest import COURSE

LINT = COURSE / "grader" / "selftest" / "lint.sh"


def lint(where):
    return subprocess.run([str(LINT), str(where)], capture_output=True,
                          text=True, timeout=300)


def test_the_course_is_lint_clean():
    res = lint(COURSE)
    assert res.returncode == 0, (f"grader/selftest/lint.sh found problems (fix them, "
                                 f"then run make lint):\n{res.stdout}{res.stderr}")
    assert "lint: clean" in res.stdout


def test_lint_finds_a_script_warning_and_unformatted_code(tmp_path):
    (tmp_path / "lessons" / "common").mkdir(parents=True)
    shutil.copy(COURSE / ".clang-format", tmp_path / ".clang-format")
    (tmp_path / "lessons" / "common" / "bad.c").write_text(
        "int f(int a){return a+1;}\n")
    (tmp_path / "tool.sh").write_text("#!/bin/bash\nfor f in $(ls); do :; done\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    res = lint(tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "tool.sh" in out and "SC2045" in out, out
    assert "bad.c" in out and "clang-format" in out, out
    assert "lint: clean" not in out
