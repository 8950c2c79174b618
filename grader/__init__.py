"""rdma-course's grader: see grader/README.md.

What a lesson's tests import from here (`from grader import points,
expect`) is loaded on first use: the grader's commands and scripts that
import a module of the package do not pay for pytest (seconds under the
micro-VM's emulation)."""

import importlib

_FROM = {"GradeFailure": "grader.core.harness", "expect": "grader.core.harness",
         "expect_line": "grader.core.harness",
         "expect_match": "grader.core.harness", "run": "grader.core.harness",
         "start": "grader.core.harness", "too_slow": "grader.core.harness",
         "at_pace": "grader.core.harness", "points": "grader.session.lesson",
         "proven_by": "grader.session.lesson",
         "GradedOnSubmission": "grader.session.lesson"}

__all__ = sorted(_FROM)


def __getattr__(name):
    if name in _FROM:
        return getattr(importlib.import_module(_FROM[name]), name)
    raise AttributeError(f"module 'grader' has no attribute {name!r}")
