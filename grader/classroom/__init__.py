"""The instructor's tools for a class: the students' repository
(studentrepo.py), a class graded into a gradebook (classrun.py,
gradebook.py), the
Gradescope autograder (gradescope.py, gradescope-files/), the students'
GitHub workflow (ci.py, student-repo/). Built on grader.run and below."""
