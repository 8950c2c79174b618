"""The grader's trusted side: the course's reference peer (peer.py, pyverbs)
and what the tests need to run it (run.py). Nothing here is run by, or
reachable from, the program under test."""
