"""Lesson 00: an rxe device exists, its port is ACTIVE, and it has the IPv4
RoCE v2 GID every later lesson connects with."""

from grader import expect, expect_match, points


@points(2, "ibv_devices lists the RDMA device")
def test_device_listed(build, rdma):
    res = build.run_cmd(["ibv_devices"]).ok()
    expect_match(res.stdout, rf"^\s*{rdma.device}\s+[0-9a-f]{{16}}\s*$",
                 f"ibv_devices should list {rdma.device} with its node GUID")


@points(2, "port 1 is ACTIVE (ibv_devinfo)")
def test_port_active(build, rdma):
    res = build.run_cmd(["ibv_devinfo", "-d", rdma.device]).ok()
    m = expect_match(res.stdout, r"^\s*state:\s*(\S+)",
                     "ibv_devinfo should print the port state")
    expect(m.group(1), "PORT_ACTIVE", f"state of {rdma.device} port 1")
    expect(rdma.port_state(), "ACTIVE", "state in sysfs")


@points(1, "an IPv4 RoCE v2 GID exists at RDMA_GID_INDEX")
def test_roce_v2_gid(build, rdma):
    res = build.run_cmd(["ibv_devinfo", "-v", "-d", rdma.device]).ok()
    m = expect_match(res.stdout,
                     rf"GID\[\s*{rdma.gid_index}\]:\s+(\S+), RoCE v2",
                     f"ibv_devinfo -v should show GID index {rdma.gid_index} "
                     f"as RoCE v2")
    expect(m.group(1).rsplit(":", 1)[-1], rdma.ip,
           f"the address in GID {rdma.gid_index} (::ffff:IPv4)")
