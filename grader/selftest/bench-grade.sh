#!/bin/bash
# bench-grade.sh (make bench-grade) - wall time of grading every solution, and
# of make test, in one run, and where the grading time goes (per lesson and
# the VM's share), and one lesson graded on a cold VM beside a warm one
# (make vm-up), in the same run. Target: the full course grades in under 90 s
# in the micro-VM on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }
backend=$(vm-setup/with-rxe --info | awk '{ print $2 }' | tr -d :)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

export RXE_VM_COLD=1    # the full-course numbers are for a cold VM
t0=$(date +%s%N)
make --no-print-directory grade SRC=solutions RESULTS="$out/results.json" >"$out/grade.log" 2>&1
grade_rc=$?
t1=$(date +%s%N)
make --no-print-directory test >"$out/test.log" 2>&1
test_rc=$?
t2=$(date +%s%N)
t3=$(date +%s%N)
vm-setup/with-rxe true
t4=$(date +%s%N)

echo "backend: $backend"
echo "grade SRC=solutions: $(secs "$t0" "$t1") s ($(tail -n 1 "$out/grade.log"), exit $grade_rc)"
/usr/bin/python3 - "$out/results.json" <<'PY'
import json, sys, collections
d = json.load(open(sys.argv[1]))
per = collections.OrderedDict()
for t in d["tests"]:
    per.setdefault(t["name"].split(":")[0], 0.0)
    per[t["name"].split(":")[0]] += t.get("execution_time", 0)
print(f"  inside pytest: {d['execution_time']} s; per lesson (tests incl. compile):")
for k, v in per.items():
    print(f"    {k:20s} {v:6.1f} s")
PY
echo "  one with-rxe true (VM boot + power-off): $(secs "$t3" "$t4") s"
echo "make test: $(secs "$t1" "$t2") s ($(tail -n 1 "$out/test.log"), exit $test_rc)"

# Lesson 05 on a cold VM and on a warm one, twice each, interleaved.
warm_rc=0
if [ "$backend" = vm ]; then
	vm-setup/microvm/run.sh --down >/dev/null
	RXE_VM_COLD=0 vm-setup/microvm/run.sh --up >/dev/null || warm_rc=1
	cold=() warm=()
	for _ in 1 2; do
		for mode in 1 0; do
			a=$(date +%s%N)
			RXE_VM_COLD=$mode make --no-print-directory grade LESSON=05 SRC=solutions >"$out/l05.log" 2>&1 || warm_rc=1
			b=$(date +%s%N)
			if [ $mode = 1 ]; then cold+=("$(secs "$a" "$b")"); else warm+=("$(secs "$a" "$b")"); fi
		done
	done
	vm-setup/microvm/run.sh --down >/dev/null
	echo "grade LESSON=05 SRC=solutions: cold VM ${cold[*]} s, warm VM ${warm[*]} s"
fi
[ $grade_rc = 0 ] && [ $test_rc = 0 ] && [ $warm_rc = 0 ]
