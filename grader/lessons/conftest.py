"""Where the wire tests are graded.

A lesson's wire tests (test_NN_*_wire.py, marked `wire`) read host A's
capture of the link of a linked pair (`make grade HOSTS=2`: the program on
host A, the reference peers on host B, every frame between them recorded
outside both guests; grader/evidence/wire.py). Graded in one VM, or natively,
there is no wire: there they are not collected at all - neither passed nor
failed - so their points exist only in a HOSTS=2 grading, whose Score
counts them (a lesson's subtotal there is larger by their points).
"""

import os


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "wire: needs host A's capture of a linked pair "
        "(make grade HOSTS=2); not collected elsewhere")


def on_the_wire(env=os.environ):
    """Is this grading on host A of a pair that records its link?"""
    return bool(env.get("RDMA_CAPTURE") and env.get("RDMA_PEER_JOBS"))


def pytest_collection_modifyitems(config, items):
    if on_the_wire():
        return
    gone = [i for i in items if i.get_closest_marker("wire")]
    if gone:
        items[:] = [i for i in items if i not in gone]
        config.hook.pytest_deselected(items=gone)
