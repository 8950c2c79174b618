"""rdma-course's grader: see grader/README.md."""

from grader.core.harness import (GradeFailure, expect, expect_line, expect_match, run,
                      start)
from grader.session.plugin import GradedOnSubmission, points

__all__ = ["GradeFailure", "GradedOnSubmission", "expect", "expect_line", "expect_match", "points",
           "run", "start"]
