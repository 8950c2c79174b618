"""Lesson 13's summary line (grader/lessons/test_13_throughput.py,
rates_problem()): MB/s is N x SIZE / T / 2^20, and the WRITE stream's SIZE
leaves the check able to tell that from 10^6 at any speed. Fresh-clone run
176: the mutant 13/mb-decimal (10^6) lost no points, its stream of 16 B
messages printing about 0.01 MB/s, where 10^6 against 2^20 moves the
figure less than half its last printed digit."""

import pytest

from grader.lessons.test_13_throughput import WRITE_SIZES, rates_problem

N = 240     # shape()'s fewest messages


def line(n, size, secs, mb):
    """The Mmsg/s and MB/s as bw.c prints them (%.6f, %.3f)."""
    return f"{n / secs / 1e6:.6f}", f"{n * size / secs / mb:.3f}"


# From 0.03 s for the stream to 10 s (lesson 13's README shows 1000 WRs
# of 64 KiB in 1.8 s), at the smallest and the largest SIZE the WRITE
# stream is given.
@pytest.mark.parametrize("secs", [0.03, 0.4, 4.0, 10.0])
@pytest.mark.parametrize("size", WRITE_SIZES)
def test_mb_per_s_in_10_to_the_6_is_refused_at_any_speed(size, secs):
    assert rates_problem(N, size, secs, *line(N, size, secs, 1e6))


@pytest.mark.parametrize("secs", [0.03, 0.4, 4.0, 10.0])
@pytest.mark.parametrize("size", WRITE_SIZES)
def test_mb_per_s_in_2_to_the_20_is_accepted(size, secs):
    assert rates_problem(N, size, secs, *line(N, size, secs, 1 << 20)) is None


def test_16_byte_messages_hid_the_10_to_the_6():
    # why the WRITE stream's SIZE starts at 1 KiB: the check is blind below
    # half a unit of the last digit
    assert rates_problem(N, 16, 0.18, *line(N, 16, 0.18, 1e6)) is None
