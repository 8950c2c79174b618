"""Lesson 01: devinfo lists the RDMA devices, ports and GID tables.

Every value devinfo prints is compared with what the kernel says in sysfs
(/sys/class/infiniband/DEV/...) and with `ibv_devinfo -v` on the same
machine, so nothing can be hard-coded.
"""

import ipaddress
import re


from grader import GradeFailure, expect, expect_match, points
from grader.core.harness import leak_checker, prog_prefixed
from grader.evidence.rxe import SYSFS_IB

PROG = "devinfo"
NO_SUCH = "nosuchdev0"

# A line may start with 'PROG: ' (harness.prog_prefixed).
DEVICE_RE = re.compile(prog_prefixed(
    r"^device (\S+) node_guid ([0-9a-f]{4}(?::[0-9a-f]{4}){3}) "
    r"transport (\S+) ports (\d+)$"), re.M)
PORT_RE = re.compile(prog_prefixed(
    r"^port (\S+)/(\d+) state (\S+) active_mtu (\d+) link_layer (\S+)$"),
    re.M)
GID_RE = re.compile(prog_prefixed(
    r"^gid (\S+)/(\d+)/(\d+) ([0-9a-f]{4}(?::[0-9a-f]{4}){7}) (\S+)$"), re.M)


def _sysfs(*parts):
    return SYSFS_IB.joinpath(*parts).read_text().strip()


def _sysfs_ports(dev):
    return sorted(int(p.name) for p in (SYSFS_IB / dev / "ports").iterdir())


def _sysfs_gids(dev, port, link_layer):
    """{index: (gid, type)} for every non-empty slot of the GID table."""
    d = SYSFS_IB / dev / "ports" / str(port)
    gids = {}
    for f in (d / "gids").iterdir():
        gid = f.read_text().strip()
        if ipaddress.IPv6Address(gid) == ipaddress.IPv6Address("::"):
            continue
        try:
            kind = (d / "gid_attrs" / "types" / f.name).read_text().strip()
        except OSError:
            kind = ""
        if link_layer != "Ethernet":
            kind = "IB"
        else:
            kind = {"RoCE v2": "RoCEv2", "IB/RoCE v1": "RoCEv1"}.get(kind, kind)
        gids[int(f.name)] = (gid, kind)
    return gids


def _ibv_devinfo(build, dev):
    """{port: {"active_mtu": int, "gids": {index: IPv6Address}}}, transport."""
    res = build.run_cmd(["ibv_devinfo", "-v", "-d", dev]).ok("ibv_devinfo -v")
    transport = re.search(r"^\s*transport:\s*(\S+)", res.stdout, re.M)
    ports = {}
    for chunk in re.split(r"^\s*port:\s*", res.stdout, flags=re.M)[1:]:
        num = int(chunk.split()[0])
        mtu = re.search(r"^\s*active_mtu:\s*(\d+)", chunk, re.M)
        gids = {int(i): ipaddress.IPv6Address(g) for i, g in
                re.findall(r"GID\[\s*(\d+)\]:\s*([0-9a-fA-F:.]+)", chunk)}
        ports[num] = {"active_mtu": int(mtu.group(1)) if mtu else None,
                      "gids": gids}
    return ports, transport.group(1) if transport else None


def _devinfo(build, *args):
    res = build.run(PROG, *args).ok(f"{PROG} {' '.join(args)}".strip())
    return res


def _reproduce(build, *args):
    return " ".join([str(build.path(PROG)), *args])


@points(3, "device line: name, node GUID, transport, ports (vs sysfs)")
def test_device_line(build, rdma):
    res = _devinfo(build)
    devices = {m.group(1): m for m in DEVICE_RE.finditer(res.stdout)}
    want = sorted(p.name for p in SYSFS_IB.iterdir())
    expect(sorted(devices), want,
           f"devices listed by '{_reproduce(build)}' (one 'device ...' line "
           f"each) vs /sys/class/infiniband/")
    m = devices[rdma.device]
    expect(m.group(2), _sysfs(rdma.device, "node_guid"),
           f"node_guid of {rdma.device} vs {SYSFS_IB}/{rdma.device}/node_guid")
    _, transport = _ibv_devinfo(build, rdma.device)
    expect(m.group(3), transport,
           f"transport of {rdma.device} vs ibv_devinfo's 'transport:'")
    expect(int(m.group(4)), len(_sysfs_ports(rdma.device)),
           f"ports of {rdma.device} vs the entries of "
           f"{SYSFS_IB}/{rdma.device}/ports/")


@points(3, "port lines: state, active MTU, link layer (vs sysfs, ibv_devinfo)")
def test_port_lines(build, rdma):
    dev = rdma.device
    res = _devinfo(build, "-d", dev)
    ports = {int(m.group(2)): m for m in PORT_RE.finditer(res.stdout)
             if m.group(1) == dev}
    expect(sorted(ports), _sysfs_ports(dev),
           f"ports listed as 'port {dev}/N ...' by '{_reproduce(build, '-d', dev)}'")
    info, _ = _ibv_devinfo(build, dev)
    for num, m in sorted(ports.items()):
        state = _sysfs(dev, "ports", str(num), "state").split(":")[-1].strip()
        expect(m.group(3), state,
               f"state of {dev}/{num} vs {SYSFS_IB}/{dev}/ports/{num}/state")
        expect(int(m.group(4)), info[num]["active_mtu"],
               f"active_mtu of {dev}/{num} (bytes) vs ibv_devinfo's active_mtu")
        expect(m.group(5), _sysfs(dev, "ports", str(num), "link_layer"),
               f"link_layer of {dev}/{num} vs "
               f"{SYSFS_IB}/{dev}/ports/{num}/link_layer")


@points(3, "GID table: index, GID, RoCE type (vs sysfs, ibv_devinfo)")
def test_gid_table(build, rdma):
    dev = rdma.device
    res = _devinfo(build, "-d", dev)
    info, _ = _ibv_devinfo(build, dev)
    for num in _sysfs_ports(dev):
        link_layer = _sysfs(dev, "ports", str(num), "link_layer")
        want = _sysfs_gids(dev, num, link_layer)
        got = {int(m.group(3)): (m.group(4), m.group(5))
               for m in GID_RE.finditer(res.stdout)
               if m.group(1) == dev and int(m.group(2)) == num}
        show = lambda g: "\n".join(f"gid {dev}/{num}/{i} {a} {b}"
                                   for i, (a, b) in sorted(g.items()))
        expect(show(got) or "(no gid lines)", show(want),
               f"'gid {dev}/{num}/INDEX GID TYPE' lines of "
               f"'{_reproduce(build, '-d', dev)}' vs "
               f"{SYSFS_IB}/{dev}/ports/{num}/gids/ and gid_attrs/types/")
        expect({i: ipaddress.IPv6Address(g) for i, (g, _) in got.items()},
               info[num]["gids"], f"GIDs of {dev}/{num} vs ibv_devinfo -v")


@points(1, "-d DEVICE shows that device only")
def test_device_flag(build, rdma):
    res = _devinfo(build, "--device", rdma.device)
    expect([m.group(1) for m in DEVICE_RE.finditer(res.stdout)], [rdma.device],
           f"'device' lines of '{_reproduce(build, '--device', rdma.device)}'")


@points(2, "unknown device: message listing the devices, exit 1")
def test_unknown_device(build, rdma):
    res = build.run(PROG, "-d", NO_SUCH).fails(1, f"{PROG} -d {NO_SUCH}")
    expect_match(res.stderr, rf"{NO_SUCH}.*not found.*\b{re.escape(rdma.device)}\b",
                 f"stderr of '{_reproduce(build, '-d', NO_SUCH)}' should say "
                 f"'{NO_SUCH}' was not found and list the devices that exist")
    if DEVICE_RE.search(res.stdout):
        raise GradeFailure(f"'{_reproduce(build, '-d', NO_SUCH)}' printed "
                           f"'device' lines:\n{res.stdout}")


# Hide the verbs providers in a private mount namespace: libibverbs then
# finds no device, whatever the kernel has. Without root (the sandbox), a user
# namespace grants the mount.
NO_PROVIDERS = ["unshare", "--mount", "sh", "-c",
                'mount -t tmpfs none /etc/libibverbs.d && exec "$0" "$@"']


@points(1, "no device at all: clear message, exit 1")
def test_no_device(build, rdma):
    wrap = NO_PROVIDERS if build.as_root else \
        NO_PROVIDERS[:1] + ["--user", "--map-root-user"] + NO_PROVIDERS[1:]
    res = build.run(PROG, wrap=wrap)
    if re.search(r"^(unshare|mount|sh):", res.stderr, re.M):
        raise GradeFailure("the grader cannot hide the verbs providers on this "
                           "machine, so this test cannot run: "
                           + res.stderr.strip().splitlines()[0])
    res.fails(1, f"{PROG} with no RDMA device")
    expect_match(res.stderr, r"no RDMA devices found",
                 f"stderr of {PROG} when there is no device (reproduce: "
                 f"{' '.join(wrap[:-3])} sh -c "
                 f"'{wrap[-1]}' {build.path(PROG)})")


@points(1, "bad command line: usage, exit 2")
def test_usage(build):
    for args in (["--bogus"], ["-d"], ["extra"]):
        res = build.run(PROG, *args).fails(2, f"{PROG} {' '.join(args)}")
        expect_match(res.stderr, r"^usage: ",
                     f"stderr of '{_reproduce(build, *args)}' should have a "
                     f"usage line")


@points(3, "nothing leaked: device list freed, devices closed (LeakSanitizer)")
def test_no_leaks(build, rdma):
    wrap, env, how = leak_checker()
    res = build.run(PROG, wrap=wrap, env=env, timeout=120)
    cmd = f"{how} {build.path(PROG)}"
    if res.returncode == 23:
        raise GradeFailure("memory leaked: ibv_get_device_list() needs its "
                           "ibv_free_device_list(), every ibv_open_device() "
                           f"its ibv_close_device()\nreproduce: {cmd}\n"
                           + res.describe(lines=30))
    res.ok(f"{PROG} under the leak checker ({cmd})")
    if not DEVICE_RE.search(res.stdout):
        raise GradeFailure(f"{PROG} printed no 'device' line under the leak "
                           f"checker\n" + res.describe())
