"""python3 -m grader build SRC [NN-topic ...] - compile lessons ahead of
grading; python3 -m grader grade [...] - what make grade runs (grader/grade.py);
python3 -m grader status - make status (grader/status.py);
python3 -m grader hint - make hint (grader/hint.py);
python3 -m grader symptoms [--write] NN - a lesson's Common failures table,
rendered from its lesson.toml (grader/symptoms.py);
python3 -m grader student-repo OUT - make student-repo (grader/studentrepo.py);
python3 -m grader grade-class ... - make grade-class (grader/classroom.py);
python3 -m grader gradescope - make gradescope (grader/gradescope.py)."""

import sys

from . import (build, ci, classroom, grade, gradescope, hint, status,
               studentrepo, symptoms)

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
         "in the VM)")

if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else ""
    if verb == "build":
        sys.exit(build.main(sys.argv[2:]))
    if verb == "grade":
        sys.exit(grade.main(sys.argv[2:]))
    if verb == "status":
        sys.exit(status.main(sys.argv[2:]))
    if verb == "grade-class":
        sys.exit(classroom.main(sys.argv[2:]))
    if verb == "class-run":
        sys.exit(classroom.class_run_main(sys.argv[2:]))
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
    if verb == "symptoms":
        sys.exit(symptoms.main(sys.argv[2:]))
    print(USAGE, file=sys.stderr)
    sys.exit(2)
