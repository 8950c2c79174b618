"""The grader against programs that skip the real work but print what the
tests look for (grader/selftest/cheats/CLASS/NN-topic/FILE.patch: a patch
of the solution's FILE.c, the fake marked CHEAT). Each cheat must lose exactly the
points it fakes - the tests named in EXPECTED - and keep the rest.

To spend the VM's time once, every cheated lesson is graded in one pytest
run over one tree, build/selftest-cheats/, whose NN-topic directories are
the solutions with the cheats applied (no lesson is faked by two classes); the non-device
test below compiles it on the host first.
"""

import os
import xml.etree.ElementTree as ET

import pytest

from conftest import COURSE, only_lessons, patched_lesson
from grader.core.course import needs_device

CHEATS = COURSE / "grader" / "selftest" / "cheats"
TREE = COURSE / "build" / "selftest-cheats"

# class -> lesson -> the tests it must fail (module: test function). Of the
# lesson's tests only the reference-peer and interposer modules (*_peer.py,
# *_spy.py) and the ones named here and in CONVINCED are run.
EXPECTED = {
    # The pair agrees with itself: the server never compares, the client
    # WRITEs zeros of the right length.
    "self-agreeing": {
        # (and the pair's own tests the reference does not confirm:
        # @proven_by, plugin.py's confirm())
        "06-rdma-write": {
            "test_06_rdma_write.py::test_short_write",
            "test_06_rdma_write_peer.py::test_peer_server_memory",
            "test_06_rdma_write_peer.py::test_peer_client_corrupt",
            "test_06_rdma_write.py::test_server_memcmp",
            "test_06_rdma_write.py::test_one_sided",
        },
        # The verdict travels inside DONE; the server never READs.
        "08-rdma-cm": {
            "test_08_rdma_cm.py::test_one_sided_counters",
            "test_08_rdma_cm_peer.py::test_peer_client_corrupt",
            "test_08_rdma_cm.py::test_server_detects_corruption",
        },
    },
    # Zeros of the right size on the wire, nothing checked on arrival.
    "filler": {
        "05-send-recv": {
            "test_05_send_recv_peer.py::test_peer_server_checks_pings",
            "test_05_send_recv_peer.py::test_peer_corrupt_pong",
            "test_05_send_recv_peer.py::test_peer_client_checks_pongs",
            "test_05_send_recv_peer.py::test_peer_corrupt_ping",
            "test_05_send_recv.py::test_server_verifies",
            "test_05_send_recv.py::test_client_verifies",
            "test_05_send_recv.py::test_counters",
        },
    },
    # No verbs call at all: devices, GUIDs, ports and GIDs read from
    # /sys/class/infiniband. Only the command line is its own.
    "sysfs-copy": {
        "01-devices": {f"test_01_devices.py::test_{t}" for t in (
            "device_line", "port_lines", "gid_table", "device_flag",
            "unknown_device", "no_device", "no_leaks")}
        | {"test_01_devices_spy.py::test_guid_from_verbs"},
    },
    # Registrations made, timings made up (growing with the size). Round
    # trips made (RDMA: each ping and pong; UDP: each datagram sent, its
    # echo read only at the end), samples made up (the README's rxe numbers).
    "fabricated-timings": {
        "02-memory-regions": {
            "test_02_memory_regions.py::test_reg_cost_grows",
            "test_02_memory_regions.py::test_reg_cost_timed"},
        # (a client that waits for no echo does not see that no server
        # answers either: test_udp_no_server)
        "11-latency": {
            "test_11_latency.py::test_rdma_reference_server",
            "test_11_latency.py::test_udp_reference_server",
            "test_11_latency.py::test_udp_no_server"},
    },
    # States printed from a counter, B printing --msg.
    "faked-states": {
        "03-queue-pairs": {
            "test_03_queue_pairs.py::test_state_sequence",
            "test_03_queue_pairs.py::test_skip_state",
            "test_03_queue_pairs_spy.py::test_states_are_real",
            "test_03_queue_pairs_spy.py::test_message_crossed",
        },
    },
    # Every experiment's line printed from a finished run; nothing broken.
    "printed-lines": {
        "09-failures": {f"test_09_failures.py::test_{e}" for e in (
            "dereg_mr", "sge_past_mr", "wrong_rkey", "no_remote_write",
            "write_past_end", "rnr_retry_0", "rnr_retry_2",
            "post_before_rts", "num_sge", "cq_overrun", "unaligned",
            "memlock", "munmap_remap", "status_names")},
        # The client sends no request and prints every reply checked.
        "17-ud": {
            "test_17_ud.py::test_client_replies",
            "test_17_ud.py::test_client_qp",
            "test_17_ud.py::test_client_addressing",
            "test_17_ud.py::test_pair"},
    },
    # The counter moved by READ and WRITE under the client's lock, not by
    # fetch-and-add: it adds up, and its old values lie in range.
    "locked-rmw": {
        "12-atomics": {
            "test_12_atomics.py::test_ref_server_2_clients",
            "test_12_atomics.py::test_ref_server_4_clients",
            "test_12_atomics.py::test_old_values",
            "test_12_atomics.py::test_pair",
            "test_12_atomics.py::test_unaligned",
        },
    },
    # No chains (one ibv_post_send() per WR), and at exit the lines the
    # grader reads written into the interposer's record (by the path the
    # environment named, or the descriptor open on it): the record is not
    # the interposer's sealed one, so no test that reads it pays.
    "forged-record": {
        "13-throughput": {f"test_13_throughput.py::test_{t}" for t in (
            "depth", "signaled", "batched", "buffers", "depth_1_vs_16")},
    },
    # answers.c prints the course recordings' answers, whatever the
    # capture (the decoder is the solution's).
    "copied-answers": {
        "16-on-the-wire": {f"test_16_on_the_wire.py::test_answers_{t}"
                           for t in ("write", "read", "rnr", "loss")},
    },
    # Event mode arms the CQ and takes its events, but waits by spinning.
    "spinning-events": {
        "10-events": {"test_10_events.py::test_cpu"},
    },
    # The server replaces itself with another program (which runs the
    # server again: a stand-in for one the submission brings along) before
    # it opens anything; the exec would keep the PID the kernel names as
    # the QPs' owner. The sandbox refuses the exec (EPERM): every test of
    # the server is lost, its own "execve: Operation not permitted" shown.
    "exec-other": {
        # python3 through execve()
        "15-kv-store": {
            "test_15_kv_store.py::test_pair",
            "test_15_kv_store.py::test_client_vanishes",
            "test_15_kv_store_peer.py::test_ref_clients",
            "test_15_kv_store_peer.py::test_server_served",
            "test_15_kv_store_peer.py::test_server_throughput",
        },
        # a shell through fexecve(), that is execveat()
        "14-srq": {
            "test_14_srq.py::test_replies",
            "test_14_srq.py::test_srq_used",
            "test_14_srq.py::test_limit_events",
            "test_14_srq.py::test_counts",
            "test_14_srq.py::test_memory_lines",
            "test_14_srq.py::test_pair",
        },
    },
    # The READ carries filler, the payload crosses the TCP side channel.
    "tcp-payload": {
        "07-rdma-read": {
            "test_07_rdma_read_peer.py::test_peer_changed_byte",
            "test_07_rdma_read_peer.py::test_peer_read_from_client_qp",
            "test_07_rdma_read_peer.py::test_peer_client_reads",
            "test_07_rdma_read.py::test_client_memcmp",
            "test_07_rdma_read.py::test_one_sided",
        },
    },
    # Each client thread takes one number from the server and makes up
    # the rest (its first + i x C: together the very set the server would
    # have handed out), with the first round trip's latency: the
    # reference server's counter, its wait for the requests, the
    # interposer's count of them and the samples' sum say so. And
    # answers.c writes one run's answers (faa fastest, ud slowest, 50
    # times apart) whatever lines it is given: the grader's made-up run
    # differs from its own run in every answer. (One class per lesson:
    # the cheats' tree has one 18-sequencer.)
    "invented-numbers": {
        "18-sequencer": {f"test_18_sequencer.py::test_{t}" for t in (
            "faa_client", "rc_client", "ud_client", "client_modes",
            "summary", "pair", "answers")},
    },
}
# Tests of the student-with-student run the cheats pass on purpose (they
# show the fake is convincing): run them too. Those of lessons 05-08 that
# a reference test must confirm (@proven_by) no longer pay a fake pair:
# they are in EXPECTED above as well (a test in both must fail).
CONVINCED = {
    "01-devices": ["test_01_devices.py::test_usage"],
    "02-memory-regions": ["test_02_memory_regions.py::test_reg_cost_csv"],
    "03-queue-pairs": ["test_03_queue_pairs.py::test_send"],
    "05-send-recv": ["test_05_send_recv.py::test_server_verifies",
                     "test_05_send_recv.py::test_client_verifies",
                     "test_05_send_recv.py::test_counters"],
    "06-rdma-write": ["test_06_rdma_write.py::test_server_memcmp",
                      "test_06_rdma_write.py::test_one_sided"],
    "07-rdma-read": ["test_07_rdma_read.py::test_client_memcmp",
                     "test_07_rdma_read.py::test_one_sided"],
    "08-rdma-cm": ["test_08_rdma_cm.py::test_server_detects_corruption"],
    "09-failures": ["test_09_failures.py::test_list"],
    "12-atomics": ["test_12_atomics.py::test_server_checks_counter"],
    # invented-numbers: the server is the solution's.
    "18-sequencer": ["test_18_sequencer.py::test_faa_server"],
    "10-events": ["test_10_events.py::test_peer_server",
                  "test_10_events.py::test_uses_channel"],
    "11-latency": ["test_11_latency.py::test_rdma_pair",
                   "test_11_latency.py::test_rdma_summary_is_the_samples",
                   "test_11_latency.py::test_udp_pair",
                   "test_11_latency.py::test_udp_summary_is_the_samples"],
    "16-on-the-wire": ["test_16_on_the_wire.py::test_bth",
                       "test_16_on_the_wire.py::test_real_capture"],
    # exec-other: the program is the solution up to its exec (its options
    # are parsed before it); its clients are untouched.
    "14-srq": ["test_14_srq.py::test_usage"],
    "15-kv-store": ["test_15_kv_store.py::test_usage"],
    # printed-lines: the server is the solution's
    "17-ud": ["test_17_ud.py::test_server_replies",
              "test_17_ud.py::test_usage"],
}


# On the wire (make grade HOSTS=2: the program on host A, the reference
# peers on host B, the link recorded): grader/selftest/test_wire.py grades
# the tree above with the wire tests of these lessons (test_NN_*_wire.py)
# and each cheat must fail exactly these.
WIRE_EXPECTED = {
    "filler": {"05-send-recv": {"test_05_send_recv_wire.py::test_wire_pings",
                                "test_05_send_recv_wire.py::test_wire_pongs"}},
    "self-agreeing": {"06-rdma-write": {
        "test_06_rdma_write_wire.py::test_wire_write"}},
    "tcp-payload": {"07-rdma-read": {
        "test_07_rdma_read_wire.py::test_wire_server_serves",
        "test_07_rdma_read_wire.py::test_wire_tcp"}},
    "locked-rmw": {"12-atomics": {
        "test_12_atomics_wire.py::test_wire_fetch_add",
        "test_12_atomics_wire.py::test_wire_counter_untouched",
        "test_12_atomics_wire.py::test_wire_old_values"}},
}
# Cheats only the wire catches, in a tree of their own
# (build/selftest-cheats-wire/), graded there with the lesson's wire and
# reference-peer tests: each fails exactly these and passes the rest.
WIRE_ONLY = {
    # The data as a plain WRITE, then an empty WRITE WITH IMMEDIATE: the
    # reference server's memory and immediate are right.
    "split-write": {"06-rdma-write": {
        "test_06_rdma_write_wire.py::test_wire_write"}},
}
WIRE_TREE = COURSE / "build" / "selftest-cheats-wire"


def make_wire_tree():
    """build/selftest-cheats-wire/: the WIRE_ONLY cheats, as make_tree()."""
    lessons = {}
    for cls, per in WIRE_ONLY.items():
        for lesson in per:
            assert lesson not in lessons, f"{lesson} faked twice"
            lessons[lesson] = cls
            patched_lesson(lesson, CHEATS / cls / lesson, WIRE_TREE / lesson,
                           f"cheats/{cls}/{lesson}")
    return lessons


def make_tree():
    """build/selftest-cheats/NN-topic/: the solution's files, each with the
    cheat's patch (cheats/CLASS/NN-topic/FILE.patch) applied, so a cheat
    follows the solution it fakes. Files are only rewritten when they
    changed, so the host's compile is reused."""
    lessons = {}
    only = only_lessons()           # make test LESSON=NN: its own
    for cls, per in EXPECTED.items():
        for lesson in per:
            assert lesson not in lessons, (f"{lesson} is faked by both "
                                           f"{lessons[lesson]} and {cls}")
            if only and lesson[:2] not in only:
                continue
            src = CHEATS / cls / lesson
            assert src.is_dir(), f"no cheats/{cls}/{lesson}"
            lessons[lesson] = cls
            patched_lesson(lesson, src, TREE / lesson, f"cheats/{cls}/{lesson}")
    return lessons


def test_every_cheat_class_has_its_tree():
    classes = {p.name for p in CHEATS.iterdir() if p.is_dir()}
    assert classes == set(EXPECTED) | set(WIRE_ONLY), \
        "cheats/ and EXPECTED, WIRE_ONLY disagree"
    assert set(WIRE_EXPECTED) <= set(EXPECTED)
    for cls, per in [*EXPECTED.items(), *WIRE_ONLY.items()]:
        for lesson in per:
            marked = [c for c in (CHEATS / cls / lesson).glob("*.patch")
                      if "CHEAT" in c.read_text()]
            assert marked, f"cheats/{cls}/{lesson}: mark the fake CHEAT"


def test_an_unexpected_failure_is_reported_whole(tmp_path):
    """A red self-check names why a test failed that must not: the failure
    block from the junit file and the test's transcript, not only its name
    (fresh-clone CI of stop 61 named a correct server's failed peer test
    on the linked pair, and nothing more)."""
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="grader.lessons.test_06_rdma_write_peer" '
        'name="test_peer_client_clean"><failure message="short">the '
        'reference peer says: no completion within 10 s</failure></testcase>'
        '<testcase classname="grader.lessons.test_06_rdma_write_wire" '
        'name="test_wire_tcp"/></testsuite></testsuites>')
    tr = tmp_path / "transcripts" / "06-rdma-write"
    tr.mkdir(parents=True)
    (tr / "test_peer_client_clean.log").write_text("server: accepted\n")
    got = junit_cases(xml)
    assert got == {
        "test_06_rdma_write_peer.py::test_peer_client_clean":
            "the reference peer says: no completion within 10 s",
        "test_06_rdma_write_wire.py::test_wire_tcp": None}
    text = "\n".join(unexpected(
        {"test_06_rdma_write_peer.py::test_peer_client_clean"}, got,
        tmp_path / "transcripts"))
    assert "test_peer_client_clean failed:\n    | the reference peer says: " \
        "no completion within 10 s" in text
    assert "test_peer_client_clean.log:\n    | server: accepted" in text


def test_cheats_compile():
    """Compile the cheats here (on the host: fast); the device test's grader
    reuses the builds."""
    from grader.core.build import compile_lesson
    for tree, lessons in ((TREE, make_tree()), (WIRE_TREE, make_wire_tree())):
        for lesson in lessons:
            res = compile_lesson(COURSE, tree, lesson)
            assert not res["missing"], f"{tree}/{lesson}: no such lesson"
            assert res["rc"] == 0, (f"{res['command']}\n{res['stdout']}"
                                    f"{res['stderr']}")


def _node(lesson, test):
    return f"grader/lessons/{test}"


@pytest.mark.device
# A backstop for a hang, not a speed (each grading has its own waits): the
# device cheats took 362-414 s in fresh-clone make tests.
@pytest.mark.timeout(1800)
def test_each_cheat_loses_exactly_what_it_fakes(tmp_path):
    """The cheats of the lessons that need a device, graded in the VM."""
    if not os.environ.get("RDMA_DEVICE"):
        pytest.fail("no RDMA device: run through vm-setup/with-rxe "
                    "(make test does)")
    grade_cheats({k: v for k, v in make_tree().items() if needs_device(k)},
                 tmp_path, 1700)


@pytest.mark.instructor
@pytest.mark.timeout(900)
def test_each_host_cheat_loses_exactly_what_it_fakes(tmp_path):
    """The cheats of the lessons graded without a device (lesson.toml:
    device = false), graded on the host as make grade LESSON=NN does
    (lesson 16's under the VM's emulation took minutes)."""
    grade_cheats({k: v for k, v in make_tree().items()
                  if not needs_device(k)}, tmp_path, 850)


def _quoted(text):
    return "\n".join("    | " + x for x in text.splitlines())


def junit_cases(path):
    """{module::test: its failure block (a failure's or an error's text),
    or None when it passed} of a junit file."""
    out = {}
    for case in ET.parse(path).iter("testcase"):
        mod = case.get("classname").rsplit(".", 1)[-1] + ".py"
        bad = case.find("failure")
        bad = case.find("error") if bad is None else bad
        out[f"{mod}::{case.get('name')}"] = (
            None if bad is None else bad.text or bad.get("message") or "")
    return out


def unexpected(names, blocks, transcripts):
    """Lines on tests that failed when they must not: an unexpected
    failure is the grader's own fault or the machine's, so each one's
    whole failure block and its transcript (transcripts/LESSON/TEST.log;
    in a VM's /tmp it is gone when the VM stops), not a log's tail."""
    lines = []
    for name in sorted(names):
        lines.append(f"  {name} failed:\n" + _quoted(blocks[name][-8000:]))
        num = name.removeprefix("test_")[:2]
        for tr in sorted(transcripts.glob(f"{num}-*/{name.split('::')[1]}.log")):
            lines.append(f"  its transcript {tr}:\n" + _quoted(
                tr.read_text(errors="replace")[-6000:]))
    return lines


def grade_cheats(lessons, tmp_path, limit):
    """Grade the cheated @lessons ({lesson: class}) of build/selftest-cheats/
    in one pytest session, ended after @limit s (a hang: below the test's
    own timeout); fail unless each loses exactly its EXPECTED tests
    and runs its CONVINCED ones."""
    if not lessons:
        return
    nodes = []
    for lesson, cls in lessons.items():
        num = lesson[:2]
        new = sorted(p for p in (COURSE / "grader/lessons").glob(
            f"test_{num}_*.py") if p.stem.endswith(("_peer", "_spy")))
        nodes += [str(p.relative_to(COURSE)) for p in new]
        nodes += [_node(lesson, t) for t in
                  sorted(EXPECTED[cls][lesson] | set(CONVINCED.get(lesson, [])))
                  if t.split("::")[0] not in {p.name for p in new}]
    # In make grade's order, file by file: a program that hangs in a later
    # file cuts the waits of what follows it (plugin: the lesson's hung
    # program), not of the tests before it.
    nodes.sort()
    junit = tmp_path / "junit.xml"
    log = tmp_path / "log"
    from grader.session import forked
    # In a session forked from this process, as the mutants are graded
    # (pytest and the lessons' tests imported once: under the VM's
    # emulation a pytest process of its own cost some 18 CPU s).
    forked.warm_imports({lesson[:2] for lesson in lessons})
    pid = forked.fork_session(
        ["-c", str(COURSE / "grader/pytest.ini"), "--rootdir", str(COURSE),
         *forked.PYTEST_FLAGS, "--verbose-failures", *nodes, f"--src={TREE}",
         f"--junitxml={junit}", f"--transcripts={tmp_path}/transcripts"],
        cwd=COURSE, log=log)
    _, ended = forked.wait_session(pid, limit)
    if ended:
        pytest.fail(f"the cheats' grading did not end in {limit} s:\n"
                    f"{log.read_text()[-6000:]}")
    output = log.read_text()
    assert junit.exists(), f"no results:\n{output}"
    failed, ran = {}, {}
    blocks = junit_cases(junit)
    for name, block in blocks.items():
        lesson = next(l for l in lessons if name.startswith(f"test_{l[:2]}_"))
        ran.setdefault(lesson, set()).add(name)
        if block is not None:
            failed.setdefault(lesson, set()).add(name)
    problems = []
    for lesson, cls in lessons.items():
        want = EXPECTED[cls][lesson]
        got = failed.get(lesson, set())
        if got != want:
            problems.append(
                f"cheat {cls}/{lesson}:\n  must fail:     {sorted(want)}\n"
                f"  failed:        {sorted(got)}\n"
                f"  unexpected:    {sorted(got - want)}\n"
                f"  not caught:    {sorted(want - got)}")
            problems += unexpected(got - want, blocks,
                                   tmp_path / "transcripts")
        convinced = set(CONVINCED.get(lesson, []))
        if not convinced <= ran.get(lesson, set()):
            problems.append(f"{lesson}: {sorted(convinced)} did not run")
    assert not problems, "\n".join(problems) + "\n" + output[-9000:]
