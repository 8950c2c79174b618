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

import sys

from grader.classroom import ci, classrun, gradescope, studentrepo
from grader.run import grade, hint, status
from grader.session import symptoms

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

if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else ""
    if verb == "build":
        sys.exit(grade.build_main(sys.argv[2:]))
    if verb == "grade":
        sys.exit(grade.main(sys.argv[2:]))
    if verb == "status":
        sys.exit(status.main(sys.argv[2:]))
    if verb == "grade-class":
        sys.exit(classrun.main(sys.argv[2:]))
    if verb == "class-run":
        sys.exit(classrun.class_run_main(sys.argv[2:]))
    if verb == "student-repo":
        sys.exit(studentrepo.main(sys.argv[2:]))
    if verb == "gradescope":
        sys.exit(gradescope.main(sys.argv[2:]))
    if verb == "gradescope-run":
        sys.exit(gradescope.run_main(sys.argv[2:]))
    if verb == "ci":
        sys.exit(ci.main(sys.argv[2:]))
    if verb == "hint":
        sys.exit(hint.main(sys.argv[2:]))
    if verb == "sandbox-check":
        from grader.core.course import COURSE
        from grader.evidence import build_programs, sandbox
        build_programs(COURSE)
        sys.exit(sandbox.check(COURSE, sys.argv[2] if len(sys.argv) > 2
                               else "here"))
    if verb == "device-kind":
        from grader.evidence import counters
        sys.exit(counters.main(sys.argv[2:]))
    if verb == "symptoms":
        sys.exit(symptoms.main(sys.argv[2:]))
    print(USAGE, file=sys.stderr)
    sys.exit(2)
