"""The grader's ground floor: the course's lessons (course.py), compiling a
lesson from a submission (build.py), running programs and checking what they
did (harness.py). Imports nothing of the floors above."""
