"""Lesson 15's benchmark runs (grader/lessons/test_15_kv_store_peer.py,
twice()): a run that failed in its READs (the failure marked `again`) is
run once more, and the second run is the grade. Fresh-clone make test (run 31): the solution's client lost both
throughput tests when rxe answered one of its thousands of READs, of the
advertised table with the advertised rkey, with 'remote access error'."""

import json

import pytest

from grader import GradeFailure
from grader.core.harness import Result
from grader.lessons import test_15_kv_store_peer as kv15
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


# ---- client_bench_run() on stand-ins: the failure's mark -------------------------

class _Peer:
    """A reference peer that has ended: its peer-result line, if any."""

    def __init__(self, cmd, record):
        self.port, self.cmd, self.record = 4791, cmd, record

    def wait(self, timeout=None):
        out = ("" if self.record is None else
               "peer-result " + json.dumps(self.record) + "\n")
        return Result(self.cmd, 0, out, "", 0.1, timed_out=False, timeout=1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Client:
    """The program's client: it exits 1 in a READ's completion error."""

    proc = type("P", (), {"pid": 4242})()

    def wait(self, timeout=None):
        return Result(["kv_client", "--bench"], 1, "preloaded 32 keys\n",
                      "rdma read: completion error: remote access error "
                      "(status 10, vendor_err 0x0)\n", 1.0, timed_out=False,
                      timeout=timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Rdma:
    ip, peer_jobs = "192.0.2.1", None

    def counters(self):
        return 0


def _bench_runs(monkeypatch, served):
    """twice(client_bench_run) with the client failing in every run and
    the reference server's record showing `served` requests of it (the
    server ends when the client's TCP connection closes: its verdict
    says so, the reference client's never comes). The runs made."""
    made = []

    def server(*opts, here=False):
        made.append(opts)
        mine = {"remote_qp": {"pid": _Client.proc.pid}, "t_go": 1.0,
                **_served(served)}
        return _Peer(["kv.py", "server"], {
            "ok": False, "error": "client 0x000077 closed its TCP connection "
            "before its BYE", "clients": [mine]})

    monkeypatch.setattr(kv15, "kv_server", server)
    monkeypatch.setattr(kv15, "kv_client", lambda *o, **k: _Peer(
        ["kv.py", "client"], None))
    build = type("B", (), {"start": lambda self, *a, **k: _Client()})()
    with pytest.raises(GradeFailure) as got:
        twice(lambda: kv15.client_bench_run(build, _Rdma()))
    return len(made), str(got.value)


def test_a_client_that_failed_in_its_reads_is_run_again(monkeypatch):
    """Fresh-clone make test (the stop of 961f23d): the solution's client
    ended in 'remote access error' after its preload, and its failure was
    not marked `again`: the reference client's missing verdict was
    raised before the reference server's record was read."""
    runs_made, err = _bench_runs(monkeypatch, BENCH_KEYS)
    assert runs_made == 2
    assert err.startswith("kv_client --bench against the reference server")
    assert "remote access error" in err
    assert "the first of two runs failed too" in err


def test_a_client_that_failed_before_its_reads_is_not_run_again(monkeypatch):
    runs_made, err = _bench_runs(monkeypatch, BENCH_KEYS - 1)
    assert runs_made == 1
    assert "exited with status 1" in err
