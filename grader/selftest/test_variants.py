"""Correct programs written in another style keep their points.

A variant is the solutions written differently where the lessons leave the
choice: grader/selftest/variants/prog-prefix.c, put in front of every
program's main file, makes each line the program writes start with its
name (`reg_mr: ibv_reg_mr(...) failed: ...`, as err(3) and perror(argv[0])
write it). The grader matches what a line says (harness.prog_prefixed), so
the variant must reach full marks in every lesson it is graded in. The
lines that are verbatim by design stay so (STREAMS).
"""

import os

import pytest

from conftest import COURSE, grade_tree, need_device

VARIANTS = COURSE / "grader" / "selftest" / "variants"
TREE = COURSE / "build" / "selftest-variants"
# Which of a program's streams get the prefix: 1 stdout, 2 stderr, 3 both.
# reg_cost's stdout is a CSV (plot.sh and the grader read its columns);
# each of lesson 09's result lines starts with its experiment's name.
STREAMS = {"reg_cost": 2, "failures": 2}
# Lesson 04 prints nothing of its own (the grader's checker calls its
# functions); lesson 00 has no program. make test grades the lessons whose
# tests match lines in every way there is (expect_line, expect_match, a
# readiness regex, a test's own regexes: 01, 03), a minute or two, where
# every lesson takes five on a loaded machine; VARIANT_LESSONS=all grades
# them all.
ALL = ["01", "02", "03", "05", "06", "07", "08", "09", "10", "11", "12"]
# VARIANT_LESSONS=05,08: those (make test LESSON=NN: the lesson's own).
_WANT = os.environ.get("VARIANT_LESSONS", "")
LESSONS = (ALL if _WANT == "all" else
           [n for n in ALL if n in _WANT.split(",")] if _WANT else
           ["01", "02", "03", "05", "08"])


def make_tree():
    """build/selftest-variants/NN-topic/: the solutions, each file with a
    main() prefixed with prog-prefix.c. Only rewritten when changed."""
    prefix = (VARIANTS / "prog-prefix.c").read_text()
    names = []
    for lesson in sorted((COURSE / "solutions").iterdir()):
        if lesson.name[:2] not in ALL:
            continue
        names.append(lesson.name)
        dst = TREE / lesson.name
        dst.mkdir(parents=True, exist_ok=True)
        for src in lesson.iterdir():
            data = src.read_text()
            if src.suffix == ".c" and "int main(" in data:
                data = (f"#define VARIANT_STREAMS {STREAMS.get(src.stem, 3)}\n"
                        + prefix + data)
            out = dst / src.name
            if not out.exists() or out.read_text() != data:
                out.write_text(data)
    return names


@pytest.mark.instructor
def test_variant_compiles():
    """Compiled here, on the host; the device test reuses the builds."""
    from grader.core.build import compile_lesson
    for lesson in make_tree():
        res = compile_lesson(COURSE, TREE, lesson)
        assert res["rc"] == 0, (f"{TREE}/{lesson}: {res['command']}\n"
                                f"{res['stdout']}{res['stderr']}")


@pytest.mark.instructor
@pytest.mark.device
@pytest.mark.timeout(1500)
def test_prefixed_lines_keep_full_marks():
    need_device()
    make_tree()
    per, out, _ = grade_tree(TREE.relative_to(COURSE), lessons=LESSONS)
    short = {k: v for k, v in per.items() if v[0] != v[1]}
    assert per and not short, (f"the solutions with 'PROG: ' before every "
                               f"line lost points: {short}\n{out[-8000:]}")
