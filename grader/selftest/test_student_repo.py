"""make student-repo: the students' repository holds no solution code and
no instructor-only test, works (make grade, the self-check's collection, the
GitHub workflow's grading command), and its workflow names only what exists.
Host only: lesson 04 needs no device."""

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import COURSE

pytestmark = pytest.mark.instructor
sys.path.insert(0, str(COURSE))
from grader.classroom import studentrepo  # noqa: E402

WORKFLOW = ".github/workflows/grade.yml"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "repo"
    res = subprocess.run([sys.executable, "-m", "grader", "student-repo",
                          str(out)], cwd=COURSE, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return out


def release_files(repo):
    res = subprocess.run(["git", "-C", str(repo), "ls-files"],
                         capture_output=True, text=True, check=True)
    return res.stdout.split()


# ---- what a solution's TODO regions hold ------------------------------------
#
# A TODO region's answer must not be readable anywhere a student reads:
# the released files (code, lesson texts, hints and symptom rows in
# lesson.toml, the grader's own messages in grader/lessons/) and what make
# grade prints (which comes from those files). Two checks:
#
#   code:  no 3 consecutive non-trivial lines of a solution's TODO region
#          (comments removed, whitespace normalised) appear as 3 consecutive
#          non-trivial lines of a released C file;
#   text:  no finished expression of a TODO region (an assignment, a call
#          with its arguments, a designated initializer's computed value)
#          appears in a released text file or in a released C file's
#          comments.
#
# A trivial line decides nothing: punctuation, a bare return/break/goto, a
# declaration without a value, an initializer's opening line, a simple
# `if (ret) {`.

TODO_RE = re.compile(r"\bTODO (\d+):")
END_TODO_RE = re.compile(r"\bEND TODO (\d+)\b")
TRIVIAL_RE = re.compile(
    r"^(?:[{}()\[\];,\s]*"
    r"|\}? ?else ?\{?"
    r"|return(?: -?\d+| \w+| NULL)?;"
    r"|break;|continue;|goto \w+;"
    r"|(?:const )?(?:(?:struct|enum|union) )?\w+(?: \**\w+(?:\[\w*\])?,?)+;"
    r"|\},? ?\**\w+;"
    r"|(?:if|while) \(!?[\w>.-]+\) ?\{?"
    r"|[\w .*\[\]>-]+ = (?:\([\w ]+\))?\{)$")
ASSIGN_RE = re.compile(r"^(?P<lhs>[\w>.\[\]*-]+) (?P<op>[-+*/|&^]?=) (?P<rhs>.+)$")
CALL_RE = re.compile(r"\w+\(([^()]|\([^()]*\))*,([^()]|\([^()]*\))*\)")
# A value is computed when it has a binary operator or a call with
# arguments (`->`, a cast and a unary `&` do not count).
STRUCTURED_RE = re.compile(r"[\w)\]] ?(?:<<|>>|[-+*/%|^&?<>])=? ?[\w(]|\w\([^)]")


def norm(text):
    return " ".join(text.split())


CAST_RE = re.compile(r"\((?:const )?(?:(?:struct|enum|unsigned) )?\w+ ?\**\)")


def squeeze(text):
    """An expression's or a text's characters, for comparing one with the
    other: no whitespace, no casts (a hint may leave them out)."""
    return CAST_RE.sub("", "".join(text.split()))


def strip_comments(text):
    """(code with comments blanked, keeping line numbers; the comments)."""
    comments = []

    def blank(m):
        # The words of the comment, without its frame (/*, */, the " * "
        # that starts each line).
        body = re.sub(r"^\s*\*(?!/)|^/[*/]|\*/$", "",
                      m.group(0), flags=re.M)
        comments.append(body)
        return "\n" * m.group(0).count("\n")
    code = re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)
    return code, "\n".join(comments)


def nontrivial(line):
    return bool(line) and not TRIVIAL_RE.match(line)


def code_lines(text):
    """The non-trivial lines of C source, normalised."""
    code, _ = strip_comments(text)
    return [x for x in map(norm, code.splitlines()) if nontrivial(x)]


def todo_regions(path):
    """[(n, [non-trivial normalised code lines])] of a solution file."""
    text = path.read_text()
    code = strip_comments(text)[0].splitlines()
    out, cur, num = [], None, None
    for raw, line in zip(text.splitlines(), code):
        if cur is None:
            m = TODO_RE.search(raw)
            if m and not END_TODO_RE.search(raw):
                cur, num = [], int(m.group(1))
        elif END_TODO_RE.search(raw):
            out.append((num, cur))
            cur = None
        elif nontrivial(norm(line)):
            cur.append(norm(line))
    return out


def windows(lines, k=3):
    return {tuple(lines[i:i + k]) for i in range(len(lines) - k + 1)}


def statements(lines):
    """Join a region's lines into whole expressions: a line continues
    while its parentheses are open."""
    out, cur, depth = [], [], 0
    for line in lines:
        cur.append(line)
        depth += line.count("(") - line.count(")")
        if depth <= 0:
            out.append(" ".join(cur))
            cur, depth = [], 0
    if cur:
        out.append(" ".join(cur))
    return out


def finished_expressions(lines):
    """What a region computes, as text a hint could hold: assignments
    (`sge.length = A_SIZE`), calls with their arguments, and designated
    initializers whose value is computed (`.addr = buf + off`; a field
    set to a plain name or number is the field, which a TODO may name)."""
    found = set()
    for st in statements(lines):
        st = st.rstrip(";,{ ").strip()
        if st.startswith("."):
            field, _, value = st[1:].partition(" = ")
            if value and STRUCTURED_RE.search(value.replace("->", ".")):
                found.add(f"{field} = {value}")
            continue
        m = ASSIGN_RE.match(st)
        if m and not st.startswith(("struct ", "const ")):
            found.add(st)
            st = m.group("rhs")
        for call in CALL_RE.finditer(st):
            found.add(call.group(0))
    return {e for e in found if len(e) >= 10}


def solution_secrets(course):
    """({3-line window: [where]}, {expression: [where]}) over every TODO
    region of every solution file; where = 'NN-topic/FILE.c TODO N'."""
    wins, exprs = {}, {}
    for sol in sorted((course / "solutions").rglob("*.c")):
        rel = f"{sol.parent.name}/{sol.name}"
        for num, lines in todo_regions(sol):
            where = f"{rel} TODO {num}"
            for w in windows(lines):
                wins.setdefault(w, []).append(where)
            for e in finished_expressions(lines):
                exprs.setdefault(e, []).append(where)
    return wins, exprs


def readable(path):
    try:
        return path.read_text()
    except (UnicodeDecodeError, OSError):
        return None


def overlaps(root, files, course=COURSE):
    """{(file, 'NN-topic/FILE.c TODO N'): what} for every released file
    that holds a solution's TODO lines (3 in a row, in code or in a text's
    code blocks) or a finished expression (in a text, or a C file's
    comments)."""
    wins, exprs = solution_secrets(course)
    found = {}
    for f in files:
        text = readable(root / f)
        if text is None:
            continue
        if f.endswith((".c", ".h")):
            lines = code_lines(text)
            text = strip_comments(text)[1]
        else:
            lines = [x for x in map(norm, text.splitlines()) if nontrivial(x)]
        for w in windows(lines) & wins.keys():
            for where in wins[w]:
                found.setdefault((f, where), f"lines {' / '.join(w)!r}")
        flat = squeeze(text)
        for e, wheres in exprs.items():
            if squeeze(e) in flat:
                for where in wheres:
                    found.setdefault((f, where), f"expression {e!r}")
    return found


def leaks(root, files, course=COURSE):
    """['FILE: what (from NN-topic/FILE.c TODO N)'], minus ALLOWED."""
    return sorted(f"{f}: {what} (from {where})" for (f, where), what in
                  overlaps(root, files, course).items()
                  if (f, where) not in ALLOWED)


# Released files that hold lines of a TODO region on purpose, each with why.
# Most of them are the fields of a work request that a later lesson, about
# something else, must post with given code.
_POSTS = ("lessons 10 and 11 are about waiting and timing: their given "
          "posts are lesson 05's and 06/07's work requests (sge and fields); "
          "lesson 05's TODOs 5-6 and 06/07's TODO 5 come first")
_LAB = ("the failure lab's given helpers post SENDs, RECVs and READs so that "
        "each experiment breaks one thing; lessons 05, 07 and 08 come first")
_SEND = ("a given SEND (lesson 03 proves its connection with one, lesson 08's "
         "messages are SENDs): the fields TODO 6's own comment names")
_WR = ("a given work request with the opcode as a variable (lesson 12's "
       "post_rdma(), lesson 08's WRITE); TODO 4's subject, .wr.atomic, is "
       "nowhere else")
_LATER = ("lessons 13 and 14 are about keeping the send queue full and "
          "serving many clients: their given receives and replies are "
          "lesson 05's work requests (TODOs 5-6 come first)")
_NAMED = ("TODO 8 names the call it times (stream()); its subject, the "
          "clock reads and the rates, is in no released file")
_PEER = ("the reference peers' own QP setup (pyverbs): a pkey index of 0, "
         "a send PSN of 0, the same in every QP of the course")
_SENDS = ("a SEND's fields (sge, one of them, signaled), given since lesson "
          "03 and lesson 05's TODO 6: lessons 17 and 18 come after, and "
          "their TODOs are about what is new (the UD fields, the reply's "
          "addressing, the counter), not the SEND")
_SEQ = ("lesson 18's given request and check: the work request's common "
        "fields (its TODOs 2 and 6 are the opcode and what is sent) and "
        "lesson 12's counter check line (TODO 7 there, after which lesson "
        "18 comes)")
ALLOWED = {
    ("skeletons/13-throughput/bw.c", "05-send-recv/pingpong.c TODO 5"): _LATER,
    ("skeletons/14-srq/srq.c", "05-send-recv/pingpong.c TODO 6"): _LATER,
    ("skeletons/13-throughput/bw.c", "13-throughput/bw.c TODO 8"): _NAMED,
    ("grader/evidence/trusted/verbs.py", "14-srq/srq.c TODO 5"): _PEER,
    ("grader/evidence/trusted/seq.py", "14-srq/srq.c TODO 5"): _PEER,
    ("grader/evidence/trusted/seq.py", "17-ud/ud.c TODO 2"): _PEER,
    ("grader/evidence/trusted/seq.py", "17-ud/ud.c TODO 4"): _PEER,
    ("grader/evidence/trusted/seq.py", "18-sequencer/seq.c TODO 1"): _PEER,
    ("grader/evidence/trusted/ud_peer.py", "14-srq/srq.c TODO 5"): _PEER,
    ("grader/evidence/trusted/ud_peer.py", "17-ud/ud.c TODO 2"): _PEER,
    ("grader/evidence/trusted/ud_peer.py", "17-ud/ud.c TODO 4"): _PEER,
    ("grader/evidence/trusted/ud_peer.py", "18-sequencer/seq.c TODO 1"): _PEER,
    ("grader/evidence/trusted/verbs.py", "17-ud/ud.c TODO 2"): _PEER,
    ("lessons/08-rdma-cm/cm_common.c", "18-sequencer/seq.c TODO 6"): _SENDS,
    ("skeletons/03-queue-pairs/qp_states.c", "18-sequencer/seq.c TODO 6"): _SENDS,
    ("skeletons/10-events/events.c", "18-sequencer/seq.c TODO 6"): _SENDS,
    ("skeletons/11-latency/latency.c", "18-sequencer/seq.c TODO 6"): _SENDS,
    ("skeletons/14-srq/srq.c", "18-sequencer/seq.c TODO 6"): _SENDS,
    ("skeletons/17-ud/ud.c", "05-send-recv/pingpong.c TODO 6"): _SENDS,
    ("skeletons/17-ud/ud.c", "18-sequencer/seq.c TODO 6"): _SENDS,
    ("skeletons/18-sequencer/seq.c", "05-send-recv/pingpong.c TODO 6"): _SENDS,
    ("skeletons/18-sequencer/seq.c", "18-sequencer/seq.c TODO 2"): _SEQ,
    ("skeletons/18-sequencer/seq.c", "18-sequencer/seq.c TODO 6"): _SEQ,
    ("skeletons/18-sequencer/seq.c", "12-atomics/atomics.c TODO 7"): _SEQ,
    ("skeletons/10-events/events.c", "05-send-recv/pingpong.c TODO 5"): _POSTS,
    ("skeletons/10-events/events.c", "05-send-recv/pingpong.c TODO 6"): _POSTS,
    ("skeletons/10-events/events.c", "06-rdma-write/rdma_write.c TODO 5"): _POSTS,
    ("skeletons/10-events/events.c", "07-rdma-read/rdma_read.c TODO 5"): _POSTS,
    ("skeletons/11-latency/latency.c", "05-send-recv/pingpong.c TODO 5"): _POSTS,
    ("skeletons/11-latency/latency.c", "05-send-recv/pingpong.c TODO 6"): _POSTS,
    ("skeletons/11-latency/latency.c", "06-rdma-write/rdma_write.c TODO 5"): _POSTS,
    ("skeletons/11-latency/latency.c", "07-rdma-read/rdma_read.c TODO 5"): _POSTS,
    ("skeletons/09-failures/failures.c", "05-send-recv/pingpong.c TODO 5"): _LAB,
    ("skeletons/09-failures/failures.c", "07-rdma-read/rdma_read.c TODO 5"): _LAB,
    ("skeletons/09-failures/failures.c", "08-rdma-cm/cm_server.c TODO 7"): _LAB,
    ("skeletons/03-queue-pairs/qp_states.c", "05-send-recv/pingpong.c TODO 6"): _SEND,
    ("lessons/08-rdma-cm/cm_common.c", "05-send-recv/pingpong.c TODO 6"): _SEND,
    ("skeletons/12-atomics/atomics.c", "12-atomics/atomics.c TODO 4"): _WR,
    ("skeletons/08-rdma-cm/cm_client.c", "12-atomics/atomics.c TODO 4"): _WR,
}


def test_the_instructors_files_are_not_released(repo):
    files = release_files(repo)
    assert files and not any(studentrepo.instructor_only(f) and f not in
                             studentrepo.GENERATED for f in files), files
    assert not (repo / "solutions").exists()
    assert not list((repo / "grader").rglob("*.patch"))
    assert "SRC=solutions" not in (repo / "README.md").read_text()
    assert "| [05-send-recv]" in (repo / "README.md").read_text()
    assert (repo / WORKFLOW).is_file()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                            capture_output=True, text=True).stdout
    assert status == "", status


def test_every_released_file_is_the_courses(repo):
    for f in release_files(repo):
        if f not in studentrepo.GENERATED:
            assert (repo / f).read_bytes() == (COURSE / f).read_bytes(), f


def test_no_solution_code_leaks(repo):
    found = leaks(repo, release_files(repo))
    assert found == [], "\n".join(found)


def test_the_leak_check_has_teeth():
    wins, exprs = solution_secrets(COURSE)
    # Most of what the TODO regions hold is theirs alone: there is
    # something to find.
    assert len(wins) > 150 and len(exprs) > 60, (len(wins), len(exprs))
    # A solution file planted among the released ones: caught.
    planted = leaks(COURSE, ["solutions/05-send-recv/rc.c"])
    assert any("rc.c TODO 3" in x for x in planted), planted
    # A hint holding one finished line, as lesson 09's once did: caught.
    hint = 'test_sge_past_mr = "sge.addr = lab->buf_a + A_SIZE - MSG / 2"\n'
    tmp = COURSE / "build" / "selftest-leak"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "lesson.toml").write_text(hint)
    (tmp / "note.c").write_text(
        "/* the psn: info->psn = lrand48() & 0xffffff */\nint x;\n")
    found = leaks(tmp, ["lesson.toml", "note.c"])
    assert any(x.startswith("lesson.toml:") and "failures.c TODO 4" in x
               for x in found), found
    assert any("note.c" in x and "TODO 2" in x for x in found), found
    # Three lines of RTR attributes pasted into a released file: caught,
    # with whitespace of its own.
    (tmp / "rtr.c").write_text(
        "struct ibv_qp_attr x = {\n  .dest_qp_num   = theirs->qpn,\n"
        "\t.rq_psn = theirs->psn,\n\n.max_dest_rd_atomic = "
        "rc->params.max_dest_rd_atomic,\n};\n")
    assert leaks(tmp, ["rtr.c"]), "three RTR lines went unnoticed"


def test_every_allowed_overlap_is_still_there(repo):
    """An ALLOWED entry whose overlap is gone must go too: the list holds
    only what is really released."""
    real = set(overlaps(repo, release_files(repo)))
    assert set(ALLOWED) <= real, sorted(set(ALLOWED) - real)


def test_make_grade_works_in_it(repo):
    res = subprocess.run(["make", "--no-print-directory", "grade",
                          "LESSON=04"], cwd=repo, capture_output=True,
                         text=True, timeout=300)
    assert "Score: 0/14" in res.stdout, res.stdout + res.stderr
    assert "differ from the checkout" not in res.stderr
    assert res.returncode != 0


def test_its_self_check_collects_no_instructor_test(repo):
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "grader/pytest.ini",
         "--rootdir", ".", "grader/selftest", "--collect-only", "-q"],
        cwd=repo, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    ids = res.stdout
    assert "test_skeleton_has_numbered_todos" in ids
    assert "test_skeleton_does_not_reach_full_marks" in ids
    for gone in ("solutions", "test_solution_reaches_full_marks",
                 "test_cheats", "test_class"):
        assert gone not in ids, gone
    assert "deselected" in ids


def workflow(repo):
    return yaml.safe_load((repo / WORKFLOW).read_text())


def test_the_workflow_runs_only_what_exists(repo):
    wf = workflow(repo)
    # PyYAML reads the key `on` as True.
    assert "push" in (wf.get("on") or wf.get(True))
    steps = wf["jobs"]["grade"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    uses = [s["uses"] for s in steps if "uses" in s]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    assert any("/dev/kvm" in r and "udev" in r for r in runs)
    assert any("GITHUB_STEP_SUMMARY" in r for r in runs)
    main = (repo / "grader/__main__.py").read_text()
    verbs = set(re.findall(r'verb == "([\w-]+)"', main)) | set(
        re.findall(r'^ +"([\w-]+)": \("grader\.', main, re.M))
    targets = set(re.findall(r"^([\w-]+):", (repo / "Makefile").read_text(),
                             re.M))
    checked = 0
    for script in runs:
        for line in script.splitlines():
            words = shlex.split(line, comments=True) if line.strip() else []
            for i, w in enumerate(words):
                if re.match(r"^(vm-setup|grader|lessons|skeletons)/", w):
                    assert (repo / w).exists(), f"{w} (in: {line})"
                    checked += 1
                if w == "-m" and words[i + 1:i + 2] == ["grader"]:
                    assert words[i + 2] in verbs, line
                    checked += 1
                if w == "make" and i + 1 < len(words):
                    assert words[i + 1] in targets, line
                    checked += 1
    assert checked >= 2
    artifacts = steps[-1]["with"]["path"].split()
    assert "build/ci/result.json" in artifacts


def test_the_workflows_grading_command_runs_here(repo, tmp_path):
    """The workflow's Grade step, lesson 04 (no device), as GitHub would
    run it in the checkout."""
    step = next(s for s in workflow(repo)["jobs"]["grade"]["steps"]
                if s.get("name") == "Grade")
    env = {"LESSON": "04", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "GITHUB_REPOSITORY": "uni/rdma-alice", "GITHUB_SHA": "abc123",
           "ASSIGNMENT": "rdma-course"}
    res = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo,
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = repo / "build" / "ci"
    result = json.loads((out / "result.json").read_text())
    assert result["schema"] == "classroom50/result/v1"
    assert result["commit"] == "https://github.com/uni/rdma-alice/commit/abc123"
    assert (result["score"], result["max-score"]) == (0, 14)
    assert len(result["tests"]) >= 3 and all(
        set(t) == {"test-name", "passed", "score", "max-score"}
        for t in result["tests"])
    assert "| ❌ 04-work-requests | 0/14 |" in (out / "summary.md").read_text()
    assert (out / "junit.xml").is_file() and (out / "results.json").is_file()


# ---- lesson 09's answer key stays with the instructor ---------------------------

def _key():
    """{experiment: its line up to the parenthesis}: the key table of
    solutions/09-failures/ANSWERS.md (the grader's answer_key() reads the
    same rows)."""
    text = (COURSE / "solutions/09-failures/ANSWERS.md").read_text()
    return dict(re.findall(r"^\| ([a-z0-9-]+) \| `([^`]+)` \|$", text, re.M))


def key_traces(root, files):
    """['FILE: what'] for every released file that holds an answer of
    lesson 09's key: an experiment's line ('dereg-mr: completion on A:
    ...'), or a hash of one (the digests a grader could keep instead)."""
    key = _key()
    lines = {f"{e}: {o}" for e, o in key.items()}
    digests = {hashlib.sha256(f"rdma-course 09 {e}: {o}".encode())
               .hexdigest()[:16] for e, o in key.items()}
    found = []
    for f in files:
        text = readable(root / f)
        if text is None:
            continue
        flat = norm(text)
        found += [f"{f}: {x!r}" for x in sorted(lines) if x in flat]
        found += [f"{f}: a digest of the key ({d}...)" for d in sorted(digests)
                  if d in text]
    return found


def test_the_answer_key_is_not_released(repo):
    assert len(_key()) == 13
    assert key_traces(repo, release_files(repo)) == []
    # A released file holding an answer, or a hash of one, is caught.
    e, o = next(iter(_key().items()))
    tmp = COURSE / "build" / "selftest-leak"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "README.md").write_text(f"| `{e}: {o} (words)` | ... |\n")
    digest = hashlib.sha256(f"rdma-course 09 {e}: {o}".encode()).hexdigest()
    (tmp / "test_x.py").write_text(f'KEY = {{"{e}": "{digest[:20]}"}}\n')
    assert len(key_traces(tmp, ["README.md", "test_x.py"])) == 2


def _grade_predictions(course, tree, tmp_path):
    """Lesson 09's prediction tests of @course (its grader, its key or
    none) on @tree: (exit status, console, results.json). They need no
    device: they read predictions.c."""
    results = tmp_path / "results.json"
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "grader/pytest.ini",
         "--rootdir", ".", "-p", "grader.session.plugin", "-qq", "--tb=no",
         "-rN", "--color=no", "grader/lessons/test_09_failures.py",
         f"--src={tree}", "--test=predict", f"--results={results}",
         f"--transcripts={tmp_path / 'transcripts'}"],
        cwd=course, capture_output=True, text=True, timeout=300)
    return res.returncode, res.stdout + res.stderr, json.loads(
        results.read_text())


def test_predictions_are_graded_on_submission(repo, tmp_path):
    """In the students' repository the predictions' form is checked and
    their points are pending; where the key is, they are graded: the same
    predictions, right, wrong and ill-formed."""
    tree = tmp_path / "tree"
    for lesson in ("05-send-recv", "09-failures"):
        shutil.copytree(COURSE / "solutions" / lesson, tree / lesson)
    preds = tree / "09-failures" / "predictions.c"
    right = preds.read_text()
    e, o = next((e, o) for e, o in _key().items() if o == "succeeded")

    rc, out, data = _grade_predictions(repo, tree, tmp_path / "s1")
    assert "Score: 0/6 (+6 graded on submission)" in out, out
    assert rc == 0, out
    assert data["graded_on_submission"] == 6
    assert [t["status"] for t in data["tests"]] == ["pending"] * 3
    rc, out, data = _grade_predictions(COURSE, tree, tmp_path / "i1")
    assert "Score: 6/6" in out and rc == 0, out

    # Well-formed but wrong: pending there, lost here.
    preds.write_text(right.replace(f'"{e}", "succeeded"',
                                   f'"{e}", "ibv_reg_mr failed: EFAULT"'))
    rc, out, _ = _grade_predictions(repo, tree, tmp_path / "s2")
    assert "Score: 0/6 (+6 graded on submission)" in out and rc == 0, out
    rc, out, _ = _grade_predictions(COURSE, tree, tmp_path / "i2")
    assert "Score: 4/6" in out and "not what rxe does" in out, out
    assert rc != 0

    # Not a form at all: lost everywhere, and the failure says why.
    preds.write_text(right.replace(f'"{e}", "succeeded"', f'"{e}", "?"'))
    rc, out, _ = _grade_predictions(repo, tree, tmp_path / "s3")
    assert "Score: 0/6 (+4 graded on submission)" in out, out
    assert f"{e}: ?" in out and rc != 0


# ---- lesson 16's answers are read from the captures, not from a text ----------

def _answers16():
    """{question: answer} of the course's recordings, as tshark finds them
    (the grader's own reading: the questions are graded on fresh captures,
    and the README asks them of the recordings first)."""
    from types import SimpleNamespace
    from grader.lessons.test_16_on_the_wire import recorded_answers
    lesson = SimpleNamespace(dir=COURSE / "lessons" / "16-on-the-wire")
    return {q: str(a) for per in recorded_answers(lesson).values()
            for q, a in per.items()}


def answer16_traces(root, files):
    """['FILE: what'] for every released text that gives an answer of lesson
    16 away: a line naming a question together with its answer (a README
    row, a hint, a comment: "write-packets ... 10"), an answer line as
    `roce_dump --answers` prints it anywhere, or a PSN of an answer (six
    hex digits: nothing but the capture holds them). The captures themselves
    are the evidence the student reads with roce_dump, not a leak."""
    answers = _answers16()
    found = []
    for f in files:
        if f.endswith(".pcap"):
            continue
        text = readable(root / f)
        if text is None:
            continue
        low = text.lower()
        for q, a in answers.items():
            al = a.lower()
            tok = re.compile(rf"(?<![\w.]){re.escape(al)}(?![\w.])")
            for line in low.splitlines():
                if q in line and tok.search(line.split(q, 1)[1]):
                    found.append(f"{f}: {q} with {a}: {line.strip()[:100]}")
            if f"{q}: {al}" in low:
                found.append(f"{f}: '{q}: {a}'")
            if re.fullmatch(r"0x[0-9a-f]{6}", al) and al in low:
                found.append(f"{f}: {q}'s PSN {a}")
    return sorted(set(found))


def test_lesson16s_answers_are_not_released(repo):
    answers = _answers16()
    assert len(answers) == 10, answers
    assert answer16_traces(repo, release_files(repo)) == []
    # A hint that gives one away, a README row, a PSN in a comment: caught.
    (q1, a1), (q2, a2) = list(answers.items())[:2]
    psn = next(a for a in answers.values() if a.startswith("0x") and
               len(a) == 8)
    tmp = COURSE / "build" / "selftest-leak16"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "lesson.toml").write_text(
        f'test_answers_write = "{q1} is {a1} packets"\n')
    (tmp / "README.md").write_text(f"| `{q2}` | {a2} |\n")
    (tmp / "note.c").write_text(f"/* resent at psn {psn} */\n")
    assert len(answer16_traces(tmp, ["lesson.toml", "README.md",
                                     "note.c"])) == 3
