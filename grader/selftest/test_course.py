"""The course checks itself (rustlings-style): every lesson is complete, every
skeleton has TODOs, builds warning-free and does not reach full marks, every
solution reaches full marks, and a skeleton differs from its solution only
inside TODO regions. Grading a lesson that needs a device needs one: run
through vm-setup/with-rxe (make test does); the lessons graded without one
(lesson.toml: device = false) are graded on the host."""

import re
import subprocess
import tomllib

import pytest

from conftest import COURSE

LESSONS = sorted(p for p in (COURSE / "lessons").glob("[0-9][0-9]-*") if p.is_dir())
TODO = re.compile(r"\bTODO (\d+):")
END_TODO = re.compile(r"\bEND TODO (\d+)\b")


def meta(lesson):
    path = lesson / "lesson.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


def is_exercise(lesson):
    return meta(lesson).get("exercise", True)


EXERCISES = [p for p in LESSONS if is_exercise(p)]
ids = [p.name for p in LESSONS]
ex_ids = [p.name for p in EXERCISES]


def sources(tree, lesson):
    return sorted(p.name for p in (COURSE / tree / lesson.name).glob("*.c"))


def regions(path):
    """Split a file into (outside lines, [(n, todo line)]), checking markers."""
    outside, todos, inside = [], [], None
    for no, line in enumerate(path.read_text().splitlines(), 1):
        m, e = TODO.search(line), END_TODO.search(line)
        if inside is None:
            if e:
                pytest.fail(f"{path}:{no}: END TODO {e.group(1)} without TODO")
            if m:
                inside = int(m.group(1))
                todos.append((inside, line.strip()))
                outside.append(line)
                continue
            outside.append(line)
        elif e:
            if int(e.group(1)) != inside:
                pytest.fail(f"{path}:{no}: END TODO {e.group(1)} closes TODO {inside}")
            outside.append(line)
            inside = None
        elif m:
            pytest.fail(f"{path}:{no}: TODO {m.group(1)} inside TODO {inside}")
    if inside is not None:
        pytest.fail(f"{path}: TODO {inside} has no END TODO {inside}")
    return outside, todos


def test_there_are_lessons():
    assert len(LESSONS) >= 2


@pytest.mark.parametrize("lesson", LESSONS, ids=ids)
def test_lesson_is_complete(lesson):
    readme = lesson / "README.md"
    assert readme.is_file() and len(readme.read_text()) > 500, f"{readme} missing or empty"
    assert meta(lesson).get("title"), f"{lesson}/lesson.toml has no title"
    tests = list((COURSE / "grader/lessons").glob(f"test_{lesson.name[:2]}_*.py"))
    assert tests, f"expected grader/lessons/test_{lesson.name[:2]}_*.py"
    if is_exercise(lesson):
        assert sources("skeletons", lesson), f"skeletons/{lesson.name}/ has no .c files"
    if is_exercise(lesson) and (COURSE / "solutions").is_dir():
        assert sources("skeletons", lesson) == sources("solutions", lesson), \
            "skeleton and solution must have the same files"


def test_a_client_of_a_reference_server_gives_up_before_the_grader_does():
    """T_CLIENT (trusted/run.py), the program's -t against a reference
    server, stays 10 s below the grader's wait for each lesson's programs
    that use it (lesson.toml's timeout): a client left waiting ends by
    itself, a clean failure, not a hang that cuts its lesson's later waits
    (fresh-clone run 43: -t 60 against a wait of 60 s)."""
    from grader.core.harness import DEFAULT_TIMEOUT
    from grader.evidence.trusted.run import T_CLIENT
    imports = r"^from grader\.evidence\.trusted\.run import (\([^)]*\)|.*)"
    users = {f.name[5:7] for f in (COURSE / "grader/lessons").glob("test_*.py")
             if any(re.search(r"\bT_CLIENT\b", m.group(1))
                    for m in re.finditer(imports, f.read_text(), re.M))}
    assert users, "no lesson uses T_CLIENT"
    for lesson in LESSONS:
        if lesson.name[:2] in users:
            wait = int(meta(lesson).get("timeout", DEFAULT_TIMEOUT))
            assert int(T_CLIENT) + 10 <= wait, \
                f"{lesson.name}: -t {T_CLIENT} against a wait of {wait} s"


@pytest.mark.parametrize("lesson", EXERCISES, ids=ex_ids)
def test_skeleton_has_numbered_todos(lesson):
    numbers = [n for name in sources("skeletons", lesson)
               for n, _ in regions(COURSE / "skeletons" / lesson.name / name)[1]]
    assert numbers, "the skeleton has no TODO markers"
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), \
        f"TODOs should be numbered 1..{len(numbers)} once each, got {sorted(numbers)}"


@pytest.mark.instructor
@pytest.mark.parametrize("lesson", EXERCISES, ids=ex_ids)
def test_skeleton_differs_from_solution_only_inside_todos(lesson):
    numbers = []
    for name in sources("skeletons", lesson):
        skel, stodo = regions(COURSE / "skeletons" / lesson.name / name)
        sol, qtodo = regions(COURSE / "solutions" / lesson.name / name)
        assert stodo == qtodo, f"{name}: the TODO lines differ between skeleton and solution"
        if skel != sol:
            diff = next(i for i, (a, b) in enumerate(zip(skel + [""], sol + [""])) if a != b)
            pytest.fail(f"{name}: skeleton and solution differ outside TODO regions "
                        f"near (outside) line {diff + 1}:\n  skeleton: {skel[diff:diff + 1]}\n"
                        f"  solution: {sol[diff:diff + 1]}")
        numbers += [n for n, _ in stodo]
    assert numbers, "the skeleton has no TODO markers"
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), \
        f"TODOs should be numbered 1..{len(numbers)} once each, got {sorted(numbers)}"


@pytest.mark.parametrize("tree", ["skeletons", pytest.param(
    "solutions", marks=pytest.mark.instructor)])
@pytest.mark.parametrize("lesson", EXERCISES, ids=ex_ids)
def test_builds_warning_free(lesson, tree, tmp_path):
    res = subprocess.run(
        ["make", "-B", "--no-print-directory", "-f", "lessons/common/lesson.mk",
         f"L={lesson.name}", f"S={tree}", f"OUT={tmp_path}"],
        cwd=COURSE, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    warnings = [l for l in res.stderr.splitlines() if "warning:" in l]
    assert not warnings, "\n".join(warnings)


def test_the_course_sources_are_compiled_once_for_every_tree(tmp_path):
    """The grader's builds link course.c and a lesson's own .c files from
    one object per lesson (build/objects/), whichever tree they build; a
    changed source is compiled again, and one that does not compile is
    left to each program's own command, which shows why."""
    from grader.core.build import compile_lesson, course_object, reference_rc
    name = "15-kv-store"
    trees = [tmp_path / t for t in ("a", "b")]
    for t in trees:
        (t / name).mkdir(parents=True)
        for f in (COURSE / "skeletons" / name).iterdir():
            (t / name / f.name).write_bytes(f.read_bytes())
    built = [compile_lesson(COURSE, t, name) for t in trees]
    assert [b["rc"] for b in built] == [0, 0], built
    linked = [re.findall(r"\S+/build/objects/\S+\.o", b["stdout"]) for b in built]
    # (The reference rc.c where the course has it; in the students'
    # repository each tree's own, compiled by each program.)
    shared = {"course", "kv"} | ({"rc"} if reference_rc(COURSE) else set())
    assert linked[0] == linked[1] and len(linked[0]) == 2 * len(shared), linked
    assert {o.rsplit("/", 1)[1].split("-")[0] for o in linked[0]} == shared
    src = tmp_path / "course.c"
    src.write_bytes((COURSE / "lessons/common/course.c").read_bytes())
    first = course_object(COURSE, name, src)
    assert first and first.is_file() and course_object(COURSE, name, src) == first
    src.write_text(src.read_text() + "\nint course_test_extra;\n")
    second = course_object(COURSE, name, src)
    assert second and second != first and second.is_file()
    src.write_text("this is not C\n")
    assert course_object(COURSE, name, src) is None
    first.unlink()
    second.unlink()


def graded(lessons, marks=()):
    """@lessons as parameters: a lesson that needs a device is graded in
    the VM (marked device: the device half of make test), one that does not
    (lesson.toml: device = false) on the host, as make grade LESSON=NN
    does."""
    return [pytest.param(p, id=p.name, marks=[*marks, pytest.mark.device]
                         if meta(p).get("device", True) else list(marks))
            for p in lessons]


def tree_grade(request, tree, lesson):
    """(per-lesson scores, output) of @tree's grading that holds @lesson:
    the whole tree's device lessons at once, or its host lessons."""
    host = not meta(lesson).get("device", True)
    return request.getfixturevalue(f"{tree}{'_host' if host else ''}_grade")


# Grading a whole tree happens in the first of these tests' setup.
@pytest.mark.instructor
@pytest.mark.timeout(2700)
@pytest.mark.parametrize("lesson", graded(LESSONS))
def test_solution_reaches_full_marks(lesson, request):
    per, out = tree_grade(request, "solutions", lesson)
    assert lesson.name in per, f"no grader results for {lesson.name}"
    got, total = per[lesson.name]
    assert total > 0
    block = lesson_block(out, lesson.name)
    # The first line is all pytest's short summary (the log's tail) shows.
    assert got == total, (f"{lesson.name}: solutions score {got}/{total}; "
                          f"{failed_tests(block)}\n{block}")


def failed_tests(block):
    """'FAIL: title (first line of why); ...' of a lesson's block."""
    lines, out = block.splitlines(), []
    for i, line in enumerate(lines):
        if line.rstrip().endswith(")") and " ... FAIL (" in line:
            why = lines[i + 1].strip() if i + 1 < len(lines) else ""
            title = re.sub(r"^.*\[\s*\d+%\]", "", line.split(" ... FAIL")[0])
            out.append(f"FAIL: {title.strip()} "
                       f"({why[:200]})")
    return "; ".join(out) or "no FAIL line"


def lesson_block(out, name):
    """The lines a grading printed for one lesson (its == header == to the
    line before the next header): what a failure message needs, short
    enough that a CI log cut to its head and tail still shows it."""
    block = []
    for line in out.splitlines():
        if line.startswith("== "):
            if block:
                break
            if line.startswith(f"== {name}:"):
                block.append(line)
        elif block:
            block.append(line)
    return "\n".join(block) or out


@pytest.mark.timeout(2700)
@pytest.mark.parametrize("lesson", graded(EXERCISES))
def test_skeleton_does_not_reach_full_marks(lesson, request):
    per, out = tree_grade(request, "skeletons", lesson)
    got, total = per[lesson.name]
    assert got < total, f"{lesson.name}: the unsolved skeleton scores {got}/{total}"


# ---- the Common failures table is lesson.toml's [[symptom]] entries ----------

@pytest.mark.parametrize("lesson", LESSONS, ids=ids)
def test_common_failures_table_is_the_symptoms(lesson):
    """One source: the README's table under '## Common failures' is
    rendered from lesson.toml's [[symptom]] entries (python3 -m grader
    symptoms --write NN rewrites it). A lesson with neither the section
    nor symptoms has nothing to check."""
    from grader.session import symptoms
    syms = symptoms.load(meta(lesson), f"{lesson.name}/lesson.toml")
    table = symptoms.readme_table((lesson / "README.md").read_text())
    if table is None:
        assert not syms, (f"{lesson.name}: lesson.toml has symptoms but "
                          f"README.md has no '{symptoms.HEADING}' section")
        return
    assert syms, (f"{lesson.name}: README.md has '{symptoms.HEADING}' but "
                  f"lesson.toml no [[symptom]] entries: write one per row "
                  f"(lessons/README.md, 'Common failures')")
    want = symptoms.render_table(syms)
    assert table == want, (
        f"{lesson.name}: README.md's Common failures table differs from "
        f"lesson.toml's symptoms; python3 -m grader symptoms --write "
        f"{lesson.name[:2]} rewrites it.\n  README:\n{table}\n  lesson.toml:\n{want}")


@pytest.mark.parametrize("lesson", EXERCISES, ids=ex_ids)
def test_a_device_lesson_says_how_to_look_inside_a_run(lesson):
    """Every lesson whose programs run on a device ends with '## Debugging'
    (lessons/README.md): make hint points there when its hints run out."""
    if not meta(lesson).get("device", True) or \
            not (COURSE / "skeletons" / lesson.name).is_dir():
        return
    text = (lesson / "README.md").read_text()
    assert "\n## Debugging\n" in text, (
        f"{lesson.name}: README.md has no '## Debugging' section (the "
        f"transcript, vm-setup/with-rxe by hand, ibv_devinfo, rdma "
        f"resource show, the counters)")
