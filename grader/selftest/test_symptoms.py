"""grader/session/symptoms.py on its own: the evidence a failed test leaves, how
symptoms match and rank, and the README table they render."""

import pytest

from grader.core import harness
from grader.session import symptoms
from grader.evidence.rxe import Counters


def _load(toml_entries):
    return symptoms.load({"symptom": toml_entries})


def test_evidence_is_the_students_runs_and_the_counters():
    t = harness.new_transcript()
    ok = harness.Result(["/x/prog", "-n", "1"], 1, "out line\n", "err line\n",
                        0.1, False, 10)
    ok.prog = "prog"
    hung = harness.Result(["/x/srv"], -9, "bye\n", "", 10.0, True, 10,
                          final=r"^bye$")
    peer = harness.Result(["peer.py"], 1, "peer says\n", "peer err\n", 0.1,
                          False, 10)
    t.runs += [(ok, True), (hung, True), (peer, False)]
    Counters({"rdma_sends": 5, "rdma_recvs": 2}) - Counters({"rdma_sends": 3,
                                                            "rdma_recvs": 2})
    ev = symptoms.evidence(t, "the message")
    assert ev["stdout"] == "out line\nbye\n"           # not the peer's
    assert ev["stderr"] == "err line\n"
    assert ev["result"] == ("prog: exited with status 1\nsrv: killed by the "
                            "grader after 10 s: it hung after its last "
                            "output (during cleanup?)\n")
    assert ev["counters"] == "rdma_sends +2\n"          # only what moved
    assert ev["failure"] == "the message"


def test_evidence_has_the_interposers_record_of_the_tests_runs(tmp_path):
    from grader.evidence.interpose import Spy
    t = harness.new_transcript()
    spy = Spy(tmp_path / "verbs_spy.so")
    assert t.spies == [spy]                 # a Spy made in a test is its
    from grader.evidence.interpose import seal
    spy.log.write_bytes(seal(b"req_notify_cq solicited=1 rc=0\n", spy.key))
    ev = symptoms.evidence(t, "msg")
    assert ev["calls"] == "req_notify_cq solicited=1 rc=0\n"
    sym = _load([{"id": "s", "row": "r", "cause": "c",
                  "calls": "^req_notify_cq solicited=1 "}])
    assert symptoms.diagnose(sym, "test_x", ev) == sym


def test_all_conditions_must_match_and_more_of_them_rank_first():
    syms = _load([
        {"id": "any", "row": "r", "cause": "c1", "stderr": "failed"},
        {"id": "rnr", "row": "r", "cause": "c2", "stderr": "failed",
         "counters": r"^rnr \+"},
        {"id": "only-x", "row": "r", "cause": "c3", "stderr": "failed",
         "tests": ["test_x"]},
        {"id": "never", "row": "r", "cause": "c4", "stderr": "failed",
         "stdout": "nothing like this"},
    ])
    ev = {"stderr": "a failed\n", "stdout": "", "counters": "rnr +3\n"}
    assert [s.id for s in symptoms.diagnose(syms, "test_x", ev)] == [
        "rnr", "only-x", "any"]
    assert [s.id for s in symptoms.diagnose(syms, "test_y", ev)] == [
        "rnr", "any"]
    assert symptoms.diagnose(syms, "test_y", {"stderr": "fine"}) == []


@pytest.mark.parametrize("entry, complaint", [
    ({"row": "r", "cause": "c", "stderr": "x"}, "needs `id`"),
    ({"id": "a", "row": "r", "cause": "c"}, "no condition"),
    ({"id": "a", "row": "r", "cause": "c", "stdrr": "x"}, "unknown keys"),
    ({"id": "a", "row": "r", "cause": "c", "stderr": "("}, "bad regex"),
])
def test_a_malformed_symptom_is_refused(entry, complaint):
    with pytest.raises(ValueError, match=complaint):
        _load([entry])


def test_the_table_renders_and_is_found_again(tmp_path):
    syms = _load([{"id": "a", "row": "`x failed`", "cause": "do y (TODO 1).",
                   "stderr": "x"}])
    readme = tmp_path / "README.md"
    readme.write_text("# 99\n\n## Common failures\n\n| old | table |\n"
                      "| --- | --- |\n| a | b |\n\nProse after it.\n\n"
                      "## Next\n")
    symptoms.write_table(readme, syms)
    text = readme.read_text()
    assert symptoms.readme_table(text) == symptoms.render_table(syms) == (
        "| symptom | cause |\n| --- | --- |\n| `x failed` | do y (TODO 1). |\n")
    assert "Prose after it.\n\n## Next\n" in text
    assert symptoms.readme_table("# 99\n\n## Other\n") is None
