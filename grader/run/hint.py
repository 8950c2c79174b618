"""python3 -m grader hint --lesson NN [--test NAME] (make hint): the next
hint for a test, after the ones its failure showed.

Without --test, the lesson's first failing test in the last grading
(.grade/status.json). .grade/hints.json remembers how many were shown. A
failure shown in full printed the test's first hint, unless its output
matched the lesson's symptoms: then it showed their causes instead
(status.json: first_failing_causes) and make hint starts at the first
hint. A failure that was not shown in full (a later lesson of a long
grading, a later failure of a lesson) showed no hint either. Hints are
counted per failure (its likely causes and its first line, numbers and
paths blanked: status.json's "why"): a different failure of the same test
starts again at the first hint."""

import argparse
import json
import sys
import tomllib

from grader.core.course import COURSE, parse_lessons

SHOWN = COURSE / ".grade" / "hints.json"
STATUS = COURSE / ".grade" / "status.json"


def _load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _where_to_look(name):
    """Where to read on when the hints are used up."""
    readme = COURSE / "lessons" / name / "README.md"
    try:
        text = readme.read_text()
    except OSError:
        text = ""
    parts = [f"'{h}'" for h in ("Common failures", "Debugging")
             if f"\n## {h}\n" in text]
    read = (f"Read lessons/{name}/README.md: {' and '.join(parts)}, and "
            if parts else "Read ")
    return (f"{read}the transcript under .grade/transcripts/{name}/ "
            f"(every command the test ran, with its output).")


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m grader hint")
    ap.add_argument("--lesson", required=True)
    ap.add_argument("--test", default="")
    args = ap.parse_args(argv)
    name = parse_lessons(args.lesson)[0]
    meta = tomllib.loads((COURSE / "lessons" / name / "lesson.toml").read_text())
    hints = dict(meta.get("hints", {}))
    test = args.test
    last = _load(STATUS).get(name, {})
    if not test:
        test = last.get("first_failing_test", "")
        if not test and last:
            untried = last.get("not_graded") or []
            rest = (f"; {len(untried)} of its tests were not graded yet: "
                    f"make grade LESSON={name[:2]}" if untried else "")
            print(f"{name}: nothing is failing ({last['got']}/"
                  f"{last['total']} in the last grading, {last['when']}"
                  f"{rest}): no hint to give.")
            return 0
        if not test:
            print(f"no failing test of {name} in the last grading: "
                  f"make grade LESSON={name[:2]} first, or name one: "
                  f"make hint LESSON={name[:2]} TEST=test_...")
            return 1
    # A test without hints of its own shows the lesson's (as the failure
    # block does).
    tests = set(hints) | set(last.get("tests", {}))
    matches = [t for t in tests if test == t] or \
        sorted(t for t in tests if test in t)
    if len(matches) != 1:
        print(f"TEST={test}: " + ("no such test" if not matches else
                                  "more than one test matches")
              + f"; tests of {name}: " + " ".join(sorted(tests)),
              file=sys.stderr)
        return 2
    test = matches[0]
    tiers = hints.get(test) or meta.get("hint") or []
    tiers = tiers if isinstance(tiers, list) else [tiers]
    if not tiers:
        print(f"{test}: the course has no hint for it. {_where_to_look(name)}")
        return 0
    shown = _load(SHOWN)
    # What the failure block of the last grading showed in its place.
    rec = last.get("tests", {}).get(test)
    if rec is None and test == last.get("first_failing_test"):
        rec = {"causes": last.get("first_failing_causes", []),
               "hint_shown": last.get("first_failing_hint_shown", True)}
    causes = (rec or {}).get("causes") or []
    # Counted per failure, not per test: once one mistake is fixed, the
    # next, different one of the same test starts at the first hint.
    why = (rec or {}).get("why", "")
    key = f"{name}/{test}" + (f"/{' '.join(causes)}/{why}"
                              if causes or why else "")
    hint_seen = bool(rec and rec.get("hint_shown") and not causes)
    first = 1 if hint_seen else 0
    n = max(shown.get(key, first), first)
    if n >= len(tiers):
        print(f"{test}: no more hints (all {len(tiers)} shown). "
              f"{_where_to_look(name)}")
        return 0
    if causes and n == 0:
        from grader.session.symptoms import load
        rows = {s.id: s.row for s in load(meta)}
        print(f"{test}: its failure showed the likely cause (lessons/{name}/"
              f"README.md, Common failures: "
              + "; ".join(rows.get(i, i) for i in causes) + ").")
    print(f"{test}, hint {n + 1} of {len(tiers)}:\n  {tiers[n]}")
    shown[key] = n + 1
    SHOWN.parent.mkdir(parents=True, exist_ok=True)
    SHOWN.write_text(json.dumps(shown, indent=2) + "\n")
    return 0
