"""The wire evidence checks itself (grader/evidence/wire.py, the lessons'
test_NN_*_wire.py).

- The grader's own RoCEv2 decoder agrees with tshark's, field by field, on
  packets of every opcode it knows with random fields, on malformed ones,
  and on a real capture of a linked pair.
- On a linked pair (make grade HOSTS=2's set-up: the programs on host A,
  the reference peers on host B, the link recorded), in one boot: the
  solutions earn every wire test and lesson 16's real capture (then fresh
  traffic across the pair); each cheat of build/selftest-cheats/ fails
  exactly its WIRE_EXPECTED; each cheat only the wire catches
  (build/selftest-cheats-wire/, WIRE_ONLY) fails exactly those tests and
  passes the lesson's reference-peer tests.

The pair test runs here, on the host, and boots its own two VMs (the wire
tests exist nowhere else: grader/lessons/conftest.py); make test runs it
beside the micro-VM parts (run-all.sh part 2).
"""

import random
import shlex
import subprocess
import sys

import pytest

from conftest import COURSE

sys.path.insert(0, str(COURSE))
from grader.evidence import wire  # noqa: E402

A, B = "192.0.2.1", "192.0.2.2"
OUT = COURSE / "build" / "selftest-wire"


def random_packet(rng, opcode):
    """One frame of `opcode` with random fields (and what went in)."""
    name, hdrs = wire.OPCODES.get(opcode, (None, ()))
    f = {"destqp": rng.randrange(1 << 24), "psn": rng.randrange(1 << 24),
         "se": rng.random() < 0.3, "ackreq": rng.random() < 0.5}
    if "RETH" in hdrs:
        f["reth"] = (rng.randrange(1 << 64), rng.randrange(1 << 32),
                     rng.randrange(1 << 20))
    if "AETH" in hdrs:
        f["aeth"] = (rng.choice([0x1f, 0x00, 0x2c, 0x21, 0x60, 0x62]),
                     rng.randrange(1 << 24))
    if "AtomicETH" in hdrs:
        f["atomic"] = (rng.randrange(1 << 64) & ~7, rng.randrange(1 << 32),
                       rng.randrange(1 << 64), rng.randrange(1 << 64))
    if "AtomicAckETH" in hdrs:
        f["orig"] = rng.randrange(1 << 64)
    if "ImmDt" in hdrs:
        f["imm"] = rng.randrange(1 << 32)
    if "IETH" in hdrs:
        f["ieth"] = rng.randrange(1 << 32)
    if "DETH" in hdrs:
        f["deth"] = (rng.randrange(1 << 32), rng.randrange(1 << 24))
    carries = (opcode & 0x1f) in (wire.SENDS | wire.WRITES |
                                  wire.READ_RESPONSES) and opcode < 0x80
    if carries:
        f["payload"] = bytes(rng.randrange(256)
                             for _ in range(rng.randrange(0, 300)))
    src, dst = (A, B) if rng.random() < 0.5 else (B, A)
    return wire.roce_frame(src, dst, opcode, **f), f


def compare(ours, theirs):
    """Lines where the decoder and tshark disagree on one packet."""
    bad = []

    def same(what, mine, field, conv=wire.tshark_int):
        got = conv(theirs[field])
        if mine != got:
            bad.append(f"frame {ours.frame} {ours.name} {what}: ours "
                       f"{mine!r}, tshark {got!r}")

    same("opcode", ours.opcode, "infiniband.bth.opcode")
    same("destqp", ours.destqp, "infiniband.bth.destqp")
    same("psn", ours.psn, "infiniband.bth.psn")
    same("se", int(ours.se), "infiniband.bth.se")
    same("ackreq", int(ours.ackreq), "infiniband.bth.a")
    malformed = bool(theirs["_ws.malformed"])
    if bool(ours.malformed) != malformed:
        bad.append(f"frame {ours.frame}: malformed ours {ours.malformed!r}, "
                   f"tshark {theirs['_ws.malformed']!r}")
    if ours.malformed:
        return bad
    va = ours.reth or ours.atomic
    same("va/rkey", (va[0], va[1]) if va else None, "infiniband.reth.va",
         lambda _: (wire.tshark_int(theirs["infiniband.reth.va"]),
                    wire.tshark_int(theirs["infiniband.reth.r_key"]))
         if theirs["infiniband.reth.va"] else None)
    same("dmalen", ours.reth[2] if ours.reth else None,
         "infiniband.reth.dmalen")
    same("aeth", ours.aeth, "infiniband.aeth.syndrome",
         lambda t: (wire.tshark_int(t),
                    wire.tshark_int(theirs["infiniband.aeth.msn"]))
         if t else None)
    same("atomic", ours.atomic[2:] if ours.atomic else None,
         "infiniband.atomiceth.swapdt",
         lambda t: (wire.tshark_int(t),
                    wire.tshark_int(theirs["infiniband.atomiceth.cmpdt"]))
         if t else None)
    same("orig", ours.orig, "infiniband.atomicacketh.origremdt")
    same("imm", ours.imm, "infiniband.immdt",
         lambda t: int(t.split(",")[0], 16) if t else None)
    return bad


def agree(path, at_least):
    """Decode `path` both ways; fail on any difference."""
    seg = wire.Segment(path.read_bytes())
    ours = seg.roce
    theirs = wire.tshark_packets(path)
    assert len(ours) >= at_least
    assert [p.frame for p in ours] == [int(t["frame.number"]) for t in theirs]
    bad = [line for o, t in zip(ours, theirs) for line in compare(o, t)]
    assert not bad, "\n".join(bad[:20])


def test_decoder_agrees_with_tshark_on_every_opcode(tmp_path):
    rng = random.Random()
    frames = []
    for opcode in sorted(wire.OPCODES) * 3:
        frames.append(random_packet(rng, opcode)[0])
    # Cut short: each opcode's headers go past the end of the packet.
    for opcode in (0x06, 0x0b, 0x0c, 0x11, 0x12, 0x13, 0x14):
        need = 12 + sum(wire.HDR_SIZE[h] for h in wire.OPCODES[opcode][1])
        frames.append(wire.roce_frame(A, B, opcode, 1, 2, reth=(1, 2, 3),
                                      aeth=(0, 1), atomic=(8, 1, 1, 0),
                                      orig=5, imm=7,
                                      cut=rng.randrange(12, need)))
    path = tmp_path / "every.pcap"
    wire.write_pcap(path, frames)
    agree(path, len(frames))


# Loading a lesson's file here meets its @points marks (registered by the
# grading plugin, not in the self-check).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")
def test_a_perftest_run_whose_report_failed_is_traffic_all_the_same():
    """Lesson 16's fresh capture takes a perftest client's exit 1 when its
    clock calibration, after the run, failed (CI: ib_write_bw on a loaded
    guest); any other failure still fails."""
    import importlib.util
    from grader.core.harness import Result
    spec = importlib.util.spec_from_file_location(
        "lesson16", COURSE / "grader/lessons/test_16_on_the_wire.py")
    lesson16 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lesson16)
    table = (" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]"
             "   MsgRate[Mpps]\n")
    lost = ("Correlation coefficient r^2: 0.526596 < 0.9\n"
            "Can't produce a report\n")

    def res(code, out, err, timed_out=False):
        return Result(["ib_write_bw"], code, out, err, 1.0, timed_out, 60)
    assert lesson16._report_lost(res(1, table, lost))
    assert not lesson16._report_lost(res(1, table, lost, timed_out=True))
    assert not lesson16._report_lost(res(1, "", lost))
    assert not lesson16._report_lost(res(
        1, table, "Failed to complete run_iter_bw function successfully\n"))
    assert not lesson16._report_lost(res(0, table, ""))


def test_pattern_runs():
    from grader.evidence.trusted import patterns
    assert wire.pattern_run(b"\0" * 10 + patterns.lesson06(300) + b"x") == (10, 300)
    assert wire.pattern_run(patterns.msg(3, "c", 40)) == (0, 40)
    assert wire.pattern_run(bytes(range(1, 20)) * 3) is None
    assert wire.pattern_run(b"\0" * 100) is None


def _read(psn, data, damage=None, mtu=1024):
    """The frames of one RDMA READ of `data` (B reads from A) at `psn`:
    the request, then A's responses; damage=(k, how) spoils response k:
    'cut' ends its frame early, 'flip' changes a payload byte (its ICRC is
    then wrong), 'short' makes it a whole MIDDLE of 210 bytes. The requester asks again from response k (a READ for the
    rest), and A answers that too."""
    va, rkey, qpa, qpb = 0x7f0000001000, 0x1234, 0x11, 0x22
    frames = [wire.roce_frame(B, A, 0x0c, qpa, psn, ackreq=True,
                              reth=(va, rkey, len(data)))]

    def responses(first_psn, at):
        chunks = [data[i:i + mtu] for i in range(at, len(data), mtu)]
        for k, chunk in enumerate(chunks):
            op = (0x10 if len(chunks) == 1 else 0x0d if k == 0 else
                  0x0f if k == len(chunks) - 1 else 0x0e)
            yield wire.roce_frame(A, B, op, qpb, first_psn + k, payload=chunk,
                                  aeth=(0x1f, 1))

    for k, frame in enumerate(responses(psn, 0)):
        if damage and k == damage[0]:
            if damage[1] == "cut":
                frame = frame[:len(frame) - 800]
            elif damage[1] == "short":          # whole, but less than the MTU
                frame = wire.roce_frame(A, B, 0x0e, qpb, psn + k,
                                        payload=data[k * mtu:k * mtu + 210])
            else:
                frame = frame[:200] + bytes([frame[200] ^ 1]) + frame[201:]
            frames.append(frame)
            break
        frames.append(frame)
    if damage:
        k = damage[0]
        frames.append(wire.roce_frame(B, A, 0x0c, qpa, psn + k, ackreq=True,
                                      reth=(va + k * mtu, rkey,
                                            len(data) - k * mtu)))
        frames += list(responses(psn + k, k * mtu))
    return frames


@pytest.mark.parametrize("how", ["cut", "flip", "short"])
def test_a_damaged_response_gives_way_to_the_one_sent_again(tmp_path, how):
    """A READ response that did not arrive whole (its requester dropped it
    and asked again for the rest: CI's run 21 on lesson 07) is not the one
    the message carried; the response to the second request is."""
    rng = random.Random(7)
    data = bytes(rng.randrange(256) for _ in range(5000))
    path = tmp_path / "read.pcap"
    wire.write_pcap(path, _read(100, data, damage=(2, how)))
    seg = wire.Segment(path.read_bytes())
    assert [p.intact for p in seg.packets(src=A)].count(False) == (
        how != "short")
    msgs = wire.requests(seg, A, B)
    assert wire.kinds(msgs) == ["RDMA_READ_RESPONSE"]
    assert msgs[0].data == data
    assert [p.psn for p in msgs[0].packets] == [100, 101, 102, 103, 104]
    assert len(wire.requests(seg, B, A)) == 1          # the retry is left out


def test_responses_lost_before_the_last_join_their_message(tmp_path):
    """READ responses lost on the way while the LAST arrived (CI's run 29
    on lesson 07: 96 full responses, then the LAST, then the requester
    asked again for the rest): the ones sent again join the message in
    PSN order, before its LAST."""
    rng = random.Random(29)
    mtu, psn, qpb = 1024, (1 << 24) - 50, 0x22     # (PSNs wrap past 2^24)
    data = bytes(rng.randrange(256) for _ in range(12 * mtu - 274))
    chunks = [data[i:i + mtu] for i in range(0, len(data), mtu)]
    op = lambda k: 0x0d if k == 0 else 0x0f if k == len(chunks) - 1 else 0x0e
    frame = lambda k, o=None: wire.roce_frame(  # noqa: E731
        A, B, o or op(k), qpb, psn + k, payload=chunks[k], aeth=(0x1f, 1))
    va, rkey = 0x7f0000001000, 0x1234
    frames = [wire.roce_frame(B, A, 0x0c, 0x11, psn, ackreq=True,
                              reth=(va, rkey, len(data)))]
    frames += [frame(k) for k in range(8)] + [frame(11)]   # 8-10 lost
    frames.append(wire.roce_frame(B, A, 0x0c, 0x11, psn + 8, ackreq=True,
                                  reth=(va + 8 * mtu, rkey,
                                        len(data) - 8 * mtu)))
    frames += [frame(k, 0x0e) for k in (8, 9, 10)] + [frame(11)]
    # ... and another READ's first response before them (a later PSN).
    nxt = wire.roce_frame(A, B, 0x0d, qpb, psn + 12, payload=b"next",
                          aeth=(0x1f, 2))
    frames.insert(-4, nxt)
    path = tmp_path / "read.pcap"
    wire.write_pcap(path, frames)
    msgs = wire.requests(wire.Segment(path.read_bytes()), A, B)
    assert wire.kinds(msgs) == ["RDMA_READ_RESPONSE", "RDMA_READ_RESPONSE"]
    assert [(p.psn - psn) % (1 << 24) for p in msgs[0].packets] == list(range(12))
    assert msgs[0].data == data
    assert msgs[1].data == b"next"


def test_an_intact_packet_sent_again_is_still_a_repeat(tmp_path):
    """Two intact packets at one PSN: the first is the one that counts."""
    data = bytes(range(256)) * 8
    frames = _read(5, data)
    again = wire.roce_frame(A, B, 0x0f, 0x22, 6, payload=b"x" * 1024,
                            aeth=(0x1f, 1))
    path = tmp_path / "read.pcap"
    wire.write_pcap(path, frames + [again])
    seg = wire.Segment(path.read_bytes())
    assert all(p.intact for p in seg.roce)
    assert wire.requests(seg, A, B)[0].data == data
    assert len(seg.messages(src=A, retransmits=True)) == 2


def test_real_captures_are_intact():
    """rxe's own frames (lesson 16's captures) pass the ICRC check."""
    for path in sorted((COURSE / "lessons/16-on-the-wire/captures").glob("*.pcap")):
        seg = wire.Segment(path.read_bytes())
        assert seg.roce and all(p.intact for p in seg.roce), path.name


def _session_args(tree, nodes, name):
    """One grading of host A's (grader.session.forked: a session each)."""
    return ["-c", "grader/pytest.ini", "--rootdir", ".", *nodes,
            f"--src={tree}", "--prebuilt",
            f"--junitxml={OUT / (name + '.xml')}",
            f"--transcripts={OUT / 'transcripts' / name}"]


@pytest.mark.instructor
@pytest.mark.timeout(1800)
def test_wire_tests_on_a_linked_pair():
    """Solutions: every wire test passes; the cheats: exactly theirs fail."""
    # The cheats are the instructor's (not in a student repository, where
    # this module's decoder tests still run).
    from test_cheats import (TREE, WIRE_EXPECTED, WIRE_ONLY, WIRE_TREE,
                             junit_cases, make_tree, make_wire_tree,
                             unexpected)
    from grader.core.build import compile_lesson
    OUT.mkdir(parents=True, exist_ok=True)
    for f in OUT.glob("*.xml"):
        f.unlink()
    # (Lesson 16's test_16_on_the_wire.py matches the pattern: it is added
    # below, by name, not as a wire test of its own.)
    wired = sorted(p for p in (COURSE / "grader/lessons").glob("test_*_wire.py")
                   if not p.name.startswith("test_16_"))
    lessons = sorted({next((COURSE / "lessons").glob(p.name[5:7] + "-*")).name
                      for p in wired})
    cheats = make_tree()
    wire_only = make_wire_tree()
    for tree, names in (("solutions", lessons),
                        (TREE, [n for n in lessons if n in cheats]),
                        (WIRE_TREE, list(wire_only))):
        for name in names:
            res = compile_lesson(COURSE, COURSE / tree, name)
            assert res["rc"] == 0, res["stderr"]
    rel = [str(p.relative_to(COURSE)) for p in wired]
    cheat_nodes = [n for n in rel if any(
        f"test_{lesson[:2]}_" in n for lesson in cheats
        if cheats[lesson] in WIRE_EXPECTED)]
    only_nodes = sorted({str(p.relative_to(COURSE)) for lesson in wire_only
                         for p in (COURSE / "grader/lessons").glob(
                             f"test_{lesson[:2]}_*.py")
                         if p.stem.endswith(("_wire", "_peer"))})
    # Lesson 16's real capture with them: on a capturing pair it is fresh
    # traffic the grader makes across the link. (Its other tests read
    # synthesized files, the same on the pair as on the host, where make
    # test grades them: under host A's emulation they took 140 s.)
    lesson16 = [str(p.relative_to(COURSE)) + "::test_real_capture" for p in
                (COURSE / "grader/lessons").glob("test_16_*.py")]
    for name in {p.split("/")[-1][5:7] for p in lesson16}:
        lessons.append(next((COURSE / "lessons").glob(f"{name}-*")).name)
    # The three gradings, forked from one process that imports pytest once
    # (under host A's emulation a pytest process costs seconds of CPU).
    cmd_a = shlex.join([
        "/usr/bin/python3", "-m", "grader.session.forked",
        *_session_args("solutions", rel + lesson16, "solutions"), "---",
        *_session_args(str(TREE.relative_to(COURSE)), cheat_nodes, "cheats"),
        "---", *_session_args(str(WIRE_TREE.relative_to(COURSE)), only_nodes,
                              "wire-only")]) + "; true"
    pcap = OUT / "wire.pcap"
    res = subprocess.run([str(COURSE / "vm-setup/with-rxe"), "--pair",
                          "--capture", str(pcap), cmd_a, ""],
                         cwd=COURSE, capture_output=True, text=True,
                         timeout=1700)
    log = res.stdout[-8000:] + res.stderr[-3000:]
    for name in ("solutions", "cheats", "wire-only"):
        assert (OUT / f"{name}.xml").exists(), f"{name}: no results\n{log}"
    problems = []
    sol = junit_cases(OUT / "solutions.xml")
    assert len(sol) >= 10 and any(t.startswith("test_16_") for t in sol), \
        f"the wire tests and lesson 16 did not run: {sol}\n{log}"
    bad = {t for t, block in sol.items() if block is not None}
    problems += [f"solutions failed {t}" for t in sorted(bad)]
    problems += unexpected(bad, sol, OUT / "transcripts" / "solutions")
    for name, expected, tree in (("cheats", WIRE_EXPECTED, TREE),
                                 ("wire-only", WIRE_ONLY, WIRE_TREE)):
        got = junit_cases(OUT / f"{name}.xml")
        for cls, per in expected.items():
            for lesson, want in per.items():
                ran = {t for t in got if t.startswith(f"test_{lesson[:2]}_")}
                mine = {t for t in ran if got[t] is not None}
                # The wire-only cheats pass their lesson's peer tests.
                peers = name != "wire-only" or any("_peer.py::" in t
                                                   for t in ran)
                if mine != want or not peers:
                    problems.append(
                        f"cheat {cls}/{lesson} ({tree.name}): must fail "
                        f"exactly {sorted(want)}, the rest passing; failed "
                        f"{sorted(mine)} of {sorted(ran)}")
                    problems += unexpected(mine - want, got,
                                           OUT / "transcripts" / name)
    assert not problems, "\n".join(problems) + "\n" + log
    # The real capture: the decoder and tshark agree on every packet.
    agree(pcap, 500)
