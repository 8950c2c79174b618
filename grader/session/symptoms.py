"""A lesson's symptoms: what a failed run printed -> its likely cause.

lessons/NN-topic/lesson.toml lists them, one `[[symptom]]` table each:

    [[symptom]]
    id = "rts-mask"                  # names it for mutants (selftest/mutants/)
    row = "`ibv_modify_qp(A: RTR -> RTS) failed: Invalid argument`"
    cause = "a mask bit of RTS missing or one too many (TODO 6) ..."
    stderr = 'ibv_modify_qp\\(A: RTR -> RTS\\) failed'

`row` and `cause` are the two cells of the README's "Common failures" table
(markdown, one line each); the table is rendered from them (render_table)
and the course self-check fails when the README differs. The conditions
are regexes (Python `re`, multi-line), searched in what the failed test saw:

    stderr, stdout   everything the student's programs printed in the test
    result           one line per student program: `PROG: STATUS`, where
                     STATUS is `exited with status N`, `crashed with SIGSEGV`,
                     `killed by the grader after N s` (+ `: it hung after its
                     last output (during cleanup?)`)
    counters         the rxe counter deltas the test took: `NAME +N` lines
    calls            what the grader's interposer (verbs_spy.so) recorded of
                     the test's runs under it: one line per verbs call,
                     `req_notify_cq solicited=1 rc=0`
    failure          the failure message (expected vs got, peer verdicts)

and `tests = ["test_x", ...]` restricts a symptom to those tests. A symptom
matches when all its conditions do; the more conditions, the more specific,
and a failure shows the matching causes most specific first (ties: in the
order of the file). Only when none matches does it show the test's hint.
"""

import re
from pathlib import Path

CONDITIONS = ("stderr", "stdout", "result", "counters", "calls",
              "failure")


class Symptom:
    def __init__(self, entry, where):
        self.where = where
        for key in ("id", "row", "cause"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise ValueError(f"{where}: [[symptom]] needs `{key}`")
        unknown = set(entry) - {"id", "row", "cause", "tests", *CONDITIONS}
        if unknown:
            raise ValueError(f"{where} ({entry['id']}): unknown keys "
                             f"{sorted(unknown)}")
        self.id, self.row, self.cause = entry["id"], entry["row"], entry["cause"]
        self.tests = list(entry.get("tests", []))
        try:
            self.conditions = {k: re.compile(entry[k], re.M)
                               for k in CONDITIONS if k in entry}
        except re.error as e:
            raise ValueError(f"{where} ({self.id}): bad regex: {e}") from e
        if not self.conditions:
            raise ValueError(f"{where} ({self.id}): no condition (one of "
                             f"{', '.join(CONDITIONS)})")

    @property
    def specificity(self):
        return len(self.conditions) + bool(self.tests)

    def matches(self, test, evidence):
        if self.tests and test not in self.tests:
            return False
        return all(rx.search(evidence.get(k, ""))
                   for k, rx in self.conditions.items())


def load(meta, where="lesson.toml"):
    """The [[symptom]] entries of a lesson's parsed lesson.toml."""
    out = [Symptom(e, f"{where}: symptom {i + 1}")
           for i, e in enumerate(meta.get("symptom", []))]
    ids = [s.id for s in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"{where}: symptom ids used twice: {sorted(dup)}")
    return out


def evidence(transcript, failure):
    """What a failed test saw, as the texts the conditions search."""
    runs = [r for r, student in transcript.runs if student]
    return {
        "stdout": "".join(r.stdout for r in runs),
        "stderr": "".join(r.stderr for r in runs),
        "result": "".join(f"{getattr(r, 'prog', Path(r.cmd[0]).name)}: "
                          f"{r.status()}\n" for r in runs),
        "counters": "".join(f"{k} {v:+d}\n" for d in transcript.counters
                            for k, v in sorted(d.items()) if v),
        "calls": "".join(s.text() for s in getattr(transcript, "spies", [])),
        "failure": failure,
    }


def diagnose(symptoms, test, ev):
    """The matching symptoms, most specific first."""
    hits = [(-s.specificity, i, s) for i, s in enumerate(symptoms)
            if s.matches(test, ev)]
    return [s for _, _, s in sorted(hits, key=lambda h: h[:2])]


# ---- the README's table ------------------------------------------------------

HEADING = "## Common failures"
HEADER = "| symptom | cause |\n| --- | --- |\n"


def render_table(symptoms):
    return HEADER + "".join(f"| {s.row} | {s.cause} |\n" for s in symptoms)


def readme_table(text):
    """The table under the README's `## Common failures` heading (the
    lines from the first `|` line to the first line that is not one);
    None when there is no such heading, "" when it has no table."""
    lines = text.splitlines(keepends=True)
    try:
        start = next(i for i, l in enumerate(lines) if l.rstrip() == HEADING)
    except StopIteration:
        return None
    table = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return "".join(table)


def write_table(readme, symptoms):
    """Replace the README's Common failures table by the rendering."""
    text = Path(readme).read_text()
    old = readme_table(text)
    if not old:
        raise ValueError(f"{readme}: no table under '{HEADING}' to replace")
    Path(readme).write_text(text.replace(old, render_table(symptoms), 1))


def main(argv):
    """python3 -m grader symptoms [--write] NN: print (or write into the
    README) the lesson's Common failures table, rendered from lesson.toml."""
    import tomllib
    from grader.core.course import COURSE, parse_lessons
    write = "--write" in argv
    args = [a for a in argv if a != "--write"]
    if len(args) != 1:
        print("usage: python3 -m grader symptoms [--write] NN")
        return 2
    d = COURSE / "lessons" / parse_lessons(args[0])[0]
    syms = load(tomllib.loads((d / "lesson.toml").read_text()),
                str(d / "lesson.toml"))
    if write:
        write_table(d / "README.md", syms)
    else:
        print(render_table(syms), end="")
    return 0
