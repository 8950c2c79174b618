"""python3 -m grader ci OUTDIR [--lesson L] [--src DIR]: what the student
repository's GitHub Actions workflow (.github/workflows/grade.yml) runs.

Grades like `make grade` (grade.py) into OUTDIR/results.json and
OUTDIR/junit.xml, then writes from results.json:
  - OUTDIR/summary.md: a Markdown table, one row per lesson, and the failed
    tests (the workflow appends it to the job summary);
  - OUTDIR/result.json: Classroom 50's result (schema classroom50/result/v1),
    one entry per test. Its identity fields come from the runner's
    environment (CLASSROOM, ASSIGNMENT, SUBMISSION_TAG, COMMIT_URL,
    RELEASE_URL, REVIEW_URL) and otherwise from GitHub's (GITHUB_*).
Exits 0 when grading ran to its end, whatever the score (the score is in the
files, a red run means the grading itself failed), non-zero otherwise.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

from grader.run import grade
from grader.core.course import COURSE


def per_lesson(results):
    lessons = {}
    for t in results["tests"]:
        name = t["name"].split(":")[0]
        got, total, failed = lessons.get(name, (0, 0, []))
        if t.get("status") == "pending":
            failed = failed + [t["name"].split(": ", 1)[-1]
                               + " (graded on submission)"]
        elif t["score"] < t["max_score"]:
            failed = failed + [t["name"].split(": ", 1)[-1]]
        lessons[name] = (got + t["score"], total + t["max_score"], failed)
    return lessons


def summary_md(results):
    pending = results.get("graded_on_submission")
    lines = [f"## Score: {results['score']}/{results['max_score']}"
             + (f" (+{pending} graded on submission)" if pending else ""), "",
             "| lesson | points | failed tests |", "|---|---:|---|"]
    for name, (got, total, failed) in sorted(per_lesson(results).items()):
        shown = "; ".join(failed[:3]) + (f"; ... ({len(failed)})"
                                         if len(failed) > 3 else "")
        mark = "✅" if got == total else "❌"
        lines.append(f"| {mark} {name} | {got}/{total} | {shown} |")
    lines += ["", "Details: the `grade` artifact (results.json, junit.xml); "
              "locally: `make grade LESSON=NN`."]
    return "\n".join(lines) + "\n"


def _commit_time(sha):
    res = subprocess.run(["git", "-C", str(COURSE), "log", "-1",
                          "--format=%cI", sha or "HEAD"],
                         capture_output=True, text=True)
    try:
        when = datetime.datetime.fromisoformat(res.stdout.strip())
    except ValueError:
        when = datetime.datetime.now(datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def classroom50(results, env=os.environ):
    server = env.get("GITHUB_SERVER_URL", "https://github.com")
    repo = env.get("GITHUB_REPOSITORY", "")
    sha = env.get("GITHUB_SHA", "")
    commit = env.get("COMMIT_URL") or (f"{server}/{repo}/commit/{sha}"
                                       if repo and sha else sha or "local")
    tests = [{"test-name": t["name"], "passed": t["score"] == t["max_score"],
              "score": t["score"], "max-score": t["max_score"]}
             for t in results["tests"]]
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "schema": "classroom50/result/v1",
        "classroom": env.get("CLASSROOM") or env.get("GITHUB_REPOSITORY_OWNER",
                                                     "rdma-course"),
        "assignment": env.get("ASSIGNMENT", "rdma-course"),
        "submission": env.get("SUBMISSION_TAG") or env.get("GITHUB_REF_NAME",
                                                           "local"),
        "commit": commit,
        "release": env.get("RELEASE_URL") or commit,
        "review": env.get("REVIEW_URL") or commit,
        "datetime": _commit_time(sha),
        "graded_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "score": sum(t["score"] for t in tests),
        "max-score": sum(t["max-score"] for t in tests),
        "tests": tests,
    }


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m grader ci")
    ap.add_argument("out")
    ap.add_argument("--lesson", default="")
    ap.add_argument("--src", default="skeletons")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    results.unlink(missing_ok=True)
    rc = grade.main(["--src", args.src, "--results", str(results),
                     "--junit", str(out / "junit.xml")]
                    + (["--lesson", args.lesson] if args.lesson else []))
    if not results.exists():
        print(f"grader ci: grading did not run to its end (exit {rc}): no "
              f"results", file=sys.stderr)
        return rc or 1
    data = json.loads(results.read_text())
    (out / "summary.md").write_text(summary_md(data))
    (out / "result.json").write_text(json.dumps(classroom50(data), indent=2)
                                     + "\n")
    print(f"grader ci: Score {data['score']}/{data['max_score']}; "
          f"{out}/summary.md, result.json, results.json, junit.xml")
    return 0
