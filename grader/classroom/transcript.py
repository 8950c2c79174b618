"""One student's whole grading as one file, for a regrade request.

    python3 -m grader.classroom.transcript OUT STUDENT [--submissions DIR]
    (make class-transcript OUT=DIR STUDENT=NAME [SUBMISSIONS=DIR])

writes OUT/<STUDENT>/grading.txt from what make grade-class kept there:
the gradebook row (status, points, the commit graded and its time, the
note), every test with its status, points and output, the lesson
summary, what make grade printed (console.log) and every failed test's
transcript (every command, all its output). With SUBMISSIONS, the graded
commit's lesson files are added as a diff against the skeleton (git
show of that commit in a clone; the tree itself otherwise).
"""

import argparse
import datetime
import difflib
import json
import subprocess
import sys
from pathlib import Path

from grader.core.course import COURSE

RULE = "=" * 78


def _read(path):
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        return f"(not readable: {e.strerror or type(e).__name__})\n"


def _submitted(sub, row, lessons):
    """The student's lesson files as graded: (heading, text) per file that
    differs from the skeleton, as a unified diff against it."""
    out = []
    commit = row.get("commit") or ""
    clone = (sub / ".git").exists()
    prefix = "skeletons/" if (sub / "skeletons").is_dir() else ""
    for lesson in lessons:
        skel_dir = COURSE / "skeletons" / lesson
        if not skel_dir.is_dir():
            continue
        names = sorted({p.name for p in skel_dir.iterdir()
                        if p.suffix in (".c", ".h")})
        for name in names:
            if clone and commit:
                res = subprocess.run(
                    ["git", "-c", "safe.directory=*", "-C", str(sub), "show",
                     f"{commit}:{prefix}{lesson}/{name}"],
                    capture_output=True, text=True, errors="replace",
                    timeout=60)
                if res.returncode != 0:
                    out.append((f"{lesson}/{name} at {commit[:12]}",
                                "(not in that commit)\n"))
                    continue
                text = res.stdout
            else:
                f = sub / prefix / lesson / name
                if not f.is_file():
                    out.append((f"{lesson}/{name}", "(not submitted)\n"))
                    continue
                text = _read(f)
            skel = (skel_dir / name).read_text(errors="replace")
            diff = "".join(difflib.unified_diff(
                skel.splitlines(keepends=True), text.splitlines(keepends=True),
                f"skeletons/{lesson}/{name}", f"submitted/{lesson}/{name}"))
            out.append((f"{lesson}/{name}" + (f" at {commit[:12]}"
                                              if clone and commit else ""),
                        diff or "(the skeleton, unchanged)\n"))
    return out


def write(out, student, submissions=None):
    if not student or "/" in student or student in (".", ".."):
        print(f"class-transcript: STUDENT={student!r}: a student's directory "
              f"name in OUT, not a path", file=sys.stderr)
        return 2
    d = Path(out).resolve() / student
    if not (d / "row.json").is_file():
        known = sorted(p.name for p in Path(out).resolve().iterdir()
                       if (p / "row.json").is_file()) if Path(out).is_dir() \
            else []
        print(f"class-transcript: no graded student '{student}' in {out}"
              + (f" (the students: {', '.join(known[:20])}"
                 + (" ..." if len(known) > 20 else "") + ")" if known
                 else " (no OUT/<student>/row.json: grade the class first)"),
              file=sys.stderr)
        return 2
    try:
        row = json.loads((d / "row.json").read_text())
    except (OSError, ValueError) as e:
        print(f"class-transcript: {d / 'row.json'}: not readable ({e})",
              file=sys.stderr)
        return 2
    parts = [f"Grading of {student}",
             f"written {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}"
             f" from {d}", RULE,
             f"status:       {row.get('status', '')}",
             f"total:        {row.get('total', '')} of "
             f"{row.get('max_total', '')}",
             f"commit:       {row.get('commit') or '(no git history)'}",
             f"commit time:  {row.get('commit_time', '')}",
             f"graded at:    {row.get('graded_at', '')}",
             f"note:         {row.get('note', '')}",
             "points:       " + ", ".join(
                 f"{n} {p}/{row.get('max', {}).get(n, '?')}"
                 for n, p in sorted(row.get("points", {}).items())), ""]
    res_path = d / "results.json"
    if res_path.exists():
        try:
            results = json.loads(res_path.read_text())
            tests = results.get("tests", [])
        except (OSError, ValueError) as e:
            tests = None
            parts += [RULE, f"results.json: not readable ({e})", ""]
        if tests is not None:
            parts += [RULE, f"TESTS ({results.get('score', '?')}/"
                      f"{results.get('max_score', '?')})", RULE]
            for t in tests:
                extra = t.get("extra_data") or {}
                syms = extra.get("symptoms") if isinstance(extra, dict) \
                    else None
                parts.append(f"[{t.get('status', '?'):7}] "
                             f"{t.get('score', 0)}/{t.get('max_score', 0)}  "
                             f"{t.get('name', '')}"
                             + (f"  ({extra.get('test')})"
                                if isinstance(extra, dict) and
                                extra.get("test") else ""))
                if syms:
                    parts.append("          symptoms: " + ", ".join(syms))
                if t.get("output"):
                    parts += ["          | " + x for x in
                              str(t["output"]).splitlines()]
            parts.append("")
    else:
        parts += [RULE, "no results.json: " + {
            "empty": "nothing was graded (no lesson file differs from the "
                     "skeleton, or no commit before the deadline)",
            "infra-error": "the grading infrastructure failed; see "
                           "OUT/infra-logs/"}.get(row.get("status"),
                                                  "the grader wrote none"), ""]
    for name, title in (("summary.json", "LESSON SUMMARY"),
                        ("console.log", "WHAT make grade PRINTED "
                                        "(console.log)")):
        if (d / name).exists():
            parts += [RULE, title, RULE, _read(d / name).rstrip("\n"), ""]
    logs = sorted((d / "transcripts").rglob("*.log")) \
        if (d / "transcripts").is_dir() else []
    for log in logs:
        parts += [RULE, f"TRANSCRIPT {log.relative_to(d)}", RULE,
                  _read(log).rstrip("\n"), ""]
    if not logs:
        parts += [RULE, "no transcripts (a transcript is kept for each "
                  "failed test)", ""]
    if submissions:
        sub = Path(submissions).resolve() / student
        if sub.is_dir():
            lessons = sorted(row.get("points", {}))
            for head, text in _submitted(sub, row, lessons):
                parts += [RULE, f"SUBMITTED {head} (diff against the "
                          f"skeleton)", RULE, text.rstrip("\n"), ""]
        else:
            parts += [RULE, f"SUBMISSIONS: no directory {sub}", ""]
    path = d / "grading.txt"
    path.write_text("\n".join(parts) + "\n")
    print(f"class-transcript: {path}")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(
        prog="python3 -m grader.classroom.transcript",
        description="one student's whole grading as one file "
                    "(make class-transcript)")
    ap.add_argument("out")
    ap.add_argument("student")
    ap.add_argument("--submissions", default="")
    args = ap.parse_args(argv)
    return write(args.out, args.student, args.submissions or None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
