#!/bin/bash
# lesson-check.sh NN - one lesson's own self-check (make test LESSON=NN), for
# whoever adds or changes a lesson. Each step prints its time:
#   1. static, on the host: the lesson's course checks (files, TODO regions,
#      warning-free builds, its Common failures table), lint, and its
#      solution, skeleton, mutants and cheats compiled (a lesson graded
#      without a device, lesson.toml's device = false: all of them graded
#      here, and step 2 has nothing to do)
#   2. in one micro-VM (two vCPUs, two devices): its solution graded (full
#      marks), its skeleton (not full) and its variants (the solution with
#      every output line prefixed) on one device, beside its mutants (each
#      shows its symptom first) and its cheats (each loses exactly the
#      tests it fakes) on the other
#   3. on the linked pair, when the lesson has wire tests or is lesson 16:
#      its solution graded with HOSTS=2 (full marks), beside step 2 (both
#      mostly wait for their programs and peers; they slow each other
#      down: lesson 05 took 157 s so, where its steps timed alone add up
#      to 177 s); its output follows step 2's
# Exit 0 only when every step passed. The whole course: make test.
set -u
cd "$(dirname "$0")/../.." || exit 2
# (--graded-in-vm NN: step 2's half inside the VM, below)
in_vm=''
[ "${1-}" = --graded-in-vm ] && in_vm=1 && shift
[ $# = 1 ] || { echo "usage: grader/selftest/lesson-check.sh NN" >&2; exit 2; }
num=$(printf '%02d' "$((10#${1%%-*}))" 2>/dev/null) || num=''
name=$(basename "$(ls -d lessons/"$num"-* 2>/dev/null | head -n 1)")
if [ -z "$num" ] || [ -z "$name" ] || [ "$name" = . ]; then
	echo "make test LESSON=$1: no such lesson; the lessons are: $(cd lessons && ls -d [0-9][0-9]-* | tr '\n' ' ')" >&2
	exit 2
fi
export BATS_LIB_PATH=/usr/lib/bats ALLOW_MODIFIED_GRADER=1
export GRADER_SELFTEST_LESSONS=$num MUTANTS=$num VARIANT_LESSONS=$num
PYTHON=${PYTHON:-/usr/bin/python3}
PYTEST="$PYTHON -m pytest -c grader/pytest.ini --rootdir ."
t0=$SECONDS
failed=()

# step TITLE CMD... - run CMD, say how long it took and whether it passed.
step() {
	local title=$1 t=$SECONDS rc
	shift
	echo "== $title =="
	"$@"
	rc=$?
	echo "== $title: $([ $rc = 0 ] && echo ok || echo "FAILED ($rc)"), $((SECONDS - t)) s =="
	[ $rc = 0 ] || failed+=("$title")
}

has_mutants=0 has_cheats=0 has_variants=0
compgen -G "grader/selftest/mutants/$num/*" >/dev/null && has_mutants=1
compgen -G "grader/selftest/cheats/*/$name" >/dev/null && has_cheats=1
grep -E '^ALL = ' grader/selftest/test_variants.py | grep -q "\"$num\"" && has_variants=1
# A lesson graded without a device (lesson.toml: device = false) is graded on
# the host in step 1, its solution, skeleton, mutants and cheats alike.
device=true
grep -Eq '^device *= *false' "lessons/$name/lesson.toml" 2>/dev/null && device=false

# Step 2 in the VM: two pytest runs side by side, each on a device of its
# own (its counters its own traffic): the solution, skeleton and variants on
# the first, the mutants and cheats on the second. Each mostly waits for
# its programs and peers: lesson 05's took 129 s one after the other, 97 s
# side by side (each with the VM's boot). Their output follows in order.
if [ -n "$in_vm" ]; then
	set -- $RDMA_DEVICES
	logs=$(mktemp -d)
	pids=() titles=() rc=0
	on_device() {	# DEVICE TITLE PYTEST-ARG...: in the background
		local dev gid ip nd
		IFS=, read -r dev gid ip nd <<<"$1"
		titles+=("$2")
		(export RDMA_DEVICE=$dev RDMA_GID_INDEX=$gid RDMA_IP=$ip \
			RDMA_NETDEV=$nd RDMA_DEVICES=$1
		exec $PYTEST -q --durations=10 -m device "${@:3}") >"$logs/${#pids[@]}" 2>&1 &
		pids+=($!)
	}
	a=(grader/selftest/test_course.py) b=()
	[ $has_variants = 1 ] && a+=(grader/selftest/test_variants.py)
	[ $has_mutants = 1 ] && b+=(grader/selftest/test_mutants.py)
	[ $has_cheats = 1 ] && b+=(grader/selftest/test_cheats.py)
	on_device "$1" "solution, skeleton, variants" -k "$name or variant" "${a[@]}"
	[ ${#b[@]} = 0 ] ||
		on_device "${2:-$1}" "mutants, cheats" -k "mutant or cheat" "${b[@]}"
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || rc=1
		echo "-- ${titles[$i]} --"
		cat "$logs/$i"
	done
	rm -rf "$logs"
	exit $rc
fi
static() {
	# (the self-check's rewritten bytecode for step 2's VM: run-all.sh, part 0)
	env -u PYTHONDONTWRITEBYTECODE $PYTEST --collect-only -q grader/selftest >/dev/null &&
		"$PYTHON" -m grader build solutions "$name" && "$PYTHON" -m grader build skeletons "$name" || return 1
	local compile=()
	[ $has_mutants = 1 ] && compile+=(grader/selftest/test_mutants.py)
	[ $has_cheats = 1 ] && compile+=(grader/selftest/test_cheats.py::test_cheats_compile)
	# (a lesson graded without a device: its cheats graded here too)
	[ $has_cheats = 1 ] && [ $device = false ] &&
		compile+=(grader/selftest/test_cheats.py::test_each_host_cheat_loses_exactly_what_it_fakes)
	[ $has_variants = 1 ] && compile+=(grader/selftest/test_variants.py::test_variant_compiles)
	# (the compiles apart: -k "$name" deselects them, and a new lesson's
	# mutants and cheats were never built before its device step)
	$PYTEST -q -m "not device" grader/selftest/test_course.py -k "$name" &&
		{ [ ${#compile[@]} = 0 ] || $PYTEST -q -m "not device" "${compile[@]}"; } &&
		grader/selftest/lint.sh
}
step "1. $name: static checks, lint, the trees compiled" static

graded() {
	RXE_VM_COLD=1 RXE_VM_SMP=2 RXE_VM_DEVICES=2 vm-setup/with-rxe \
		bash grader/selftest/lesson-check.sh --graded-in-vm "$num"
}
# Step 3 (the pair's two VMs) starts first and runs beside step 2 (one VM):
# its output, held in a file, is shown once step 2 is done.
pair=''
if compgen -G "grader/lessons/test_${num}_*_wire.py" >/dev/null || [ "$num" = 16 ]; then
	wire() {
		local out
		out=$("$PYTHON" -m grader grade --src=solutions --lesson="$num" --hosts=2 2>&1)
		local rc=$?
		printf '%s\n' "$out" | tail -n 40
		# (host A's lines come prefixed "A| ")
		[ $rc = 0 ] && grep -Eq '^(A\| )?Score: ([0-9]+)/\2$' <<<"$out"
	}
	pair=$(mktemp)
	trap 'rm -f "$pair"' EXIT
	pair_title="3. $name: the solution on a linked pair (HOSTS=2)"
	(step "$pair_title" wire; [ ${#failed[@]} = 0 ]) >"$pair" 2>&1 &
	pair_pid=$!
fi

if [ $device = true ] || [ $has_variants = 1 ]; then
	step "2. $name: solution, skeleton, mutants, cheats, variants graded" graded
fi

if [ -n "$pair" ]; then
	wait "$pair_pid" || failed+=("$pair_title")
	cat "$pair"
fi

echo "make test LESSON=$num: ${#failed[@]} step(s) failed$([ ${#failed[@]} = 0 ] || printf ' (%s)' "${failed[*]}"); $((SECONDS - t0)) s"
[ ${#failed[@]} = 0 ]
