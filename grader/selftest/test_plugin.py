"""The grader plugin end to end, on a throwaway course tree with a good
lesson (whose program can pass, fail, hang and crash) and a lesson that
does not compile."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import COURSE, unstretched

GOOD_C = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "ok";

	if (!strcmp(mode, "hang"))
		for (;;)
			pause();
	if (!strcmp(mode, "byehang")) {
		printf("bye\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	if (!strcmp(mode, "crash"))
		return *(volatile int *)0;
	printf("hello 42\n");
	return 0;
}
"""

GOOD_TESTS = '''
from grader import expect_line, points

@points(3, "prints hello 42")
def test_pass(build):
    expect_line(build.run("prog").ok().stdout, "hello 42", "output")

@points(2, "prints hello 43")
def test_wrong(build):
    expect_line(build.run("prog").ok().stdout, "hello 43", "output")

@points(1, "finishes")
def test_hang(build):
    build.run("prog", "hang", timeout=1).ok()

@points(1, "cleans up")
def test_cleanup(build):
    build.run("prog", "byehang", timeout=1).ok()

@points(1, "does not crash")
def test_crash(build):
    build.run("prog", "crash").ok()

@points(1, "cannot check")
def test_skipped(build):
    import pytest
    pytest.skip("nothing to check here")
'''

# Two symptoms match the crash: the one with more conditions comes first.
SYMPTOMS = '''
[final_line]
prog = "^bye$"

[[symptom]]
id = "segv"
row = "`crashed with SIGSEGV`"
cause = "any crash"
result = "^prog: crashed with SIGSEGV$"

[[symptom]]
id = "segv-unprinted"
row = "`crashed with SIGSEGV`, nothing printed"
cause = "a crash before the greeting"
result = "crashed with SIGSEGV"
stdout = '\\A\\Z'
'''

BROKEN_TESTS = '''
from grader import points

@points(2, "runs")
def test_runs(build):
    build.run("prog").ok()

@points(2, "runs again")
def test_again(build):
    build.run("prog").ok()
'''


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    (root / "lessons").mkdir()
    (root / "lessons" / "common").symlink_to(COURSE / "lessons" / "common")
    for name, toml in (
            ("90-good", 'title = "A good lesson"\nhint = "general hint"\n'
                        '[hints]\ntest_wrong = "look at the number"\n'
                        'test_crash = "never shown: a symptom matches"\n'
                        + SYMPTOMS),
            ("91-broken", 'title = "A broken lesson"\n')):
        (root / "lessons" / name).mkdir()
        (root / "lessons" / name / "lesson.toml").write_text(toml)
        (root / "skeletons" / name).mkdir(parents=True)
    (root / "skeletons" / "90-good" / "prog.c").write_text(GOOD_C)
    (root / "skeletons" / "91-broken" / "prog.c").write_text(
        "int main(void) { return undefined_thing; }\n")
    (root / "grader" / "lessons").mkdir(parents=True)
    (root / "grader" / "lessons" / "test_90_good.py").write_text(GOOD_TESTS)
    (root / "grader" / "lessons" / "test_91_broken.py").write_text(BROKEN_TESTS)
    return root


def grade(course, *args, src=None, path=(), autoload=False, cold=False):
    """A grading of `course` as make grade's (grade.py's flags and
    environment); `path`: more of PYTHONPATH; `autoload`: without
    PYTEST_DISABLE_PLUGIN_AUTOLOAD; `cold`: as client.c's cold way runs it
    (`python3 -m grader.session.shards --`, no PYTEST_ENV given)."""
    from grader.session.forked import AUTOLOAD, PYTEST_ENV, PYTEST_FLAGS
    runner = ["grader.session.shards", "--"] if cold else ["pytest"]
    cmd = [sys.executable, "-m", *runner, "-c", str(COURSE / "grader/pytest.ini"),
           "--rootdir", str(course), *PYTEST_FLAGS,
           str(course / "grader/lessons"),
           "--course-root", str(course), "--src", str(src or course / "skeletons"),
           "--transcripts", str(course / "transcripts"), *args]
    env = dict(os.environ, PYTHONPATH=":".join([str(COURSE), *map(str, path)]))
    env.update(PYTEST_ENV)
    if autoload:
        del env[AUTOLOAD]
    if cold:
        for name in PYTEST_ENV:
            del env[name]
    return subprocess.run(cmd, cwd=course, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def full(course):
    res = grade(course, "--results", str(course / "results.json"))
    return res, json.loads((course / "results.json").read_text())


def test_score_line_and_exit_status(full):
    res, _ = full
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 3/13"
    assert "  90-good: 3/9" in res.stdout
    assert "  91-broken: 0/4" in res.stdout


def test_a_pytest_plugin_installed_beside_changes_no_grade(course, tmp_path):
    """A grading loads the plugins make grade names and no other: a pytest
    plugin installed on the machine (an entry point; here one that would
    end every session) is not loaded. Without grade.py's environment it
    would be: the control run shows the plant works. The same the cold way
    of a device's grading (client.c runs grader.session.shards, which sets
    that environment itself)."""
    site = tmp_path / "site"
    info = site / "planted-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\n"
                                           "planted = planted_plugin\n")
    (site / "planted_plugin.py").write_text(
        "def pytest_configure(config):\n"
        "    raise SystemExit('the planted plugin was loaded')\n")
    control = grade(course, path=[site], autoload=True)
    assert control.returncode != 0 and "planted_plugin" in control.stderr
    for cold in (False, True):
        res = grade(course, path=[site], cold=cold)
        assert "planted" not in res.stdout + res.stderr
        assert res.stdout.rstrip().splitlines()[-1] == "Score: 3/13", \
            res.stdout + res.stderr


def session_args(course, out, *extra):
    """pytest's arguments for a session forked here (forked.fork_session)
    that grades `course`'s skeletons, writing into `out`."""
    from grader.session import forked
    return ["-c", str(COURSE / "grader/pytest.ini"), "--rootdir",
            str(course), *forked.PYTEST_FLAGS, str(course / "grader/lessons"),
            "--course-root", str(course), "--src", str(course / "skeletons"),
            "--transcripts", str(out / "t"),
            "--results", str(out / "results.json"), *extra]


def test_a_gated_session_runs_no_test_until_told(course, tmp_path):
    """A session the warm grader forks starts at once and waits at its
    gate, after collection, for the grader's word that no grader file
    changed (server.py): with GO it grades; with the gate closed instead it
    ends (75) and grades nothing."""
    from grader.session import forked
    for go in (True, False):
        out = tmp_path / ("go" if go else "closed")
        out.mkdir()
        args = session_args(course, out)
        gate_r, gate_w = os.pipe()
        pid = forked.fork_session(args, cwd=course, log=out / "log",
                                  gate=gate_r, closing=[gate_w])
        os.close(gate_r)
        time.sleep(3)
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "it did not wait"
        assert not (out / "results.json").exists()
        if go:
            os.write(gate_w, forked.GO)
        os.close(gate_w)
        _, status = os.waitpid(pid, 0)
        log = (out / "log").read_text()
        if go:
            assert "Score: 3/13" in log, log
        else:
            assert os.waitstatus_to_exitcode(status) == 75, log
            assert "Score" not in log and "90-good" not in log, log
            assert not (out / "results.json").exists()


def test_a_session_waited_for_past_its_time_is_ended(tmp_path):
    """forked.wait_session: a session that ends in time gives its status;
    one still running at the timeout is ended, with all it started, and
    said so (class-run's rows, the cheats' self-check)."""
    from grader.session import forked

    def quick(args):
        return 3

    def stuck(args):
        child = subprocess.Popen(["sleep", "600"])
        (tmp_path / "child").write_text(str(child.pid))
        time.sleep(600)
    pid = forked.fork_session([], entry=quick, log=tmp_path / "log")
    assert forked.wait_session(pid, 30) == (3, False)
    pid = forked.fork_session([], entry=stuck, log=tmp_path / "log")
    t0 = time.monotonic()
    rc, ended = forked.wait_session(pid, 2)
    assert ended and rc != 0 and time.monotonic() - t0 < 30
    # Its child was killed too (gone, or a zombie, within a bound for a
    # SIGKILL's delivery).
    child = int((tmp_path / "child").read_text())
    for _ in range(100):
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the session's child {child} still runs")


def test_a_gated_sessions_shards_wait_at_its_gate(tmp_path):
    """A session of several lessons runs as shards, each a session forked
    from it (shards.py): each keeps the gate, and runs nothing until GO."""
    from grader.session import forked

    def shard(args):
        forked.pass_gate()
        (tmp_path / args[0]).write_text("ran")
        return 0

    def session(args):
        pids = [forked.fork_session([n], entry=shard, setsid=False)
                for n in ("a", "b", "c")]
        return max(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1])
                   for p in pids)
    gate_r, gate_w = os.pipe()
    pid = forked.fork_session([], entry=session, gate=gate_r,
                              closing=[gate_w], log=tmp_path / "log")
    os.close(gate_r)
    time.sleep(1)
    assert not list(tmp_path.glob("[abc]")), "a shard ran before GO"
    os.write(gate_w, forked.GO * 8)
    os.close(gate_w)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, (tmp_path / "log").read_text()
    assert sorted(p.name for p in tmp_path.glob("[abc]")) == ["a", "b", "c"]


def test_a_session_from_the_prepared_configuration_grades_the_same(course, tmp_path):
    """A session forked after warm_imports() starts from the configuration
    made once before the fork (forked.prepare_config) and uses it up; it
    grades as a session configured from scratch does, and a mistyped
    option fails the same way, naming the ini file and the rootdir."""
    from grader.session import forked
    forked.prepare_config()
    assert forked._config is not None, "this pytest lacks what it uses"

    def run(name, prepared, *extra):
        out = tmp_path / name
        out.mkdir()
        args = session_args(course, out, *extra)

        def entry(a):
            import pytest
            had = forked._config is not None
            rc = pytest.main(a)
            (out / "used").write_text(str(had and forked._config is None))
            return rc
        kept = forked._config
        if not prepared:
            forked._config = None
        try:
            pid = forked.fork_session(args, cwd=course, log=out / "log",
                                      entry=entry)
        finally:
            forked._config = kept
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        log = re.sub(r"\([0-9.]+s\)", "",
                     unstretched((out / "log").read_text()))
        log = log.replace(str(out), "OUT")
        return status, log, out

    s1, log1, out1 = run("prepared", True)
    s0, log0, out0 = run("scratch", False)
    assert (out1 / "used").read_text() == "True"
    assert (out0 / "used").read_text() == "False"
    assert (s1, log1) == (s0, log0)
    assert "Score: 3/13" in log1, log1
    tests = [json.loads((o / "results.json").read_text())["tests"]
             for o in (out1, out0)]
    assert [(t["name"], t["score"]) for t in tests[0]] == \
        [(t["name"], t["score"]) for t in tests[1]]
    s1, log1, _ = run("prepared-typo", True, "--lessons=90")
    s0, log0, _ = run("scratch-typo", False, "--lessons=90")
    assert (s1, log1) == (s0, log0)
    assert s1 == 4 and "unrecognized arguments: --lessons=90" in log1, log1
    assert f"rootdir: {course}" in log1 and "inifile: " in log1, log1


def test_one_line_per_test(full):
    out = full[0].stdout
    assert "== 90-good: A good lesson ==" in out
    for line in ("  prints hello 42 ... OK", "  prints hello 43 ... FAIL",
                 "  finishes ... FAIL", "  does not crash ... FAIL"):
        assert line in out


@pytest.fixture(scope="module")
def verbose(course):
    return grade(course, "--verbose-failures")


def test_failures_explain_themselves(verbose):
    out = verbose.stdout
    assert "expected the line: 'hello 43'" in out
    assert "got: killed by the grader after 1 s\n" in unstretched(out)
    assert ("got: killed by the grader after 1 s: it hung after its last "
            "output (during cleanup?)\n") in out
    assert "crashed with SIGSEGV" in out
    assert "hint: look at the number" in out            # the test's own hint
    assert "hint: general hint" in out                  # the lesson's hint


def test_every_failure_block_has_the_command(verbose):
    blocks = verbose.stdout.split("== 91-broken")[0].split(" ... FAIL")[1:]
    assert len(blocks) == 5
    for block in blocks[:4]:                            # not the skipped one
        assert "\n      command: " in block, block


def test_symptoms_replace_the_hint_most_specific_first(verbose):
    block = verbose.stdout.split("does not crash ... FAIL")[1].split(" ... ")[0]
    assert "never shown" not in block
    assert ("      likely cause: a crash before the greeting\n"
            "        or: any crash\n") in block


def test_a_symptom_that_does_not_match_leaves_the_hint(verbose):
    block = verbose.stdout.split("prints hello 43 ... FAIL")[1].split(" ... ")[0]
    assert "likely cause" not in block and "hint: look at the number" in block


def test_transcripts_are_saved_for_failures_only(full, course):
    t = course / "transcripts" / "90-good"
    assert sorted(p.name for p in t.iterdir()) == [
        "test_cleanup.log", "test_crash.log", "test_hang.log", "test_wrong.log"]
    text = (t / "test_crash.log").read_text()
    assert "crashed with SIGSEGV" in text and "prog crash" in text
    assert f"transcript: {t / 'test_wrong.log'}" in full[0].stdout


def test_only_each_lessons_first_failure_is_shown_in_full(full):
    out = full[0].stdout.split("== 91-broken")[0]
    assert "hint: look at the number" in out            # the first failure
    assert "hint: general hint" not in out              # later ones: one line
    assert "      expected exit status 0, got: killed by the grader after 1 s\n" \
        in unstretched(out)
    assert "      expected exit status 0, got: crashed with SIGSEGV\n" in out
    assert out.count("transcript: ") == 4               # each still has one


def test_a_compile_error_is_shown_once(verbose):
    out = verbose.stdout.split("== 91-broken")[1]
    assert out.count("compile error (reproduce:") == 1
    assert "not run: does not compile" in out


def test_one_test_by_name_or_title(course):
    res = grade(course, "--test", "hello 43")
    assert "  prints hello 43 ... FAIL" in res.stdout
    assert "prints hello 42" not in res.stdout
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 0/2"
    res = grade(course, "--test", "test_pass")
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 3/3"


def test_an_unknown_test_lists_the_tests(course):
    res = grade(course, "--test", "no-such-test")
    assert res.returncode == 4
    assert "no test matches TEST=no-such-test" in res.stderr
    assert "  test_wrong: prints hello 43" in res.stderr


def test_status_records_each_lesson(course, tmp_path):
    status = tmp_path / "status.json"
    grade(course, "--status", str(status))
    data = json.loads(status.read_text())
    assert data["90-good"]["got"] == 3 and data["90-good"]["total"] == 9
    assert data["90-good"]["first_failing"] == "prints hello 43"
    assert data["90-good"]["first_failing_causes"] == []
    assert data["91-broken"]["got"] == 0


def test_status_keeps_what_a_test_run_did_not_grade(course, tmp_path):
    """make grade TEST=... updates the tests it ran; the others keep the
    last grading's results (make status used to ignore TEST= runs)."""
    status = tmp_path / "status.json"
    grade(course, "--status", str(status), "--lesson", "90",
          "--test", "hello 43")
    d = json.loads(status.read_text())["90-good"]
    assert (d["got"], d["total"]) == (0, 9)
    assert d["test_filter"] == "hello 43"
    assert len(d["not_graded"]) == 5 and "test_wrong" not in d["not_graded"]
    grade(course, "--status", str(status), "--lesson", "90")
    d = json.loads(status.read_text())["90-good"]
    assert (d["got"], d["total"], d["not_graded"]) == (3, 9, [])
    grade(course, "--status", str(status), "--lesson", "90",
          "--test", "test_pass")
    d = json.loads(status.read_text())["90-good"]
    assert (d["got"], d["total"]) == (3, 9)             # not 3/3
    assert d["first_failing_test"] == "test_wrong"
    assert d["tests"]["test_wrong"]["passed"] is False  # from the full run


def test_make_status_lines_up_its_columns():
    from grader.run.status import lines
    status = {"05-send-recv": {"got": 7, "total": 35, "when": "2026-01-02 10:00",
                               "src": "/c/skeletons", "first_failing": "x"},
              "10-events": {"got": 21, "total": 21, "when": "2026-01-02 11:00",
                            "src": "/c/skeletons", "test_filter": "cpu"}}
    out = lines(status, ["01-devices", "05-send-recv", "10-events"])
    cols = {line.index("next:") if "next:" in line else line.index("done")
            for line in out[1:]}
    assert len(cols) == 1, out                          # one column
    assert out[1].index("7/35") + 4 == out[2].index("21/21") + 5, out
    assert "not graded yet: make grade LESSON=01" in out[0]
    assert "[last: TEST=cpu]" in out[2]


def one_lesson_course(tmp_path, lesson, toml, tests):
    """A course of one lesson, @lesson ("92-hang"), its lesson.toml @toml,
    GOOD_C as its skeleton's prog.c and @tests as its grader module: the
    grading of a hang, a linger or a sleep alone."""
    root = tmp_path / "course"
    (root / "lessons" / lesson).mkdir(parents=True)
    (root / "lessons" / "common").symlink_to(COURSE / "lessons" / "common")
    (root / "lessons" / lesson / "lesson.toml").write_text(toml)
    (root / "skeletons" / lesson).mkdir(parents=True)
    (root / "skeletons" / lesson / "prog.c").write_text(GOOD_C)
    (root / "grader" / "lessons").mkdir(parents=True)
    (root / "grader" / "lessons" /
     f"test_{lesson[:2]}_{lesson[3:]}.py").write_text(tests)
    return root


def test_a_hung_program_shortens_the_lessons_later_waits(tmp_path):
    # After the first hang (6 s), every wait is cut - also those that ask
    # for 60 s outright, and those of processes the grader starts itself
    # (reference peers): 5 s, then 1 s once another hung. Before, the five
    # later waits cost 5 + 60 + 60 + 60 + 60 s.
    waits = ["build.run('prog', 'hang').ok()",
             "build.start('prog', 'hang', ready=None).wait(timeout=60).ok()",
             "harness.run([build.path('prog'), 'hang'], timeout=60).ok()",
             "build.start('prog', 'hang', ready='never', timeout=60)",
             "build.run('prog', 'hang', timeout=60).ok()"]
    root = one_lesson_course(
        tmp_path, "92-hang", 'title = "hangs"\n',
        "from grader import points\nfrom grader.core import harness\n"
        "@points(1, 'hang')\ndef test_hang(build):\n"
        "    build.run('prog', 'hang', timeout=6).ok()\n"
        + "".join(f"@points(1, 'hang {i}')\ndef test_hang{i}(build):\n"
                  f"    {w}\n" for i, w in enumerate(waits)))
    t0 = time.monotonic()
    res = grade(root)
    took = time.monotonic() - t0
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 0/6"
    # 6 + 5 + 4 s of waits and the grading's start (12 s loaded, seconds
    # quiet), far below the 251 s of the waits uncut.
    assert took < 6 + 5 + 4 + 60, f"{took:.0f} s:\n{res.stdout}"
    assert "cut to 5 s" in res.stdout


def test_silence_after_the_final_line_ends_the_wait(tmp_path):
    """A program that printed its final line (lesson.toml [final_line]) and
    then did not exit is killed FINAL_GRACE seconds after that line, not at
    its timeout, and counts as a hang: the lesson's later waits are cut."""
    from grader.core.harness import FINAL_GRACE
    root = one_lesson_course(
        tmp_path, "93-linger",
        'title = "lingers"\n[final_line]\nprog = "^bye$"\n',
        "from grader import points\n"
        "@points(1, 'cleans up')\ndef test_linger(build):\n"
        "    build.run('prog', 'byehang', timeout=120).ok()\n"
        "@points(1, 'cleans up again')\ndef test_linger_again(build):\n"
        "    build.run('prog', 'byehang', timeout=120).ok()\n"
        "@points(1, 'greets')\ndef test_ok(build):\n"
        "    build.run('prog', timeout=120).ok()\n")
    t0 = time.monotonic()
    res = grade(root, "--verbose-failures")
    took = time.monotonic() - t0
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 1/3", res.stdout
    # Uncut, the first wait alone is 120 s.
    assert took < FINAL_GRACE + 5 + 60, f"{took:.0f} s:\n{res.stdout}"
    assert re.search(r"got: killed by the grader after \d+ s: it hung after "
                     r"its last output \(during cleanup\?\)\n", res.stdout), \
        res.stdout
    assert ("got: killed by the grader after 5 s: it hung after its last "
            "output (during cleanup?)\n") in res.stdout, res.stdout
    assert "cut to 5 s" in res.stdout


def test_a_program_asleep_with_nothing_open_is_not_waited_for(tmp_path):
    """A student's program asleep with neither the device nor a socket open
    (here from its start) is killed IDLE_LIMIT seconds into that sleep, not
    at its timeout, and counts as a hang: the lesson's later waits are
    cut. A program that ends by itself is graded as before."""
    from grader.core.harness import IDLE_LIMIT
    root = one_lesson_course(
        tmp_path, "94-idle", 'title = "sleeps"\n',
        "from grader import points\n"
        "@points(1, 'sleeps')\ndef test_sleeps(build):\n"
        "    build.run('prog', 'hang', timeout=120).ok()\n"
        "@points(1, 'greets')\ndef test_ok(build):\n"
        "    build.run('prog', timeout=120).ok()\n"
        "@points(1, 'sleeps again')\ndef test_again(build):\n"
        "    build.start('prog', 'hang', ready='never', timeout=120)\n")
    t0 = time.monotonic()
    res = grade(root, "--verbose-failures")
    took = time.monotonic() - t0
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 1/3", res.stdout
    # Uncut, the first wait alone is 120 s.
    assert took < IDLE_LIMIT + 5 + 60, f"{took:.0f} s:\n{res.stdout}"
    assert re.search(r"got: killed by the grader after \d+ s: it slept "
                     r"\d+ s with neither the RDMA device nor a socket "
                     r"open \(waiting for nothing: hung\?\)\n", res.stdout), \
        res.stdout
    assert "matching /never/ within 5 s" in res.stdout, res.stdout
    assert "cut to 5 s" in res.stdout


def test_a_skipped_test_earns_nothing(full):
    assert "  cannot check ... FAIL" in full[0].stdout
    assert "not checked (skipped: nothing to check here): no points" in full[0].stdout


def test_compile_error_costs_only_that_lesson(full, verbose):
    assert "  90-good: 3/9" in full[0].stdout
    assert "  91-broken: 0/4 (does not compile)" in full[0].stdout
    out = verbose.stdout
    assert "compile error (reproduce: make build LESSON=91" in out
    assert "undefined_thing" in out
    assert "  90-good: 3/9" in out


def test_after_the_first_unfinished_lesson_only_subtotals(full, verbose):
    """Several lessons short of full marks: the first in detail, the
    others one line each, and the command to run next before the score."""
    out = full[0].stdout.rstrip().splitlines()
    assert "== 91-broken: A broken lesson ==" not in out
    assert "  runs ... FAIL" not in "\n".join(out)
    assert "  91-broken: 0/4 (does not compile)" in out
    assert out[-2].startswith("next: make grade LESSON=90   ")
    assert out[-1] == "Score: 3/13"
    # V=1: everything
    assert "== 91-broken: A broken lesson ==" in verbose.stdout
    assert "  runs ... FAIL" in verbose.stdout


def test_a_later_failure_in_one_line_is_a_whole_sentence():
    from grader.session.report import ONE_LINE_MAX, one_line
    first = ("/home/you/rdma-course/build/grade/skeletons/05-send-recv/"
             "pingpong --port 0 -n 50 -s 1500 -t 10: it exited with status "
             "1 before printing a line matching /listening on port (\\d+)/")
    assert one_line([first, "command: ..."]) == first   # whole, not cut
    assert one_line(["client stdout", "  expected: 'a'", "  got:      'b'"]) \
        == "client stdout: expected: 'a', got: 'b'"
    assert one_line(["stderr", "  expected a line matching: /x/", "  got:",
                     "  | y"]) == "stderr: expected a line matching: /x/"
    long = "the run, " + "step after step, " * 40 + "failed"
    line = one_line([long])
    assert len(line) < ONE_LINE_MAX + 40
    assert line.endswith(", ... (V=1 shows it whole)") or \
        line.endswith("step ... (V=1 shows it whole)"), line


def test_results_json_has_gradescopes_shape(full):
    data = full[1]
    assert data["score"] == 3
    assert len(data["tests"]) == 8
    for t in data["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output"}
        assert t["status"] in ("passed", "failed")
        assert t["score"] == (t["max_score"] if t["status"] == "passed" else 0)
    assert {t["name"] for t in data["tests"]} >= {"90-good: prints hello 42",
                                                  "91-broken: runs"}


def test_one_lesson_only(course):
    res = grade(course, "--lesson", "90")
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 3/9"
    assert "91-broken" not in res.stdout


def test_unknown_lesson_is_a_usage_error(course):
    res = grade(course, "--lesson", "55")
    assert res.returncode == 4
    assert "no lesson '55'; the lessons are: 90 (90-good) 91 (91-broken)" in res.stderr


def test_src_without_the_lesson(course, tmp_path):
    res = grade(course, "--lesson", "90", src=tmp_path)
    assert res.returncode == 1
    assert "90-good/ does not exist: there is nothing to grade" in res.stdout
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 0/9"


def test_missing_src_is_a_usage_error(course, tmp_path):
    res = grade(course, src=tmp_path / "nope")
    assert res.returncode == 4
    assert "no such directory" in res.stderr


def test_all_passing_exits_zero(course, tmp_path):
    (tmp_path / "90-good").mkdir()
    (tmp_path / "90-good" / "prog.c").write_text(
        '#include <stdio.h>\nint main(void) { printf("hello 42\\nhello 43\\n"); return 0; }\n')
    res = grade(course, "--lesson", "90", "-k", "pass or wrong", src=tmp_path)
    assert res.returncode == 0, res.stdout
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 5/5"


def test_make_hint_starts_at_the_first_hint_after_causes(tmp_path, monkeypatch,
                                                         capsys):
    """A failure that showed likely causes did not show the test's first
    hint: make hint gives that one next (and says which causes were
    shown); after a failure that showed the first hint, the second."""
    from grader.run import hint
    monkeypatch.setattr(hint, "SHOWN", tmp_path / "hints.json")
    monkeypatch.setattr(hint, "STATUS", tmp_path / "status.json")
    status = {"03-queue-pairs": {"first_failing_test": "test_state_sequence",
                                 "first_failing_causes": ["rts-mask"]}}
    (tmp_path / "status.json").write_text(json.dumps(status))
    assert hint.main(["--lesson", "03"]) == 0
    out = capsys.readouterr().out
    assert "RTR -> RTS) failed" in out and "hint 1 of 1" in out
    status["03-queue-pairs"]["first_failing_causes"] = []
    (tmp_path / "status.json").write_text(json.dumps(status))
    (tmp_path / "hints.json").unlink()
    hint.main(["--lesson", "03"])
    assert "no more hints" in capsys.readouterr().out


def test_shards_grade_as_one_session(course, full):
    """grader/session/shards.py over two (stand-in) devices: each lesson in
    a session of its own, the output in lesson order with one Score line,
    the results as the unsharded grading's."""
    res, data = full
    out = course / "sharded.json"
    cmd = [sys.executable, "-m", "grader.session.shards", "--",
           "-c", str(COURSE / "grader/pytest.ini"), "--rootdir", str(course),
           "-p", "grader.session.plugin", "-qq", "--tb=no", "-rN",
           "--color=no", str(course / "grader/lessons"),
           "--course-root", str(course), "--src", str(course / "skeletons"),
           "--transcripts", str(course / "transcripts"), "--results", str(out)]
    env = dict(os.environ, PYTHONPATH=str(COURSE),
               RDMA_DEVICES="dev0,1,127.0.0.1,lo dev1,1,127.0.0.1,lo")
    sharded = subprocess.run(cmd, cwd=course, env=env, capture_output=True,
                             text=True, timeout=300)
    assert sharded.returncode == res.returncode, sharded.stdout + sharded.stderr
    lines = sharded.stdout.splitlines()
    heads = [x for x in lines if x.startswith("== ")]
    # As one session shows it: 90 in full, then (short of full marks) 91
    # as its subtotal only, the next step, one Score line.
    assert [h[3:5] for h in heads] == ["90"], sharded.stdout
    plain = res.stdout.splitlines()
    for want in ("  90-good: 3/9", "  91-broken: 0/4 (does not compile)"):
        assert want in plain and want in lines, (res.stdout, sharded.stdout)
    assert lines.index("  90-good: 3/9") < \
        lines.index("  91-broken: 0/4 (does not compile)"), sharded.stdout
    assert [x for x in lines if x.startswith(("next:", "Score:"))] == \
        [x for x in plain if x.startswith(("next:", "Score:"))] == \
        [next(x for x in plain if x.startswith("next:")),
         f"Score: {data['score']}/{data['max_score']}"], sharded.stdout
    # V=1: every lesson in full, each block whole.
    v1 = subprocess.run(cmd + ["--verbose-failures"], cwd=course, env=env,
                        capture_output=True, text=True, timeout=300)
    vl = v1.stdout.splitlines()
    vh = [x for x in vl if x.startswith("== ")]
    assert [h[3:5] for h in vh] == ["90", "91"], v1.stdout
    assert vl.index("  90-good: 3/9") < vl.index(vh[1]), v1.stdout
    merged = json.loads(out.read_text())
    assert (merged["score"], merged["max_score"]) == (data["score"],
                                                       data["max_score"])
    assert [(t["name"], t["score"]) for t in merged["tests"]] == \
        [(t["name"], t["score"]) for t in data["tests"]]
    # Graded in shards (they note each lesson's time for the next plan).
    times = json.loads((course / "build/grade/lesson-times.json").read_text())
    assert sorted(times) == ["90", "91"]


def test_shard_plan_balances_and_keeps_order():
    from grader.session.shards import plan
    times = {"01": 10, "02": 10, "05": 40, "06": 40, "09": 30}
    shards = plan(sorted(times), 2, times)
    assert sorted(n for s in shards for n in s) == sorted(times)
    assert all(s == sorted(s) for s in shards)
    loads = [sum(times[n] for n in s) for s in shards]
    assert max(loads) - min(loads) <= 10, shards
    assert plan(["01", "02"], 3, {}) == [["01"], ["02"]]


def test_make_hint_gives_a_hint_never_shown_and_says_when_nothing_fails(
        tmp_path, monkeypatch, capsys):
    from grader.run import hint
    monkeypatch.setattr(hint, "SHOWN", tmp_path / "hints.json")
    monkeypatch.setattr(hint, "STATUS", tmp_path / "status.json")
    # Its failure was not shown in full (a later lesson of a long
    # grading): its hint was never shown, make hint gives the first.
    status = {"03-queue-pairs": {
        "first_failing_test": "test_state_sequence", "got": 0, "total": 20,
        "tests": {"test_state_sequence": {"passed": False, "causes": [],
                                          "hint_shown": False}}}}
    (tmp_path / "status.json").write_text(json.dumps(status))
    assert hint.main(["--lesson", "03"]) == 0
    out = capsys.readouterr().out
    assert "hint 1 of 1" in out and "no more hints" not in out
    assert hint.main(["--lesson", "03"]) == 0
    out = capsys.readouterr().out
    assert "no more hints" in out
    assert "'Debugging'" in out                 # lesson 03 has the section
    # Nothing failing: it says so, and that is no error (exit 0).
    status = {"03-queue-pairs": {"first_failing_test": "", "got": 20,
                                 "total": 20, "when": "2026-01-02 10:00"}}
    (tmp_path / "status.json").write_text(json.dumps(status))
    assert hint.main(["--lesson", "03"]) == 0
    assert "nothing is failing (20/20" in capsys.readouterr().out


PAIR_TESTS = '''
from grader import expect_line, points, proven_by

@points(2, "the pair agrees, the reference does not")
@proven_by("test_ref_fails")
def test_agree(build):
    expect_line(build.run("prog").ok().stdout, "hello 42", "output")

@points(2, "the pair agrees, and so does the reference")
@proven_by("test_ref_ok")
def test_agree_ok(build):
    expect_line(build.run("prog").ok().stdout, "hello 42", "output")

@points(1, "reference: finds what it must")
def test_ref_ok(build):
    expect_line(build.run("prog").ok().stdout, "hello 42", "output")

@points(1, "reference: finds nothing")
def test_ref_fails(build):
    expect_line(build.run("prog").ok().stdout, "hello 43", "the reference")
'''


@pytest.fixture(scope="module")
def pair_course(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair-course")
    (root / "lessons" / "92-pair").mkdir(parents=True)
    (root / "lessons" / "common").symlink_to(COURSE / "lessons" / "common")
    (root / "lessons" / "92-pair" / "lesson.toml").write_text(
        'title = "A pair and its reference"\n')
    (root / "skeletons" / "92-pair").mkdir(parents=True)
    (root / "skeletons" / "92-pair" / "prog.c").write_text(GOOD_C)
    (root / "grader" / "lessons").mkdir(parents=True)
    (root / "grader" / "lessons" / "test_92_pair.py").write_text(PAIR_TESTS)
    return root


def test_a_pair_test_pays_only_when_its_reference_tests_passed(pair_course):
    out = grade(pair_course, "--verbose-failures").stdout
    lines = [x for x in out.splitlines() if " ... " in x]
    # The pair's verdicts are shown after the reference tests they wait for.
    assert [x.split(" ... ")[0].strip() for x in lines] == [
        "reference: finds what it must",
        "the pair agrees, and so does the reference",
        "reference: finds nothing",
        "the pair agrees, the reference does not"], out
    assert "the pair agrees, the reference does not ... FAIL" in out
    assert "the pair agrees, and so does the reference ... OK" in out
    assert ("but the reference peers do not confirm it: 'reference: finds "
            "nothing' failed in this grading") in out
    assert "  92-pair: 3/6" in out
    # JUnit says what the grade counts.
    import xml.etree.ElementTree as ET
    junit = pair_course / "pair.xml"
    grade(pair_course, f"--junitxml={junit}")
    failed = {c.get("name") for c in ET.parse(junit).iter("testcase")
              if c.find("failure") is not None}
    assert failed == {"test_agree", "test_ref_fails"}, failed
    # Graded alone (TEST=), the reference test is not held against it.
    alone = grade(pair_course, "--test", "the reference does not").stdout
    assert "the pair agrees, the reference does not ... OK" in alone, alone


def test_make_hint_counts_per_failure_not_per_test(tmp_path, monkeypatch,
                                                   capsys):
    """Once one mistake is fixed, the next, different failure of the same
    test starts at the first hint again; the same failure graded again
    (other ports, other timings) goes on where it was."""
    from grader.run import hint
    from grader.session.records import failure_signature
    monkeypatch.setattr(hint, "SHOWN", tmp_path / "hints.json")
    monkeypatch.setattr(hint, "STATUS", tmp_path / "status.json")

    def graded(output):
        why = failure_signature({"passed": False, "output": output})
        status = {"05-send-recv": {
            "first_failing_test": "test_pingpong", "got": 0, "total": 38,
            "tests": {"test_pingpong": {"passed": False, "causes": [],
                                        "why": why, "hint_shown": True}}}}
        (tmp_path / "status.json").write_text(json.dumps(status))
        assert hint.main(["--lesson", "05"]) == 0
        return capsys.readouterr().out

    a1 = "pingpong --port 4242: it exited with status 1 after 0.4 s"
    a2 = "pingpong --port 5151: it exited with status 1 after 1.2 s"
    assert "hint 2 of" in graded(a1)            # the block showed hint 1
    assert "hint 3 of 3" in graded(a2)          # the same failure again
    b = "pingpong: printed no line matching /listening/ within 10 s"
    assert "hint 2 of" in graded(b)             # another failure: afresh
    assert failure_signature({"passed": True, "output": a1}) == ""
    assert failure_signature({"passed": False, "output": a1}) == \
        failure_signature({"passed": False, "output": a2})


def test_a_failure_shows_the_programs_own_last_words():
    """A failure whose message does not show why (a peer's verdict) gets
    the last lines of stderr of the submission's program that failed."""
    from grader.core import harness
    from grader.session.plugin import own_words
    t = harness.new_transcript()
    r = harness.Result(["/c/build/grade/skeletons/14-srq/srq", "--port", "0"],
                       1, "", "setup done\nreply: completion error: RNR "
                       "retry counter exceeded (status 13)\n", 1.0, False, None)
    t.runs.append((r, True))
    words = own_words(t, "the reference client: the program closed the "
                         "TCP connection")
    assert words == ("\nsrq exited with status 1; its stderr ended:\n"
                     "  | setup done\n  | reply: completion error: RNR "
                     "retry counter exceeded (status 13)")
    # Shown already, or the program did not fail: nothing added.
    assert own_words(t, "got: reply: completion error: RNR retry counter "
                        "exceeded (status 13)\nsetup done") == ""
    t.runs[-1] = (harness.Result(["prog"], 0, "", "note\n", 1.0, False, None), True)
    assert own_words(t, "a peer's verdict") == ""


def test_first_loss_ends_a_lesson_at_its_first_lost_point(tmp_path):
    """--first-loss (the self-check's skeletons): once a lesson lost a
    point, its later tests do not run and earn nothing; another lesson is
    graded from its start."""
    root = tmp_path / "course"
    (root / "lessons").mkdir(parents=True)
    (root / "lessons" / "common").symlink_to(COURSE / "lessons" / "common")
    (root / "grader" / "lessons").mkdir(parents=True)
    ran = tmp_path / "ran"
    ran.mkdir()
    for num, first in (("93", "assert False, 'lost'"), ("94", "pass")):
        (root / "lessons" / f"{num}-x").mkdir()
        (root / "lessons" / f"{num}-x" / "lesson.toml").write_text(
            'title = "x"\ndevice = false\n')
        (root / "skeletons" / f"{num}-x").mkdir(parents=True)
        (root / "skeletons" / f"{num}-x" / "prog.c").write_text(GOOD_C)
        (root / "grader" / "lessons" / f"test_{num}_x.py").write_text(
            "import pathlib\nfrom grader import points\n"
            f"@points(1, 'first')\ndef test_a(build):\n    {first}\n"
            + "".join(f"@points(1, '{t}')\ndef test_{t}(build):\n"
                      f"    pathlib.Path({str(ran)!r}, '{num}{t}').touch()\n"
                      for t in ("b", "c")))
    res = grade(root, "--first-loss", "--verbose-failures")
    assert res.stdout.rstrip().splitlines()[-1] == "Score: 3/6", res.stdout
    assert sorted(p.name for p in ran.iterdir()) == ["94b", "94c"]
    assert "not checked (skipped: --first-loss" in res.stdout, res.stdout


def test_fixtures_are_looked_for_once_in_what_the_warm_process_has():
    """forked.scan_fixtures: parsefactories goes through only the names of
    a scanned holder that held a fixture, and through every name of one
    that changed since (a fixture added) or was never scanned."""
    import types

    import pytest
    from _pytest import fixtures
    from grader.session import forked

    m = types.ModuleType("test_scanned_once")

    @pytest.fixture
    def given():
        return 1

    m.given, m.number, m.helper = given, 3, lambda: 0
    forked.scan_fixtures([m])
    assert fixtures.dir(m) == ["given"]

    @pytest.fixture
    def later():
        return 2

    m.later = later
    assert fixtures.dir(m) == dir(m) and "later" in fixtures.dir(m)
    other = types.ModuleType("test_never_scanned")
    other.given = given
    assert fixtures.dir(other) == dir(other)


class WarmServer:
    """The warm VM's grader (server.py --ahead) on a socket in `d` (made
    0700), its output in d/log; `code`: Python that runs instead of
    `-m grader.session.server` (a fault injected before its main)."""

    def __init__(self, d, code=None):
        from grader.core.build import grader_program
        d.mkdir(mode=0o700)
        self.sock, self.log = d / "sock", d / "log"
        self.client = str(grader_program(COURSE, "session/client.c"))
        run = ["-c", code] if code else ["-m", "grader.session.server"]
        with open(self.log, "w") as f:
            self.proc = subprocess.Popen(
                [sys.executable, *run, "--ahead", str(self.sock)],
                cwd=COURSE, stdout=f, stderr=subprocess.STDOUT,
                start_new_session=True)

    def lines(self, pattern):
        return [x for x in self.log.read_text().splitlines()
                if re.search(pattern, x)]

    def wait_for(self, what, n):
        deadline = time.monotonic() + 120
        while len(self.lines(what)) < n:
            assert self.proc.poll() is None and time.monotonic() < deadline, \
                f"no {n} x {what!r}:\n" + self.log.read_text()
            time.sleep(0.1)

    def request(self, root, args):
        """make grade's request (client.c) of a session of `args`, from
        `root`; it must be served warm: a client that grades the cold way
        says why on its stderr."""
        env = {"PATH": os.environ["PATH"], "GRADER_SERVER": str(self.sock),
               "PYTHONPATH": str(COURSE)}
        res = subprocess.run([self.client, sys.executable, "--", *args],
                             cwd=root, env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=300)
        assert "without the warm grader" not in res.stderr, \
            res.stderr + self.log.read_text()
        return res

    def stop(self):
        """The server killed; nothing of it is left: a session made ready
        ahead ends when its gate's other end (the server) is gone."""
        os.killpg(self.proc.pid, 9)
        self.proc.wait()
        deadline = time.monotonic() + 30
        while subprocess.run(["pgrep", "-f", str(self.sock)],
                             capture_output=True).returncode == 0:
            assert time.monotonic() < deadline, \
                "a session outlived the server"
            time.sleep(0.2)


def test_a_regrade_goes_to_the_session_made_ready_ahead(course, tmp_path):
    """The warm VM's grader (server.py --ahead) forks the grading it just
    ran again, to wait configured and collected at its gate: the same
    request again (another --results file) is handed to it and grades as
    a fresh session does, into its own stdout and results file. A changed
    lesson.toml or another request gets a fresh session; one that ended
    before its request (a usage error) is replaced by a fresh one that
    shows the error; none outlives the server."""
    import shutil
    root = tmp_path / "course"
    shutil.copytree(course, root, symlinks=True)
    server = WarmServer(tmp_path / "server")
    wait_for = server.wait_for
    runs = []

    def request(test, lesson="90"):
        out = tmp_path / f"out{len(runs)}"
        out.mkdir()
        # (make grade's transcripts go to one place; its results to a
        # directory of their own each time)
        args = [str(tmp_path / "t") if a == str(out / "t") else a
                for a in session_args(root, out)]
        res = server.request(root, [*args, f"--lesson={lesson}",
                                    f"--test={test}"])
        runs.append(res)
        return res, out, re.sub(r"\([0-9.]+s\)", "", res.stdout)

    def ahead():
        return len(server.lines(r"started \(made ready ahead\)"))

    log = server.log
    try:
        wait_for("grader server ready", 1)
        first, out0, shown = request("test_pass")
        assert first.returncode == 0 and "Score: 3/3" in shown, \
            first.stdout + first.stderr
        wait_for("made ready ahead$", 1)
        again, out1, shown1 = request("test_pass")
        assert ahead() == 1, log.read_text()
        assert (again.returncode, shown1, again.stderr) == \
            (first.returncode, shown, first.stderr)
        got = json.loads((out1 / "results.json").read_text())
        assert [(t["name"], t["score"]) for t in got["tests"]] == \
            [(t["name"], t["score"]) for t in json.loads(
                (out0 / "results.json").read_text())["tests"]]
        assert got["score"] == 3, got
        # A changed lesson.toml: a fresh session reads it.
        wait_for("made ready ahead$", 2)
        toml = root / "lessons" / "90-good" / "lesson.toml"
        toml.write_text(toml.read_text().replace("A good lesson",
                                                 "A renamed lesson"))
        fresh, _, shown2 = request("test_pass")
        assert "A renamed lesson" in shown2, shown2
        assert ahead() == 1, log.read_text()
        # Another request: a fresh session; the one made ready is ended.
        wait_for("made ready ahead$", 3)
        other, _, shown3 = request("test_wrong")
        assert "prints hello 43 ... FAIL" in shown3, shown3
        assert ahead() == 1, log.read_text()
        # A collection's usage error waits at the gate like any other,
        # and reaches the request's own stderr.
        for n in (1, 2):
            bad, _, _ = request("no_such_test")
            assert bad.returncode == 4 and "no test matches" in bad.stderr, \
                bad.stdout + bad.stderr
        assert ahead() == 2, log.read_text()
        # One that ends before its request (a configuration's usage
        # error): the next request is fresh and shows it.
        for n in (1, 2):
            bad, _, _ = request("test_pass", lesson="99")
            assert bad.returncode == 4 and "no lesson '99'" in bad.stderr, \
                bad.stdout + bad.stderr
            wait_for("made ready ahead ended: exit 4", n)
        assert ahead() == 2, log.read_text()
    finally:
        server.stop()


# The warm grader with its fork_session waiting until a fresh session (not
# one made ready ahead) has ended: the order of events of a server kept
# waiting while its session failed at once, every time.
ENDED_BEFORE_ITS_GATE = """
import os, sys
from grader.session import forked, server
fork = forked.fork_session
def ended_first(*args, **kwargs):
    pid = fork(*args, **kwargs)
    if not kwargs.get("ahead"):
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    return pid
forked.fork_session = ended_first
sys.exit(server.main(sys.argv[1:]))
"""


def test_a_session_that_ends_before_its_gate_is_the_requests_own(
        course, tmp_path):
    """A fresh session may end before the server opens its gate (a usage
    error found while it configures, while the server was kept waiting):
    it is still the request's session, served warm - its error on the
    client's stderr, its status the client's - and its grading is made
    ready ahead as any other's. (Fresh-clone run 158: the gate's write
    failed with EPIPE, and the client graded the cold way.)"""
    server = WarmServer(tmp_path / "server", code=ENDED_BEFORE_ITS_GATE)
    try:
        server.wait_for("grader server ready", 1)
        res = server.request(course, [*session_args(course, tmp_path),
                                      "--lesson=99"])
        assert (res.returncode, "no lesson '99'" in res.stderr) == (4, True), \
            res.stdout + res.stderr
        server.wait_for("made ready ahead ended: exit 4", 1)
        assert len(server.lines(r"session \d+ started: .*--lesson=99$")) == 1 \
            and len(server.lines(r"session \d+ ended: exit 4$")) == 1, \
            server.log.read_text()
    finally:
        server.stop()


# The warm grader with each session made ready ahead held back until its
# request has been handed to it (its gate readable): the order of events of
# a request that came while the session was still failing, every time.
HANDED_BEFORE_IT_ENDED = """
import select, sys
from grader.session import forked, server
fork = forked.fork_session
def handed_first(*args, **kwargs):
    if kwargs.get("ahead"):
        entry, gate = kwargs["entry"], kwargs["gate"]
        def after_handing(argv):
            select.select([gate], [], [])
            return entry(argv)
        kwargs["entry"] = after_handing
    return fork(*args, **kwargs)
forked.fork_session = handed_first
sys.exit(server.main(sys.argv[1:]))
"""


def test_a_session_made_ready_ahead_that_ends_once_handed_shows_why(
        course, tmp_path):
    """A session made ready ahead may be handed its request and then end
    before it reads its gate (a configuration's usage error, found while
    the request came): what it wrote before its gate - the error - reaches
    the request's stderr with its status. (Before, the client got exit 4
    and not a word.)"""
    server = WarmServer(tmp_path / "server", code=HANDED_BEFORE_IT_ENDED)
    try:
        server.wait_for("grader server ready", 1)
        args = [*session_args(course, tmp_path), "--lesson=99"]
        fresh = server.request(course, args)
        assert (fresh.returncode, fresh.stderr.count("no lesson '99'")) == \
            (4, 1), fresh.stdout + fresh.stderr
        server.wait_for("made ready ahead$", 1)
        handed = server.request(course, args)
        assert len(server.lines(r"started \(made ready ahead\)")) == 1, \
            server.log.read_text()
        assert (handed.returncode, handed.stdout, handed.stderr) == \
            (fresh.returncode, fresh.stdout, fresh.stderr)
    finally:
        server.stop()
