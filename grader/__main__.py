"""python3 -m grader build SRC [NN-topic ...] - compile lessons ahead of
grading (make grade does this on the host before the micro-VM boots)."""

import sys

from .build import main

if __name__ == "__main__":
    if sys.argv[1:2] != ["build"]:
        print("usage: python3 -m grader build SRC [NN-topic ...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[2:]))
