"""A grading session: the pytest plugin (points, titles, subtotals, Score,
results.json, transcripts), the symptoms that name a failure's likely
cause, and the client/server pair runs and fault checks the lessons' tests
share (pairs.py). Built on grader.core and grader.evidence."""
