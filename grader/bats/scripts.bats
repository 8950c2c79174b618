#!/usr/bin/env bats
# vm-setup scripts and the Makefile: argument errors, non-root behaviour,
# doctor on a host without rxe. Runs on the host, boots no VM.

bats_require_minimum_version 1.5.0

setup() {
	load helpers
	export BATS_LIB_PATH=/usr/lib/bats
}

@test "with-rxe: unknown option is a usage error (exit 2)" {
	run "$COURSE/vm-setup/with-rxe" --bogus true
	assert_failure 2
	assert_output --partial "unknown option '--bogus'"
}

@test "with-rxe: no command is a usage error" {
	run "$COURSE/vm-setup/with-rxe"
	assert_failure 2
	assert_output --partial "no command given"
}

@test "with-rxe: bad backend name is a usage error" {
	run "$COURSE/vm-setup/with-rxe" --backend cloud true
	assert_failure 2
	assert_output --partial "backend must be native or vm"
}

@test "with-rxe --info names the backend" {
	run "$COURSE/vm-setup/with-rxe" --info
	assert_success
	assert_output --regexp '^backend (native|vm): '
}

@test "with-rxe --backend native without a device says how to make one" {
	[ -z "$(ls /sys/class/infiniband 2>/dev/null)" ] || skip "this host has an RDMA device"
	run "$COURSE/vm-setup/with-rxe" --backend native true
	assert_failure 1
	assert_output --partial "setup-rxe.sh"
}

@test "microvm/run.sh: unknown option and missing command" {
	run "$COURSE/vm-setup/microvm/run.sh" --nope
	assert_failure 2
	assert_output --partial "unknown option '--nope'"
	run "$COURSE/vm-setup/microvm/run.sh"
	assert_failure 2
	assert_output --partial "no command given"
}

@test "microvm/run.sh: a non-numeric RXE_VM_TIMEOUT is refused" {
	RXE_VM_TIMEOUT=soon run "$COURSE/vm-setup/microvm/run.sh" true
	assert_failure 2
	assert_output --partial "RXE_VM_TIMEOUT must be a number"
}

@test "microvm/run.sh: QEMU missing gives the install command" {
	mkdir -p "$BATS_TEST_TMPDIR/bin"
	for t in bash cat dirname mktemp rm sed uname awk; do ln -s "$(command -v $t)" "$BATS_TEST_TMPDIR/bin/$t"; done
	PATH="$BATS_TEST_TMPDIR/bin" run "$COURSE/vm-setup/microvm/run.sh" true
	assert_failure 1
	assert_output --partial "qemu-system-x86_64 is missing"
	assert_output --partial "install-deps.sh"
}

@test "microvm/build.sh: a missing kernel package is named, nothing is left half-built" {
	cache="$BATS_TEST_TMPDIR/cache"
	RXE_VM_CACHE=$cache RXE_VM_KERNEL_DEB=/nonexistent/linux-image.deb run "$COURSE/vm-setup/microvm/build.sh"
	assert_failure 1
	assert_output --partial "kernel package '/nonexistent/linux-image.deb' does not exist"
	run ls -d "$cache"/vm-*
	assert_failure
	run find "$cache" -mindepth 1 ! -name .lock
	assert_output ""
}

@test "microvm/build.sh: unknown option" {
	run "$COURSE/vm-setup/microvm/build.sh" --fast
	assert_failure 1
	assert_output --partial "unknown option '--fast'"
}

@test "setup-rxe: unknown argument is a usage error" {
	run "$COURSE/vm-setup/setup-rxe.sh" --frobnicate
	assert_failure 2
	assert_output --partial "unknown argument '--frobnicate'"
	assert_output --partial "usage:"
}

@test "setup-rxe: --netdev without a value" {
	run "$COURSE/vm-setup/setup-rxe.sh" --netdev
	assert_failure 2
	assert_output --partial "--netdev needs an interface name"
}

@test "setup-rxe: refuses to run without root and says why" {
	run_unprivileged "$COURSE/vm-setup/setup-rxe.sh"
	assert_failure 1
	assert_output --partial "needs root"
	assert_output --partial "sudo"
}

@test "setup-rxe: a wrong netdev is named with the interfaces that exist" {
	[ "$(id -u)" = 0 ] || skip "needs root to get past the root check"
	run "$COURSE/vm-setup/setup-rxe.sh" --netdev no-such-if0
	assert_failure 1
	assert_output --partial "no network interface 'no-such-if0'"
	assert_output --partial "lo"
	[ ! -e /sys/class/infiniband/rxe0 ] || [ -n "$(ls /sys/class/infiniband)" ]
}

@test "setup-rxe: refuses lo (librdmacm cannot use 127.0.0.0/8)" {
	[ "$(id -u)" = 0 ] || skip "needs root to get past the root check"
	run "$COURSE/vm-setup/setup-rxe.sh" --netdev lo
	assert_failure 1
	assert_output --partial "cannot use rxe on 'lo'"
}

@test "setup-rxe: on a kernel without rdma_rxe, points to the micro-VM" {
	[ "$(id -u)" = 0 ] || skip "needs root to get past the root check"
	modinfo rdma_rxe >/dev/null 2>&1 && skip "this kernel has rdma_rxe"
	run "$COURSE/vm-setup/setup-rxe.sh"
	assert_failure 1
	assert_output --partial "cannot load the rdma_rxe kernel module"
	assert_output --partial "with-rxe"
	[ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]
}

@test "install-deps: --check works without root and lists nothing missing after install" {
	run_unprivileged "$COURSE/vm-setup/install-deps.sh" --check
	assert_success
	assert_output --partial "all"
}

@test "install-deps: unknown option" {
	run "$COURSE/vm-setup/install-deps.sh" --yes
	assert_failure 2
	assert_output --partial "unknown option '--yes'"
}

@test "doctor: unknown option" {
	run "$COURSE/vm-setup/doctor.sh" --quick
	assert_failure 2
	assert_output --partial "unknown option '--quick'"
}

@test "doctor --no-vm on a host without rxe: WARN for the device, names the micro-VM, exit 1" {
	[ -z "$(ls /sys/class/infiniband 2>/dev/null)" ] || skip "this host has an RDMA device"
	run "$COURSE/vm-setup/doctor.sh" --no-vm
	assert_failure 1
	assert_line --partial "PASS  packages: all installed"
	assert_line --regexp '^WARN  native RDMA device: none'
	assert_line --regexp '^PASS  QEMU: '
	assert_output --partial "the micro-VM was not checked"
}

@test "make build: unknown lesson lists the lessons" {
	run make -C "$COURSE" --no-print-directory build LESSON=42
	assert_failure
	assert_output --partial "no lesson '42'"
	assert_output --partial "00-setup"
}

@test "make build without LESSON prints the usage" {
	run make -C "$COURSE" --no-print-directory build
	assert_failure
	assert_output --partial "usage: make build LESSON=NN"
}

@test "make grade: an unknown lesson is refused before anything runs" {
	RXE_BACKEND=native run make -C "$COURSE" --no-print-directory grade LESSON=77
	assert_failure
	assert_output --partial "no lesson '77'"
}

# A stand-in QEMU for the KVM boot probe: FAKE_KVM=ok boots, anything else
# fails the way the build machines' KVM does.
fake_qemu() {
	mkdir -p "$BATS_TEST_TMPDIR/bin"
	cat >"$BATS_TEST_TMPDIR/bin/qemu-system-x86_64" <<'QEMU'
#!/bin/bash
if [ "$1" = --version ]; then echo "QEMU emulator version 9.9.$FAKE_ID"; exit 0; fi
case " $* " in
*" -enable-kvm "*)
	if [ "$FAKE_KVM" = ok ]; then echo "Run /bin/busybox as init process"; exit 0; fi
	echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x0" >&2
	exit 1 ;;
esac
exit 1
QEMU
	chmod +x "$BATS_TEST_TMPDIR/bin/qemu-system-x86_64"
	: >"$BATS_TEST_TMPDIR/kvm"
	export RXE_VM_KVM_DEV="$BATS_TEST_TMPDIR/kvm" FAKE_ID="$BATS_TEST_NUMBER$$$RANDOM"
	export PATH="$BATS_TEST_TMPDIR/bin:$PATH"
	# run.sh keeps a failed VM's run directory for its user: in the test's.
	export TMPDIR=$BATS_TEST_TMPDIR
}

# The stand-in's verdicts are cached like real ones (a version of their own):
# none is left behind. A make watch test's watcher is stopped.
teardown() {
	if [ -f "$BATS_TEST_TMPDIR/watched" ]; then
		pkill -TERM -f "grader/run/watch.sh 04 $(cat "$BATS_TEST_TMPDIR/watched")" || true
	fi
	if [ -n "${FAKE_ID:-}" ]; then
		rm -f "${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-course/microvm}"/kvm-probe-*-qemu9.9."$FAKE_ID"-*
	fi
}

@test "microvm/run.sh --accel: a probe guest that boots under KVM means KVM" {
	fake_qemu
	FAKE_KVM=ok run --separate-stderr "$COURSE/vm-setup/microvm/run.sh" --accel
	assert_success
	assert_output "kvm: ok
accel: kvm"
}

@test "microvm/run.sh --accel: a failed KVM probe means TCG, with QEMU's reason" {
	fake_qemu
	FAKE_KVM=fail run --separate-stderr "$COURSE/vm-setup/microvm/run.sh" --accel
	assert_success
	assert_output "kvm: fail: qemu-system-x86_64: error: failed to set MSR 0x10a to 0x0
accel: tcg"
	# shellcheck disable=SC2154 # run --separate-stderr sets $stderr
	[[ "$stderr" != *"unbound variable"* ]]
	# RXE_VM_VERBOSE=1 says why on every run (the verdict is cached).
	RXE_VM_VERBOSE=1 FAKE_KVM=fail run --separate-stderr "$COURSE/vm-setup/microvm/run.sh" --accel
	[[ "$stderr" == *"KVM not used, TCG instead: qemu-system-x86_64: error: failed to set MSR"* ]]
}

@test "microvm/run.sh --accel: no KVM device is said plainly, no probe runs" {
	fake_qemu
	RXE_VM_KVM_DEV=/nonexistent/kvm run --separate-stderr "$COURSE/vm-setup/microvm/run.sh" --accel
	assert_success
	assert_output --partial "kvm: fail: /nonexistent/kvm does not exist"
	assert_line "accel: tcg"
}

@test "make doctor reports the KVM probe's verdict, not just /dev/kvm" {
	fake_qemu
	FAKE_KVM=fail run "$COURSE/vm-setup/doctor.sh" --no-vm
	assert_output --partial "WARN  KVM: not used, the micro-VM runs under TCG emulation"
	assert_output --partial "failed to set MSR 0x10a"
	refute_output --partial "PASS  KVM"
}

@test "make watch: grades, then grades again when a file of the lesson is saved" {
	needs_solutions
	command -v inotifywait || fail "inotify-tools is missing (make deps)"
	src="$BATS_TEST_TMPDIR/work"
	mkdir -p "$src"
	cp -r "$COURSE/skeletons/04-work-requests" "$src/"
	log="$BATS_TEST_TMPDIR/watch.log"
	make -C "$COURSE" --no-print-directory watch LESSON=04 SRC="$src" >"$log" 2>&1 3>&- &
	watcher=$!
	# Whatever fails below, the watcher does not outlive the test.
	echo "$src" >"$BATS_TEST_TMPDIR/watched"
	wait_for() { for _ in $(seq 300); do grep -q "$1" "$log" && return 0; sleep 0.1; done; return 1; }
	wait_for "waiting for a change" || { kill "$watcher"; cat "$log"; fail "no first grading"; }
	grep -q "Score: 0/14" "$log"
	cp "$COURSE/solutions/04-work-requests/worksheet.c" "$src/04-work-requests/"
	wait_for "Score: 14/14" || { kill "$watcher"; cat "$log"; fail "no regrade after the save"; }
	# Stopping it leaves nothing of it running.
	wait_for "waiting for a change" || true
	# (a background job of a script ignores SIGINT: TERM, which it traps the same)
	pkill -TERM -f "grader/run/watch.sh 04 $src"
	for _ in $(seq 200); do
		pgrep -r R,S,D,T -f "grader/run/watch.sh 04 $src|inotifywait.*$src" >/dev/null || break
		sleep 0.1
	done
	run pgrep -r R,S,D,T -f "grader/run/watch.sh 04 $src|inotifywait.*$src"
	kill "$watcher" 2>/dev/null || true
	assert_failure
}

@test "make watch: stops by itself, saying so, when the lesson's directory is deleted" {
	command -v inotifywait || fail "inotify-tools is missing (make deps)"
	src="$BATS_TEST_TMPDIR/work"
	mkdir -p "$src"
	cp -r "$COURSE/skeletons/04-work-requests" "$src/"
	log="$BATS_TEST_TMPDIR/watch.log"
	make -C "$COURSE" --no-print-directory watch LESSON=04 SRC="$src" >"$log" 2>&1 3>&- &
	watcher=$!
	echo "$src" >"$BATS_TEST_TMPDIR/watched"
	for _ in $(seq 300); do grep -q "waiting for a change" "$log" && break; sleep 0.1; done
	grep -q "waiting for a change" "$log" || { cat "$log"; fail "no first grading"; }
	rm -r "$src/04-work-requests"
	for _ in $(seq 100); do kill -0 "$watcher" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$watcher" 2>/dev/null && fail "make watch still runs 10 s after its directory was deleted"
	run grep -c "== make watch:" "$log"
	assert_output 1
	run grep "is gone" "$log"
	assert_output "watch: $src/04-work-requests/ is gone: stopping"
	run pgrep -r R,S,D,T -f "grader/run/watch.sh 04 $src|inotifywait.*$src"
	assert_failure
}

@test "with-rxe --pair needs exactly two commands (exit 2, nothing booted)" {
	run "$COURSE/vm-setup/with-rxe" --pair 'true'
	assert_failure 2
	assert_output --partial "--pair takes two shell commands, host A's and host B's"
	run "$COURSE/vm-setup/with-rxe" --backend native --pair true true
	assert_failure 2
	assert_output --partial "always runs two micro-VMs"
}

# in_memory_cgroup LIMIT CMD... - run CMD in a new memory cgroup (v1 or v2)
# limited to LIMIT bytes; the cgroup is removed afterwards.
in_memory_cgroup() {
	local limit=$1 cg
	shift
	if [ -w /sys/fs/cgroup/memory/cgroup.procs ]; then
		cg=/sys/fs/cgroup/memory/rdma-course-bats.$$
		mkdir "$cg" && echo "$limit" >"$cg/memory.limit_in_bytes"
	elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		cg=/sys/fs/cgroup/rdma-course-bats.$$
		mkdir "$cg" && echo "$limit" >"$cg/memory.max"
	else
		fail "no memory cgroup controller to write to here (needs root)"
	fi
	run bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"
	rmdir "$cg"
}

@test "microvm/run.sh: in a 768 MB container the guest gets 448M, a small TCG cache, one vCPU on one CPU" {
	mkdir -p "$BATS_TEST_TMPDIR/bin"
	printf '#!/bin/bash\necho "$*" >>"%s/qemu.args"\nexit 1\n' "$BATS_TEST_TMPDIR" >"$BATS_TEST_TMPDIR/bin/qemu-system-x86_64"
	chmod +x "$BATS_TEST_TMPDIR/bin/qemu-system-x86_64"
	export PATH="$BATS_TEST_TMPDIR/bin:$PATH" RXE_VM_COLD=1 RXE_VM_ACCEL=tcg TMPDIR=$BATS_TEST_TMPDIR
	unset RXE_VM_MEM RXE_VM_SMP
	in_memory_cgroup $((768 * 1024 * 1024)) taskset -c 0 "$COURSE/vm-setup/microvm/run.sh" true
	assert_failure 125
	run cat "$BATS_TEST_TMPDIR/qemu.args"
	assert_output --partial "-accel tcg,thread=multi,tb-size=128 -cpu max -m 448M -smp 1 "
	# No limit, two CPUs: the defaults; RXE_VM_MEM wins over the limit.
	rm "$BATS_TEST_TMPDIR/qemu.args"
	run "$COURSE/vm-setup/microvm/run.sh" true
	RXE_VM_MEM=300M in_memory_cgroup $((768 * 1024 * 1024)) "$COURSE/vm-setup/microvm/run.sh" true
	run cat "$BATS_TEST_TMPDIR/qemu.args"
	assert_line --index 0 --partial "-accel tcg,thread=multi -cpu max -m 2G -smp 2 "
	assert_line --index 1 --partial "-accel tcg,thread=multi -cpu max -m 300M -smp 2 "
}

# lessons 11 and 13: perftest without a number ----------------------------------

# fake_perftest DIR - DIR/ib_send_lat and DIR/ib_write_bw: stand-ins for
# perftest's. Run with a HOST (a client), each prints no row in its first
# $FAKE_NO_REPORT runs (exit 1: its clock calibration failed), then a row;
# ib_send_lat's t_typical is `inf` in its first $FAKE_INF runs (and always
# at size $FAKE_INF_SIZE), then 12.50. DIR/latency: a stand-in for lesson
# 11's program (a server that is ready at once, a client with 3 samples).
fake_perftest() {
	local dir=$1
	cat >"$dir/ib_send_lat" <<'FAKE'
#!/bin/bash
size=0 host=''
while [ $# -gt 0 ]; do
	case $1 in -s) size=$2; shift 2 ;; -[dxpn]) shift 2 ;; *) host=$1; shift ;; esac
done
[ -n "$host" ] || { echo "Waiting for client to connect..."; exit 0; }
n=$(($(cat "$FAKE_DIR/calls" 2>/dev/null || echo 0) + 1))
echo "$n" >"$FAKE_DIR/calls"
if [ "${0##*/}" = ib_write_bw ]; then
	echo " TX depth        : 128"
	echo " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
else
	echo " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
fi
if [ "$n" -le "${FAKE_NO_REPORT:-0}" ]; then
	printf "Correlation coefficient r^2: 0.526596 < 0.9\nCan't produce a report\n" >&2
	exit 1
fi
if [ "${0##*/}" = ib_write_bw ]; then
	echo " $size      200              40.00              38.50                0.616000"
	exit 0
fi
t=12.50
if [ "$n" -le "${FAKE_INF:-0}" ] || [ "$size" = "${FAKE_INF_SIZE:-}" ]; then t=inf; fi
echo " $size   3          10.00         30.00      $t  	       12.00     	1.00		20.00 		30.00"
FAKE
	cp "$dir/ib_send_lat" "$dir/ib_write_bw"
	cat >"$dir/latency" <<'FAKE'
#!/bin/bash
t=$1 size=0 csv='' host=''
shift
while [ $# -gt 0 ]; do
	case $1 in -s) size=$2; shift 2 ;; -[pn]) shift 2 ;; --csv) csv=$2; shift 2 ;; *) host=$1; shift ;; esac
done
[ -n "$host" ] || { echo "listening on port 5555"; exit 0; }
printf 'i,rtt_ns\n0,20000\n1,21000\n2,30000\n' >"$csv"
echo "rtt ${t#--} $size bytes: min 20.00 p50 21.00 p90 30.00 p99 30.00 max 30.00 us (3 round trips)"
FAKE
	chmod +x "$dir/ib_send_lat" "$dir/ib_write_bw" "$dir/latency"
}

@test "lesson 11 measure.sh: ib_send_lat's inf, or no row (its clock calibration failed), is said and run again; no number after 3 runs is '- -'" {
	export FAKE_DIR=$BATS_TEST_TMPDIR RDMA_DEVICE=rxe0 RDMA_GID_INDEX=1 RDMA_IP=192.0.2.1
	fake_perftest "$FAKE_DIR"
	tries() {
		rm -f "$FAKE_DIR/calls"
		run env "$@" bash -c ". '$COURSE/lessons/11-latency/measure.sh'; perftest_lat '$FAKE_DIR/ib_send_lat' 16384 3"
	}
	tries FAKE_INF=1
	assert_success
	assert_line "12.50 20.00"
	assert_line --partial "printed t_typical 'inf', 99% '20.00' (not a latency) in run 1 of 3"
	tries FAKE_NO_REPORT=2
	assert_success
	assert_line "12.50 20.00"
	assert_line --partial "in run 2 of 3: its clock calibration failed: Correlation coefficient r^2: 0.526596 < 0.9"
	for never in FAKE_INF=9 FAKE_NO_REPORT=9; do
		tries "$never"
		assert_failure 3
		assert_line "- -"
		assert_line --partial "in run 3 of 3"
	done
}

@test "lesson 11 plot.sh: a size where ib_send_lat printed inf is named, left empty in latency.csv, and its key says so" {
	command -v gnuplot >/dev/null || skip "no gnuplot"
	export FAKE_DIR=$BATS_TEST_TMPDIR RDMA_DEVICE=rxe0 RDMA_GID_INDEX=1 RDMA_IP=192.0.2.1
	fake_perftest "$FAKE_DIR"
	PATH=$FAKE_DIR:$PATH FAKE_INF_SIZE=16384 PLOT_SIZES="2 16384" PLOT_ITERS=3 \
		run "$COURSE/lessons/11-latency/plot.sh" "$FAKE_DIR" "$FAKE_DIR/out"
	assert_success
	assert_line --partial "ib_send_lat 16384 bytes: no latency in 3 runs (it printed inf or nan, or no row when its clock calibration failed)"
	run cat "$FAKE_DIR/out/latency.csv"
	assert_line "2,21.00,30.00,21.00,30.00,25,40"
	assert_line "16384,21.00,30.00,21.00,30.00,,"
	refute_output --partial "inf"
	[ -s "$FAKE_DIR/out/latency-size.png" ]
}

@test "lesson 13 measure.sh: ib_write_bw's failed clock calibration (no row, exit 1) is said and run again" {
	export FAKE_DIR=$BATS_TEST_TMPDIR RDMA_DEVICE=rxe0 RDMA_GID_INDEX=1 RDMA_IP=192.0.2.1
	fake_perftest "$FAKE_DIR"
	FAKE_NO_REPORT=2 PATH=$FAKE_DIR:$PATH run bash -c ". '$COURSE/lessons/13-throughput/measure.sh'; perftest_bw 65536 200"
	assert_success
	assert_line "38.50 0.616000"
	assert_line "measure.sh: ib_write_bw -s 65536: its clock calibration failed (no result) in run 2 of 3"
	rm -f "$FAKE_DIR/calls"
	FAKE_NO_REPORT=9 PATH=$FAKE_DIR:$PATH run bash -c ". '$COURSE/lessons/13-throughput/measure.sh'; perftest_bw 65536 200"
	assert_failure 1
	assert_line --partial "in run 3 of 3"
	refute_line --partial "in run 4"
}
