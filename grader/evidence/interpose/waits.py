"""The shape of a program's waits for completions, from an interposer
record taken with VERBS_SPY_EMPTY=1 (verbs_spy.c: `poll_empty` once per
run of polls that found nothing, `req_notify_cq`, `get_cq_event`, and
`vcsw=` on each completion, the thread's voluntary context switches, and
`run=`/`at=` on each post and completion, how long the threads have been
runnable and when).

Lesson 10's event mode waits correctly when each wait that finds nothing
arms the CQ, polls once more and sleeps on the channel until its event. A
correct program the scheduler held up past the completion finds it at its
first look or by the poll right after arming, and takes no event for it:
the shape, not a count of events, is what holds at any speed.
"""

IBV_WC_RECV = 128
WORDS = {"E": "a poll that found nothing", "A": "armed the CQ",
         "G": "took an event"}


def pong_waits(calls):
    """What is wrong with each wait for a RECV completion (a pong) in an
    interposer record taken with VERBS_SPY_EMPTY: "" for a wait that found
    it at its first look, by the poll right after arming the CQ, or after
    an event; else what the wait did instead. A wait is what the record
    holds between the completion before and the pong's."""
    out, seg, before = [], [], None
    for name, c in calls:
        if name == "poll_empty":
            seg.append("E")
        elif name == "req_notify_cq":
            seg.append("A")
        elif name == "get_cq_event" and c.get("rc") == "0":
            seg.append("G")
        elif name == "poll_cq":
            if c.get("opcode") == str(IBV_WC_RECV):
                out.append(_wait_problem(seg, before, c))
            seg, before = [], c
    return out


def _shape(seg):
    words = [WORDS[t] for t in seg]
    if len(words) > 6:
        words = words[:3] + [f"... ({len(words) - 5} more)"] + words[-2:]
    return ", ".join(words)


def _wait_problem(seg, before, wc):
    for k, t in enumerate(seg):
        nxt = seg[k + 1] if k + 1 < len(seg) else "W"
        shape = _shape(seg[:k + 1])
        if t == "E" and k and seg[k - 1] == "A" and nxt != "G":
            then = "found the pong" if nxt == "W" else WORDS[nxt]
            return (f"{shape}, then {then}: after arming the CQ and "
                    f"finding nothing it did not sleep on the channel for "
                    f"the event")
        if t == "E" and nxt == "W":
            return (f"{shape}, then found the pong with nothing between "
                    f"the empty polls and it: it waited without the "
                    f"channel (a spin or a nap)")
    if not seg and before is not None and \
            before.get("vcsw") != wc.get("vcsw"):
        return ("its first poll found the pong, but the thread had slept "
                f"since the completion before ({before.get('vcsw')} -> "
                f"{wc.get('vcsw')} voluntary context switches): it waited "
                f"without the channel before it looked")
    return ""


def runnable_share(calls):
    """The share of the window (the first post_send to the last successful
    completion) in which the program's threads were runnable, summed
    (running or waiting for a CPU: /proc's schedstat, read by the
    interposer at each end), or None when the record has no such
    readings. A thread that spins is runnable all of the window at any
    load; one that sleeps on the channel only while it works."""
    marks = [(int(c["at"]), int(c["run"])) for name, c in calls
             if "run" in c and "at" in c and (
                 name == "post_send" or
                 (name == "poll_cq" and c.get("status") == "0"))]
    if len(marks) < 2 or marks[-1][0] <= marks[0][0]:
        return None
    return (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0])
