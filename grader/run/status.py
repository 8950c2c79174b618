"""python3 -m grader status (make status): where a student stands, one line
per lesson, from .grade/status.json (written by the plugin after each
grading)."""

import json
import sys

from grader.core.course import COURSE

STATUS = COURSE / ".grade" / "status.json"


def main(argv):
    if argv:
        print("usage: python3 -m grader status", file=sys.stderr)
        return 2
    try:
        status = json.loads(STATUS.read_text())
    except (OSError, ValueError):
        status = {}
    lessons = sorted(p.name for p in (COURSE / "lessons").glob("[0-9][0-9]-*")
                     if p.is_dir())
    width = max(len(n) for n in lessons)
    done = 0
    for name in lessons:
        st = status.get(name)
        if not st:
            print(f"  {name:<{width}}  not graded yet   (make grade LESSON={name[:2]})")
            continue
        pending = st.get("pending", 0)
        full = st["got"] + pending == st["total"]
        done += full
        mark = "done" if full else f"next: {st['first_failing']}"
        if pending:
            mark += f" (+{pending} graded on submission)"
        src = "" if st["src"].endswith("/skeletons") else f"  [SRC={st['src']}]"
        print(f"  {name:<{width}}  {st['got']:>3}/{st['total']:<3}  "
              f"{st['when']}  {mark}{src}")
    print(f"{done} of {len(lessons)} lessons at full marks")
    return 0
