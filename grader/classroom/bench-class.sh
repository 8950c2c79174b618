#!/bin/bash
# bench-class.sh (make bench-class) - how fast a class is graded: 8
# submissions of one lesson (default LESSON=05: 6 copies of the solution, 2
# of the skeleton with a line added, each its own tree) through make
# grade-class with JOBS=1 and JOBS=2, in one run, beside make grade on one
# tree (a cold VM, as a student's first make grade). Prints wall time,
# seconds per submission and submissions per minute for each. Each VM gets
# one vCPU (RXE_VM_SMP=1), so JOBS=2 fills two cores.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
lesson=${LESSON:-05}
n=8
export RXE_VM_SMP=${RXE_VM_SMP:-1} RXE_VM_COLD=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
name=$(basename "$(ls -d lessons/"$lesson"-* 2>/dev/null | head -n 1)")
[ -n "$name" ] && [ -d "solutions/$name" ] || { echo "bench-class: no lesson '$lesson' with a solution" >&2; exit 2; }
for i in $(seq 1 $n); do
	d=$work/subs/student$i
	mkdir -p "$d"
	if [ "$i" -le 6 ]; then
		cp -r "solutions/$name" "$d/"
	else
		cp -r "skeletons/$name" "$d/"
		for f in "$d/$name"/*.c; do echo "/* student $i */" >>"$f"; done
	fi
done

now() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }
row() { # label seconds count
	awk -v l="$1" -v s="$2" -v c="$3" 'BEGIN { printf "%-34s %7.1f s %7.1f s %8.2f\n", l, s, s / c, c * 60 / s }'
}

t0=$(now)
make --no-print-directory grade LESSON="$lesson" SRC=solutions >"$work/one.log" 2>&1
one_rc=$?
t1=$(now)
make --no-print-directory grade-class SUBMISSIONS="$work/subs" OUT="$work/out1" LESSON="$lesson" JOBS=1 >"$work/j1.log" 2>&1
j1_rc=$?
t2=$(now)
make --no-print-directory grade-class SUBMISSIONS="$work/subs" OUT="$work/out2" LESSON="$lesson" JOBS=2 >"$work/j2.log" 2>&1
j2_rc=$?
t3=$(now)

echo "bench-class: lesson $name, $n submissions (6 solved, 2 not), $(nproc) cores, RXE_VM_SMP=$RXE_VM_SMP, $(vm-setup/microvm/run.sh --accel | tail -n 1)"
printf "%-34s %9s %9s %8s\n" "" "wall" "per sub" "subs/min"
row "make grade, one tree (cold VM)" "$(secs "$t0" "$t1")" 1
row "make grade-class JOBS=1" "$(secs "$t1" "$t2")" $n
row "make grade-class JOBS=2" "$(secs "$t2" "$t3")" $n
echo "make grade: $(tail -n 1 "$work/one.log") (exit $one_rc)"
for j in 1 2; do
	rc=j${j}_rc
	echo "JOBS=$j: $(cut -d, -f5 "$work/out$j/gradebook.csv" | tail -n +2 | sort | uniq -c | tr -s ' \n' ' ')(exit ${!rc})"
done
# The rows must agree between the two runs (same submissions, same grader).
if ! diff <(cut -d, -f1-5 "$work/out1/gradebook.csv") <(cut -d, -f1-5 "$work/out2/gradebook.csv") >/dev/null; then
	echo "bench-class: JOBS=1 and JOBS=2 disagree:" >&2
	diff <(cut -d, -f1-5 "$work/out1/gradebook.csv") <(cut -d, -f1-5 "$work/out2/gradebook.csv") >&2
	# What the differing rows lost, and the start of why.
	for s in $(diff <(cut -d, -f1-5 "$work/out1/gradebook.csv") <(cut -d, -f1-5 "$work/out2/gradebook.csv") |
		sed -n 's/^[<>] \([^,]*\),.*/\1/p' | sort -u); do
		for j in 1 2; do
			/usr/bin/python3 - "$work/out$j/$s/results.json" "JOBS=$j $s" <<'PY' >&2
import json, sys
for t in json.load(open(sys.argv[1]))["tests"]:
    if t["score"] < t["max_score"]:
        print(f"  {sys.argv[2]}: {t['name']}: {t['output'][:300]}")
PY
		done
	done
	exit 1
fi
[ $j1_rc = 0 ] && [ $j2_rc = 0 ]
