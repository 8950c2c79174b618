#!/bin/bash
# lesson-check.sh NN - one lesson's own self-check (make test LESSON=NN), for
# whoever adds or changes a lesson. Each step prints its time:
#   1. static, on the host: the lesson's course checks (files, TODO regions,
#      warning-free builds, its Common failures table), lint, and its
#      solution, skeleton, mutants and cheats compiled (a lesson graded
#      without a device, lesson.toml's device = false: all of them graded
#      here, and step 2 has nothing to do)
#   2. in one micro-VM: its solution graded (full marks), its skeleton (not
#      full), its mutants (each shows its symptom first), its cheats (each
#      loses exactly the tests it fakes), its variants (the solution with
#      every output line prefixed)
#   3. on the linked pair, when the lesson has wire tests or is lesson 16:
#      its solution graded with HOSTS=2 (full marks)
# Exit 0 only when every step passed. The whole course: make test.
set -u
cd "$(dirname "$0")/../.." || exit 2
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

static() {
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
	local tests=(grader/selftest/test_course.py)
	[ $has_mutants = 1 ] && tests+=(grader/selftest/test_mutants.py)
	[ $has_cheats = 1 ] && tests+=(grader/selftest/test_cheats.py)
	[ $has_variants = 1 ] && tests+=(grader/selftest/test_variants.py)
	RXE_VM_COLD=1 vm-setup/with-rxe $PYTEST -q -m device -k "$name or mutant or cheat or variant" "${tests[@]}"
}
if [ $device = true ] || [ $has_variants = 1 ]; then
	step "2. $name: solution, skeleton, mutants, cheats, variants graded" graded
fi

if compgen -G "grader/lessons/test_${num}_*_wire.py" >/dev/null || [ "$num" = 16 ]; then
	wire() {
		local out
		out=$("$PYTHON" -m grader grade --src=solutions --lesson="$num" --hosts=2 2>&1)
		local rc=$?
		printf '%s\n' "$out" | tail -n 40
		# (host A's lines come prefixed "A| ")
		[ $rc = 0 ] && grep -Eq '^(A\| )?Score: ([0-9]+)/\2$' <<<"$out"
	}
	step "3. $name: the solution on a linked pair (HOSTS=2)" wire
fi

echo "make test LESSON=$num: ${#failed[@]} step(s) failed$([ ${#failed[@]} = 0 ] || printf ' (%s)' "${failed[*]}"); $((SECONDS - t0)) s"
[ ${#failed[@]} = 0 ]
