"""grader/evidence/interpose/waits.py: lesson 10's test_cpu reads the shape
of each wait for a pong from the interposer's record. A correct program
passes whatever the scheduler did to it (a fresh-clone make test at load
15: the solution found one pong at its first look after a stall, took 4
events for 5 pongs and lost 3 points when the test counted events); a
program that naps or spins between polls fails however its naps fall."""

from grader.evidence.interpose.waits import pong_waits, runnable_share

SEND, RECV = "0", "128"


def _record(*steps, vcsw=("3", "3")):
    """A record: 'W' the send's completion, then the pong's wait's steps
    (E empty poll, A arm, G event), then the pong's completion; the
    thread's voluntary switches at the two completions."""
    calls = [("post_send", {"opcode": "2"}),
             ("poll_cq", {"opcode": SEND, "status": "0", "vcsw": vcsw[0]})]
    names = {"E": ("poll_empty", {}), "A": ("req_notify_cq", {"rc": "0"}),
             "G": ("get_cq_event", {"rc": "0"})}
    calls += [names[s] for s in steps]
    calls.append(("poll_cq", {"opcode": RECV, "status": "0",
                              "vcsw": vcsw[1]}))
    return calls


def test_the_lessons_wait_passes_in_every_order_the_pong_can_come():
    for steps in ("EAEG",          # slept until the event
                  "EAEGEAEG",      # a stale event first, then its own
                  "EA",            # the poll after arming found it
                  "",              # held up past the pong: the first look
                  "EAEGEA"):       # woken early, found after re-arming
        assert pong_waits(_record(*steps)) == [""], steps


def test_a_spin_before_arming_passes_this_test():
    # (its CPU is test_cpu's second check)
    assert pong_waits(_record(*"EAEG")) == [""]


def test_naps_after_arming_fail_whenever_the_pong_is_found():
    # usleep() between polls after the first event, arming each time
    for steps in ("EAEAEAEA", "EAEAEAE", "EAE"):
        why, = pong_waits(_record(*steps))
        assert "did not sleep on the channel" in why, steps


def test_a_spin_or_nap_without_arming_fails():
    why, = pong_waits(_record("E"))
    assert "without the channel (a spin or a nap)" in why
    why, = pong_waits(_record(*"EAEGE"))
    assert "a spin or a nap" in why


def test_a_first_look_after_sleeping_some_other_way_fails():
    why, = pong_waits(_record(vcsw=("3", "4")))
    assert "the thread had slept" in why and "3 -> 4" in why


def test_only_the_pongs_waits_are_judged():
    calls = _record(*"EAEG") + [("poll_empty", {}),
                                ("poll_cq", {"opcode": SEND, "status": "0"})]
    assert pong_waits(calls) == [""]


def test_a_long_wait_is_shown_short():
    why, = pong_waits(_record(*("EAEG" * 50 + "E")))
    assert "more)" in why and len(why) < 400


def test_the_runnable_share_is_of_the_first_post_to_the_last_completion():
    calls = [("post_recv", {}),
             ("post_send", {"at": "1000", "run": "50"}),
             ("poll_empty", {}),
             ("poll_cq", {"status": "5", "at": "9000", "run": "9000"}),
             ("poll_cq", {"status": "0", "at": "3000", "run": "550"}),
             ("get_cq_event", {"rc": "0"})]
    # 500 ns runnable of 2000: the failed completion is no end of it
    assert runnable_share(calls) == 0.25


def test_no_readings_no_share():
    assert runnable_share(_record(*"EAEG")) is None
    assert runnable_share([("post_send", {"at": "1", "run": "1"})]) is None
