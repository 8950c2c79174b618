#!/bin/bash
# bench-grade.sh (make bench-grade) - how long a student waits, in one run:
# one test and one lesson on a warm VM (make vm-up: the resident grader),
# one lesson and the whole course on a cold VM, one test of lesson 09 (what
# TEST= runs), and make test (SKIP_TEST=1 leaves it out). Each wall time
# stands beside the tests' own time (results.json's execution_time, summed)
# and the target:
#   warm, one test regraded (the same grading again, the student's loop)
#                      <= the test's own time + 1.5 s
#   warm, one lesson   <= 1.3 x the tests' own time
#   cold, one lesson   <= 1.5 x the tests' own time
#   cold, all lessons  <= 60 s
#   make test          <= 480 s (8 minutes)
# Warm and cold runs are interleaved, three of each, and the median shown:
# a loaded machine moves every row alike.
# Then the stalled submissions (grader/selftest/stalls/): per lesson, on the
# warm VM, the solution, a "hang" tree (every program blocks for ever before
# main) and a "linger" tree (every program does its work, prints it all and
# never exits), each graded once:
#   hang NN, linger NN <= the solution's own test time + 60 s
# BENCH_ONLY=grade runs only the first part, BENCH_ONLY=hang, linger or
# stall (both) only those rows; LESSON=NN[,NN] limits the stalled lessons
# (default: every lesson with a solution). Each row shows the load when it
# started; each grading's output, results.json and new transcripts are
# kept in build/bench-grade/. Exits 1 when a solution's grading lost points.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

out=$(mktemp -d)
trap 'rm -rf "$out"; vm-setup/microvm/run.sh --down >/dev/null 2>&1' EXIT
rc=0
rows=$out/rows
only=${BENCH_ONLY:-all}
case ,$only, in
*,all,* | *,stall,*) only=$only,hang,linger ;;
esac
wants() {
	case ,$only, in *,all,* | *,"$1",*) return 0 ;; esac
	return 1
}

# timed NAME COLD ARGS... - make grade ARGS (RXE_VM_COLD=COLD), one line of
# "NAME wall tests load score max" in rows. A stalled tree (NAME hang or
# linger ...) is meant to lose points.
timed() {
	local name=$1 cold=$2 a b load
	shift 2
	load=$(cut -d' ' -f1 /proc/loadavg)
	rm -f "$out/r.json"
	touch "$out/start"
	a=$(date +%s%N)
	RXE_VM_COLD=$cold make --no-print-directory grade "$@" RESULTS="$out/r.json" >"$out/log" 2>&1 || {
		case $name in
		hang* | linger*) ;;
		*)
			rc=1
			echo "bench-grade: make grade $* lost points:" >&2
			tail -n 5 "$out/log" >&2
			;;
		esac
	}
	b=$(date +%s%N)
	# Each grading's output and results.json stay for a look at where the
	# time went (a test's execution_time), the last run's only.
	mkdir -p build/bench-grade
	cp "$out/log" "build/bench-grade/${name//[^a-z0-9]/_}.log"
	cp "$out/r.json" "build/bench-grade/${name//[^a-z0-9]/_}.json" 2>/dev/null
	rm -rf "build/bench-grade/${name//[^a-z0-9]/_}.transcripts"
	find .grade/transcripts -name '*.log' -newer "$out/start" 2>/dev/null |
		while read -r f; do
			mkdir -p "build/bench-grade/${name//[^a-z0-9]/_}.transcripts"
			cp "$f" "build/bench-grade/${name//[^a-z0-9]/_}.transcripts/"
		done
	/usr/bin/python3 - "$name" "$a" "$b" "$load" "$out/r.json" >>"$rows" <<'PY'
import json, sys
name, a, b, load, path = sys.argv[1:]
try:
    data = json.load(open(path))
    tests = sum(t["execution_time"] for t in data["tests"])
    score = f"{data['score']:g}/{data['max_score']:g}"
except (OSError, ValueError, KeyError):
    tests, score = float("nan"), "?"
print(name.replace(" ", "~"), (int(b) - int(a)) / 1e9, tests, load, score)
PY
}

echo "bench-grade: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), backend $(vm-setup/with-rxe --info | awk '{ print $2 }' | tr -d :)"
vm-setup/microvm/run.sh --down >/dev/null 2>&1
vm-setup/microvm/run.sh --up >/dev/null || rc=1
# The warm grader's first grading after boot waits for its imports: one
# grading first, not counted.
make --no-print-directory grade LESSON=05 SRC=solutions TEST=test_bad_host >/dev/null 2>&1
if wants grade; then
	for _ in 1 2 3; do
		# A regrade is the same grading again, a student's edit (more
		# than 2 s) after the last: the warm grader has made it ready
		# ahead (server.py --ahead). "first": after another grading.
		timed "warm, one test first (05 TEST=test_pingpong)" 0 LESSON=05 SRC=solutions TEST=test_pingpong
		sleep 2
		timed "warm, one test regraded (05 TEST=test_pingpong)" 0 LESSON=05 SRC=solutions TEST=test_pingpong
		timed "warm, one lesson (05)" 0 LESSON=05 SRC=solutions
		timed "warm, 09 first (TEST=status_names)" 0 LESSON=09 SRC=solutions TEST=status_names
		sleep 2
		timed "warm, 09 regraded (TEST=status_names)" 0 LESSON=09 SRC=solutions TEST=status_names
		timed "cold, one lesson (05)" 1 LESSON=05 SRC=solutions
	done
fi
# The stalled trees, built and compiled before they are timed (a compile
# is the same for any submission). A lesson's tests time is its solution's,
# graded just before.
if wants hang || wants linger; then
	stalls=build/bench-stalls
	kinds=""
	for k in hang linger; do wants $k && kinds="$kinds $k"; done
	lessons=${LESSON:-}
	# shellcheck disable=SC2086
	nums=$(/usr/bin/python3 grader/selftest/stalls/tree.py --lessons ${lessons//,/ })
	for k in $kinds; do
		# shellcheck disable=SC2086
		/usr/bin/python3 grader/selftest/stalls/tree.py "$k" "$stalls/$k" $nums &&
			/usr/bin/python3 -m grader build "$stalls/$k" $nums >/dev/null || rc=1
	done
	for n in $nums; do
		timed "solution $n" 0 LESSON="$n" SRC=solutions
		for k in $kinds; do
			timed "$k $n" 0 LESSON="$n" SRC="$stalls/$k"
		done
	done
fi
vm-setup/microvm/run.sh --down >/dev/null
wants grade && timed "cold, all lessons" 1 SRC=solutions
if wants grade && [ "${SKIP_TEST:-0}" != 1 ]; then
	load=$(cut -d' ' -f1 /proc/loadavg)
	a=$(date +%s%N)
	make --no-print-directory test >"$out/test.log" 2>&1 || rc=1
	b=$(date +%s%N)
	echo "make-test $(((b - a) / 1000000000)) nan $load -" >>"$rows"
	tail -n 1 "$out/test.log"
fi

/usr/bin/python3 - "$rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, wall, tests, load, score = line.split()
    rows.setdefault(name.replace("~", " "), []).append(
        (float(wall), float(tests), float(load), score))
# A stalled tree's target is its solution's tests (graded just before) + 60 s.
for name, vals in rows.items():
    kind, _, num = name.partition(" ")
    if kind in ("hang", "linger"):
        sol = rows.get(f"solution {num}", [(0, float("nan"))])[0][1]
        rows[name] = [(w, sol, ld, sc) for w, _, ld, sc in vals]
target = {"solution": lambda w, t: (None, "its own tests"),
          "hang": lambda w, t: (w <= t + 60, "tests + 60 s"),
          "linger": lambda w, t: (w <= t + 60, "tests + 60 s"),
          "warm, one test first": lambda w, t: (None, "its own test"),
          "warm, one test regraded": lambda w, t: (w <= t + 1.5, "test + 1.5 s"),
          "warm, one lesson": lambda w, t: (w <= 1.3 * t, "1.3 x tests"),
          "warm, 09 first": lambda w, t: (None, "its own test"),
          "warm, 09 regraded": lambda w, t: (w <= t + 1.5, "test + 1.5 s"),
          "cold, one lesson": lambda w, t: (w <= 1.5 * t, "1.5 x tests"),
          "cold, all lessons": lambda w, t: (w <= 60, "60 s"),
          "make-test": lambda w, t: (w <= 480, "480 s")}
print(f"{'what':40s} {'wall s':>8s} {'tests s':>8s} {'load':>5s} "
      f"{'score':>7s}  target")
for name, vals in rows.items():
    wall = statistics.median(v[0] for v in vals)
    tests = statistics.median(v[1] for v in vals)
    load = statistics.median(v[2] for v in vals)
    rule = next(f for k, f in target.items() if name.startswith(k))
    ok, what = rule(wall, tests)
    shown = "make test" if name == "make-test" else name
    print(f"{shown:40s} {wall:8.1f} {tests:8.1f} {load:5.1f} "
          f"{vals[-1][3]:>7s}  {what}"
          + ("" if ok is None else f": {'met' if ok else 'NOT met'}")
          + (f"  (runs: {', '.join(f'{v[0]:.1f}' for v in vals)})"
             if len(vals) > 1 else ""))
PY
exit $rc
