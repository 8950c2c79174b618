"""Build a stalled submission tree:
python3 grader/selftest/stalls/tree.py KIND DIR [NN ...]
(python3 grader/selftest/stalls/tree.py --lessons [NN ...]: their numbers)

KIND.c here (hang: blocks for ever before main; linger: does all its work,
prints everything, then never exits) is appended to every .c file of a copy
of each lesson's solution (all lessons, or those numbered NN), as the
hostile trees are made (grader/selftest/hostile/tree.py). make bench-grade
grades them (BENCH_ONLY=stall): a stalled submission must cost no more than
the solution's own test time plus 60 s."""

import sys
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
COURSE = HERE.parent.parent.parent
sys.path.insert(0, str(HERE.parent / "hostile"))
from tree import append  # noqa: E402

KINDS = sorted(p.stem for p in HERE.glob("*.c"))


def lessons(numbers=()):
    """The solutions' lesson directories (those numbered `numbers`)."""
    return [p.name for p in sorted((COURSE / "solutions").iterdir())
            if p.is_dir() and (not numbers or p.name[:2] in numbers)]


def build_tree(kind, tree, numbers=()):
    tree = Path(tree)
    text = (HERE / f"{kind}.c").read_text()
    for lesson in lessons(numbers):
        shutil.rmtree(tree / lesson, ignore_errors=True)
        shutil.copytree(COURSE / "solutions" / lesson, tree / lesson)
        append(tree / lesson, "\n" + text)
    return tree


if __name__ == "__main__":
    if sys.argv[1:2] == ["--lessons"]:
        print(" ".join(n[:2] for n in lessons(
            [n.zfill(2) for n in sys.argv[2:]])))
        sys.exit(0)
    if len(sys.argv) < 3 or sys.argv[1] not in KINDS:
        sys.exit(f"usage: tree.py {'|'.join(KINDS)} DIR [NN ...]")
    build_tree(sys.argv[1], sys.argv[2],
               [n.zfill(2) for n in sys.argv[3:]])
