"""Lesson 01, checked from inside the program: the grader preloads its
interposer (grader/evidence/interpose/verbs_spy.c), which makes ibv_get_device_guid()
and ibv_query_device() return a node GUID chosen here at random. A program that asks the device
prints it; one that copies sysfs (or `ibv_devinfo`) prints the real one.
"""

import re
import secrets

import pytest

from grader import GradeFailure, expect, points
from grader.core.harness import prog_prefixed
from grader.evidence.interpose import Spy, build_interposer

PROG = "devinfo"
DEVICE_RE = r"^device {dev} node_guid (\S+) "


@pytest.fixture(scope="module")
def spy_lib(build):
    return build_interposer(build.course)


def _guid_str(v):
    h = f"{v:016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


@points(3, "node_guid comes from the verbs calls, not from sysfs (interposer)")
def test_guid_from_verbs(build, rdma, spy_lib):
    guid = secrets.randbits(64) | (1 << 63)
    spy = Spy(spy_lib, node_guid=f"{guid:016x}")
    res = build.run(PROG, env=spy.env)
    how = f"{spy.describe()} {build.path(PROG)}"
    res.ok(how)
    if not spy.calls("get_device_guid") and not spy.calls("query_device"):
        raise GradeFailure(f"{how}\nthe program called neither "
                           f"ibv_get_device_guid() nor ibv_query_device() "
                           f"(the interposer saw no call)")
    m = re.search(prog_prefixed(DEVICE_RE.format(dev=re.escape(rdma.device))),
                  res.stdout, re.M)
    if not m:
        raise GradeFailure(f"no 'device {rdma.device} node_guid ...' line in "
                           f"the output of: {how}\n{res.describe()}")
    expect(m.group(1), _guid_str(guid),
           f"node_guid printed when ibv_get_device_guid() returns "
           f"{_guid_str(guid)} (reproduce: {how})")
