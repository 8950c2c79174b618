"""What the device decides, per device kind (the kind as counters.py
reads it): where the same program meets a different outcome on rxe and on
a NIC, the test asks here what to expect instead of assuming rxe.

- An atomic at an address that is not 8-byte aligned: rxe refuses it in
  ibv_post_send() with EINVAL (measured in the micro-VM, rxe_verbs.c's
  validate); mlx5 posts it and the request fails as an error completion
  (issue 39's reading of the provider; its status is to be verified on a
  real NIC, INSTRUCTORS.md).
- Lesson 09's answer key: one key per kind (test_09_failures.key_file).
"""

from grader.core.harness import GradeFailure

# kind -> "post" (the post returns an error) or "completion" (the post
# succeeds, the WR completes with an error status)
UNALIGNED_ATOMIC = {"rxe": "post", "mlx5": "completion"}


def unaligned_atomic(kind):
    """Where a @kind device refuses an unaligned atomic: 'post' or
    'completion'."""
    try:
        return UNALIGNED_ATOMIC[kind]
    except KeyError:
        raise GradeFailure(
            f"no evidence: the course does not know where a {kind} device "
            f"refuses an unaligned atomic (at the post or as a completion; "
            f"grader/evidence/behaviour.py knows {sorted(UNALIGNED_ATOMIC)}):"
            f" this check cannot be graded on this device") from None
