"""Lesson 16: roce_dump, a RoCE v2 packet dump written with libpcap, and
the questions a capture answers.

The judge of every line is tshark (Wireshark's decoder, an independent
implementation), not the grader's own decoder: the grader builds the line
the README specifies from tshark's fields for that frame.

- Synthesized captures, fresh random fields every grading: one pcap with
  packets of every RC opcode (and UC, UD, the invalidates), non-RoCE frames
  (TCP, ARP, ICMP, UDP to other ports, a non-first fragment), packets cut
  short inside their headers and opcodes without a table entry. roce_dump
  reads it once; each test checks its frames' lines.
- A real capture: where the grading runs on host A of a linked pair that
  records its link (make grade HOSTS=2), fresh traffic the grader makes
  across the pair (ibv_rc_pingpong, ib_write_bw, ib_read_bw, ib_atomic_bw
  with random sizes); elsewhere the course's recordings
  (lessons/16-on-the-wire/captures/) with every QP number, PSN, rkey,
  address and old value changed for this grading (wire.reshuffle).
- Files libpcap cannot read to the end (not a pcap, cut inside a record,
  not Ethernet): one line on stderr naming the call, exit 1, no crash.
- The questions: `roce_dump --answers FILE` (the student's answers.c,
  computing each answer from FILE's packets) on captures made for this
  grading, one per scenario (a WRITE WITH IMMEDIATE, a READ, an RNR NAK, a
  lost packet: random sizes, MTUs, QPNs, PSNs, timers, losses), against
  what tshark finds in them; never the recordings' own answers (no key:
  the captures are the evidence).

roce_dump runs without the right to start a process (its nproc limit is 0;
and in the sandbox no program may execve() another): a dump made by tshark
or a script is not the program's own.
"""

import functools
import random
import re
import secrets
import struct
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.core import harness
from grader.evidence import wire
from grader.evidence.trusted.run import REMOTE

PROG = "roce_dump"
NOPROC = {"nproc": 0}            # no fork: roce_dump cannot start tshark
A, B = "192.0.2.1", "192.0.2.2"
SUMMARY = re.compile(r"^(\d+) frames: (\d+) RoCE packets, (\d+) malformed, "
                     r"(\d+) other$")
CAPTURES = ("write", "read", "atomics", "rnr", "loss")


# ---- the lines the README specifies, from tshark's fields -----------------------

def _i(row, field):
    return wire.tshark_int(row[field])


def expected_line(row):
    """The line roce_dump must print for one frame tshark decoded: the
    README's "Output" format, with tshark's values."""
    op = _i(row, "infiniband.bth.opcode")
    name, hdrs = wire.OPCODES.get(op, (f"OPCODE_0x{op:02x}", None))
    head = (f"{row['frame.number']} {row['ip.src']} > {row['ip.dst']}")
    if row["_ws.malformed"]:
        return None                         # see malformed_line()
    line = (f"{head} {name} qp 0x{_i(row, 'infiniband.bth.destqp'):06x} "
            f"psn 0x{_i(row, 'infiniband.bth.psn'):06x}")
    if hdrs is None:
        return line
    if _i(row, "infiniband.bth.a"):
        line += " ack-req"
    if _i(row, "infiniband.bth.se"):
        line += " se"
    if "DETH" in hdrs:
        line += (f" deth qkey 0x{_i(row, 'infiniband.deth.q_key'):08x} "
                 f"srcqp 0x{_i(row, 'infiniband.deth.srcqp') & 0xffffff:06x}")
    va = row["infiniband.reth.va"]
    if "RETH" in hdrs:
        line += (f" reth va 0x{wire.tshark_int(va):016x} rkey "
                 f"0x{_i(row, 'infiniband.reth.r_key'):08x} len "
                 f"{_i(row, 'infiniband.reth.dmalen')}")
    if "AtomicETH" in hdrs:
        line += (f" atomic va 0x{wire.tshark_int(va):016x} rkey "
                 f"0x{_i(row, 'infiniband.reth.r_key'):08x}")
        swap = _i(row, "infiniband.atomiceth.swapdt")
        if op & 0x1f == 0x14:
            line += f" add {swap}"
        else:
            line += (f" compare {_i(row, 'infiniband.atomiceth.cmpdt')} "
                     f"swap {swap}")
    if "AETH" in hdrs:
        kind, val = wire.aeth_meaning(_i(row, "infiniband.aeth.syndrome"))
        if kind == "ACK":
            what = f"ACK credits {val}"
        elif kind == "RNR_NAK":
            what = f"RNR_NAK timer {val}"
        elif kind == "NAK":
            what = f"NAK {val}"
        else:
            what = f"RESERVED 0x{val:02x}"
        line += f" aeth {what} msn {_i(row, 'infiniband.aeth.msn')}"
    if "AtomicAckETH" in hdrs:
        line += f" orig {_i(row, 'infiniband.atomicacketh.origremdt')}"
    if "ImmDt" in hdrs:
        line += f" imm 0x{int(row['infiniband.immdt'].split(',')[0], 16):08x}"
    if "IETH" in hdrs:
        line += f" ieth 0x{int(row['infiniband.ieth'].split(',')[0], 16):08x}"
    size = sum(wire.HDR_SIZE[h] for h in hdrs)
    payload = (_i(row, "udp.length") - 8 - 12 - size
               - _i(row, "infiniband.bth.padcnt") - 4)
    return f"{line} payload {max(payload, 0)}"


def malformed_line(frame, p):
    """A RoCE packet cut short: the README's malformed line (the sizes are
    the lesson's: BTH, the opcode's headers, the ICRC)."""
    return f"{frame} {p.src} > {p.dst} malformed: {p.malformed}"


# ---- synthesized captures -----------------------------------------------------------

def _rand_fields(rng, opcode, qp=None):
    name, hdrs = wire.OPCODES[opcode]
    f = {"se": rng.random() < 0.3, "ackreq": rng.random() < 0.5}
    if "RETH" in hdrs:
        f["reth"] = (rng.randrange(1 << 64), rng.randrange(1 << 32),
                     rng.randrange(1 << 31))
    if "AETH" in hdrs:
        f["aeth"] = (rng.choice([rng.randrange(0x20), 0x20 | rng.randrange(32),
                                 0x60 | rng.randrange(5)]),
                     rng.randrange(1 << 24))
    if "AtomicETH" in hdrs:
        f["atomic"] = (rng.randrange(1 << 61) << 3, rng.randrange(1 << 32),
                       rng.randrange(1 << 64), rng.randrange(1 << 64))
    if "AtomicAckETH" in hdrs:
        f["orig"] = rng.randrange(1 << 64)
    if "ImmDt" in hdrs:
        f["imm"] = rng.randrange(1 << 32)
    if "IETH" in hdrs:
        f["ieth"] = rng.randrange(1 << 32)
    if "DETH" in hdrs:
        f["deth"] = (rng.randrange(1 << 32), rng.randrange(1 << 24))
    low = opcode & 0x1f
    if low in wire.SENDS | wire.WRITES | wire.READ_RESPONSES:
        n = rng.choice([0, 1, 2, 3, rng.randrange(4, 1024)])
        f["payload"] = bytes(rng.randrange(1, 256) for _ in range(n))
    return f


def _other_frames(rng):
    """Frames that are not RoCE v2: roce_dump prints nothing for them."""
    def ip(proto, body, frag=0x4000):
        hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body),
                                    rng.randrange(1 << 16), frag, 64, proto, 0,
                                    bytes([192, 0, 2, 1]),
                                    bytes([192, 0, 2, 2])))
        return wire.ether(bytes(hdr) + body)
    udp = lambda port, n: struct.pack("!HHHH", rng.randrange(1024, 65535),
                                      port, 8 + n, 0) + bytes(n)
    tcp = struct.pack("!HHIIBBHHH", 18515, rng.randrange(1024, 65535),
                      rng.randrange(1 << 32), 0, 0x50, 0x18, 512, 0, 0) + \
        bytes(rng.randrange(1, 60))
    arp = wire.ether(bytes(28), etype=0x0806)
    return [ip(6, tcp), arp, ip(17, udp(4792, 40)), ip(17, udp(53, 20)),
            ip(1, b"\x08\0\0\0" + bytes(16)),
            # a later fragment of a datagram to 4791: no UDP header in it
            ip(17, udp(4791, 40), frag=0x2000 | 185)]


def synthesize(rng):
    """[(frame bytes, category)] in a random order."""
    frames = []
    for op in (0x00, 0x01, 0x02, 0x04, 0x07, 0x08, 0x0e, 0x20, 0x24):
        frames.append((op, "bth"))
    for op in (0x06, 0x0a, 0x0b, 0x0c, 0x26, 0x2b):
        frames.append((op, "reth"))
    for op in (0x11, 0x11, 0x11, 0x11, 0x0d, 0x0f, 0x10):
        frames.append((op, "aeth"))
    for op in (0x13, 0x14, 0x12, 0x14):
        frames.append((op, "atomic"))
    for op in (0x03, 0x05, 0x09, 0x16, 0x17, 0x64, 0x65, 0x25):
        frames.append((op, "imm"))
    out = []
    for op, cat in frames * 2:
        src, dst = (A, B) if rng.random() < 0.5 else (B, A)
        out.append((wire.roce_frame(src, dst, op, rng.randrange(1 << 24),
                                    rng.randrange(1 << 24),
                                    **_rand_fields(rng, op)), cat))
    # Acknowledgements of each kind, whatever the draw above.
    for syn in (0x1f, 0x20 | rng.randrange(32), 0x60, 0x61, 0x62, 0x63):
        out.append((wire.roce_frame(B, A, 0x11, rng.randrange(1 << 24),
                                    rng.randrange(1 << 24),
                                    aeth=(syn, rng.randrange(1 << 24))),
                    "aeth"))
    for f in _other_frames(rng):
        out.append((f, "other"))
    # Cut short: inside the BTH, inside each kind of header.
    out.append((wire.roce_frame(A, B, 0x04, 1, 2, cut=rng.randrange(1, 12)),
                "malformed"))
    # (Inside the headers: a packet that lacks only its ICRC is malformed
    # to the lesson, not to tshark.)
    for op in (0x06, 0x0b, 0x0c, 0x11, 0x12, 0x13, 0x14, 0x03, 0x64):
        hdrs = 12 + sum(wire.HDR_SIZE[h] for h in wire.OPCODES[op][1])
        out.append((wire.roce_frame(A, B, op, rng.randrange(1 << 24),
                                    rng.randrange(1 << 24),
                                    cut=rng.randrange(12, hdrs),
                                    **_rand_fields(rng, op)), "malformed"))
    # Opcodes the lesson's table has no entry for: BTH fields only.
    # (An RD packet, 0x40, with its RDETH and DETH: tshark decodes them.)
    for op in (0x81, 0x40, 0x15, 0x2c, 0x7f):
        out.append((wire.roce_frame(A, B, op, rng.randrange(1 << 24),
                                    rng.randrange(1 << 24),
                                    extra=bytes(rng.randrange(16, 40))),
                    "unknown"))
    rng.shuffle(out)
    return out


class Dump:
    """roce_dump's run on one capture, with tshark's view of it."""

    def __init__(self, build, path, keep, categories=None):
        self.path = keep            # for messages: the run's copy is gone
        self.repro = build.command(PROG, str(keep))
        self.categories = categories or {}
        self.res = build.run(PROG, str(path), rlimits=NOPROC, timeout=60)
        self.lines = {}
        for line in self.res.stdout.splitlines():
            m = re.match(r"^(\d+) ", line)
            if m and not SUMMARY.match(line):
                self.lines.setdefault(int(m.group(1)), line)
        self.file = Path(path)
        self.decoded = wire.Segment(self.file.read_bytes()).decoded

    @functools.cached_property
    def rows(self):
        """tshark's decoding, once a test needs it (a program that failed
        needs none: under emulation a tshark start costs seconds)."""
        return {int(r["frame.number"]): r
                for r in wire.tshark_packets(self.file)}

    def expected(self, frame):
        p = self.decoded[frame - 1]
        row = self.rows.get(frame)
        if isinstance(p, wire.Roce) and p.malformed:
            if row is not None and not row["_ws.malformed"]:
                raise GradeFailure(f"grader: frame {frame} is malformed to "
                                   f"the grader but not to tshark")
            return malformed_line(frame, p)
        if row is None:
            return None
        return expected_line(row)

    def check(self, cats, what):
        self.res.ok(f"roce_dump on {what}")
        frames = sorted(f for f, c in self.categories.items() if c in cats) \
            if cats else sorted(self.rows)
        if not frames:
            raise GradeFailure(f"grader: no frames of {cats} in {self.path}")
        for f in frames:
            want = self.expected(f)
            got = self.lines.get(f)
            if got != want:
                raise GradeFailure(
                    f"{what}, frame {f} of {self.path} (tshark -r "
                    f"{self.path} -V -Y frame.number=={f})\n"
                    f"  expected: {want if want else '(no line: not a RoCE v2 packet)'}\n"
                    f"  got:      {got if got else '(no line)'}\n"
                    f"{_payload_only(want, got)}"
                    f"  reproduce: {self.repro}")


def _payload_only(want, got):
    """A line for a failure where the payload length is all that differs
    (which way it is off tells a tail counted from one subtracted twice)."""
    w, g = (re.fullmatch(r"(.*) payload (\d+)", x or "") for x in (want, got))
    if not (w and g and w[1] == g[1]):
        return ""
    d = int(g[2]) - int(w[2])
    return (f"  payload:  {abs(d)} byte{'s' * (abs(d) != 1)} "
            f"{'more' if d > 0 else 'fewer'} than tshark's, every other "
            f"field as tshark's\n")


def _keep(build, request, name, blob):
    """A capture for the program: in the test's scratch directory (the one
    place the sandboxed program has of its own), and a copy next to the
    transcripts for the student (the scratch directory goes with the
    test). Returns (the path the program reads, the copy's path)."""
    run = Path(build.sandbox.scratch) / name
    run.write_bytes(blob)
    run.chmod(0o644)
    keep = Path(request.config.getoption("transcripts")) / "16-on-the-wire"
    try:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / name).write_bytes(blob)
        keep = keep / name
    except OSError:
        keep = run
    return run, keep


@pytest.fixture(scope="module")
def synth(build, request):
    rng = random.Random(secrets.randbits(64))
    frames = synthesize(rng)
    blob = wire.pcap_header() + b"".join(
        wire.pcap_record(f, 1000 + i / 1000) for i, (f, _) in enumerate(frames))
    run, keep = _keep(build, request, "synthesized.pcap", blob)
    return Dump(build, run, keep,
                {i + 1: c for i, (_, c) in enumerate(frames)})


@points(1, "roce_dump -h, no FILE, an unknown option: usage and exit codes")
def test_usage(build):
    res = build.run(PROG, "-h")
    res.ok("roce_dump -h")
    expect_match(res.stdout, r"^usage: \S*roce_dump FILE\.pcap \| --answers "
                 r"FILE\.pcap$",
                 "roce_dump -h stdout")
    build.run(PROG).fails(2, "roce_dump without FILE")
    bad = build.run(PROG, "--bogus", "x.pcap")
    bad.fails(2, "roce_dump --bogus x.pcap")
    expect_match(bad.stderr, r"unknown option '--bogus'", "stderr")


@points(3, "the BTH: opcode name, destination QP, PSN, ack-req and se of every packet")
def test_bth(synth):
    synth.check({"bth"}, "packets with no extension header")


@points(3, "the RETH of WRITEs and READ requests: address, rkey, length")
def test_reth(synth):
    synth.check({"reth"}, "RDMA WRITE FIRST/ONLY and READ REQUEST packets")


@points(3, "the AETH: ACK credits, RNR NAK timer, NAK codes, MSN")
def test_aeth(synth):
    synth.check({"aeth"}, "ACKs, NAKs and READ responses")


@points(2, "atomics: AtomicETH and the ATOMIC ACKNOWLEDGE's old value")
def test_atomic(synth):
    synth.check({"atomic"}, "FETCH_ADD, COMPARE_SWAP, ATOMIC_ACKNOWLEDGE")


@points(2, "immediate data, IETH, DETH, and payload lengths past the pad")
def test_imm_and_payload(synth):
    synth.check({"imm"}, "WITH_IMMEDIATE, WITH_INVALIDATE and UD packets")


@points(2, "frames that are not RoCE v2: no line, counted in the summary")
def test_other_frames(synth):
    synth.check({"other"}, "TCP, ARP, ICMP, other UDP, a later fragment")
    cats = list(synth.categories.values())
    m = expect_match(synth.res.stdout, SUMMARY.pattern, "roce_dump's last line")
    other = cats.count("other")
    malformed = cats.count("malformed")
    expect(tuple(map(int, m.groups())),
           (len(cats), len(cats) - other - malformed, malformed, other),
           "the summary's (frames, RoCE packets, malformed, other)")


@points(3, "packets cut short and unknown opcodes: a clear line each, no crash")
def test_malformed(synth):
    synth.check({"malformed", "unknown"},
                "packets shorter than their headers, opcodes outside the table")


def _bad_file(build, request, name, blob):
    run, keep = _keep(build, request, name, blob)
    return build.run(PROG, str(run), rlimits=NOPROC, timeout=30), keep


@points(2, "files libpcap cannot read to the end: one line, exit 1")
def test_bad_files(build, request):
    rng = random.Random(secrets.randbits(64))
    frames = [wire.roce_frame(A, B, 0x04, rng.randrange(1 << 24),
                              rng.randrange(1 << 24), payload=bytes(100))
              for _ in range(3)]
    whole = wire.pcap_header() + b"".join(wire.pcap_record(f) for f in frames)
    cut = whole[:len(whole) - rng.randrange(10, 60)]
    res, path = _bad_file(build, request, "cut.pcap", cut)
    res.fails(1, f"roce_dump on {path} (its last record cut short)")
    expect_match(res.stderr, r"^pcap_next_ex failed: .*truncated",
                 "stderr (libpcap's reason, from pcap_geterr())")
    expect(len([x for x in res.stdout.splitlines() if " RC_SEND_ONLY " in x]),
           2, "lines printed for the two whole records before the cut")
    res, path = _bad_file(build, request, "text.pcap",
                          b"this is not a capture\n" * 3)
    res.fails(1, f"roce_dump on {path} (a text file)")
    expect_match(res.stderr, r"^pcap_open_offline failed: \S",
                 "stderr (libpcap's errbuf)")
    raw = wire.pcap_header(linktype=101) + wire.pcap_record(frames[0][14:])
    res, path = _bad_file(build, request, "raw-ip.pcap", raw)
    res.fails(1, f"roce_dump on {path} (raw IP packets, link type 101: it is not Ethernet)")
    expect_match(res.stderr, r"link type \d+ \(RAW\) is not Ethernet$",
                 "stderr")


# ---- real captures ----------------------------------------------------------------

def recorded(lesson):
    return {n: lesson.dir / "captures" / f"{n}.pcap" for n in CAPTURES}


def _fresh(rdma, rng):
    """On host A of a capturing pair: traffic of the grader's own across
    the link, random sizes (servers on host B through remote.py, clients
    here); what crossed, as a pcap."""
    cap = wire.capture()
    g = str(rdma.gid_index)
    waiting = r"Waiting for client"
    runs = [
        (["ibv_rc_pingpong", "-g", g, "-s", str(rng.randrange(100, 5000)),
          "-n", str(rng.randrange(3, 8))], r"local address"),
        (["ib_write_bw", "-x", g, "-s", str(rng.randrange(1000, 9000)),
          "-n", "5"], waiting),
        (["ib_read_bw", "-x", g, "-s", str(rng.randrange(1000, 9000)),
          "-n", "5"], waiting),
        (["ib_atomic_bw", "-x", g, "-n", "5"], waiting),
    ]
    mark = cap.mark()
    for cmd, ready in runs:
        # stdbuf: B's output goes to a file, and the readiness line would
        # wait in stdio's buffer until the server's end.
        with harness.start([sys.executable, str(REMOTE), rdma.peer_jobs,
                            "--", "stdbuf", "-oL", *cmd], ready=ready,
                           timeout=60) as server:
            for _ in range(10):
                # The line comes just before the server listens.
                res = harness.run([*cmd, rdma.peer_ip], timeout=60)
                if res.returncode == 0 or not re.search(
                        r"(?i)couldn't connect|unable to", res.stdout +
                        res.stderr):
                    break
                time.sleep(1)
            if not _report_lost(res):
                res.ok(" ".join(cmd))
            server.wait(timeout=30)
    return cap.since(mark, record=False).blob


def _report_lost(res):
    """True when a perftest client sent all its traffic and then could not
    print its report: perftest calibrates its cycle counter against
    gettimeofday() after the run, and gives up (exit 1, "Correlation
    coefficient r^2: 0.53 < 0.9", "Can't produce a report") when the two
    clocks disagree, as on a loaded TCG guest (a fresh-clone make test).
    The run is over by then (the report follows it; a failed run says
    "Failed to complete run_iter_bw" instead); the capture is what this
    test needs, not the numbers."""
    return (res.returncode == 1 and not res.timed_out
            and "Can't produce a report" in res.stderr
            and re.search(r"(?m)^\s*#bytes\s", res.stdout) is not None)


@pytest.fixture(scope="module")
def real(build, lesson, request):
    rng = random.Random(secrets.randbits(64))
    if wire.Capture.from_env():
        from grader.evidence.rxe import Rdma
        blob, what = _fresh(Rdma(), rng), "fresh traffic across the pair"
    else:
        blob = wire.pcap_header()
        for path in recorded(lesson).values():
            blob += path.read_bytes()[wire.FILE_HEADER:]
        blob = wire.reshuffle(blob, rng)
        what = ("the course's recordings, every QPN, PSN, rkey, address "
                "and old value changed for this grading")
    run, keep = _keep(build, request, "real.pcap", blob)
    dump = Dump(build, run, keep)
    dump.what = what
    return dump


@points(4, "a real capture: every line as tshark decodes it")
def test_real_capture(real):
    real.res.ok(f"roce_dump on a real capture ({real.what})")
    if len(real.rows) < 50:
        raise GradeFailure(f"grader: the real capture has {len(real.rows)} "
                           f"RoCE packets")
    real.check(None, f"a real capture ({real.what})")


# ---- the questions ----------------------------------------------------------------
#
# Asked of captures made for this grading: one scenario per group of
# questions (a WRITE WITH IMMEDIATE, a READ, an RNR NAK, a lost packet),
# synthesized with the grader's encoder (wire.roce_frame: byte-exact RoCE v2
# with its ICRC) from fresh random sizes, path MTUs, QPNs, PSNs, keys,
# timers and losses, and answered by the student's own code: `roce_dump
# --answers FILE` (answers.c) on each. The truth is tshark's decoding of
# the same files (_want_*). A draw whose answers to a group equal the
# course recordings' (what tshark finds in captures/) is drawn again: the
# recordings' answers, copied, are wrong here every time.

SCENARIOS = ("write", "read", "rnr", "loss")
MTUS = (256, 512, 1024, 2048, 4096)


def _rand_payload(rng, n):
    return rng.randbytes(n)


def _message(rng, mtu, size):
    """A message of `size` bytes in packets of the path MTU: the payloads."""
    n = max(1, -(-size // mtu))
    return [_rand_payload(rng, min(mtu, size - k * mtu)) for k in range(n)]


def _scenario_write(rng):
    """One RDMA WRITE WITH IMMEDIATE from A to B; B acknowledges after the
    last packet, and after 0-2 earlier ones the requester asked for it."""
    mtu = rng.choice(MTUS)
    parts = _message(rng, mtu, rng.randrange(1, 24 * mtu))
    qpa, qpb, psn = (rng.randrange(1, 1 << 24) for _ in range(3))
    reth = (rng.randrange(1 << 64), rng.randrange(1 << 32),
            sum(map(len, parts)))
    imm = rng.randrange(1 << 32)
    acked = set(rng.sample(range(len(parts) - 1),
                           min(len(parts) - 1, rng.randrange(3))))
    acked.add(len(parts) - 1)
    out = [wire.ether(bytes(28), etype=0x0806)]
    for k, data in enumerate(parts):
        if len(parts) == 1:
            op, f = 0x0b, {"reth": reth, "imm": imm}
        elif k == 0:
            op, f = 0x06, {"reth": reth}
        elif k + 1 < len(parts):
            op, f = 0x07, {}
        else:
            op, f = 0x09, {"imm": imm}
        out.append(wire.roce_frame(A, B, op, qpb, psn + k, payload=data,
                                   ackreq=k in acked, **f))
        if k in acked:
            out.append(wire.roce_frame(
                B, A, 0x11, qpa, psn + k,
                aeth=(0x1f, int(k + 1 == len(parts)))))
    return out


def _scenario_read(rng):
    """One RDMA READ from A; B's responses, the first and last with an
    AETH; the requester acknowledges nothing."""
    mtu = rng.choice(MTUS)
    parts = _message(rng, mtu, rng.randrange(1, 24 * mtu))
    qpa, qpb, psn = (rng.randrange(1, 1 << 24) for _ in range(3))
    reth = (rng.randrange(1 << 64), rng.randrange(1 << 32),
            sum(map(len, parts)))
    out = [wire.ether(bytes(28), etype=0x0806),
           wire.roce_frame(A, B, 0x0c, qpb, psn, ackreq=True, reth=reth)]
    for k, data in enumerate(parts):
        if len(parts) == 1:
            op = 0x10
        else:
            op = 0x0d if k == 0 else 0x0f if k + 1 == len(parts) else 0x0e
        f = {} if op == 0x0e else {"aeth": (0x1f, 1)}
        out.append(wire.roce_frame(B, A, op, qpa, psn + k, payload=data,
                                   **f))
    return out


def _scenario_rnr(rng):
    """SENDs from A, each acknowledged, until B has no receive for one: an
    RNR NAK (a random timer) for its PSN, and A sends it again."""
    qpa, qpb, psn = (rng.randrange(1, 1 << 24) for _ in range(3))
    size = rng.randrange(1, 1024)
    ok, msn = rng.randrange(1, 6), 0
    out = []
    for k in range(ok + 1 + rng.randrange(3)):
        data = _rand_payload(rng, size)
        out.append(wire.roce_frame(A, B, 0x04, qpb, psn + k, payload=data,
                                   ackreq=True))
        if k == ok:
            timer = rng.randrange(1, 32)
            out.append(wire.roce_frame(B, A, 0x11, qpa, psn + k,
                                       aeth=(0x20 | timer, msn)))
            out.append(wire.roce_frame(A, B, 0x04, qpb, psn + k,
                                       payload=data, ackreq=True))
        msn += 1
        out.append(wire.roce_frame(B, A, 0x11, qpa, psn + k,
                                   aeth=(0x1f, msn)))
    return out


def _scenario_loss(rng):
    """SENDs of several packets from A; one packet lost (not in the
    capture): B answers the next one with a PSN sequence error NAK for the
    lost PSN and A sends from there again. Half the time A's timer ran out
    first and it sent an earlier packet again before the NAK."""
    mtu = rng.choice(MTUS[:3])
    qpa, qpb, psn = (rng.randrange(1, 1 << 24) for _ in range(3))
    pkts = []                               # (opcode, payload)
    for _ in range(rng.randrange(2, 5)):
        parts = _message(rng, mtu, rng.randrange(1, 4 * mtu))
        for k, data in enumerate(parts):
            op = (0x04 if len(parts) == 1 else 0x00 if k == 0 else
                  0x02 if k + 1 == len(parts) else 0x01)
            pkts.append((op, data))
    while len(pkts) < 3:
        pkts.append((0x04, _rand_payload(rng, rng.randrange(1, mtu))))
    lost = rng.randrange(1, len(pkts) - 1)
    frame = lambda k, ackreq=False: wire.roce_frame(   # noqa: E731
        A, B, pkts[k][0], qpb, psn + k, payload=pkts[k][1], ackreq=ackreq)
    out = [frame(k) for k in range(lost)]
    if rng.random() < 0.5:
        out.append(frame(rng.randrange(lost), True))     # the timer's resend
    out.append(frame(lost + 1))
    out.append(wire.roce_frame(B, A, 0x11, qpa, psn + lost,
                               aeth=(0x60, rng.randrange(1, 8))))
    out += [frame(k, k + 1 == len(pkts)) for k in range(lost, len(pkts))]
    out.append(wire.roce_frame(B, A, 0x11, qpa, psn + len(pkts) - 1,
                               aeth=(0x1f, rng.randrange(8, 16))))
    return out


_DRAW = {"write": _scenario_write, "read": _scenario_read,
         "rnr": _scenario_rnr, "loss": _scenario_loss}
WANT = {"write": lambda rows: _want_write(rows),
        "read": lambda rows: _want_read(rows),
        "rnr": lambda rows: _want_rnr(rows),
        "loss": lambda rows: _want_loss(rows)}


def _pcap(frames):
    return wire.pcap_header() + b"".join(
        wire.pcap_record(f, 1000 + i / 1000) for i, f in enumerate(frames))


def _tshark_each(blobs):
    """tshark's rows of each capture {name: bytes}, in one tshark run."""
    blob, ranges, first = wire.pcap_header(), {}, 1
    for name, data in blobs.items():
        n = len(wire.read_pcap(data)[1])
        blob += data[wire.FILE_HEADER:]
        ranges[name] = range(first, first + n)
        first += n
    with tempfile.TemporaryDirectory() as tmp:
        both = Path(tmp) / "captures.pcap"
        both.write_bytes(blob)
        rows = wire.tshark_packets(both)
    return {name: [r for r in rows if int(r["frame.number"]) in frames]
            for name, frames in ranges.items()}


def recorded_answers(lesson):
    """What tshark finds in the course's recordings, per scenario."""
    rows = _tshark_each({n: recorded(lesson)[n].read_bytes()
                         for n in SCENARIOS})
    return {n: WANT[n](rows[n]) for n in SCENARIOS}


@pytest.fixture(scope="module")
def questions(build, lesson, request):
    """Fresh captures, one per scenario, each answered by the program:
    {name: (its answers {question: answer}, the Result, the capture's
    path, tshark's answers)}."""
    rng = random.Random(secrets.randbits(64))
    old = recorded_answers(lesson)
    blobs, want = {}, {}
    todo = list(SCENARIOS)
    for _ in range(20):
        fresh = {n: _pcap(_DRAW[n](rng)) for n in todo}
        rows = _tshark_each(fresh)
        for n in todo:
            w = WANT[n](rows[n])
            if w != old[n]:
                blobs[n], want[n] = fresh[n], w
        todo = [n for n in SCENARIOS if n not in blobs]
        if not todo:
            break
    else:
        raise GradeFailure(f"grader: no fresh {todo} capture whose answers "
                           f"differ from the recordings' in 20 draws")
    out = {}
    for n in SCENARIOS:
        run, keep = _keep(build, request, f"{n}-fresh.pcap", blobs[n])
        res = build.run(PROG, "--answers", str(run), rlimits=NOPROC,
                        timeout=60)
        got = {}
        for line in res.stdout.splitlines():
            k, _, v = line.partition(":")
            got[k.strip()] = v.strip()
        out[n] = (got, res, keep, want[n])
    return out


def _norm(v):
    v = str(v).strip()
    try:
        return int(v, 0)
    except ValueError:
        return v.upper()


def _check(questions, name):
    """The program's answers about the fresh `name` capture against
    tshark's."""
    got, res, keep, want = questions[name]
    repro = f"roce_dump --answers {keep}"
    res.ok(f"roce_dump --answers on a capture made for this grading "
           f"({keep})")
    for q in want:
        if q not in got:
            raise GradeFailure(f"roce_dump --answers has no line '{q}: ...' "
                               f"\n  reproduce: {repro}")
        if got[q] == "?":
            raise GradeFailure(
                f"question {q} (lessons/16-on-the-wire/README.md, "
                f"\"Questions\") about {keep}\n  expected: what the capture "
                f"shows (answers.c computes it from the packets)\n"
                f"  got:      ?")
    for q, truth_value in want.items():
        if _norm(got[q]) != _norm(truth_value):
            raise GradeFailure(
                f"question {q} (lessons/16-on-the-wire/README.md, "
                f"\"Questions\") about a capture made for this grading\n"
                f"  expected: {truth_value} (what tshark finds in it)\n"
                f"  got:      {got[q]}\n  reproduce: {repro} (tshark -r "
                f"{keep} -V -Y infiniband shows every header)")


def _ops(rows, src=None):
    return [(_i(r, "infiniband.bth.opcode"), r) for r in rows
            if src is None or r["ip.src"] == src]


def _want_write(rows):
    writes = [(o, r) for o, r in _ops(rows) if o < 0x20 and
              o & 0x1f in wire.WRITES]
    writer = writes[0][1]["ip.src"]
    acks = [r for o, r in _ops(rows) if o == 0x11 and r["ip.src"] != writer]
    return {
        "write-packets": len(writes),
        "write-acks": len(acks),
        "rkey-opcode": wire.OPCODES[next(o for o, r in writes
                                         if r["infiniband.reth.r_key"])][0],
        "imm-opcode": wire.OPCODES[next(o for o, r in writes
                                        if r["infiniband.immdt"])][0]}


def _want_read(rows):
    req = next(r for o, r in _ops(rows) if o == 0x0c)
    resp = [r for o, r in _ops(rows) if o < 0x20 and
            o & 0x1f in wire.READ_RESPONSES]
    acks = [r for o, r in _ops(rows, req["ip.src"]) if o == 0x11]
    return {"read-responses": len(resp), "read-acks": len(acks)}


def _want_rnr(rows):
    nak = next(r for o, r in _ops(rows) if r["infiniband.aeth.syndrome"] and
               _i(r, "infiniband.aeth.syndrome") >> 5 == 1)
    return {
        "rnr-syndrome": f"0x{_i(nak, 'infiniband.aeth.syndrome'):02x}",
        "rnr-resent-psn": f"0x{_i(nak, 'infiniband.bth.psn'):06x}"}


def _want_loss(rows):
    nak = next(r for o, r in _ops(rows) if r["infiniband.aeth.syndrome"] and
               _i(r, "infiniband.aeth.syndrome") >> 5 == 3)
    seen, twice = set(), None
    for o, r in _ops(rows):
        if o in (0x11, 0x12):
            continue
        key = (r["ip.src"], r["infiniband.bth.destqp"],
               _i(r, "infiniband.bth.psn"))
        if key in seen:
            twice = key[2]
            break
        seen.add(key)
    return {
        "nak-code": wire.aeth_meaning(_i(nak, "infiniband.aeth.syndrome"))[1],
        "resent-psn": f"0x{twice:06x}"}


@points(2, "questions: a WRITE WITH IMMEDIATE, packet by packet")
def test_answers_write(questions):
    _check(questions, "write")


@points(2, "questions: a READ, and who acknowledges it")
def test_answers_read(questions):
    _check(questions, "read")


@points(2, "questions: an RNR NAK and what follows it")
def test_answers_rnr(questions):
    _check(questions, "rnr")


@points(2, "questions: loss - the NAK and the first PSN sent twice")
def test_answers_loss(questions):
    _check(questions, "loss")
