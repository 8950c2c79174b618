"""Lesson 15's benchmark runs (grader/lessons/test_15_kv_store_peer.py,
twice()): a run that failed in its READs (the failure marked `again`) is
run once more, and the second run is the grade. Fresh-clone make test (run 31): the solution's client lost both
throughput tests when rxe answered one of its thousands of READs, of the
advertised table with the advertised rkey, with 'remote access error'."""

import pytest

from grader import GradeFailure
from grader.core.harness import Result
from grader.lessons.test_15_kv_store_peer import (BENCH_KEYS, again,
                                                   reads_began, twice)


def runs(*outcomes):
    """A run() that gives each outcome in turn (raising the failures),
    and the list of the runs it made."""
    made = []

    def run():
        out = outcomes[len(made)]
        made.append(out)
        if isinstance(out, Exception):
            raise out
        return out
    return run, made


def test_a_run_that_passes_is_not_run_again():
    run, made = runs("first")
    assert twice(run) == "first"
    assert len(made) == 1


def test_a_failed_run_is_run_once_more_and_the_second_counts():
    run, made = runs(again(GradeFailure("kv_client --bench: expected exit "
                                        "status 0, got: exited with status "
                                        "1\n  stderr"), True),
                     "second")
    assert twice(run) == "second"
    assert len(made) == 2


def test_a_run_that_failed_before_its_reads_is_not_run_again():
    for err in (GradeFailure("kv_client --bench: expected exit status 0, "
                             "got: exited with status 1"),
                again(GradeFailure("the reference server: says: no request "
                                   "from any client within 10 s"), False)):
        run, made = runs(err, "second")
        with pytest.raises(GradeFailure):
            twice(run)
        assert len(made) == 1


def test_two_failed_runs_fail_with_both_shown():
    run, made = runs(again(GradeFailure("first: exited with status 1\n  "
                                        "more"), True),
                     again(GradeFailure("second: exited with status 1"), True),
                     "never")
    with pytest.raises(GradeFailure) as got:
        twice(run)
    assert len(made) == 2
    assert str(got.value).startswith("second: exited with status 1")
    assert "the first of two runs failed too: first: exited with " \
           "status 1" in str(got.value)
    assert "more" not in str(got.value)


def _client(returncode=1, timed_out=False):
    return Result(["kv_client", "--bench"], returncode, "", "", 1.0,
                  timed_out=timed_out, timeout=120)


def _served(n):
    return {"requests": [{"seq": i, "op": "put"} for i in range(n)]}


def test_the_reads_began_once_the_server_answered_the_whole_preload():
    assert reads_began(_client(), _served(BENCH_KEYS))
    assert reads_began(_client(), _served(BENCH_KEYS + 1))
    # The skeleton: one PUT answered, then it waited for its reply.
    assert not reads_began(_client(), _served(1))
    assert not reads_began(_client(), _served(BENCH_KEYS - 1))
    assert not reads_began(_client(), None)


def test_a_run_that_hung_is_not_run_again():
    hung = _client(returncode=-9, timed_out=True)
    assert not reads_began(hung, _served(BENCH_KEYS))
    run, made = runs(again(GradeFailure("kv_client --bench: expected exit "
                                        "status 0, got: killed by the grader "
                                        "after 120 s"),
                           reads_began(hung, _served(BENCH_KEYS))),
                     "second")
    with pytest.raises(GradeFailure, match="killed by the grader"):
        twice(run)
    assert len(made) == 1
