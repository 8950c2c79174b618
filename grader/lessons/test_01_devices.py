"""Lesson 01: devinfo lists the RDMA devices, ports and GID tables.

The values devinfo prints must come from the verbs calls, so every value
test runs it with the grader's interposer preloaded
(grader/evidence/interpose/verbs_spy.c), which hands the program values the
grader chose at random for this run - a node GUID, a port's state, active
MTU and link layer, the GIDs and their types, a suffix to the device's
name - where sysfs, `ibv_devinfo` or a table learnt by heart would give
the real ones. What the interposer cannot change (the devices, the number
of ports, which GID slots hold a GID, the transport) is compared with
sysfs (/sys/class/infiniband/DEV/...) and `ibv_devinfo -v`, and the
interposer must have seen the calls that give it. The leak test checks
with the interposer's record that the device list was freed and every
device opened was closed.
"""

import ipaddress
import re
import secrets

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.core.harness import leak_checker, prog_prefixed
from grader.evidence.interpose import Spy, build_interposer
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


def _sysfs_state(dev, port):
    """The port's state number from sysfs ("4: ACTIVE" -> 4), or None."""
    try:
        return int(_sysfs(dev, "ports", str(port), "state").split(":")[0])
    except (OSError, ValueError):
        return None


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


def _reproduce(build, *args):
    return " ".join([str(build.path(PROG)), *args])


@pytest.fixture(scope="module")
def spy_lib(build):
    return build_interposer(build.course)


def _guid_str(v):
    h = f"{v:016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def _spied(build, spy_lib, *args, **values):
    """Run devinfo @args under the interposer with @values (Spy's):
    (Result, Spy, the command to reproduce it)."""
    spy = Spy(spy_lib, **values)
    how = f"{spy.describe()} {_reproduce(build, *args)}"
    res = build.run(PROG, *args, env=spy.env).ok(how)
    return res, spy, how


@points(3, "device line: name, node GUID, transport, ports (interposer, sysfs)")
def test_device_line(build, rdma, spy_lib):
    guid = secrets.randbits(64) | (1 << 63)
    res, spy, how = _spied(build, spy_lib, node_guid=f"{guid:016x}")
    devices = {m.group(1): m for m in DEVICE_RE.finditer(res.stdout)}
    want = sorted(p.name for p in SYSFS_IB.iterdir())
    expect(sorted(devices), want,
           f"devices listed by '{how}' (one 'device ...' line "
           f"each) vs /sys/class/infiniband/")
    if not spy.calls("get_device_list") or not spy.calls("query_device"):
        raise GradeFailure(f"{how}\nthe interposer saw no "
                           f"ibv_get_device_list() or no ibv_query_device(): "
                           f"the devices and their ports come from them")
    m = devices[rdma.device]
    expect(m.group(2), _guid_str(guid),
           f"node_guid of {rdma.device} when the verbs calls return "
           f"{_guid_str(guid)} (the interposer's; sysfs says "
           f"{_sysfs(rdma.device, 'node_guid')})")
    _, transport = _ibv_devinfo(build, rdma.device)
    expect(m.group(3), transport,
           f"transport of {rdma.device} vs ibv_devinfo's 'transport:'")
    expect(int(m.group(4)), len(_sysfs_ports(rdma.device)),
           f"ports of {rdma.device} vs the entries of "
           f"{SYSFS_IB}/{rdma.device}/ports/")


PORT_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE"}
LINK_LAYERS = {1: "InfiniBand", 2: "Ethernet"}


@points(3, "port lines: state, active MTU, link layer (interposer)")
def test_port_lines(build, rdma, spy_lib):
    dev = rdma.device
    # Never the device's own state and link layer together: a program that
    # copied them (from sysfs, say) instead of asking ibv_query_port() was
    # right by chance in 1 draw of 40 (its MTU as well; a cheat's grading
    # in make test met it).
    own = {(_sysfs_state(dev, num), _sysfs(dev, "ports", str(num), "link_layer"))
           for num in _sysfs_ports(dev)}
    state, link = secrets.choice([(s, k) for s in sorted(PORT_STATES)
                                  for k in sorted(LINK_LAYERS)
                                  if (s, LINK_LAYERS[k]) not in own])
    mtu = 1 + secrets.randbelow(5)                  # IBV_MTU_256 .. 4096
    res, spy, how = _spied(build, spy_lib, "-d", dev,
                           port=f"{state}:{mtu}:{link}")
    ports = {int(m.group(2)): m for m in PORT_RE.finditer(res.stdout)
             if m.group(1) == dev}
    expect(sorted(ports), _sysfs_ports(dev),
           f"ports listed as 'port {dev}/N ...' by '{how}'")
    told = (f"when ibv_query_port() returns state {state}, active_mtu "
            f"{mtu}, link_layer {link} (the interposer's values; sysfs and "
            f"ibv_devinfo have the real ones; reproduce: {how})")
    for num, m in sorted(ports.items()):
        expect(m.group(3), PORT_STATES[state], f"state of {dev}/{num} {told}")
        expect(int(m.group(4)), 128 << mtu,
               f"active_mtu of {dev}/{num} (bytes) {told}")
        expect(m.group(5), LINK_LAYERS[link],
               f"link_layer of {dev}/{num} {told}")


GID_TYPES = {0: "IB", 1: "RoCEv1", 2: "RoCEv2"}


def _gid_str(raw):
    h = raw.hex()
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


@points(3, "GID table: index, GID, RoCE type (interposer, sysfs)")
def test_gid_table(build, rdma, spy_lib):
    dev = rdma.device
    prefix = bytes([0xfe, 0x80]) + secrets.token_bytes(14)
    kind = secrets.choice(sorted(GID_TYPES))
    res, spy, how = _spied(build, spy_lib, "-d", dev,
                           gid=f"{prefix.hex()}:{kind}")
    for num in _sysfs_ports(dev):
        link_layer = _sysfs(dev, "ports", str(num), "link_layer")
        slots = _sysfs_gids(dev, num, link_layer)      # which hold a GID
        want = {i: (_gid_str(prefix[:14] + i.to_bytes(2, "big")),
                    GID_TYPES[kind]) for i in slots}
        got = {int(m.group(3)): (m.group(4), m.group(5))
               for m in GID_RE.finditer(res.stdout)
               if m.group(1) == dev and int(m.group(2)) == num}
        show = lambda g: "\n".join(f"gid {dev}/{num}/{i} {a} {b}"
                                   for i, (a, b) in sorted(g.items()))
        expect(show(got) or "(no gid lines)", show(want),
               f"'gid {dev}/{num}/INDEX GID TYPE' lines of '{how}': the "
               f"slots {SYSFS_IB}/{dev}/ports/{num}/gids/ fills, each with "
               f"the GID and type the interposer made ibv_query_gid_ex() "
               f"return")


@points(1, "-d DEVICE shows that device only")
def test_device_flag(build, rdma, spy_lib):
    guid = secrets.randbits(64) | (1 << 63)
    res, spy, how = _spied(build, spy_lib, "--device", rdma.device,
                           node_guid=f"{guid:016x}")
    expect([(m.group(1), m.group(2)) for m in DEVICE_RE.finditer(res.stdout)],
           [(rdma.device, _guid_str(guid))],
           f"(name, node_guid) of the 'device' lines of '{how}'")


@points(2, "unknown device: message listing the devices, exit 1")
def test_unknown_device(build, rdma, spy_lib):
    # The names listed must be the library's: ibv_get_device_name()
    # answers with a suffix of the grader's.
    suffix = "-" + secrets.token_hex(3)
    spy = Spy(spy_lib, device_suffix=suffix)
    how = f"{spy.describe()} {_reproduce(build, '-d', NO_SUCH)}"
    res = build.run(PROG, "-d", NO_SUCH, env=spy.env).fails(1, how)
    name = re.escape(rdma.device + suffix)
    expect_match(res.stderr, rf"{NO_SUCH}.*not found.*(?<![\w-]){name}\b",
                 f"stderr of '{how}' should say '{NO_SUCH}' was not found "
                 f"and list the devices by the names ibv_get_device_name() "
                 f"gives ({rdma.device}{suffix} here)")
    if DEVICE_RE.search(res.stdout):
        raise GradeFailure(f"'{_reproduce(build, '-d', NO_SUCH)}' printed "
                           f"'device' lines:\n{res.stdout}")


# The verbs providers' directory, hidden under an empty tmpfs in a mount
# namespace of the program's own (sandbox-exec --empty-dir; uncontained,
# unshare): libibverbs then finds no device, whatever the kernel has.
PROVIDERS = "/etc/libibverbs.d"


@points(1, "no device at all: clear message, exit 1")
def test_no_device(build, rdma):
    res = build.run(PROG, empty_dirs=[PROVIDERS])
    if re.search(r"^(unshare|mount|sh|sandbox-exec):", res.stderr, re.M):
        raise GradeFailure("the grader cannot hide the verbs providers on this "
                           "machine, so this test cannot run: "
                           + res.stderr.strip().splitlines()[0])
    res.fails(1, f"{PROG} with no RDMA device")
    expect_match(res.stderr, r"no RDMA devices found",
                 f"stderr of {PROG} when there is no device (reproduce: "
                 f"{res.command})")


@points(1, "bad command line: usage, exit 2")
def test_usage(build):
    for args in (["--bogus"], ["-d"], ["extra"]):
        res = build.run(PROG, *args).fails(2, f"{PROG} {' '.join(args)}")
        expect_match(res.stderr, r"^usage: ",
                     f"stderr of '{_reproduce(build, *args)}' should have a "
                     f"usage line")


@points(3, "nothing leaked: device list freed, devices closed (LeakSanitizer, interposer)")
def test_no_leaks(build, rdma, spy_lib):
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
    # What was released, counted by the interposer (a run of its own:
    # the leak checker reports what it finds alone).
    _, spy, cmd = _spied(build, spy_lib)
    counts = {k: len(spy.calls(k)) for k in
              ("get_device_list", "free_device_list", "open_device",
               "close_device")}
    expect(counts, {"get_device_list": 1, "free_device_list": 1,
                    "open_device": counts["open_device"] or 1,
                    "close_device": counts["open_device"] or 1},
           f"verbs calls of '{cmd}' (the interposer's count): the list "
           f"got once and freed once, every device opened closed")
