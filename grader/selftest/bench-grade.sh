#!/bin/bash
# bench-grade.sh (make bench-grade) - how long a student waits, in one run:
# one test and one lesson on a warm VM (make vm-up: the resident grader),
# one lesson and the whole course on a cold VM, one test of lesson 09 (what
# TEST= runs), and make test (SKIP_TEST=1 leaves it out). Each wall time
# stands beside the tests' own time (results.json's execution_time, summed)
# and the target:
#   warm, one test     <= the test's own time + 1.5 s
#   warm, one lesson   <= 1.3 x the tests' own time
#   cold, one lesson   <= 1.5 x the tests' own time
#   cold, all lessons  <= 60 s
#   make test          <= 300 s
# Warm and cold runs are interleaved, three of each, and the median shown:
# a loaded machine moves every row alike. Exits 1 when a grading lost points.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

out=$(mktemp -d)
trap 'rm -rf "$out"; vm-setup/microvm/run.sh --down >/dev/null 2>&1' EXIT
rc=0
rows=$out/rows

# timed NAME COLD ARGS... - make grade ARGS (RXE_VM_COLD=COLD), one line of
# "NAME wall tests" in rows.
timed() {
	local name=$1 cold=$2 a b
	shift 2
	a=$(date +%s%N)
	RXE_VM_COLD=$cold make --no-print-directory grade "$@" RESULTS="$out/r.json" >"$out/log" 2>&1 || {
		rc=1
		echo "bench-grade: make grade $* lost points:" >&2
		tail -n 5 "$out/log" >&2
	}
	b=$(date +%s%N)
	/usr/bin/python3 - "$name" "$a" "$b" "$out/r.json" >>"$rows" <<'PY'
import json, sys
name, a, b, path = sys.argv[1:]
try:
    tests = sum(t["execution_time"] for t in json.load(open(path))["tests"])
except (OSError, ValueError, KeyError):
    tests = float("nan")
print(name, (int(b) - int(a)) / 1e9, tests)
PY
}

echo "bench-grade: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), backend $(vm-setup/with-rxe --info | awk '{ print $2 }' | tr -d :)"
vm-setup/microvm/run.sh --down >/dev/null 2>&1
vm-setup/microvm/run.sh --up >/dev/null || rc=1
# The warm grader's first grading after boot waits for its imports: one
# grading first, not counted.
make --no-print-directory grade LESSON=05 SRC=solutions TEST=test_bad_host >/dev/null 2>&1
for _ in 1 2 3; do
	timed "warm, one test (05 TEST=test_pingpong)" 0 LESSON=05 SRC=solutions TEST=test_pingpong
	timed "warm, one lesson (05)" 0 LESSON=05 SRC=solutions
	timed "warm, 09 TEST=status_names" 0 LESSON=09 SRC=solutions TEST=status_names
	timed "cold, one lesson (05)" 1 LESSON=05 SRC=solutions
done
vm-setup/microvm/run.sh --down >/dev/null
timed "cold, all lessons" 1 SRC=solutions
if [ "${SKIP_TEST:-0}" != 1 ]; then
	a=$(date +%s%N)
	make --no-print-directory test >"$out/test.log" 2>&1 || rc=1
	b=$(date +%s%N)
	echo "make-test $(((b - a) / 1000000000)) nan" >>"$rows"
	tail -n 1 "$out/test.log"
fi

/usr/bin/python3 - "$rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    *name, wall, tests = line.split()
    rows.setdefault(" ".join(name), []).append((float(wall), float(tests)))
target = {"warm, one test": lambda w, t: (w <= t + 1.5, "test + 1.5 s"),
          "warm, one lesson": lambda w, t: (w <= 1.3 * t, "1.3 x tests"),
          "warm, 09": lambda w, t: (w <= t + 1.5, "test + 1.5 s"),
          "cold, one lesson": lambda w, t: (w <= 1.5 * t, "1.5 x tests"),
          "cold, all lessons": lambda w, t: (w <= 60, "60 s"),
          "make-test": lambda w, t: (w <= 300, "300 s")}
print(f"{'what':40s} {'wall s':>8s} {'tests s':>8s}  target")
for name, vals in rows.items():
    wall = statistics.median(v[0] for v in vals)
    tests = statistics.median(v[1] for v in vals)
    rule = next(f for k, f in target.items() if name.startswith(k))
    ok, what = rule(wall, tests)
    shown = "make test" if name == "make-test" else name
    print(f"{shown:40s} {wall:8.1f} {tests:8.1f}  {what}: "
          f"{'met' if ok else 'NOT met'}"
          + (f"  (runs: {', '.join(f'{v[0]:.1f}' for v in vals)})"
             if len(vals) > 1 else ""))
PY
exit $rc
