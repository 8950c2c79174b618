#!/bin/bash
# run-all.sh - the course's own tests (make test). What needs no device runs
# on the host (gcc and Python are much slower under the VM's emulation):
#   0. the self-check's modules as pytest rewrites them (bytecode for the
#      VMs) and the trees the device parts grade, compiled on the host: solutions,
#      skeletons, the hostile submissions, the cheats, the mutants and the
#      variants (compiled here, never by part 4a's grading in the VM,
#      which did when it reached them before part 2's compile test did)
#   1. bats: vm-setup scripts and the Makefile, setting up (kernel pin,
#      Ubuntu, arm64, offline cache, dev container)
#   2. pytest -m "not device": the grader against bad programs, the plugin end
#      to end, the course self-check's static half (files, TODO regions,
#      warning-free builds)
#   3. bats: with-rxe through the micro-VM (exit codes, output, timeout, the
#      warm VM and the warm grader, make grade from outside, a linked pair
#      of VMs), then the native backend for real in a VM booted without a
#      device, then grading as an ordinary user with a 0700 home and as
#      root in a 0700 directory (anyuser.bats)
#   4a. in one vm-setup/with-rxe run: the device smoke test (bats) and
#      pytest -m device: the self-check grades solutions (full marks) and
#      skeletons (not full marks), and the hostile submissions (no more than
#      the skeletons, nothing changed)
#   4b. in another VM: the cheats (test_cheats.py) and the mutants, the
#      planted mistakes that prove each lesson's symptoms (test_mutants.py)
# Parts 3, 4a and 4b start as soon as part 0 is done and run beside parts 1
# and 2: the two host cores stay busy from the start. Each part's output
# follows in order, then its time. Exit 0 only when every part passed.
set -u
cd "$(dirname "$0")/../.." || exit 2
export BATS_LIB_PATH=/usr/lib/bats
# A host-side bats test that hangs fails after this long instead of
# holding make test for ever (pytest's tests have pytest-timeout).
export BATS_TEST_TIMEOUT=${BATS_TEST_TIMEOUT:-600}
# The course's own tests run make grade on a tree being edited; the refusal
# to grade with modified grader files has a test of its own (test_hostile.py).
export ALLOW_MODIFIED_GRADER=1
PYTHON=${PYTHON:-/usr/bin/python3}
PYTEST_CMD="$PYTHON -m pytest -c grader/pytest.ini --rootdir ."
PYTEST="$PYTEST_CMD grader/selftest"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
t0=$SECONDS

# Where the time goes: the parts share the host's cores, so a part's wall
# time says little; the CPU its processes used (QEMU's included: each part
# in a cgroup v2 of its own, where this user may make one) says what it
# costs. Without one, the CPU column is '-'.
cg=''
cg2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
if [ -n "$cg2" ] && mkdir "$cg2/rdma-selftest.$$" 2>/dev/null; then
	cg=$cg2/rdma-selftest.$$
	trap 'rm -rf "$logs"; rmdir "$cg"/*/ "$cg" 2>/dev/null' EXIT
fi

# part NAME CMD... - run CMD with its output in the part's log, its status
# in NAME.rc, its end (seconds since the start) in NAME.end and its CPU
# seconds in NAME.cpu.
part() {
	local name=$1 rc
	shift
	if [ -n "$cg" ] && mkdir "$cg/$name" 2>/dev/null; then
		(echo "$BASHPID" >"$cg/$name/cgroup.procs" 2>/dev/null; "$@") >"$logs/$name" 2>&1 3>&-
		rc=$?
		awk '$1 == "usage_usec" { printf "%d\n", $2 / 1e6 }' "$cg/$name/cpu.stat" >"$logs/$name.cpu" 2>/dev/null
	else
		"$@" >"$logs/$name" 2>&1 3>&-
		rc=$?
	fi
	echo "$rc" >"$logs/$name.rc"
	echo $((SECONDS - t0)) >"$logs/$name.end"
	return "$rc"
}

# 0. A student repository (make student-repo) has no solutions/, no cheats
# and no mutants: what needs them is the instructor's checkout's alone.
build_trees() {
	# The self-check's modules as pytest rewrites their asserts, saved
	# here for the VMs' pytest runs, which cannot write them into their
	# read-only grader/ share: rewriting them at each start took 4-5 s of
	# a VM's CPU (PYTHONDONTWRITEBYTECODE, if set, would stop it here).
	env -u PYTHONDONTWRITEBYTECODE $PYTEST --collect-only -q >/dev/null || return 1
	"$PYTHON" -m grader build skeletons || return 1
	"$PYTHON" grader/selftest/hostile/tree.py build/selftest/hostile &&
		"$PYTHON" -m grader build build/selftest/hostile || return 1
	[ -d solutions ] || return 0
	"$PYTHON" -m grader build solutions &&
		$PYTEST_CMD -q -m "not device" grader/selftest/test_cheats.py::test_cheats_compile \
			grader/selftest/test_mutants.py::test_mutants_compile \
			grader/selftest/test_variants.py::test_variant_compiles
}
part 0 build_trees

# 3, 4a, 4b: each VM gets one vCPU (three 2-vCPU VMs on two cores cost more
# than they gain under TCG) and 4a two rxe devices, over which the self-check
# spreads its gradings (grader/session/shards.py: one waits while the other
# works). 4a and 4b boot their own VMs (RXE_VM_COLD), never the warm VM
# part 3 starts and stops. Each VM has its own devices and counters. 4b
# alone has two vCPUs (RXE_VM_SMP_4B): it has the most work and ends last,
# and with one vCPU it left a core idle for its last 240 s (fresh-clone run
# at 543a5c1: 4a and 3 done at 953 s, 4b at 1191 s); its mutants grade six
# at a time.
smp_4b=${RXE_VM_SMP_4B:-${RXE_VM_SMP:-2}}
export RXE_VM_SMP=${RXE_VM_SMP:-1}
vm_part() {
	bats --timing grader/bats/with-rxe.bats
	local w=$?
	RXE_VM_NO_RXE=1 vm-setup/with-rxe bats --timing grader/bats/native.bats
	local n=$?
	bats --timing grader/bats/anyuser.bats
	local a=$?
	[ $w = 0 ] && [ $n = 0 ] && [ $a = 0 ]
}
part 3 vm_part &
# Parts 4a and 4b are one VM each, whose whole run the VM's own timeout
# bounds: a backstop for a hang, not a speed. They took 1000-1150 s in
# fresh-clone make tests, then 2050-2090 s on a slower host (run 41),
# against run.sh's default of 1800 s; CI stops everything at 90 minutes.
vm_timeout=${RXE_VM_TIMEOUT:-4800}
if [ -d solutions ]; then
	part 4b env RXE_VM_COLD=1 RXE_VM_SMP="$smp_4b" RXE_VM_TIMEOUT="$vm_timeout" vm-setup/with-rxe $PYTEST_CMD -m device -v --durations=8 \
		grader/selftest/test_cheats.py grader/selftest/test_mutants.py "$@" &
else
	echo "(no solutions/ here: no cheats or mutants to grade)" >"$logs/4b"
	echo 0 >"$logs/4b.rc"
	echo 0 >"$logs/4b.end"
fi
device_part() {
	RXE_VM_COLD=1 RXE_VM_DEVICES=2 RXE_VM_TIMEOUT="$vm_timeout" vm-setup/with-rxe bash -c 'bats --timing grader/bats/device.bats; b=$?
		'"$PYTEST"' -m device -v --durations=8 --deselect grader/selftest/test_cheats.py --deselect grader/selftest/test_mutants.py "$@"; p=$?
		[ $b = 0 ] && [ $p = 0 ]' run-all "$@"
}
part 4a device_part "$@" &

part 1 bats --timing grader/bats/scripts.bats grader/bats/setup.bats grader/bats/hardware.bats
part 2 $PYTEST -m "not device" --durations=8 "$@"
wait

status() { [ "$(cat "$logs/$1.rc")" = 0 ] && echo ok || echo "FAILED ($(cat "$logs/$1.rc"))"; }
cpu() { cat "$logs/$1.cpu" 2>/dev/null || echo -; }
for p in 0 1 2 3 4a 4b; do
	case $p in
	0) title="the trees the device parts grade, compiled" ;;
	1) title="bats: vm-setup scripts and Makefile" ;;
	2) title="pytest: grader and course self-check, no device" ;;
	3) title="bats: with-rxe through the micro-VM" ;;
	4a) title="in vm-setup/with-rxe: device smoke test, solutions, skeletons and hostile submissions graded" ;;
	4b) title="in vm-setup/with-rxe: the cheats and the mutants graded" ;;
	esac
	echo "== $p. $title =="
	cat "$logs/$p"
	echo "== $p: $(status "$p"), done at $(cat "$logs/$p.end") s, $(cpu "$p") CPU s =="
done
echo "make test: trees $(status 0), scripts $(status 1), grader+self-check $(status 2)," \
	"micro-VM $(status 3), device $(status 4a), cheats $(status 4b); $((SECONDS - t0)) s"
echo "make test: CPU s per part: 0 $(cpu 0), 1 $(cpu 1), 2 $(cpu 2), 3 $(cpu 3), 4a $(cpu 4a), 4b $(cpu 4b)" \
	"on $(nproc) cores"
# What failed, last (where a log's tail shows it): each failed part's
# failing tests as pytest's summary and bats name them, each with the start
# of its reason; the whole reason is in the part's output above. pytest
# in the VM writes to a terminal, in colour: the colours go first (fresh-
# clone run 176 named no test of its failed part 4b).
failed=0
for p in 0 1 2 3 4a 4b; do
	[ "$(cat "$logs/$p.rc")" = 0 ] && continue
	failed=1
	sed 's/\x1b\[[0-9;]*m//g' "$logs/$p" |
		grep -aE '^(FAILED|ERROR) |^not ok ' | cut -c1-400 |
		sed "s/^/make test: part $p: /"
done
exit $failed
