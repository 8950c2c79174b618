"""The files a grading session writes about its results, from the
plugin's Grader `g` (its items, outcomes, builds):

- results.json (--results): Gradescope's format, each test's score,
  status (passed, failed, pending) and output;
- the summary (--summary): per lesson got/total, compiled, hung (the class
  run's gradebook reads it);
- .grade/status.json (--status): per lesson and per test where it stands,
  each test's last result kept across TEST= runs (make status, make hint).
"""

import fcntl
import json
import re
import time

from grader.session.lesson import short_test_name


def write_results(g, path):
    """results.json (Gradescope's format): each test's score, status and
    output, the total, what is graded on submission."""
    got, total = g.score()
    tests = []
    for nodeid, (num, pts, title) in g.items.items():
        rec = g.outcome.get(nodeid, {"passed": False, "output":
                                        "not run", "duration": 0})
        # Gradescope's free-form field: the test's function and, for a
        # failure, the ids of the [[symptom]] rows it matched, most
        # specific first (make grade-class's class report counts them).
        extra = {"test": short_test_name(nodeid)}
        if not rec["passed"] and not rec.get("pending"):
            extra["symptoms"] = list(g.causes.get(nodeid, []))
        tests.append({
            "name": f"{g.lesson(num).name}: {title}",
            "score": pts if rec["passed"] else 0,
            "max_score": pts,
            "status": ("passed" if rec["passed"] else
                       "pending" if rec.get("pending") else "failed"),
            "output": rec["output"],
            "execution_time": round(rec["duration"], 2),
            "extra_data": extra,
        })
    data = {"score": got, "max_score": total,
            "execution_time": round(time.monotonic() - g.started, 1),
            "output": f"{g.score_line()} (SRC={g.src})",
            "tests": tests}
    if g.pending():
        data["graded_on_submission"] = g.pending()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_summary(g, path):
    """Per lesson: got, total, compiled (False: a compile error or no
    files), hung (the command of a program that hung, or null)."""
    lessons = {}
    for num in sorted({n for n, _, _ in g.items.values()}):
        got, total = g.subtotal(num)
        b = g.builds.get(num)
        lessons[g.lesson(num).name] = {
            "got": got, "total": total,
            "compiled": None if b is None else not b.error,
            "hung": b.hung if b else None}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"lessons": lessons}, indent=2) + "\n")


def failure_signature(rec):
    """The first line of a failure, its numbers and paths blanked: the same
    mistake graded again keeps its signature (ports, PIDs, timings and
    scratch paths differ from run to run); another mistake changes it.
    "" for a test that passed."""
    if rec.get("passed"):
        return ""
    line = (rec.get("output") or "").strip().splitlines()[:1]
    line = line[0] if line else ""
    line = re.sub(r"/\S+", "PATH", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)[:200]


def save_status(g, path):
    """.grade/status.json: per lesson, where it stands (make status
    reads it; make hint reads its first failing test). Each test's
    last result is kept: a TEST= run updates its tests and leaves the
    others' results as the last grading left them."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(path.name + ".lock"), "a")
    except OSError:
        return
    # Shards of one grading write their lessons side by side.
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _update_status(g, path)


def _update_status(g, path):
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        status = {}
    when = time.strftime("%Y-%m-%d %H:%M")
    for num in sorted({n for n, _, _ in g.items.values()}):
        name = g.lesson(num).name
        old = status.get(name, {})
        known = (old.get("tests", {}) if g.test_filter and
                 old.get("src") == str(g.src) else {})
        tests = {}
        # Every test of the lesson, in the order of its files.
        for test, (pts, title) in g.all_tests.get(num, {}).items():
            tests[test] = known.get(test) or {
                "title": title, "points": pts, "passed": None}
        for nid, (n, pts, title) in g.items.items():
            if n == num and nid in g.outcome:
                tests[short_test_name(nid)] = {
                    "title": title, "points": pts, "when": when,
                    "passed": bool(g.outcome[nid]["passed"]),
                    "pending": bool(g.outcome[nid].get("pending")),
                    "causes": g.causes.get(nid, []),
                    # what failed, for make hint: a different failure of
                    # the same test starts its hints again
                    "why": failure_signature(g.outcome[nid]),
                    # its block was shown in full, with its hint
                    # unless causes stood in for it
                    "hint_shown": nid in g.hint_shown}
        first = next((t for t, r in tests.items()
                      if r["passed"] is False
                      and not r.get("pending")), "")
        rec = tests.get(first, {})
        status[name] = {
            "got": sum(r["points"] for r in tests.values()
                       if r["passed"]),
            "total": sum(r["points"] for r in tests.values()),
            "pending": sum(r["points"] for r in tests.values()
                           if r.get("pending")),
            "when": when, "src": str(g.src),
            # what this grading ran: the whole lesson, or TEST=
            "test_filter": g.test_filter,
            "not_graded": [t for t, r in tests.items()
                           if r["passed"] is None],
            "first_failing": rec.get("title", ""),
            "first_failing_test": first,
            # The failure showed these causes instead of the test's
            # first hint: make hint starts at that hint.
            "first_failing_causes": rec.get("causes", []),
            "first_failing_hint_shown": rec.get("hint_shown", False),
            "tests": tests}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(status, indent=2) + "\n")
    except OSError:
        pass
