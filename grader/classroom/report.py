"""The class report: what a graded class (make grade-class's OUT) says
about the lessons, for the instructor.

    python3 -m grader.classroom.report OUT        (make class-report OUT=DIR)

grade-class writes it at its end; this rebuilds it from OUT's files without
grading anything again. It reads, per student, OUT/<student>/row.json (the
gradebook row), results.json (each test: status, output and, in
extra_data, the ids of the lesson's [[symptom]] rows its failure matched,
most specific first) and summary.json (per lesson: compiled, hung), and
writes

    OUT/report.html                  one static page: no server, no script
    OUT/class-report/lessons.csv     per lesson: who was graded, the scores
    OUT/class-report/scores.csv      per lesson and score: how many students
    OUT/class-report/tests.csv       per test: the share failing, the most
                                     common first symptom
    OUT/class-report/symptoms.csv    per test and symptom: how many students
    OUT/class-report/failures.csv    per student and failing test: the
                                     symptoms its failure matched
    OUT/class-report/NN-topic-scores.png, NN-topic-tests.png   (gnuplot)

Who counts where:
  - a lesson's score distribution is over the students it was graded for
    (they changed a file of it; infra-error rows are not scored); the
    others are counted as "not submitted" (0 in the gradebook);
  - a test's share failing is over the students whose lesson compiled (a
    lesson that does not compile fails every test: counted once, per
    lesson, as "did not compile"); a test graded on submission (pending)
    is neither;
  - a failing test's first symptom is the most specific [[symptom]] row
    that matched (what `likely cause:` showed the student); "none" when no
    row matched and the student saw the test's hint instead. Results
    written before the ids were recorded are read from their `likely
    cause:` lines.
"""

import collections
import csv
import html
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from urllib.parse import quote

from grader.core.course import COURSE
from grader.session import symptoms as symptoms_mod

HTML_NAME = "report.html"
REPORT_DIR = "class-report"
SIMILARITY_JSON = "similarity.json"
# OUT's entries that are not students.
NOT_STUDENTS = {REPORT_DIR, "infra-logs"}


# ---- reading OUT ----------------------------------------------------------------

class Student:
    def __init__(self, name, d):
        self.name, self.dir = name, d
        self.row = None
        self.results = None         # results.json, or None
        self.summary = {}           # lesson -> {got, total, compiled, hung}


def _read_json(path, problems, what):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        problems.append(f"{path}: {what} not readable ({_why(e)}): "
                        f"left out of the report")
        return None


def _why(e):
    if isinstance(e, OSError):
        return e.strerror or type(e).__name__
    return str(e).splitlines()[0][:120] if str(e) else type(e).__name__


def load(out):
    """The students of OUT (those with a row.json) and the problems met
    reading them (lines for the report: nothing is skipped silently)."""
    students, problems = [], []
    try:
        entries = sorted(out.iterdir())
    except OSError as e:
        raise SystemExit(f"OUT={out}: cannot list it ({_why(e)})")
    for d in entries:
        if d.name.startswith(".") or d.name in NOT_STUDENTS or not d.is_dir():
            continue
        s = Student(d.name, d)
        s.row = _read_json(d / "row.json", problems, "the gradebook row")
        if not isinstance(s.row, dict) or "status" not in s.row:
            if (d / "row.json").exists() and s.row is not None:
                problems.append(f"{d / 'row.json'}: not a gradebook row: "
                                f"left out of the report")
            elif not (d / "row.json").exists():
                problems.append(f"{d}: no row.json (not a graded student): "
                                f"left out of the report")
            continue
        s.row.setdefault("points", {})
        s.row.setdefault("max", {})
        res = _read_json(d / "results.json", problems, "the test results")
        if isinstance(res, dict) and isinstance(res.get("tests"), list):
            s.results = res
        elif res is not None:
            problems.append(f"{d / 'results.json'}: no tests in it: "
                            f"its tests are left out")
        summ = _read_json(d / "summary.json", problems, "the lesson summary")
        if isinstance(summ, dict) and isinstance(summ.get("lessons"), dict):
            s.summary = summ["lessons"]
        students.append(s)
    return students, problems


def lesson_symptoms(name, problems):
    """{id: Symptom} of lesson @name's lesson.toml ({} when it has none)."""
    path = COURSE / "lessons" / name / "lesson.toml"
    try:
        meta = tomllib.loads(path.read_text())
        return {s.id: s for s in symptoms_mod.load(meta, str(path))}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        problems.append(f"{path}: its symptoms could not be read ({e})")
        return {}


def symptoms_of(test, syms):
    """The symptom ids test entry @test's failure matched, most specific
    first: extra_data's, or (results written before they were recorded)
    read back from the output's `likely cause:` lines."""
    extra = test.get("extra_data")
    if isinstance(extra, dict) and isinstance(extra.get("symptoms"), list):
        return [str(x) for x in extra["symptoms"]]
    by_cause = {s.cause.strip(): i for i, s in syms.items()}
    ids = []
    for line in str(test.get("output", "")).splitlines():
        if line.startswith("likely cause: "):
            cause = line[len("likely cause: "):]
        elif line.startswith("  or: ") and ids:
            cause = line[len("  or: "):]
        else:
            continue
        ids.append(by_cause.get(cause.strip(), "(unknown) " + cause[:60]))
    return ids


# ---- the numbers ----------------------------------------------------------------

class TestStats:
    def __init__(self, lesson, title):
        self.lesson, self.title = lesson, title
        self.func = ""
        self.points = 0
        self.graded = self.failing = self.pending = 0
        self.first = collections.Counter()      # first symptom id (or None)
        self.any = collections.Counter()        # every matched symptom id
        self.failing_students = {}              # student -> symptom ids

    @property
    def share(self):
        return self.failing / self.graded if self.graded else 0.0

    @property
    def label(self):
        return self.func or self.title[:28]


class LessonStats:
    def __init__(self, name):
        self.name = name
        self.max_points = 0
        self.scores = {}            # student -> points (graded for it)
        self.not_submitted = []
        self.no_compile = []
        self.hung = []
        self.tests = {}             # title -> TestStats, in grading order
        self.first_failing = collections.Counter()   # title -> students
        self.symptoms = {}

    def distribution(self):
        return collections.Counter(self.scores.values())


def analyse(students, problems):
    """{lesson name: LessonStats}, in lesson order."""
    lessons = {}

    def lesson(name):
        if name not in lessons:
            lessons[name] = LessonStats(name)
            lessons[name].symptoms = lesson_symptoms(name, problems)
        return lessons[name]

    for s in students:
        for n, m in s.row["max"].items():
            lesson(n).max_points = max(lesson(n).max_points, m or 0)
        for t in (s.results or {}).get("tests", []):
            name = str(t.get("name", ""))
            if ": " in name and name[:2].isdigit():
                lesson(name.split(": ", 1)[0])
    scored = [s for s in students if s.row["status"] != "infra-error"]
    for name, L in sorted(lessons.items()):
        for s in scored:
            if name in s.row["points"]:
                L.scores[s.name] = s.row["points"][name]
            else:
                L.not_submitted.append(s.name)
            info = s.summary.get(name) or {}
            if name in s.row["points"] and info.get("compiled") is False:
                L.no_compile.append(s.name)
            if info.get("hung"):
                L.hung.append(s.name)
        for s in scored:
            if s.results is None or s.name in L.no_compile:
                continue
            first_fail = None
            for t in s.results["tests"]:
                tname = str(t.get("name", ""))
                if not tname.startswith(name + ": "):
                    continue
                title = tname[len(name) + 2:]
                ts = L.tests.get(title)
                if ts is None:
                    ts = L.tests[title] = TestStats(name, title)
                extra = t.get("extra_data")
                if isinstance(extra, dict) and extra.get("test"):
                    ts.func = str(extra["test"])
                ts.points = max(ts.points, t.get("max_score") or 0)
                status = t.get("status")
                if status == "pending":
                    ts.pending += 1
                    continue
                ts.graded += 1
                if status == "passed":
                    continue
                ts.failing += 1
                ids = symptoms_of(t, L.symptoms)
                ts.failing_students[s.name] = ids
                ts.first[ids[0] if ids else None] += 1
                for i in dict.fromkeys(ids):
                    ts.any[i] += 1
                if first_fail is None:
                    first_fail = title
            if first_fail is not None:
                L.first_failing[first_fail] += 1
    return dict(sorted(lessons.items()))


def top_symptoms(lessons, n=10):
    """The (lesson, test, symptom id, students) seen most often as a
    failure's first symptom across the class: what to teach again."""
    rows = [(count, L.name, ts, sid) for L in lessons.values()
            for ts in L.tests.values() for sid, count in ts.first.items()
            if sid is not None]
    rows.sort(key=lambda r: (-r[0], r[1], r[2].title))
    return rows[:n]


# ---- CSV --------------------------------------------------------------------------

def _median(xs):
    return statistics.median(xs) if xs else ""


def _num(x):
    return round(x, 1) if isinstance(x, float) else x


def cause_of(L, sid):
    if sid is None:
        return "(no symptom matched: the test's hint was shown)"
    s = L.symptoms.get(sid)
    return s.cause if s else "(not a symptom of this lesson.toml)"


def write_csvs(lessons, d):
    with open(d / "lessons.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lesson", "max_points", "graded", "not_submitted",
                    "did_not_compile", "hung", "mean", "median", "min", "max",
                    "full_marks", "zero", "first_failing_test",
                    "first_failing_students"])
        for L in lessons.values():
            pts = list(L.scores.values())
            first = L.first_failing.most_common(1)
            w.writerow([L.name, L.max_points, len(pts), len(L.not_submitted),
                        len(L.no_compile), len(L.hung),
                        _num(statistics.mean(pts)) if pts else "",
                        _num(_median(pts)), min(pts, default=""),
                        max(pts, default=""),
                        sum(1 for p in pts if L.max_points and
                            p >= L.max_points),
                        sum(1 for p in pts if p == 0),
                        first[0][0] if first else "",
                        first[0][1] if first else ""])
    with open(d / "scores.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lesson", "points", "students"])
        for L in lessons.values():
            dist = L.distribution()
            for p in range(0, int(max([L.max_points, *dist], default=0)) + 1):
                w.writerow([L.name, p, dist.get(p, 0)])
    with open(d / "tests.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lesson", "test", "title", "points", "graded", "failing",
                    "failing_share", "pending", "first_symptom",
                    "first_symptom_cause", "first_symptom_students",
                    "no_symptom_students"])
        for L in lessons.values():
            for ts in L.tests.values():
                top = [(sid, c) for sid, c in ts.first.most_common()
                       if sid is not None][:1]
                w.writerow([L.name, ts.func, ts.title, ts.points, ts.graded,
                            ts.failing, round(ts.share, 3), ts.pending,
                            top[0][0] if top else "",
                            cause_of(L, top[0][0]) if top else "",
                            top[0][1] if top else 0, ts.first.get(None, 0)])
    with open(d / "failures.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "lesson", "test", "title", "first_symptom",
                    "symptoms"])
        for L in lessons.values():
            for ts in L.tests.values():
                for who, ids in sorted(ts.failing_students.items()):
                    w.writerow([who, L.name, ts.func, ts.title,
                                ids[0] if ids else "", " ".join(ids)])
    with open(d / "symptoms.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lesson", "test", "title", "symptom", "cause",
                    "first_symptom_students", "matched_students"])
        for L in lessons.values():
            for ts in L.tests.values():
                for sid in sorted(set(ts.first) | set(ts.any),
                                  key=lambda i: (-ts.first.get(i, 0),
                                                 i or "")):
                    w.writerow([L.name, ts.func, ts.title, sid or "(none)",
                                cause_of(L, sid), ts.first.get(sid, 0),
                                ts.any.get(sid, 0) if sid else ""])


# ---- plots (gnuplot) ----------------------------------------------------------

def _label(text):
    return re.sub(r'["\\\t\n]', "", text)


def write_plots(lessons, d):
    """One PNG of the scores and one of the tests' shares failing per
    lesson graded for anyone; {lesson: [png names]}, or a message saying
    why there are none."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        return {}, ("no plots: gnuplot is not installed (make deps installs "
                    "gnuplot-nox); the numbers are in the tables and CSVs")
    script = ['set terminal pngcairo size 720,380 font "sans,10" noenhanced',
              'set datafile separator "\\t"', "set style fill solid 0.7",
              "set boxwidth 0.8", 'set grid ytics lc rgb "#dddddd"']
    made = {}
    for L in lessons.values():
        if not L.scores:
            continue
        dist = L.distribution()
        top = int(max([L.max_points, *dist]))
        with open(d / f"{L.name}-scores.dat", "w") as f:
            for p in range(top + 1):
                f.write(f"{p}\t{dist.get(p, 0)}\n")
        most = max(dist.values())
        script += [
            f'set output "{L.name}-scores.png"',
            f'set title "{L.name}: points of the {len(L.scores)} students '
            f'graded ({len(L.not_submitted)} not submitted)"',
            f'set xlabel "points (of {L.max_points})"',
            'set ylabel "students"', "unset xtics", "set xtics out nomirror",
            f"set xrange [-0.5:{top + 0.5}]",
            f"set yrange [0:{most + 1}]",
            f"set ytics {1 if most <= 12 else 'autofreq'}",
            f"set xtics {1 if top <= 30 else 'autofreq'}",
            f'plot "{L.name}-scores.dat" using 1:2 with boxes '
            f'lc rgb "#4477aa" notitle']
        made[L.name] = [f"{L.name}-scores.png"]
        tests = [ts for ts in L.tests.values() if ts.graded]
        if tests:
            with open(d / f"{L.name}-tests.dat", "w") as f:
                for i, ts in enumerate(tests):
                    f.write(f"{i}\t{_label(ts.label)}\t"
                            f"{100 * ts.share:.1f}\n")
            width = max(720, 60 * len(tests))
            script += [
                f"set terminal pngcairo size {width},420 font \"sans,10\" "
                "noenhanced",
                f'set output "{L.name}-tests.png"',
                f'set title "{L.name}: share of the graded students failing '
                f'each test (lesson compiled)"',
                'set xlabel ""', 'set ylabel "% failing"',
                f"set xrange [-0.5:{len(tests) - 0.5}]", "set yrange [0:100]",
                "set ytics 20", "set xtics rotate by -35 nomirror",
                "set bmargin 8",
                f'plot "{L.name}-tests.dat" using 1:3:xtic(2) with boxes '
                f'lc rgb "#cc6677" notitle',
                'set terminal pngcairo size 720,380 font "sans,10" '
                "noenhanced", "set xtics norotate", "unset bmargin"]
            made[L.name].append(f"{L.name}-tests.png")
    if not made:
        return {}, "no plots: no lesson was graded for anyone"
    (d / "plots.gp").write_text("\n".join(script) + "\n")
    try:
        res = subprocess.run([gnuplot, "plots.gp"], cwd=d, capture_output=True,
                             text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {}, f"no plots: gnuplot failed ({e})"
    if res.returncode != 0:
        return {}, ("no plots: gnuplot failed: "
                    + res.stderr.strip()[-400:])
    return made, ""


# ---- the page ---------------------------------------------------------------------

CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1100px;
       color: #222; line-height: 1.35; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left;
         vertical-align: top; }
th { background: #f0f0f0; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.bar { display: inline-block; height: 0.8em; background: #cc6677; }
.muted { color: #777; }
code { background: #f4f4f4; padding: 0 0.2em; }
.problems li { color: #a33; }
img { max-width: 100%; border: 1px solid #eee; }
"""


def _e(x):
    return html.escape(str(x))


def _md(text):
    """A lesson.toml cause (markdown: `code`) as HTML."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _pct(x):
    return f"{100 * x:.0f}%"


def _href(*parts):
    return "/".join(quote(p) for p in parts)


def page(out, students, lessons, plots, plot_note, problems, sim):
    statuses = collections.Counter(s.row["status"] for s in students)
    h = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         f"<title>Class report: {_e(out.name)}</title>",
         f"<style>{CSS}</style></head><body>",
         f"<h1>Class report: {_e(out.name)}</h1>",
         f"<p>{len(students)} students: "
         + ", ".join(f"{_e(k)} {v}" for k, v in sorted(statuses.items()))
         + f". Built {_e(time.strftime('%Y-%m-%d %H:%M'))} from "
         f"<code>{_e(out)}</code> (<a href=\"gradebook.csv\">gradebook.csv"
         f"</a>; the numbers below as CSV: "
         + ", ".join(f'<a href="{REPORT_DIR}/{n}">{n}</a>' for n in (
             "lessons.csv", "scores.csv", "tests.csv", "symptoms.csv",
             "failures.csv"))
         + ").</p>",
         "<p class=\"muted\">A test's share failing counts the students "
         "whose lesson compiled; its first symptom is the cause "
         "<code>likely cause:</code> showed first (the most specific "
         "<code>[[symptom]]</code> row of the lesson that matched), "
         "<em>none</em> when no row matched and the test's hint was "
         "shown. INSTRUCTORS.md, \"Reading the class report\".</p>"]
    if problems:
        h.append("<h2>Not read</h2><ul class=\"problems\">")
        h += [f"<li>{_e(p)}</li>" for p in problems]
        h.append("</ul>")
    top = top_symptoms(lessons)
    h.append("<h2>What to teach again</h2>")
    if top:
        h.append("<p>The failures' first symptoms seen most often, across "
                 "the class:</p><table><tr><th>students</th><th>lesson</th>"
                 "<th>test</th><th>symptom</th><th>cause</th></tr>")
        for count, lname, ts, sid in top:
            L = lessons[lname]
            h.append(f'<tr><td class="n">{count}</td><td>{_e(lname)}</td>'
                     f"<td>{_e(ts.title)}</td><td><code>{_e(sid)}</code></td>"
                     f"<td>{_md(cause_of(L, sid))}</td></tr>")
        h.append("</table>")
    else:
        h.append("<p class=\"muted\">No failure matched a symptom.</p>")
    h.append("<h2>Lessons</h2>")
    if plot_note:
        h.append(f'<p class="muted">{_e(plot_note)}</p>')
    h.append("<table><tr><th>lesson</th><th>max</th><th>graded</th>"
             "<th>not submitted</th><th>did not compile</th><th>hung</th>"
             "<th>mean</th><th>median</th><th>full marks</th><th>zero</th>"
             "<th>first failing test (students)</th></tr>")
    for L in lessons.values():
        pts = list(L.scores.values())
        first = L.first_failing.most_common(1)
        h.append(
            f'<tr><td><a href="#{_e(L.name)}">{_e(L.name)}</a></td>'
            f'<td class="n">{L.max_points}</td><td class="n">{len(pts)}</td>'
            f'<td class="n">{len(L.not_submitted)}</td>'
            f'<td class="n">{len(L.no_compile)}</td>'
            f'<td class="n">{len(L.hung)}</td>'
            f'<td class="n">{_num(statistics.mean(pts)) if pts else ""}</td>'
            f'<td class="n">{_num(_median(pts))}</td>'
            f'<td class="n">{sum(1 for p in pts if L.max_points and p >= L.max_points)}</td>'
            f'<td class="n">{sum(1 for p in pts if p == 0)}</td>'
            f"<td>{_e(first[0][0]) + f' ({first[0][1]})' if first else ''}"
            f"</td></tr>")
    h.append("</table>")
    for L in lessons.values():
        h.append(f'<h3 id="{_e(L.name)}">{_e(L.name)}</h3>')
        dist = L.distribution()
        h.append(f"<p>{len(L.scores)} graded, {len(L.not_submitted)} not "
                 f"submitted (0 in the gradebook)"
                 + (f", did not compile: {_e(', '.join(L.no_compile))}"
                    if L.no_compile else "")
                 + (f", a program hung: {_e(', '.join(L.hung))}"
                    if L.hung else "") + ". Scores: "
                 + (", ".join(f"{p} pts &times; {c}" for p, c in
                              sorted(dist.items(), reverse=True))
                    or "none") + ".</p>")
        for png in plots.get(L.name, []):
            h.append(f'<p><img src="{REPORT_DIR}/{_href(png)}" '
                     f'alt="{_e(png)}"></p>')
        if not L.tests:
            continue
        h.append("<table><tr><th>test</th><th>points</th><th>graded</th>"
                 "<th>failing</th><th>first symptom (students)</th>"
                 "<th>no symptom</th><th>other first symptoms</th></tr>")
        for ts in sorted(L.tests.values(), key=lambda t: -t.share):
            named = [(sid, c) for sid, c in ts.first.most_common()
                     if sid is not None]
            first = (f"<code>{_e(named[0][0])}</code> ({named[0][1]}): "
                     f"{_md(cause_of(L, named[0][0]))}" if named else "")
            others = ", ".join(f"<code>{_e(sid)}</code> ({c})"
                               for sid, c in named[1:])
            who = collections.defaultdict(list)
            for name, ids in sorted(ts.failing_students.items()):
                who[ids[0] if ids else "none"].append(name)
            if who:
                others += ("<details><summary>who</summary>" + "<br>".join(
                    f"<code>{_e(sid)}</code>: {_e(', '.join(names))}"
                    for sid, names in sorted(who.items())) + "</details>")
            h.append(
                f"<tr><td>{_e(ts.title)}"
                + (f' <span class="muted">{_e(ts.func)}</span>'
                   if ts.func else "")
                + f'</td><td class="n">{ts.points}</td>'
                f'<td class="n">{ts.graded}'
                + (f" (+{ts.pending} pending)" if ts.pending else "")
                + f'</td><td class="n">{ts.failing} ({_pct(ts.share)}) '
                f'<span class="bar" style="width:{int(60 * ts.share)}px">'
                f"</span></td><td>{first}</td>"
                f'<td class="n">{ts.first.get(None, 0)}</td>'
                f"<td>{others}</td></tr>")
        h.append("</table>")
    h.append("<h2>Students</h2><table><tr><th>student</th><th>status</th>"
             "<th>total</th>"
             + "".join(f"<th>{_e(n[:2])}</th>" for n in lessons)
             + "<th>commit</th><th>files</th><th>note</th></tr>")
    for s in students:
        r = s.row
        scored = r["status"] != "infra-error"
        files = [f for f in ("console.log", "results.json", "grading.txt")
                 if (s.dir / f).exists()]
        h.append(
            f"<tr><td>{_e(s.name)}</td><td>{_e(r['status'])}</td>"
            f'<td class="n">{_e(r.get("total", "")) if scored else ""}</td>'
            + "".join(f'<td class="n">{_e(r["points"].get(n, 0)) if scored else ""}</td>'
                      for n in lessons)
            + f"<td><code>{_e(str(r.get('commit', ''))[:12])}</code></td><td>"
            + " ".join(f'<a href="{_href(s.name, f)}">{_e(f)}</a>'
                       for f in files)
            + f"</td><td>{_e(r.get('note', ''))}</td></tr>")
    h.append("</table><p class=\"muted\">One file with a student's whole "
             "grading, for a regrade request: <code>make class-transcript "
             f"OUT={_e(out)} STUDENT=NAME</code> (writes "
             "<code>grading.txt</code> in the student's directory).</p>")
    h.append("<h2>Similarity</h2>")
    if sim is None:
        h.append("<p class=\"muted\">Not run: <code>make similarity "
                 "SUBMISSIONS=DIR OUT=...</code> or <code>make grade-class "
                 "SIMILARITY=1</code>.</p>")
    else:
        from grader.classroom import similarity
        h += similarity.report_section(sim)
    h.append("</body></html>")
    return "\n".join(h) + "\n"


# ---- building it ------------------------------------------------------------------

def build(out, quiet=False):
    """Write OUT's class report; 0, or 2 when there is nothing to report."""
    out = Path(out).resolve()
    t0 = time.monotonic()
    if not out.is_dir():
        print(f"class report: OUT={out}: no such directory", file=sys.stderr)
        return 2
    students, problems = load(out)
    if not students:
        print(f"class report: no graded students in {out} (no "
              f"OUT/<student>/row.json): run make grade-class first",
              file=sys.stderr)
        return 2
    d = out / REPORT_DIR
    if (d / "row.json").exists():
        print(f"class report: a student's directory is called {REPORT_DIR} "
              f"({d}): the report would mix with it; rename that "
              f"submission", file=sys.stderr)
        return 2
    d.mkdir(exist_ok=True)
    for old in list(d.glob("*.png")) + list(d.glob("*.dat")):
        old.unlink()
    lessons = analyse(students, problems)
    write_csvs(lessons, d)
    plots, note = write_plots(lessons, d)
    sim = None
    if (out / SIMILARITY_JSON).exists():
        sim = _read_json(out / SIMILARITY_JSON, problems, "the similarity list")
    tmp = out / (HTML_NAME + ".tmp")
    tmp.write_text(page(out, students, lessons, plots, note, problems, sim))
    tmp.replace(out / HTML_NAME)
    for p in problems:
        print(f"class report: {p}", file=sys.stderr)
    if not quiet:
        print(f"class report: {out / HTML_NAME} ({len(students)} students, "
              f"{len(lessons)} lessons, {time.monotonic() - t0:.1f} s)"
              + (f"; {note}" if note else ""))
    return 0


def main(argv):
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python3 -m grader.classroom.report OUT   (make "
              "class-report OUT=DIR: rebuild OUT/report.html from a graded "
              "class)", file=sys.stderr)
        return 2
    return build(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
