"""Similar submissions: a list to read, never a penalty.

    python3 -m grader.classroom.similarity --submissions DIR [--out DIR]
        [--lesson L] [--deadline ISO-TIME] [--threshold P] [--min-tokens N]
    (make similarity SUBMISSIONS=DIR [OUT=DIR] [LESSON=..]; make grade-class
    SIMILARITY=1 runs it on the class it graded)

Each lesson's submitted files are compared pairwise with Debian's
similarity-tester (sim_c, Dick Grune's): it reads C as tokens, so layout,
comments, the names of identifiers and the contents of numbers and
strings do not count, and it reports runs of at least --run (24) tokens
that two files share, with their line ranges.

The skeleton's given code is taken out first: every line of a submitted
file that is also a line of the skeleton's file of that name (whitespace
ignored) is blanked (line numbers stay), so what is compared is what the
student wrote. A lesson the student left as the skeleton has nothing
left. Files other than .c/.h are not read; a file that cannot be read is
named in the list's notes.

A pair of students is listed for a lesson when the runs they share cover
at least --threshold percent (default 50) of the smaller side's own code
(its tokens after the skeleton's lines are gone) and at least
--min-tokens tokens (default 60: a lone idiom is not a list entry).

OUT/similarity.html shows each listed pair's runs side by side (the
skeleton's lines among them greyed), OUT/similarity.csv and
OUT/similarity.json the same list; the class report (report.html) links
them when they are in its OUT. What a listed pair does and does not show:
INSTRUCTORS.md, "The similarity list".
"""

import argparse
import collections
import csv
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.core.course import COURSE, lesson_names, parse_lessons

SIM = "sim_c"
DEFAULT_THRESHOLD = 50      # percent of the smaller side's own tokens
DEFAULT_MIN_TOKENS = 60     # shared tokens
DEFAULT_RUN = 24            # sim_c's minimum run (its default)
# Pairs shown side by side (the highest first); the rest only in the
# table and the CSV: a class that shares one solution lists thousands.
DETAIL = 200
TABLE = 1000                # pairs in the HTML tables
SOURCES = (".c", ".h")
HTML_NAME = "similarity.html"
CSV_NAME = "similarity.csv"
JSON_NAME = "similarity.json"


def _norm(line):
    return " ".join(line.split())


def uncomment(text):
    """@text with its C comments turned into spaces (newlines kept): a
    line left blank by the skeleton must not open or close a comment
    for the lines after it. Strings and character constants are kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_given(text, skeleton):
    """(@text without comments, every line that is also a line of
    @skeleton blanked; [is line i the skeleton's?]). Whitespace and
    comments do not count; line numbers stay."""
    # (lines as sim_c counts them: split at "\n" alone)
    bare = uncomment(text).split("\n")
    given = {_norm(x) for x in uncomment(skeleton).split("\n")} - {""}
    raw = {_norm(x) for x in skeleton.split("\n")} - {""}
    kept, mark = [], []
    for line, orig in zip(bare, text.split("\n")):
        g = _norm(line) in given
        kept.append("" if g else line)
        mark.append(g or _norm(orig) in raw)
    return "\n".join(kept), mark


def _read(path, notes, who):
    """A submitted file's text, or None (and a note saying why)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        notes.append(f"{who}: {path.name}: not readable "
                     f"({e.strerror or type(e).__name__}): not compared")
        return None
    if b"\0" in data:
        notes.append(f"{who}: {path.name}: binary, not compared")
        return None
    return data.decode("utf-8", errors="replace")


def collect(trees, lessons, work):
    """Write each student's lesson files, the skeleton's lines blanked, into
    @work/LESSON/sNNN/FILE; (entries, notes): entries[lesson] =
    {student: {file name: (original text, stripped path)}}."""
    entries, notes = {}, []
    ids = {name: f"s{i:04d}" for i, name in enumerate(sorted(trees))}
    for name in sorted(trees):
        src = trees[name]
        if src is None:
            continue
        for lesson in lessons:
            d = src / lesson
            if not d.is_dir():
                continue
            try:
                files = sorted(d.iterdir())
            except OSError as e:
                notes.append(f"{name}: {lesson}/: not readable "
                             f"({e.strerror}): not compared")
                continue
            others = [f.name for f in files if f.suffix not in SOURCES
                      and not f.name.startswith(".")]
            if others:
                notes.append(f"{name}: {lesson}/: not C, not compared: "
                             + ", ".join(others[:8])
                             + (" ..." if len(others) > 8 else ""))
            for f in files:
                if f.suffix not in SOURCES or not f.is_file():
                    continue
                text = _read(f, notes, f"{name}: {lesson}")
                if text is None:
                    continue
                skel = COURSE / "skeletons" / lesson / f.name
                stripped, given = strip_given(text, skel.read_text(
                    errors="replace") if skel.is_file() else "")
                if not stripped.strip():
                    continue
                # (sim_c's output names files: no space in the copy's)
                dst = work / lesson / ids[name] / re.sub(
                    r"[^A-Za-z0-9_.-]", "_", f.name)
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(stripped)
                entries.setdefault(lesson, {}).setdefault(name, {})[
                    f.name] = (text, dst, given)
    return entries, notes


RUN_LINE = re.compile(r"^(\S+): line (\d+)-(\d+)\s*\|(\S+): line (\d+)-(\d+)"
                      r"\s*\[(\d+)\]\s*$")
FILE_LINE = re.compile(r"^File (\S+): (\d+) tokens?,")


def sim(paths, run):
    """sim_c over @paths, each pair in isolation: ({path: tokens},
    [(path a, a1, a2, path b, b1, b2, tokens)])."""
    res = subprocess.run(
        [SIM, "-n", "-e", "-s", "-r", str(run), "-w", "400", "-i"],
        input="".join(f"{p}\n" for p in paths), capture_output=True,
        text=True, timeout=3600)
    if res.returncode != 0:
        raise RuntimeError(f"{SIM} failed (exit {res.returncode}): "
                           + res.stderr.strip()[-300:])
    tokens, runs = {}, []
    for line in res.stdout.splitlines():
        m = FILE_LINE.match(line)
        if m:
            tokens[m.group(1)] = int(m.group(2))
            continue
        m = RUN_LINE.match(line)
        if m:
            a, a1, a2, b, b1, b2, n = m.groups()
            runs.append((a, int(a1), int(a2), b, int(b1), int(b2), int(n)))
    return tokens, runs


def compare(trees, lessons, threshold=DEFAULT_THRESHOLD,
            min_tokens=DEFAULT_MIN_TOKENS, run=DEFAULT_RUN):
    """{lessons, pairs, notes, settings}: the pairs listed, each with its
    runs (file, lines in a, lines in b, tokens) and the text to show."""
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="similarity."))
    try:
        entries, notes = collect(trees, lessons, work)
        pairs, counted = [], {}
        for lesson in lessons:
            students = entries.get(lesson, {})
            counted[lesson] = len(students)
            if len(students) < 2:
                continue
            back = {}
            per_file = collections.defaultdict(list)
            for who, files in students.items():
                for fname, (text, path, _) in files.items():
                    back[str(path)] = (who, fname)
                    per_file[fname].append(str(path))
            own = collections.Counter()
            shared = collections.defaultdict(list)
            for fname, paths in sorted(per_file.items()):
                tokens, runs = sim(sorted(paths), run)
                for p, n in tokens.items():
                    if p in back:
                        own[back[p][0]] += n
                for a, a1, a2, b, b1, b2, n in runs:
                    if a not in back or b not in back:
                        continue
                    wa, wb = back[a][0], back[b][0]
                    if wa == wb:
                        continue
                    if wa > wb:
                        wa, wb, a1, a2, b1, b2 = wb, wa, b1, b2, a1, a2
                    shared[(wa, wb)].append((fname, a1, a2, b1, b2, n))
            for (wa, wb), rs in sorted(shared.items()):
                common = sum(r[5] for r in rs)
                smaller = min(own[wa], own[wb]) or 1
                pct = round(100 * common / smaller)
                if pct < threshold or common < min_tokens:
                    continue
                pairs.append({
                    "lesson": lesson, "a": wa, "b": wb,
                    "shared_tokens": common, "tokens_a": own[wa],
                    "tokens_b": own[wb], "percent": min(pct, 100),
                    "runs": sorted(rs, key=lambda r: (r[0], r[1])),
                    "students": students})
        pairs.sort(key=lambda p: (-p["percent"], -p["shared_tokens"],
                                  p["lesson"], p["a"], p["b"]))
        for i, p in enumerate(pairs):
            students = p.pop("students")
            p["runs"] = [_show(students, p["a"], p["b"], r, i < DETAIL)
                         for r in p["runs"]]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"settings": {"threshold": threshold, "min_tokens": min_tokens,
                         "run": run},
            "lessons": counted, "pairs": pairs, "notes": notes,
            "students": len(trees),
            "made": time.strftime("%Y-%m-%d %H:%M"),
            "seconds": round(time.monotonic() - t0, 1)}


def _show(students, wa, wb, r, text=True):
    """A run with the lines it covers in both files (with @text: the
    original lines, each marked given when the skeleton has it)."""
    fname, a1, a2, b1, b2, n = r
    if not text:
        return {"file": fname, "a_lines": [a1, a2], "b_lines": [b1, b2],
                "tokens": n}

    def lines(who, lo, hi):
        text, _, given = students[who][fname]
        orig = text.split("\n")
        return [[orig[i].rstrip("\r"), given[i]]
                for i in range(lo - 1, min(hi, len(orig)))]
    return {"file": fname, "a_lines": [a1, a2], "b_lines": [b1, b2],
            "tokens": n, "a_text": lines(wa, a1, a2),
            "b_text": lines(wb, b1, b2)}


# ---- writing it -----------------------------------------------------------------

CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1300px;
       color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left;
         vertical-align: top; }
th { background: #f0f0f0; }
td.n { text-align: right; }
pre { margin: 0; font-size: 12px; white-space: pre-wrap; }
.given { color: #aaa; }
.muted { color: #777; }
table.side { width: 100%; table-layout: fixed; }
"""


def _e(x):
    return html.escape(str(x))


def _pre(lines, first):
    out = []
    for i, (text, given) in enumerate(lines):
        row = f"{first + i:4d}  {_e(text.expandtabs(4))}"
        out.append(f'<span class="given">{row}</span>' if given else row)
    return "<pre>" + "\n".join(out) + "</pre>"


def settings_text(data):
    s = data["settings"]
    return (f"listed: the runs two students share (sim_c, at least "
            f"{s['run']} tokens each) cover at least {s['threshold']}% of "
            f"the smaller one's own code and at least {s['min_tokens']} "
            f"tokens; the skeleton's lines are left out of both")


def write(data, out):
    out.mkdir(parents=True, exist_ok=True)
    (out / JSON_NAME).write_text(json.dumps(data) + "\n")
    with open(out / CSV_NAME, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lesson", "student_a", "student_b", "percent",
                    "shared_tokens", "tokens_a", "tokens_b", "runs"])
        for p in data["pairs"]:
            w.writerow([p["lesson"], p["a"], p["b"], p["percent"],
                        p["shared_tokens"], p["tokens_a"], p["tokens_b"],
                        "; ".join(f"{r['file']}:{r['a_lines'][0]}-"
                                  f"{r['a_lines'][1]}={r['b_lines'][0]}-"
                                  f"{r['b_lines'][1]} [{r['tokens']}]"
                                  for r in p["runs"])])
    h = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         "<title>Similar submissions</title>", f"<style>{CSS}</style>",
         "</head><body><h1>Similar submissions</h1>",
         f"<p>{data['students']} students; "
         + (", ".join(f"{_e(k)}: {v} compared" for k, v in
                      data["lessons"].items() if v) or "nothing compared")
         + f". {_e(settings_text(data))}.</p>",
         "<p><strong>A list to read, not a verdict.</strong> Students "
         "who solved a short exercise the way its README and man pages "
         "lead come out alike; a pair that shares the given code's "
         "mistakes, a helper nobody else wrote or the same odd names "
         "deserves a conversation, and nothing here is a penalty "
         "(INSTRUCTORS.md, \"The similarity list\").</p>"]
    h += pair_table(data, "")
    if len(data["pairs"]) > DETAIL:
        h.append(f"<p><strong>{len(data['pairs'])} pairs</strong> are above "
                 f"the threshold: the {DETAIL} highest are shown side by side "
                 f"below, all are in {CSV_NAME}. So many usually means a "
                 f"solution went round, or a threshold too low for this "
                 f"lesson's short exercises.</p>")
    for i, p in enumerate(data["pairs"][:DETAIL]):
        h.append(f'<h2 id="p{i}">{_e(p["lesson"])}: {_e(p["a"])} and '
                 f'{_e(p["b"])}: {p["percent"]}%</h2>'
                 f"<p>{p['shared_tokens']} tokens in common; "
                 f"{_e(p['a'])} wrote {p['tokens_a']}, {_e(p['b'])} "
                 f"{p['tokens_b']} (the skeleton's lines left out). Grey: "
                 f"a line the skeleton has.</p>")
        for r in p["runs"]:
            h.append(
                f'<table class="side"><tr><th>{_e(p["a"])}: '
                f'{_e(r["file"])} lines {r["a_lines"][0]}-'
                f'{r["a_lines"][1]}</th><th>{_e(p["b"])}: {_e(r["file"])} '
                f'lines {r["b_lines"][0]}-{r["b_lines"][1]}</th></tr>'
                f'<tr><td>{_pre(r["a_text"], r["a_lines"][0])}</td>'
                f'<td>{_pre(r["b_text"], r["b_lines"][0])}</td></tr>'
                f'<tr><td colspan="2" class="muted">{r["tokens"]} tokens'
                f"</td></tr></table>")
    if data["notes"]:
        h.append("<h2>Notes</h2><ul>")
        h += [f"<li>{_e(n)}</li>" for n in data["notes"]]
        h.append("</ul>")
    h.append("</body></html>")
    tmp = out / (HTML_NAME + ".tmp")
    tmp.write_text("\n".join(h) + "\n")
    tmp.replace(out / HTML_NAME)


def pair_table(data, prefix):
    """The listed pairs, highest first (the first TABLE of them), each
    shown side by side linked."""
    pairs = data["pairs"]
    if not pairs:
        return ['<p class="muted">No pair above the threshold.</p>']
    h = ["<table><tr><th>lesson</th><th>student</th><th>student</th>"
         "<th>shared</th><th>tokens in common</th><th>runs</th></tr>"]
    for i, p in enumerate(pairs[:TABLE]):
        pct = (f'<a href="{prefix}#p{i}">{p["percent"]}%</a>' if i < DETAIL
               else f'{p["percent"]}%')
        h.append(f"<tr><td>{_e(p['lesson'])}</td><td>{_e(p['a'])}</td>"
                 f'<td>{_e(p["b"])}</td><td class="n">{pct}</td>'
                 f'<td class="n">{p["shared_tokens"]}</td>'
                 f'<td class="n">{len(p["runs"])}</td></tr>')
    h.append("</table>")
    if len(pairs) > TABLE:
        h.append(f'<p class="muted">... and {len(pairs) - TABLE} more '
                 f"pairs: all {len(pairs)} are in {CSV_NAME}.</p>")
    return h


def report_section(data):
    """The class report's section: the list, linking similarity.html."""
    try:
        h = [f"<p>{_e(settings_text(data))} ({data['students']} students, "
             f"made {_e(data.get('made', '?'))} in {data.get('seconds', '?')}"
             f" s). A list to read, never a "
             f"penalty: <a href=\"{HTML_NAME}\">{HTML_NAME}</a> shows each "
             f"pair's runs side by side.</p>"]
        h += pair_table(data, HTML_NAME)
        if data["notes"]:
            h.append(f"<p class=\"muted\">{len(data['notes'])} notes "
                     f"(files not compared): see {HTML_NAME}.</p>")
        return h
    except (KeyError, TypeError):
        return ['<p class="muted">similarity.json is not one this '
                'version wrote: run make similarity again.</p>']


# ---- the command ----------------------------------------------------------------

def run(trees, lessons, out, threshold=DEFAULT_THRESHOLD,
        min_tokens=DEFAULT_MIN_TOKENS, run_len=DEFAULT_RUN):
    """Compare, write OUT's files, print a line; 0, or 2 without sim_c."""
    if not shutil.which(SIM):
        print(f"similarity: {SIM} is not installed (Debian's "
              f"similarity-tester package: make deps installs it)",
              file=sys.stderr)
        return 2
    data = compare(trees, lessons, threshold, min_tokens, run_len)
    write(data, out)
    for n in data["notes"]:
        print(f"similarity: {n}", file=sys.stderr)
    compared = [f"{k} {v}" for k, v in data["lessons"].items() if v]
    print(f"similarity: {len(data['pairs'])} pairs listed "
          f"({data['students']} students; compared: "
          + (", ".join(compared) or "nothing") + f"; {data['seconds']} s): "
          f"{out / HTML_NAME}")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m grader.classroom.similarity",
                                 description="list similar submissions "
                                             "(make similarity)")
    ap.add_argument("--submissions", required=True)
    ap.add_argument("--out", default=str(COURSE / "build" / "similarity"))
    ap.add_argument("--lesson", default="")
    ap.add_argument("--deadline", default="")
    ap.add_argument("--threshold", type=int, default=DEFAULT_THRESHOLD)
    ap.add_argument("--min-tokens", type=int, default=DEFAULT_MIN_TOKENS)
    ap.add_argument("--run", type=int, default=DEFAULT_RUN)
    args = ap.parse_args(argv)
    from grader.classroom.classrun import resolve
    subdir = Path(args.submissions).resolve()
    out = Path(args.out).resolve()
    if not subdir.is_dir():
        print(f"SUBMISSIONS={args.submissions}: no such directory",
              file=sys.stderr)
        return 2
    if out.is_relative_to(subdir):
        print(f"OUT={args.out} is inside SUBMISSIONS={args.submissions}: "
              f"put it elsewhere", file=sys.stderr)
        return 2
    if not 0 <= args.threshold <= 100 or args.min_tokens < 0 or args.run < 2:
        print("THRESHOLD is a percent (0-100), MIN_TOKENS >= 0, RUN >= 2",
              file=sys.stderr)
        return 2
    names = (parse_lessons(args.lesson) if args.lesson
             else lesson_names(COURSE, COURSE))
    lessons = [n for n in names if (COURSE / "skeletons" / n).is_dir()]
    work = Path(tempfile.mkdtemp(prefix="similarity-trees."))
    try:
        trees = {}
        for p in sorted(subdir.iterdir()):
            if p.name.startswith(".") or not p.is_dir():
                continue
            src, _, _, note = resolve(p, work / p.name, args.deadline)
            trees[p.name] = src
            if src is None:
                print(f"similarity: {p.name}: {note}: not compared",
                      file=sys.stderr)
        rc = run(trees, lessons, out, args.threshold, args.min_tokens,
                 args.run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rc == 0 and any(out.glob("*/row.json")):
        from grader.classroom import report
        report.build(out)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
