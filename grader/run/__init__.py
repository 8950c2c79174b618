"""The student's loop, the commands make runs: grade (make grade, make
build), status, hint, watch.sh. Built on grader.session and below."""
