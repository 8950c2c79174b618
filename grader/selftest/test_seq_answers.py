"""Lesson 18's questions (test_answers): a program that takes the line with
the shortest (longest) T for the fastest (slowest) mode is named for it
(symptom time-not-rate) in whichever check it fails first. On a loaded
host the grading's own run can make the slowest modes a tie (rates within
TIE): that mistake then picked a mode the tie allows and failed only the
ratio, where the symptom's note was missing (fresh-clone run 110, beside
a second make test: mutant 18/time-not-rate, rc 13.69 and ud 14.59
numbers per second, the answer 20.7 for the truth's 22.1)."""

import tomllib

import pytest

from conftest import COURSE
from grader import GradeFailure
from grader.lessons import test_18_sequencer as t18
from grader.session import symptoms


class Ran:
    """A `seq --answers` run that exited 0."""

    def ok(self, what):
        pass


def _line(mode, c, n, secs):
    return (mode, c, n, secs, t18.summary_text(mode, c, n, secs, 1.0, 2.0))


# Run 110's rates; faa's T the shortest, ud's the longest.
TIED = [_line("faa", 1, 1000, 1000 / 302.355), _line("rc", 1, 100, 100 / 13.6904),
        _line("ud", 1, 200, 200 / 14.5909)]


def _failure(got, lines):
    with pytest.raises(GradeFailure) as e:
        t18.check_answers(got, Ran(), "answers-run.txt", lines, "a run")
    return str(e.value)


def _time_not_rate():
    meta = tomllib.loads((COURSE / "lessons/18-sequencer/lesson.toml")
                         .read_text())
    return next(s for s in symptoms.load(meta) if s.id == "time-not-rate")


def _by_t(lines):
    """What the mistake answers: the shortest and longest T's modes and
    their rates' ratio."""
    by_t = sorted(lines, key=lambda x: x[3])
    return {"fastest": by_t[0][0], "slowest": by_t[-1][0],
            "times": f"{t18.line_rate(by_t[0]) / t18.line_rate(by_t[-1]):.1f}"}


def test_in_a_tie_the_ratio_of_the_shortest_and_longest_t_is_named():
    assert t18.truth(TIED)["slowest"] == {"rc", "ud"}
    got = _by_t(TIED)
    assert got == {"fastest": "faa", "slowest": "ud", "times": "20.7"}
    why = _failure(got, TIED)
    assert why.startswith("question times")
    assert _time_not_rate().matches("test_answers", {"failure": why}), why


def test_the_shortest_t_taken_for_the_fastest_is_named_first():
    lines = [_line("faa", 1, 5000, 1.0), _line("rc", 1, 10, 0.01),
             _line("ud", 1, 100, 10.0)]
    why = _failure(_by_t(lines), lines)
    assert why.startswith("question fastest")
    assert _time_not_rate().matches("test_answers", {"failure": why}), why


def test_another_wrong_ratio_has_no_such_note():
    why = _failure({"fastest": "faa", "slowest": "ud", "times": "35.0"}, TIED)
    assert why.startswith("question times")
    assert not _time_not_rate().matches("test_answers", {"failure": why}), why


def test_the_right_answers_pass_in_a_tie():
    for slowest in ("rc", "ud"):
        t18.check_answers({"fastest": "faa", "slowest": slowest,
                           "times": "22.1"}, Ran(), "answers-run.txt", TIED,
                          "a run")
