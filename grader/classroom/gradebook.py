"""The gradebook of make grade-class (grader/classroom/classrun.py grades
the class): OUT/<student>/row.json per student, OUT/gradebook.csv with one
row per student, OUT/canvas.csv for Canvas's import (--roster), and the
progress line."""

import collections
import csv
import datetime
import html
import json
import shutil
import sys
import threading
import time
from pathlib import Path

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
ROSTER_DIR_COLUMNS = ("Submission", "Directory", "Login")


def _repath(path, old, new):
    """Rewrite directory @old to @new in the file @path, as that file's
    format spells a path (JSON string, XML text or attribute, plain)."""
    if path.suffix == ".json":
        spell = [lambda s: json.dumps(s)[1:-1]]
    elif path.suffix == ".xml":
        spell = [str, lambda s: html.escape(s, quote=False),
                 lambda s: html.escape(s, quote=True)]
    else:
        spell = [str]
    try:
        text = orig = path.read_text()
        for f in spell:
            text = text.replace(f(str(old)), f(str(new)))
        if text != orig:
            path.write_text(text)
    except (OSError, UnicodeDecodeError):
        pass


class Gradebook:
    """The class's rows: one per student (OUT/NAME/row.json), the progress
    line, OUT/gradebook.csv and Canvas's import."""

    def __init__(self, out, names, timeout):
        self.out = Path(out).resolve()
        self.names = names
        self.timeout = timeout
        self.lock = threading.Lock()
        self.rows = {}
        self.done = self.total = self.started_n = 0
        self.counts = collections.Counter()
        self.t0 = time.monotonic()
        self.graded_now = 0

    def keep(self, name, row):
        """An earlier grading's row, kept (same commit)."""
        with self.lock:
            self.rows[name] = row
            self.done += 1
            self.counts["kept"] += 1

    def progress(self, final=False):
        with self.lock:
            done, total = self.done, self.total
            elapsed = time.monotonic() - self.t0
            eta = ""
            if self.started_n and done < total and self.graded_now \
                    and elapsed > 1:
                # Wall time per submission so far, JOBS at a time.
                left = elapsed / self.graded_now * (total - done)
                eta = f", ETA {int(left // 60)}m{int(left % 60):02d}s"
            counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
            line = (f"grade-class: {done}/{total} done ({counts or 'none yet'})"
                    f", {int(elapsed)}s{eta}")
        if sys.stderr.isatty():
            print("\r" + line + "\033[K", end="\n" if final else "",
                  file=sys.stderr, flush=True)
        elif not final:
            print(line, file=sys.stderr, flush=True)

    def write_row(self, sub, status, points, maxes, note=""):
        row = {"student": sub.name, "status": status, "points": points,
               "max": maxes, "total": sum(points.values()),
               "max_total": sum(maxes.values()), "commit": sub.commit,
               "commit_time": sub.when,
               "graded_at": datetime.datetime.now().astimezone()
               .isoformat(timespec="seconds"),
               "note": "; ".join(x for x in (sub.note, note) if x)}
        d = self.out / sub.name
        d.mkdir(parents=True, exist_ok=True)
        (d / "row.json").write_text(json.dumps(row, indent=2) + "\n")
        with self.lock:
            self.rows[sub.name] = row
            self.done += 1
            self.counts[status] += 1
            if status != "empty":
                self.graded_now += 1
        self.progress()

    def finish(self, sub, where, rc, killed):
        """Turn a finished session's files (in `where`) into the row."""
        d = self.out / sub.name
        d.mkdir(parents=True, exist_ok=True)
        for f in ("results.json", "junit.xml", "summary.json", "console.log"):
            if (where / f).exists():
                shutil.copyfile(where / f, d / f)
                # The session wrote into a batch directory that goes: the
                # transcripts it names are in OUT/<student>/ from now on.
                _repath(d / f, where, d)
        shutil.rmtree(d / "transcripts", ignore_errors=True)
        if (where / "transcripts").is_dir():
            shutil.copytree(where / "transcripts", d / "transcripts")
        try:
            summary = json.loads((where / "summary.json").read_text())["lessons"]
        except (OSError, ValueError, KeyError):
            summary = None
        if summary is None:
            if killed:
                self.write_row(sub, "timed-out", {}, {},
                               f"grading did not finish within "
                               f"{self.timeout} s and was stopped")
                return True
            return False        # no results: the grader did not run through
        points = {n: v["got"] for n, v in summary.items()}
        maxes = {n: v["total"] for n, v in summary.items()}
        failed = [n for n in sub.lessons if sub.compiled.get(n, {}).get("rc")
                  and not sub.compiled[n].get("missing")]
        hung = [n for n, v in summary.items() if v.get("hung")]
        notes = []
        if failed:
            notes.append("does not compile: " + ", ".join(failed))
        if hung:
            notes.append("a program hung: " + ", ".join(hung))
        status = ("build-failed" if failed else
                  "timed-out" if hung or killed else "graded")
        if killed:
            notes.append(f"stopped after {self.timeout} s")
        self.write_row(sub, status, points, maxes, "; ".join(notes))
        return True

    def old_row(self, name):
        try:
            return json.loads((self.out / name / "row.json").read_text())
        except (OSError, ValueError):
            return None

    def lesson_max(self):
        maxes = {}
        for row in self.rows.values():
            for n, m in row["max"].items():
                maxes[n] = max(maxes.get(n, 0), m)
        return maxes

    def write_gradebook(self):
        maxes = self.lesson_max()
        cols = sorted(set(self.names) | set(maxes))
        path = self.out / "gradebook.csv"
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["student", *cols, "total", "max", "status", "commit",
                        "commit_time", "note"])
            for name in sorted(self.rows):
                r = self.rows[name]
                scored = r["status"] != "infra-error"
                w.writerow([name, *[r["points"].get(c, 0 if scored else "")
                                    for c in cols],
                            r["total"] if scored else "",
                            sum(maxes.values()) if maxes else "", r["status"], r["commit"],
                            r["commit_time"], r["note"]])

    def write_canvas(self, roster):
        """Canvas's gradebook import: the roster's columns, one column per
        lesson, a 'Points Possible' row."""
        maxes = self.lesson_max()
        cols = sorted(set(self.names) | set(maxes))
        with open(roster, newline="") as f:
            people = list(csv.DictReader(f))
        key = next((c for c in ROSTER_DIR_COLUMNS if people and c in people[0]),
                   None)
        if key is None:
            print(f"ROSTER={roster}: needs a column naming each student's "
                  f"submission directory ({' or '.join(ROSTER_DIR_COLUMNS)})",
                  file=sys.stderr)
            return
        path = self.out / "canvas.csv"
        seen = set()
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow([*CANVAS_COLUMNS, *cols])
            w.writerow(["Points Possible", "", "", "", "",
                        *[maxes.get(c, "") for c in cols]])
            for p in people:
                row = self.rows.get(p[key])
                seen.add(p[key])
                scores = ["" if row is None or row["status"] == "infra-error"
                          else row["points"].get(c, 0) for c in cols]
                w.writerow([p.get(c, "") for c in CANVAS_COLUMNS] + scores)
        missing = sorted(set(self.rows) - seen)
        if missing:
            print(f"canvas.csv: not in the roster: {', '.join(missing)}",
                  file=sys.stderr)
        print(f"canvas: {path}")
