"""python3 -m grader hint --lesson NN [--test NAME] (make hint): the next
hint for a test, after the one its failure showed.

Without --test, the lesson's first failing test in the last grading
(.grade/status.json). .grade/hints.json remembers how many were shown. A
failure whose output matched the lesson's symptoms showed their causes
instead of the first hint (status.json: first_failing_causes): then make
hint starts at the first."""

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


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m grader hint")
    ap.add_argument("--lesson", required=True)
    ap.add_argument("--test", default="")
    args = ap.parse_args(argv)
    name = parse_lessons(args.lesson)[0]
    meta = tomllib.loads((COURSE / "lessons" / name / "lesson.toml").read_text())
    hints = meta.get("hints", {})
    test = args.test
    last = _load(STATUS).get(name, {})
    if not test:
        test = last.get("first_failing_test", "")
        if not test:
            print(f"no failing test of {name} in the last grading: "
                  f"make grade LESSON={name[:2]} first, or name one: "
                  f"make hint LESSON={name[:2]} TEST=test_...")
            return 1
    matches = [t for t in hints if test == t] or \
        [t for t in hints if test in t]
    if len(matches) != 1:
        print(f"TEST={test}: " + ("no such test" if not matches else
                                  "more than one test matches")
              + f"; tests of {name} with hints: " + " ".join(sorted(hints)),
              file=sys.stderr)
        return 2
    test = matches[0]
    tiers = hints[test] if isinstance(hints[test], list) else [hints[test]]
    shown = _load(SHOWN)
    key = f"{name}/{test}"
    # The failure showed the first hint, or (when symptoms matched) the
    # likely causes in its place.
    showed_causes = (test == last.get("first_failing_test")
                     and last.get("first_failing_causes"))
    first = 0 if showed_causes else 1
    n = max(shown.get(key, first), first)
    if n >= len(tiers):
        print(f"{test}: no more hints (the failure showed the last). Read "
              f"lessons/{name}/README.md: 'Common failures' and "
              f"'Debugging', and the transcript under .grade/transcripts/"
              f"{name}/.")
        return 0
    if showed_causes and n == 0:
        from grader.session.symptoms import load
        rows = {s.id: s.row for s in load(meta)}
        print(f"{test}: its failure showed the likely cause (lessons/{name}/"
              f"README.md, Common failures: "
              + "; ".join(rows.get(i, i) for i in showed_causes) + ").")
    print(f"{test}, hint {n + 1} of {len(tiers)}:\n  {tiers[n]}")
    shown[key] = n + 1
    SHOWN.parent.mkdir(parents=True, exist_ok=True)
    SHOWN.write_text(json.dumps(shown, indent=2) + "\n")
    return 0
