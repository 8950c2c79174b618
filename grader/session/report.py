"""What a grading prints about its results, in one place: the plugin
(one session) and shards.py (several sessions shown as one) print the same
lines from these functions.

- a failure in one line (later failures of a lesson),
- a lesson's subtotal line, and its parse,
- the note before the lessons shown as their subtotal only,
- the command to run next, and the Score line.
"""

import re

ONE_LINE_MAX = 300

SUBTOTAL = re.compile(r"^  (\d\d)-\S+: (\d+)/(\d+)"
                      r"(?: \(\+(\d+) graded on submission\))?")


def one_line(lines):
    """A failure in one line, a whole sentence: the message's first line
    (with its expected/got lines when they are short), never cut
    mid-word; one that is too long ends at a clause, and says so."""
    line = lines[0].rstrip()
    rest = [" ".join(x.split()) for x in lines[1:3]]
    if (line and len(rest) == 2 and rest[0].startswith("expected")
            and rest[1].startswith("got") and
            len(rest[0]) + len(rest[1]) < 160):
        # "got:" alone: the text got is on the lines below it
        got = "" if rest[1] == "got:" else f", {rest[1]}"
        line = f"{line.rstrip(':')}: {rest[0]}{got}"
    if len(line) <= ONE_LINE_MAX:
        return line
    cut = max(line.rfind(sep, 0, ONE_LINE_MAX) for sep in (": ", "; ", ", "))
    if cut < ONE_LINE_MAX // 2:
        cut = line.rfind(" ", 0, ONE_LINE_MAX)
    return line[:cut] + " ... (V=1 shows it whole)"


def subtotal_line(name, got, total, pending=0, compiled=True):
    """'  NN-topic: got/total', with what is pending or why it is 0."""
    return (f"  {name}: {got}/{total}"
            + (f" (+{pending} graded on submission)" if pending else "")
            + ("" if compiled else " (does not compile)"))


def short_of_full(line):
    """The lesson number of a subtotal line short of full marks, else
    None (also for a line that is no subtotal)."""
    m = SUBTOTAL.match(line)
    if not m:
        return None
    got, total, pending = int(m[2]), int(m[3]), int(m[4] or 0)
    return m[1] if got + pending < total else None


def compact_note(unfinished):
    """Printed once, before the first lesson shown as its subtotal only."""
    return (f"(the lessons after {unfinished}: their subtotals only; make "
            f"grade LESSON=NN shows one in full, V=1 all)")


def next_step(unfinished, src_arg, several):
    """The command to run next when lesson `unfinished` is short of full
    marks; src_arg: ' SRC=...' or ''."""
    if several:
        return (f"next: make grade LESSON={unfinished}{src_arg}   (the "
                f"first lesson short of full marks; make hint "
                f"LESSON={unfinished} for a hint)")
    return (f"next: make hint LESSON={unfinished}   (a hint for its first "
            f"failing test)")


def score_line(got, total, pending=0):
    return (f"Score: {got}/{total}"
            + (f" (+{pending} graded on submission)" if pending else ""))
