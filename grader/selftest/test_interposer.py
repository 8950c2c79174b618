"""The interposer the lesson tests preload (grader/evidence/interpose/verbs_spy.c)
builds warning-free, here on the host, so that the device half reuses it."""

from conftest import COURSE

from grader.evidence.interpose import build_interposer


def test_interposer_builds():
    lib = build_interposer(COURSE)
    assert lib.exists() and lib.stat().st_size > 0
    assert build_interposer(COURSE) == lib      # cached by content
