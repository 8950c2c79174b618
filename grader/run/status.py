"""python3 -m grader status (make status): where a student stands, one line
per lesson, from .grade/status.json (written by the plugin after each
grading; a TEST= run updates the tests it ran)."""

import json
import sys

from grader.core.course import COURSE

STATUS = COURSE / ".grade" / "status.json"


def lines(status, lessons):
    """The table's lines: lesson, points, when, what is next."""
    width = max(len(n) for n in lessons)
    rows = []
    for name in lessons:
        st = status.get(name)
        if not st:
            rows.append((name, "-", "", f"not graded yet: make grade "
                                          f"LESSON={name[:2]}"))
            continue
        pending = st.get("pending", 0)
        if st["got"] + pending == st["total"] and not st.get("not_graded"):
            mark = "done"
        elif st.get("first_failing"):
            mark = f"next: {st['first_failing']}"
        else:
            mark = "next: grade the rest"
        untried = st.get("not_graded") or []
        if untried:
            mark += (f"  ({len(untried)} of {len(st.get('tests', {}))} "
                     f"tests not graded yet: make grade "
                     f"LESSON={name[:2]})")
        if pending:
            mark += f" (+{pending} graded on submission)"
        if st.get("test_filter"):
            mark += f"  [last: TEST={st['test_filter']}]"
        if not st["src"].endswith("/skeletons"):
            mark += f"  [SRC={st['src']}]"
        rows.append((name, f"{st['got']}/{st['total']}", st["when"], mark))
    pw = max(len(r[1]) for r in rows)
    ww = max(len(r[2]) for r in rows)
    out = []
    for name, pts, when, mark in rows:
        out.append(f"  {name:<{width}}  {pts:>{pw}}  {when:<{ww}}  "
                   f"{mark}".rstrip())
    return out


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
    for line in lines(status, lessons):
        print(line)
    done = sum(1 for n in lessons if status.get(n) and
               status[n]["got"] + status[n].get("pending", 0)
               == status[n]["total"] and
               not status[n].get("not_graded"))
    print(f"{done} of {len(lessons)} lessons at full marks")
    return 0
