"""python3 -m grader build SRC [NN-topic ...] - compile lessons ahead of
grading; python3 -m grader grade [...] - what make grade runs (grader/run/grade.py);
python3 -m grader status - make status (grader/run/status.py);
python3 -m grader hint - make hint (grader/run/hint.py);
python3 -m grader symptoms [--write] NN - a lesson's Common failures table,
rendered from its lesson.toml (grader/session/symptoms.py);
python3 -m grader student-repo OUT - make student-repo (grader/classroom/studentrepo.py);
python3 -m grader grade-class ... - make grade-class (grader/classroom/classrun.py);
python3 -m grader gradescope - make gradescope (grader/classroom/gradescope.py);
python3 -m grader sandbox-check [WHERE] - make doctor's run of one program
through the sandbox (grader/evidence/sandbox.py);
python3 -m grader device-kind DEV - make doctor's word on a device: its kind
and which lessons' counter evidence it has (grader/evidence/counters.py)."""

import importlib
import sys

USAGE = ("usage: python3 -m grader build SRC [NN-topic ...]\n"
         "       python3 -m grader grade [--src DIR] [--lesson L] "
         "[--results FILE] [--junit FILE] [--test NAME] [-v]\n"
         "       python3 -m grader status\n"
         "       python3 -m grader hint --lesson NN [--test NAME]\n"
         "       python3 -m grader symptoms [--write] NN\n"
         "       python3 -m grader student-repo OUT\n"
         "       python3 -m grader grade-class --submissions DIR --out DIR "
         "[--jobs N] [--lesson L] [--deadline T] [--force] [--roster F]\n"
         "       python3 -m grader ci OUTDIR [--lesson L]   (the student "
         "repository's workflow)\n"
         "       python3 -m grader gradescope [--lesson L]   (make gradescope)\n"
         "       python3 -m grader gradescope-run   (its run_autograder)\n"
         "       python3 -m grader class-run SPEC   (what grade-class runs "
         "in the VM)\n"
         "       python3 -m grader sandbox-check [WHERE]   (make doctor)\n"
         "       python3 -m grader device-kind DEV   (make doctor)")

# Each verb's module is imported when it is asked for: make grade's host
# side waits for no import of the class tools.
VERBS = {
    "build": ("grader.run.grade", "build_main"),
    "grade": ("grader.run.grade", "main"),
    "status": ("grader.run.status", "main"),
    "grade-class": ("grader.classroom.classrun", "main"),
    "class-run": ("grader.classroom.classrun", "class_run_main"),
    "student-repo": ("grader.classroom.studentrepo", "main"),
    "gradescope": ("grader.classroom.gradescope", "main"),
    "gradescope-run": ("grader.classroom.gradescope", "run_main"),
    "ci": ("grader.classroom.ci", "main"),
    "hint": ("grader.run.hint", "main"),
    "device-kind": ("grader.evidence.counters", "main"),
    "symptoms": ("grader.session.symptoms", "main"),
}


def sandbox_check(argv):
    from grader.core.course import COURSE
    from grader.evidence import build_programs, sandbox
    build_programs(COURSE)
    return sandbox.check(COURSE, argv[0] if argv else "here")


if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else ""
    if verb == "sandbox-check":
        sys.exit(sandbox_check(sys.argv[2:]))
    if verb in VERBS:
        module, func = VERBS[verb]
        sys.exit(getattr(importlib.import_module(module), func)(sys.argv[2:]))
    print(USAGE, file=sys.stderr)
    sys.exit(2)
