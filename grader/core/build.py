"""Compiling a lesson from a SRC tree, once, from a copy that reaches nothing
else of the course.

gcc under the micro-VM's CPU emulation is about ten times slower than on the
host, so `make grade` compiles every lesson on the host first
(`python3 -m grader build`), and the grader in the VM reuses that result
(`--prebuilt`: it never reads SRC itself, so SRC may be anywhere). Either way
the compiler's output is kept: warnings are shown, and an error costs only
that lesson.

Build hygiene: the lesson's files are copied from SRC/NN-topic/ into the build
directory and compiled there. A submission may include its own files,
lessons/common/, lessons/NN-topic/ and system headers; an #include that
reaches anything else (solutions/, the grader, another tree) is refused with
the file and the rule, and costs that lesson.

The course's own sources (lessons/common/course.c, a lesson's provided .c
files, the reference rc.c) are compiled once per lesson into build/objects/
and linked from there by every tree's build of that lesson (the self-check
builds some 150 trees' lessons: course.c compiled with each program was half
of that time); `make build` compiles them with each program, as before.

Lesson 05's connection: the lessons whose lesson.mk links $(RC) (06, 07,
09-12) are built with lesson 05's rc.c. Where the course has its reference
(solutions/05-send-recv/rc.c: the instructor's checkout, the Gradescope
autograder) that one, so that a lesson's points do not depend on another
lesson's; otherwise (the students' repository) SRC's own
05-send-recv/rc.c, copied and checked like the lesson's files.
"""

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import threading
from pathlib import Path

from grader.core import harness
from grader.core.course import COURSE, lesson_names  # noqa: F401
SYSTEM_HEADERS = ("/usr/",)
STAMP = ".build.json"
RC_FILE = Path("05-send-recv") / "rc.c"     # lesson 05's connection
PRELAB = "prelab"   # in a build: a pre-lab's files (grader/classroom/classrun.py)


def links_rc(course, name):
    """Does lesson `name` link lesson 05's rc.c (its lesson.mk uses $(RC))?"""
    mk = course / "lessons" / name / "lesson.mk"
    return name != RC_FILE.parts[0] and mk.is_file() and \
        "$(RC)" in mk.read_text()


def reference_rc(course):
    """The course's reference rc.c (solutions/), or None where there is
    none (the students' repository)."""
    ref = course / "solutions" / RC_FILE
    return ref if ref.is_file() else None


def build_dir(course, src, lesson_name):
    """build/grade/<SRC relative to the course, or ext/abs/path>/<lesson>."""
    src = Path(src)
    tag = (str(src.relative_to(course)) if src.is_relative_to(course)
           else "ext" + str(src))
    return course / "build" / "grade" / tag.replace("/", "_") / lesson_name


def _lesson_files(src, name):
    """SRC's files for one lesson, checked: regular files only."""
    tree = src / name
    files = []
    for f in sorted(tree.iterdir()):
        if f.is_symlink():
            raise ValueError(f"{f} is a symbolic link; a submission's files "
                             f"must be regular files in {tree}/")
        if f.is_file() and f.suffix in (".c", ".h"):
            files.append(f)
    return files


def _inputs_key(course, files, name, rc=None):
    h = hashlib.sha256()
    if rc is not None:
        h.update(b"rc\0" + rc.read_bytes() + b"\0")
    provided = sorted((course / "lessons" / name).glob("*")) \
        + sorted((course / "lessons" / "common").glob("*"))
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    for f in provided:
        if f.is_file():
            h.update(str(f.relative_to(course)).encode() + b"\0"
                     + f.read_bytes() + b"\0")
    return h.hexdigest()


def _outside_includes(course, copy, name, files):
    """The dependencies of the copied sources (`files`: paths relative to
    `copy`) that the rule forbids, as (source file, dependency) pairs."""
    allowed = [os.path.realpath(p) + "/" for p in
               (copy, copy.parent / RC_FILE.parent,
                course / "lessons" / "common", course / "lessons" / name)]
    allowed += SYSTEM_HEADERS
    bad = []
    for f in files:
        if f.suffix != ".c":
            continue
        res = subprocess.run(
            [os.environ.get("CC", "cc"), "-M", "-Ilessons/common",
             f"-Ilessons/{name}", str(copy / f)],
            cwd=course, capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            continue        # the compile reports it, with the real message
        deps = res.stdout.replace("\\\n", " ").split(":", 1)[-1].split()
        for d in deps:
            real = os.path.realpath(course / d)
            if not any(real.startswith(a) or real + "/" == a for a in allowed):
                bad.append((f.name, d))
    return bad


def compile_lesson(course, src, name, prebuilt=False):
    """Compile lesson `name` of `src` unless an identical build exists.
    Returns a dict: rc, stdout, stderr (the compiler's diagnostics), command,
    missing (SRC has no such lesson). With `prebuilt`, only the record of
    the build made on the host is read."""
    out = build_dir(course, src, name)
    stamp = out / STAMP
    cmd = ["make", "-B", "--no-print-directory", "-f",
           "lessons/common/lesson.mk", f"L={name}", f"S={out / 'src'}",
           f"OUT={out}"]
    try:
        saved = json.loads(stamp.read_text())
    except (OSError, ValueError):
        saved = None
    if prebuilt:
        if saved is None:
            return {"rc": 1, "stdout": "", "missing": False,
                    "command": f"python3 -m grader build {src} {name}",
                    "stderr": f"lesson {name} of {src} was not compiled "
                              f"before grading (no {stamp})"}
        return saved
    result = {"rc": 0, "stdout": "", "stderr": "", "missing": False,
              "command": shlex.join(cmd)}
    # A pre-lab's record (make grade-class PRELAB=...) is written after
    # each compile by the one who wants it; never left from another run.
    shutil.rmtree(out / PRELAB, ignore_errors=True)
    if not (src / name).is_dir():
        result.update(missing=True, rc=1)
        return _save(out, stamp, result)
    try:
        files = _lesson_files(src, name)
    except ValueError as e:
        result.update(rc=1, stderr=str(e))
        return _save(out, stamp, result)
    rc = None
    ref_rc = None
    if links_rc(course, name):
        rc = ref_rc = reference_rc(course)
        result["rc_from"] = "reference" if rc else "own"
        if rc is None:
            rc = src / RC_FILE
            if rc.is_symlink() or not rc.is_file():
                what = "a symbolic link" if rc.is_symlink() else "missing"
                result.update(rc=1, stderr=(
                    f"lesson {name} connects with your lesson 05, {rc}, "
                    f"which is {what} (lessons/common/lesson.mk: RC)"))
                return _save(out, stamp, result)
    key = _inputs_key(course, files, name, rc)
    if saved and saved.get("key") == key:
        return saved
    result["key"] = key
    # The copy: only this lesson's files (and lesson 05's rc.c), nothing
    # else of SRC.
    copy = out / "src" / name
    shutil.rmtree(out / "src", ignore_errors=True)
    copy.mkdir(parents=True)
    for f in files:
        shutil.copyfile(f, copy / f.name)
    checked = [Path(f.name) for f in files]
    if rc is not None:
        rc_copy = out / "src" / RC_FILE
        rc_copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(rc, rc_copy)
        cmd.append(f"RC={rc_copy}")
        result["command"] = shlex.join(cmd)
        if result["rc_from"] == "own":
            checked.append(Path("..") / RC_FILE)
    prebuilt_objs = course_objects(course, name)
    if ref_rc is not None:
        obj = course_object(course, name, ref_rc)
        if obj:
            prebuilt_objs.append(f"{rc_copy}={obj}")
    if prebuilt_objs:
        cmd.append("PREBUILT=" + " ".join(prebuilt_objs))
        result["command"] = shlex.join(cmd)
    bad = _outside_includes(course, copy, name, checked)
    if bad:
        result.update(rc=1, stderr="\n".join(
            f"{os.path.normpath(src / name / f)}: includes {d}: refused "
            f"(a submission may "
            f"include its own files, lessons/common/, lessons/{name}/ and "
            f"system headers, nothing else of the course or the machine)"
            for f, d in bad))
        return _save(out, stamp, result)
    res = harness.run(cmd, timeout=300, cwd=course)
    # Diagnostics name the student's own paths, not the copy's.
    def shown(text):
        text = text.replace(str(copy), str(src / name))
        if result.get("rc_from") == "own":
            text = text.replace(str(out / "src" / RC_FILE), str(src / RC_FILE))
        return text
    result.update(rc=1 if res.timed_out else res.returncode,
                  stdout=shown(res.stdout), stderr=shown(res.stderr))
    return _save(out, stamp, result)


OBJECTS = Path("build") / "objects"


def course_object(course, name, source):
    """The course's own `source` (course.c, a file of lessons/NAME/, the
    reference rc.c) compiled as lesson `name` compiles it, once for every
    tree that builds the lesson: build/objects/NAME/STEM-KEY.o, KEY the
    hash of the source, the headers it may include (lessons/common/ and
    lessons/NAME/), the compiler and the flags. None when it does not
    compile (each program then compiles it, and shows why)."""
    h = hashlib.sha256()
    for part in (name, str(source), os.environ.get("CC", "cc"),
                 os.environ.get("CFLAGS", "")):
        h.update(part.encode() + b"\0")
    h.update(source.read_bytes() + b"\0")
    for d in (course / "lessons" / "common", course / "lessons" / name):
        for f in sorted(d.glob("*")):
            if f.is_file():
                h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    obj = course / OBJECTS / name / f"{source.stem}-{h.hexdigest()[:16]}.o"
    if obj.is_file():
        return obj
    obj.parent.mkdir(parents=True, exist_ok=True)
    # Two builds of one lesson at once (the self-check compiles two trees
    # at a time) each compile it; the last rename wins, and both are whole.
    tmp = obj.with_name(f".{obj.name}.{os.getpid()}.{threading.get_ident()}")
    res = harness.run(["make", "--no-print-directory", "-f",
                       "lessons/common/lesson.mk", f"L={name}",
                       f"OBJ_SRC={source}", f"OBJ_OUT={tmp}", "object"],
                      timeout=300, cwd=course)
    if res.timed_out or res.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        return None
    os.replace(tmp, obj)
    return obj


def course_objects(course, name):
    """PREBUILT pairs (lessons/common/lesson.mk) of course.c and the .c
    files lessons/NAME/ provides, as lesson.mk names them."""
    pairs = []
    for rel in [Path("lessons/common/course.c"),
                *sorted(p.relative_to(course) for p in
                        (course / "lessons" / name).glob("*.c"))]:
        obj = course_object(course, name, course / rel)
        if obj:
            pairs.append(f"{rel}={obj}")
    return pairs


def _save(out, stamp, result):
    out.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(result))
    return result


def grader_program(course, source, flags=("-static",), libs=(), name=None):
    """Compile one of the grader's own C programs (grader/SOURCE) into
    build/grader/NAME (default: SOURCE's stem), unless that build is
    current (a stamp of the source and the command). Returns its path;
    raises RuntimeError with the compiler's message."""
    src = course / "grader" / source
    out = course / "build" / "grader" / (name or src.stem)
    def command(target):
        return [os.environ.get("CC", "cc"), "-O2", "-Wall", "-Wextra", *flags,
                "-o", str(target), str(src), *libs]
    key = hashlib.sha256(src.read_bytes()
                         + shlex.join(command(out)).encode()).hexdigest()
    stamp = out.with_name(out.name + ".key")
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    res = subprocess.run(command(tmp), capture_output=True, text=True,
                         timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"cannot compile {src}:\n{res.stderr}")
    os.replace(tmp, out)
    stamp.write_text(key)
    return out
