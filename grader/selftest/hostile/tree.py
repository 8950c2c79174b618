"""Build the hostile submission tree: python3 grader/selftest/hostile/tree.py DIR

Each attack (*.c here but include.c) is appended, after common.h, to every .c
file of a copy of the untouched skeleton of the lesson its first line names;
include.c replaces that lesson's program file whole. make test builds the
tree on the host (python3 -m grader build DIR) and grades it in the VM
(test_hostile.py)."""

import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COURSE = HERE.parent.parent.parent
APPENDED = ["daemon", "escape", "plant", "tamper"]
REPLACING = ["include"]


def lesson_of(attack):
    first = (HERE / f"{attack}.c").read_text().splitlines()[0]
    return re.match(r"/\* lesson: (\S+) \*/", first).group(1)


def lessons():
    return sorted({lesson_of(a) for a in APPENDED + REPLACING})


def append(lesson_dir, text):
    """Append `text` to every .c file of `lesson_dir` (the stalled trees of
    grader/selftest/stalls/tree.py are made the same way)."""
    for c in Path(lesson_dir).glob("*.c"):
        c.write_text(c.read_text() + text)


def build_tree(tree):
    tree = Path(tree)
    shutil.rmtree(tree, ignore_errors=True)
    common = (HERE / "common.h").read_text()
    for attack in APPENDED:
        lesson = lesson_of(attack)
        if not (tree / lesson).exists():
            shutil.copytree(COURSE / "skeletons" / lesson, tree / lesson)
            append(tree / lesson, "\n" + common)
        append(tree / lesson, (HERE / f"{attack}.c").read_text())
    for attack in REPLACING:
        lesson = lesson_of(attack)
        (tree / lesson).mkdir(parents=True, exist_ok=True)
        prog = next((COURSE / "skeletons" / lesson).glob("*.c")).name
        (tree / lesson / prog).write_text(
            (HERE / f"{attack}.c").read_text().replace("COURSE", str(COURSE)))
    return tree


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tree.py DIR")
    build_tree(sys.argv[1])
