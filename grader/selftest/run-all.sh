#!/bin/bash
# run-all.sh - the course's own tests (make test). What needs no device runs
# on the host (gcc and Python are much slower under the VM's emulation):
#   1. bats: vm-setup scripts and the Makefile, setting up (kernel pin,
#      Ubuntu, arm64, offline cache, dev container)
#   2. pytest -m "not device": the grader against bad programs, the plugin end
#      to end, the course self-check's static half (files, TODO regions,
#      warning-free builds)
#   3. bats: with-rxe through the micro-VM (exit codes, output, timeout, the
#      warm VM, make grade from outside, a linked pair of VMs), then the
#      native backend for real in a VM booted without a device - from the
#      start, beside parts 2 and 4
#   4a. in one vm-setup/with-rxe run: the device smoke test (bats) and
#      pytest -m device: the self-check grades solutions (full marks) and
#      skeletons (not full marks), and the hostile submissions (no more than
#      the skeletons, nothing changed)
#   4b. in another VM at the same time: the cheats (test_cheats.py) and the
#      mutants, the planted mistakes that prove each lesson's symptoms
#      (test_mutants.py)
# Exit 0 only when every part passed.
set -u
cd "$(dirname "$0")/../.." || exit 2
export BATS_LIB_PATH=/usr/lib/bats
# The course's own tests run make grade on a tree being edited; the refusal
# to grade with modified grader files has a test of its own (test_hostile.py).
export ALLOW_MODIFIED_GRADER=1
PYTHON=${PYTHON:-/usr/bin/python3}
PYTEST_CMD="$PYTHON -m pytest -c grader/pytest.ini --rootdir ."
PYTEST="$PYTEST_CMD grader/selftest"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

echo "== 1. bats: vm-setup scripts and Makefile =="
bats grader/bats/scripts.bats grader/bats/setup.bats
scripts=$?
# Each VM gets one vCPU: under TCG a 1-vCPU guest grades as fast as a
# 2-vCPU one (39 s vs 43 s for lessons 05-07), and three 2-vCPU VMs at once
# made make test take 10m43s instead of 6m31s. Part 3 mostly waits (boots,
# timeouts, a shell; under one core on a quiet machine): it runs from the
# start, beside part 2 (host Python), then beside 4a and 4b, which each keep
# a core busy. Each VM has its own rxe device and counters; 4a and 4b boot
# their own (RXE_VM_COLD), never the warm VM part 3 starts and stops. The
# output of the background parts follows 4a's, in order.
export RXE_VM_SMP=${RXE_VM_SMP:-1}
# Compile the trees here, natively; the grader in the VM reuses the builds.
# The solutions first, once: part 3 grades some of them (native.bats in the
# VM, which cannot compile), and a build that exists is not made again.
# A student repository (make student-repo) has no solutions/, no cheats and
# no mutants: what needs them is the instructor's checkout's alone.
[ ! -d solutions ] || "$PYTHON" -m grader build solutions >/dev/null
built=$?
{
	bats grader/bats/with-rxe.bats; w=$?
	RXE_VM_NO_RXE=1 vm-setup/with-rxe bats grader/bats/native.bats; n=$?
	[ $w = 0 ] && [ $n = 0 ]
} >"$logs/3" 2>&1 3>&- &
part3=$!
echo "== 2. pytest: grader and course self-check, no device =="
$PYTEST -m "not device" "$@"
host=$?
[ $built = 0 ] && "$PYTHON" -m grader build skeletons &&
	"$PYTHON" grader/selftest/hostile/tree.py build/selftest/hostile &&
	"$PYTHON" -m grader build build/selftest/hostile
if [ -d solutions ]; then
	RXE_VM_COLD=1 vm-setup/with-rxe $PYTEST_CMD -m device -v grader/selftest/test_cheats.py \
		grader/selftest/test_mutants.py "$@" \
		>"$logs/4b" 2>&1 3>&- &
else
	echo "(no solutions/ here: no cheats or mutants to grade)" >"$logs/4b"
	true &
fi
part4b=$!
echo "== 4a. in vm-setup/with-rxe: device smoke test, solutions, skeletons and hostile submissions graded =="
RXE_VM_COLD=1 vm-setup/with-rxe bash -c 'bats grader/bats/device.bats; b=$?
	'"$PYTEST"' -m device -v --deselect grader/selftest/test_cheats.py --deselect grader/selftest/test_mutants.py "$@"; p=$?
	[ $b = 0 ] && [ $p = 0 ]' run-all "$@"
device=$?
wait $part3
vm=$?
echo "== 3. bats: with-rxe through the micro-VM (beside parts 2 and 4) =="
cat "$logs/3"
wait $part4b
cheats=$?
echo "== 4b. in vm-setup/with-rxe: the cheats and the mutants graded =="
cat "$logs/4b"

status() { [ "$1" = 0 ] && echo ok || echo "FAILED ($1)"; }
echo "make test: scripts $(status $scripts), grader+self-check $(status $host)," \
	"micro-VM $(status $vm), device $(status $device), cheats $(status $cheats)"
[ $scripts = 0 ] && [ $host = 0 ] && [ $vm = 0 ] && [ $device = 0 ] && [ $cheats = 0 ]
