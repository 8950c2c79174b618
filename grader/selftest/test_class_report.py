"""The instructor's view of a class: the class report (make class-report,
written by make grade-class at its end), the similarity list (make
similarity, grade-class SIMILARITY=1) and one student's whole grading
(make class-transcript).

A synthetic class is graded for real, on the host: lessons 04 and 16 need
no device, so grade-class grades them without the micro-VM in seconds.
Its students are the solutions, the skeletons, every mutant of the two
lessons (grader/selftest/mutants/: the report must name each one's
symptom for its test), an independent solution of lesson 04 written here
and a copy of it with renamed variables and reordered functions (the
similarity list must list the copy, not the independent program against
the reference), and bad input: a name with spaces and markup, a lesson
that does not compile, only non-C files, an empty directory, a stray
file. The report builder's numbers are checked on canned results (no
grading); one device test grades a device lesson (01) through the VM.
"""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import COURSE, patched_lesson

sys.path.insert(0, str(COURSE))
from grader.classroom import report, similarity  # noqa: E402
from test_mutants import Mutant  # noqa: E402

pytestmark = pytest.mark.instructor
MUTANTS = COURSE / "grader" / "selftest" / "mutants"
L04, L16 = "04-work-requests", "16-on-the-wire"
WEIRD = "ann <lee>"         # a directory name with a space and markup

# Lesson 04 solved without solutions/: the same six functions, written
# another way (full marks: test_the_synthetic_class_is_graded).
INDEPENDENT = {
    1: """\tif (len == 0)
\t\treturn 0;
\tuint64_t first = addr & ~(page_size - 1);
\tuint64_t last = (addr + len - 1) & ~(page_size - 1);
\treturn (last - first) / page_size + 1;
""",
    2: """\tuint64_t n = ws_pages(addr, len, page_size);
\treturn n * entry_size;
""",
    3: """\tuint64_t entries = table_capacity / entry_size;
\treturn entries * page_size;
""",
    4: """\tuint64_t sq = max_send_wr;
\tuint64_t rq = max_recv_wr;
\tsq *= wqe_size;
\trq *= wqe_size;
\tm.sq_bytes = sq;
\tm.rq_bytes = rq;
\tm.qp_bytes = sq + rq;
\tm.cq_entries = (uint64_t)max_send_wr + (uint64_t)max_recv_wr;
\tm.cq_bytes = cqe_size * m.cq_entries;
""",
    5: """\tmemset(sge, 0, sizeof(*sge));
\tsge->addr = local_addr;
\tsge->lkey = lkey;
\tsge->length = length;
\tmemset(wr, 0, sizeof(*wr));
\twr->opcode = IBV_WR_RDMA_WRITE;
\twr->wr_id = wr_id;
\twr->sg_list = sge;
\twr->num_sge = 1;
\twr->send_flags = IBV_SEND_SIGNALED;
\twr->wr.rdma.rkey = rkey;
\twr->wr.rdma.remote_addr = remote_addr;
""",
    6: """\tdouble sock_one_way = c->sock_send_us + c->sock_recv_us;
\tr.socket_us = sock_one_way * 2 + c->net_rtt_us;
\tr.rdma_us = c->net_rtt_us + c->post_send_us + c->poll_cq_us;
\tr.speedup = r.socket_us / r.rdma_us;
""",
}


def independent_worksheet():
    """The skeleton of lesson 04 with INDEPENDENT in its TODO regions."""
    text = (COURSE / "skeletons" / L04 / "worksheet.c").read_text()
    for n, body in INDEPENDENT.items():
        start = text.index("*/", text.index(f"/* TODO {n}:")) + 3
        end = text.rindex("\n", 0, text.index(f"/* END TODO {n} */")) + 1
        text = text[:start] + body + text[end:]
    return text.replace('#include "worksheet.h"\n',
                        '#include <string.h>\n\n#include "worksheet.h"\n')


def copied(text):
    """@text as a copier hands it in: its variables renamed, its
    functions in the reverse order."""
    for a, b in {"first": "lo_page", "last": "hi_page", "sq": "send_bytes",
                 "rq": "recv_bytes", "entries": "fit", "n": "npages",
                 "sock_one_way": "leg"}.items():
        text = re.sub(rf"\b{a}\b", b, text)
    head, *funcs = re.split(r"(?=^/\*\n \* Exercise )", text, flags=re.M)
    return head + "".join(reversed(funcs))


def mutants(*nums):
    return [Mutant(p) for n in nums for p in sorted((MUTANTS / n).iterdir())
            if p.is_dir()]


def grade_class(subs, out, *extra, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "grader", "grade-class",
         f"--submissions={subs}", f"--out={out}", *extra], cwd=COURSE,
        capture_output=True, text=True, timeout=timeout,
        env=dict(os.environ, ALLOW_MODIFIED_GRADER="1"))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def first_failing(results, tests):
    """The first test of @tests (function names) that failed, in the
    order graded, and its results.json entry."""
    for t in results["tests"]:
        if t["status"] == "failed" and t["extra_data"]["test"] in tests:
            return t
    return None


# ---- the synthetic class, graded on the host -----------------------------------

@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    top = tmp_path_factory.mktemp("report")
    subs = top / "submissions"
    for lesson in (L04, L16):
        shutil.copytree(COURSE / "solutions" / lesson,
                        subs / "solution" / lesson)
        shutil.copytree(COURSE / "skeletons" / lesson,
                        subs / "skeleton" / lesson)
    shutil.copytree(COURSE / "skeletons" / L04, subs / "started" / L04)
    with open(subs / "started" / L04 / "worksheet.c", "a") as f:
        f.write("/* started */\n")
    muts = mutants("04", "16")
    for m in muts:
        patched_lesson(m.lesson, m.path, subs / f"m-{m.num}-{m.name}" /
                       m.lesson, f"mutants/{m.id}")
    (subs / "indep" / L04).mkdir(parents=True)
    (subs / "indep" / L04 / "worksheet.c").write_text(independent_worksheet())
    (subs / "copier" / L04).mkdir(parents=True)
    (subs / "copier" / L04 / "worksheet.c").write_text(
        copied(independent_worksheet()))
    # Bad input: nothing of it may cost another student anything.
    shutil.copytree(COURSE / "solutions" / L04, subs / WEIRD / L04)
    shutil.copytree(COURSE / "solutions" / L04, subs / "carol" / L04)
    with open(subs / "carol" / L04 / "worksheet.c", "a") as f:
        f.write("int broken(void) { return }\n")
    (subs / "notes" / L04).mkdir(parents=True)
    (subs / "notes" / L04 / "README.txt").write_text("my notes\n")
    (subs / "notes" / L04 / "a.out").write_bytes(b"\x7fELF\0\0\0")
    (subs / "nobody").mkdir()
    (subs / "stray.txt").write_text("not a student\n")
    out = top / "out"
    res = grade_class(subs, out, "--lesson=04,16", "--jobs=2",
                      "--similarity")
    return {"subs": subs, "out": out, "res": res, "mutants": muts,
            "top": top}


def test_the_synthetic_class_is_graded(klass):
    res, out = klass["res"], klass["out"]
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["student"]: r for r in read_csv(out / "gradebook.csv")}
    students = {p.name for p in klass["subs"].iterdir() if p.is_dir()}
    assert set(rows) == students, "every directory has its row, no more"
    assert rows["solution"]["total"] == rows["solution"]["max"]
    assert rows["indep"][L04] == rows["copier"][L04] == "14", rows
    assert rows[WEIRD][L04] == "14", rows[WEIRD]
    assert rows["carol"]["status"] == "build-failed", rows["carol"]
    for who in ("skeleton", "notes", "nobody"):
        assert rows[who]["status"] == "empty", rows[who]
    assert "class report: " in res.stdout and "similarity: " in res.stdout
    # The transcripts the results name are the ones kept in OUT.
    over = json.loads((out / "m-04-overflow" / "results.json").read_text())
    named = re.findall(r"^transcript: (.*)$", "\n".join(
        t["output"] for t in over["tests"]), re.M)
    assert named and all(Path(p).is_file() and
                         Path(p).is_relative_to(out) for p in named), named


def test_results_json_carries_the_symptom_ids(klass):
    for m in klass["mutants"]:
        data = json.loads((klass["out"] / f"m-{m.num}-{m.name}" /
                           "results.json").read_text())
        for t in data["tests"]:
            assert set(t) >= {"name", "score", "max_score", "status",
                              "output"}
            assert isinstance(t["extra_data"]["test"], str)
            assert ("symptoms" in t["extra_data"]) == \
                (t["status"] == "failed"), t
        t = first_failing(data, m.tests)
        assert t and t["extra_data"]["symptoms"][0] == m.symptom, (m.id, t)


def test_the_report_names_each_mutants_symptom_for_its_test(klass):
    out = klass["out"]
    fails = {(r["student"], r["test"]): r
             for r in read_csv(out / "class-report" / "failures.csv")}
    syms = read_csv(out / "class-report" / "symptoms.csv")
    page = (out / "report.html").read_text()
    for m in klass["mutants"]:
        who = f"m-{m.num}-{m.name}"
        data = json.loads((out / who / "results.json").read_text())
        test = first_failing(data, m.tests)["extra_data"]["test"]
        row = fails.get((who, test))
        assert row and row["first_symptom"] == m.symptom, (m.id, test, row)
        assert any(s["test"] == test and s["symptom"] == m.symptom and
                   int(s["first_symptom_students"]) >= 1 for s in syms), m.id
        assert f"<code>{m.symptom}</code>" in page, m.id


def test_the_reports_numbers(klass):
    out = klass["out"]
    lessons = {r["lesson"]: r for r in read_csv(out / "class-report" /
                                                "lessons.csv")}
    l04 = lessons[L04]
    # Graded for 04: solution, started, 7 mutants, indep, copier, WEIRD,
    # carol; the other scored students left it as the skeleton.
    graded04 = 6 + len([m for m in klass["mutants"] if m.num == "04"])
    assert int(l04["graded"]) == graded04, l04
    scored = len(read_csv(out / "gradebook.csv"))
    assert int(l04["not_submitted"]) == scored - graded04, l04
    assert (l04["did_not_compile"], l04["max_points"]) == ("1", "14"), l04
    assert int(l04["full_marks"]) == 4 and int(l04["zero"]) == 2, l04
    # Each test's share, against the results themselves: carol's lesson
    # does not compile, so she is in no test's count.
    tests = read_csv(out / "class-report" / "tests.csv")
    for t in tests:
        failing = graded = 0
        for d in out.iterdir():
            if d.name == "carol" or not (d / "results.json").is_file():
                continue
            for x in json.loads((d / "results.json").read_text())["tests"]:
                if x["name"] == f"{t['lesson']}: {t['title']}":
                    graded += 1
                    failing += x["status"] == "failed"
        assert (int(t["graded"]), int(t["failing"])) == (graded, failing), t
    scores = [r for r in read_csv(out / "class-report" / "scores.csv")
              if r["lesson"] == L04]
    assert [r["points"] for r in scores] == [str(p) for p in range(15)]
    assert sum(int(r["students"]) for r in scores) == graded04


def test_the_page_is_static_and_escaped(klass):
    out = klass["out"]
    page = (out / "report.html").read_text()
    assert "<script" not in page.lower() and "http" not in page
    assert "ann &lt;lee&gt;" in page and WEIRD not in page
    for src in re.findall(r'(?:src|href)="([^"#]+)', page):
        from urllib.parse import unquote
        assert (out / unquote(src)).exists(), src
    pngs = list((out / "class-report").glob("*.png"))
    assert {p.name for p in pngs} >= {f"{L04}-scores.png", f"{L04}-tests.png",
                                      f"{L16}-scores.png"}
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p


def test_similarity_lists_the_copy_not_the_independent_program(klass):
    """copier renamed indep's variables and reversed its functions: listed.
    indep against the reference (and the copies of it): not listed. The
    solution, WEIRD (a byte copy) and the mutants (the solution with one
    line changed) are listed against each other: they are one program."""
    out = klass["out"]
    pairs = {(p["lesson"], p["student_a"], p["student_b"]): p
             for p in read_csv(out / "similarity.csv")}
    assert (L04, "copier", "indep") in pairs, sorted(pairs)
    assert int(pairs[(L04, "copier", "indep")]["percent"]) >= 80
    for (lesson, a, b) in pairs:
        if "indep" in (a, b) or "copier" in (a, b):
            assert {a, b} == {"copier", "indep"}, (a, b)
    assert (L04, WEIRD, "solution") in pairs
    assert (L04, "m-04-overflow", "solution") in pairs
    page = (out / "similarity.html").read_text()
    assert "ann &lt;lee&gt;" in page and "<script" not in page.lower()
    # The runs side by side: the copier's renamed line beside indep's.
    assert "double leg = c-&gt;sock_send_us" in page
    assert "double sock_one_way = c-&gt;sock_send_us" in page
    assert "notes: 04-work-requests/: not C, not compared: README.txt, " \
        "a.out" in klass["res"].stderr
    assert 'href="similarity.html#p' in (out / "report.html").read_text()


def test_class_report_rebuilds_without_regrading(klass, tmp_path):
    out = klass["out"]
    before = (out / "class-report" / "tests.csv").read_text()
    stamp = (out / "solution" / "results.json").stat().st_mtime_ns
    shutil.rmtree(out / "class-report")
    (out / "report.html").unlink()
    res = subprocess.run(["make", "-s", "class-report", f"OUT={out}"],
                         cwd=COURSE, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out / "report.html").is_file()
    assert (out / "class-report" / "tests.csv").read_text() == before
    assert (out / "solution" / "results.json").stat().st_mtime_ns == stamp
    print(res.stdout)           # the time it took (pytest -s shows it)
    res = subprocess.run(["make", "-s", "class-report", f"OUT={tmp_path}"],
                         cwd=COURSE, capture_output=True, text=True)
    assert res.returncode != 0 and "no graded students" in res.stderr


def test_class_transcript_one_file_for_a_regrade(klass):
    out, subs = klass["out"], klass["subs"]
    res = subprocess.run(["make", "-s", "class-transcript", f"OUT={out}",
                          "STUDENT=m-04-overflow", f"SUBMISSIONS={subs}"],
                         cwd=COURSE, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    text = (out / "m-04-overflow" / "grading.txt").read_text()
    for want in ("status:       graded", "commit:       (no git history)",
                 "[failed ] 0/3  04-work-requests: B:",
                 "symptoms: overflow",
                 "TRANSCRIPT transcripts/04-work-requests/"
                 "test_b_queue_memory.log", "== commands ==",
                 "WHAT make grade PRINTED", "Score: 11/14",
                 "SUBMITTED 04-work-requests/worksheet.c",
                 "+\tm.sq_bytes = max_send_wr * wqe_size;"):
        assert want in text, want
    res = subprocess.run([sys.executable, "-m", "grader.classroom.transcript",
                          str(out), WEIRD], cwd=COURSE, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and (out / WEIRD / "grading.txt").is_file()
    res = subprocess.run([sys.executable, "-m", "grader.classroom.transcript",
                          str(out), "zed"], cwd=COURSE, capture_output=True,
                         text=True)
    assert res.returncode == 2 and "no graded student 'zed'" in res.stderr
    assert "m-04-overflow" in res.stderr


# ---- the report builder on canned results (no grading) -----------------------

def canned_test(title, func, pts, status, symptoms=None, output=""):
    t = {"name": f"{L04}: {title}", "score": pts if status == "passed" else 0,
         "max_score": pts, "status": status, "output": output,
         "extra_data": {"test": func}}
    if symptoms is not None:
        t["extra_data"]["symptoms"] = symptoms
    return t


def canned_student(out, name, status, points, tests=None, compiled=True,
                   raw_results=None):
    d = out / name
    d.mkdir(parents=True)
    (d / "row.json").write_text(json.dumps({
        "student": name, "status": status, "points": points,
        "max": {L04: 14} if status != "empty" else {},
        "total": sum(points.values()), "max_total": 14, "commit": "",
        "commit_time": "", "note": ""}))
    if tests is not None:
        (d / "results.json").write_text(json.dumps({"tests": tests}))
        (d / "summary.json").write_text(json.dumps({"lessons": {L04: {
            "got": points.get(L04, 0), "total": 14, "compiled": compiled,
            "hung": None}}}))
    if raw_results is not None:
        (d / "results.json").write_text(raw_results)


def test_report_from_canned_results(tmp_path, capsys):
    from grader.session import symptoms
    import tomllib
    cause = {s.id: s.cause for s in symptoms.load(tomllib.loads(
        (COURSE / "lessons" / L04 / "lesson.toml").read_text()))}
    A = ("A: pages", "test_a_pages", 3)
    B = ("B: queues", "test_b_queue_memory", 3)
    out = tmp_path / "out"
    canned_student(out, "alice", "graded", {L04: 14},
                   [canned_test(*A, "passed"), canned_test(*B, "passed")])
    canned_student(out, "bob", "graded", {L04: 11},
                   [canned_test(*A, "passed"),
                    canned_test(*B, "failed", ["overflow"])])
    # Results written before the ids were kept: read from the output.
    canned_student(out, "cy old", "graded", {L04: 8}, [
        canned_test(*A, "failed", None,
                    f"x\nlikely cause: {cause['pages-empty']}\n"
                    f"  or: {cause['pages-unaligned']}"),
        canned_test(*B, "failed", None, "no cause shown\nhint: look")])
    for t in json.loads((out / "cy old" / "results.json").read_text())[
            "tests"]:
        assert "symptoms" not in t["extra_data"]
    canned_student(out, "dan", "build-failed", {L04: 0},
                   [canned_test(*A, "failed", []),
                    canned_test(*B, "failed", [])], compiled=False)
    canned_student(out, "eve", "empty", {})
    canned_student(out, "fay", "infra-error", {})
    canned_student(out, "gus", "graded", {L04: 3},
                   raw_results='{"tests": [')          # cut short
    (out / "junk").mkdir()
    (out / "stray.txt").write_text("x")
    assert report.build(out) == 0
    err = capsys.readouterr().err
    assert "gus/results.json: the test results not readable" in err, err
    assert "junk: no row.json" in err, err
    lessons = read_csv(out / "class-report" / "lessons.csv")
    assert len(lessons) == 1
    l = lessons[0]
    assert (l["graded"], l["not_submitted"], l["did_not_compile"]) == \
        ("5", "1", "1"), l                        # fay is not scored
    assert (l["full_marks"], l["zero"], l["min"], l["max"]) == \
        ("1", "1", "0", "14"), l
    # bob fails B first, cy old A: one each (dan's lesson did not compile)
    assert l["median"] == "8" and l["first_failing_students"] == "1", l
    tests = {t["test"]: t for t in read_csv(out / "class-report" /
                                            "tests.csv")}
    a, b = tests["test_a_pages"], tests["test_b_queue_memory"]
    assert (a["graded"], a["failing"], a["first_symptom"]) == \
        ("3", "1", "pages-empty"), a
    assert (b["graded"], b["failing"], b["first_symptom"],
            b["first_symptom_students"], b["no_symptom_students"]) == \
        ("3", "2", "overflow", "1", "1"), b
    assert b["first_symptom_cause"] == cause["overflow"]
    fails = read_csv(out / "class-report" / "failures.csv")
    assert {(f["student"], f["test"], f["symptoms"]) for f in fails} == {
        ("bob", "test_b_queue_memory", "overflow"),
        ("cy old", "test_a_pages", "pages-empty pages-unaligned"),
        ("cy old", "test_b_queue_memory", "")}
    page = (out / "report.html").read_text()
    assert "Not read" in page and "cut short" not in page
    assert page.count("<tr>") > 5 and "What to teach again" in page


def test_report_without_gnuplot_keeps_the_numbers(tmp_path):
    out = tmp_path / "out"
    canned_student(out, "alice", "graded", {L04: 14},
                   [canned_test("A: pages", "test_a_pages", 3, "passed")])
    res = subprocess.run([sys.executable, "-m", "grader.classroom.report",
                          str(out)], cwd=COURSE, capture_output=True,
                         text=True, env=dict(os.environ, PATH="/nonexistent"))
    assert res.returncode == 0, res.stderr
    assert "gnuplot is not installed" in res.stdout
    assert (out / "class-report" / "tests.csv").is_file()
    assert "gnuplot is not installed" in (out / "report.html").read_text()
    assert not list((out / "class-report").glob("*.png"))


def test_report_refuses_what_is_not_a_graded_class(tmp_path):
    res = subprocess.run([sys.executable, "-m", "grader.classroom.report",
                          str(tmp_path / "none")], cwd=COURSE,
                         capture_output=True, text=True)
    assert res.returncode == 2 and "no such directory" in res.stderr
    res = subprocess.run(["make", "-s", "class-report"], cwd=COURSE,
                         capture_output=True, text=True)
    assert res.returncode != 0 and "usage: make class-report" in res.stderr


# ---- similarity on its own --------------------------------------------------------

def test_strip_given_blanks_the_skeletons_lines_and_keeps_the_numbers():
    skel = "int f(void)\n{\n\t/* TODO 1: do it\n\t * well */\n\treturn 0;\n}\n"
    text = ("int f(void)\n{\n\t/* TODO 1: do it\n\t * mine */\n"
            "\tint x = g();\n\treturn x; // done\n}\n")
    kept, given = similarity.strip_given(text, skel)
    lines = kept.split("\n")
    assert len(lines) == len(text.split("\n"))
    assert [x.strip() for x in lines if x.strip()] == ["int x = g();",
                                                       "return x;"]
    # The comment's opening line is the skeleton's; its next line is not
    # code for sim_c all the same (comments go first).
    assert lines[3].strip() == ""
    assert given[:3] == [True, True, True] and given[4] is False
    assert similarity.uncomment('a = "/* no */"; /* yes */ b;\n') == \
        'a = "/* no */"; ' + " " * len("/* yes */") + ' b;\n'


def test_similarity_on_bad_input_says_what_it_skipped(tmp_path, monkeypatch):
    subs = tmp_path / "subs"
    ind = independent_worksheet()
    (subs / "a b" / L04).mkdir(parents=True)
    (subs / "a b" / L04 / "worksheet.c").write_text(ind)
    (subs / "c" / L04).mkdir(parents=True)
    (subs / "c" / L04 / "worksheet.c").write_text(copied(ind))
    (subs / "c" / L04 / "my helper.c").write_text("int helper(void);\n")
    (subs / "c" / L04 / "notes.md").write_text("# notes\n")
    (subs / "d" / L04).mkdir(parents=True)
    (subs / "d" / L04 / "worksheet.c").write_bytes(b"\x7fELF\0\0")
    (subs / "e" / L04).mkdir(parents=True)
    locked = subs / "e" / L04 / "worksheet.c"
    locked.write_text(ind)
    locked.chmod(0)
    real = Path.read_bytes

    def read_bytes(self):           # root reads a mode-0 file all the same
        if self == locked:
            raise PermissionError(13, "Permission denied")
        return real(self)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    (subs / "empty").mkdir()
    trees = {p.name: p for p in subs.iterdir()}
    data = similarity.compare(trees, [L04])
    notes = "\n".join(data["notes"])
    assert "c: 04-work-requests/: not C, not compared: notes.md" in notes
    assert "d: 04-work-requests: worksheet.c: binary, not compared" in notes
    assert ("e: 04-work-requests: worksheet.c: not readable (Permission "
            "denied): not compared") in notes
    assert [(p["a"], p["b"]) for p in data["pairs"]] == [("a b", "c")]
    assert data["lessons"] == {L04: 2}
    similarity.write(data, tmp_path / "out")
    page = (tmp_path / "out" / "similarity.html").read_text()
    assert "a b" in page and "Permission denied" in page


def test_the_variants_are_listed_against_the_reference_and_why():
    """grader/selftest/variants/ holds no independent program: it is
    prog-prefix.c, which test_variants.py puts in front of each solution's
    main file. So the variant tree is the reference plus 90 lines: every
    token the reference's students write is in it, and the pair is
    listed (a copy with code added is still a copy)."""
    import test_variants
    names = [n for n in test_variants.make_tree() if n[:2] in ("01", "03",
                                                              "05")]
    data = similarity.compare({"reference": COURSE / "solutions",
                               "variant": test_variants.TREE}, names)
    got = {p["lesson"]: p for p in data["pairs"]}
    assert set(got) == set(names), got
    for p in got.values():
        assert p["percent"] >= 99 and p["tokens_b"] > p["tokens_a"], p


def test_make_similarity_from_the_command_line(tmp_path):
    subs = tmp_path / "subs"
    (subs / "x" / L04).mkdir(parents=True)
    (subs / "x" / L04 / "worksheet.c").write_text(independent_worksheet())
    (subs / "y" / L04).mkdir(parents=True)
    (subs / "y" / L04 / "worksheet.c").write_text(
        copied(independent_worksheet()))
    res = subprocess.run(["make", "-s", "similarity", f"SUBMISSIONS={subs}",
                          f"OUT={tmp_path / 'sim'}", "LESSON=04",
                          "THRESHOLD=95"], cwd=COURSE, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "similarity: 0 pairs listed" in res.stdout, res.stdout
    res = subprocess.run(["make", "-s", "similarity", f"SUBMISSIONS={subs}",
                          f"OUT={tmp_path / 'sim'}", "LESSON=04"],
                         cwd=COURSE, capture_output=True, text=True,
                         timeout=120)
    assert "similarity: 1 pairs listed" in res.stdout, res.stdout
    rows = read_csv(tmp_path / "sim" / "similarity.csv")
    assert [(r["student_a"], r["student_b"]) for r in rows] == [("x", "y")]
    res = subprocess.run(["make", "-s", "similarity"], cwd=COURSE,
                         capture_output=True, text=True)
    assert res.returncode != 0 and "usage: make similarity" in res.stderr
    res = subprocess.run(["make", "-s", "similarity",
                          f"SUBMISSIONS={tmp_path / 'none'}"], cwd=COURSE,
                         capture_output=True, text=True)
    assert res.returncode == 2 and "no such directory" in res.stderr
