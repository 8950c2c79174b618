#!/usr/bin/env bats
# The native backend, for real: run inside a micro-VM booted without a
# device (RXE_VM_NO_RXE=1), as root, where setup-rxe.sh can load rdma_rxe
# and add a link as it would on a student's Linux machine. make test runs:
#   RXE_VM_NO_RXE=1 vm-setup/with-rxe bats grader/bats/native.bats
# The tests run in order and build on each other: no device, setup, use,
# grading, teardown.

bats_require_minimum_version 1.5.0

setup_file() {
	if [ "$(id -u)" != 0 ] || [ "$(hostname)" != rxe-vm ] || [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
		echo "native.bats needs root in a micro-VM without an RDMA device:" >&2
		echo "  RXE_VM_NO_RXE=1 vm-setup/with-rxe bats grader/bats/native.bats" >&2
		return 1
	fi
}

teardown_file() {
	"$BATS_TEST_DIRNAME/../../vm-setup/setup-rxe.sh" --teardown >/dev/null 2>&1 || true
}

setup() {
	load helpers
	export BATS_LIB_PATH=/usr/lib/bats
}

@test "native: with-rxe --backend native without a device says how to make one (exit 1)" {
	run "$COURSE/vm-setup/with-rxe" --backend native true
	assert_failure 1
	assert_output --partial "no ACTIVE RDMA device"
	assert_output --partial "sudo vm-setup/setup-rxe.sh"
}

@test "native: setup-rxe.sh without --netdev and no default route names the interfaces" {
	run "$COURSE/vm-setup/setup-rxe.sh"
	assert_failure 1
	assert_output --partial "no default route"
	assert_output --partial "rdma0"
}

@test "native: setup-rxe.sh --netdev rdma0 adds rxe0, ACTIVE, with its RoCE v2 GID" {
	run "$COURSE/vm-setup/setup-rxe.sh" --netdev rdma0
	assert_success
	assert_line "setup-rxe: added rxe0 on rdma0"
	assert_line "device rxe0, GID index 1, IP 192.0.2.1, port ACTIVE"
	run rdma link show rxe0/1
	assert_output --partial "state ACTIVE"
	assert_output --partial "netdev rdma0"
}

@test "native: setup-rxe.sh again is a no-op that says so" {
	run "$COURSE/vm-setup/setup-rxe.sh" --netdev rdma0
	assert_success
	assert_line "setup-rxe: rxe0 already exists on rdma0"
	[ "$(ls /sys/class/infiniband)" = rxe0 ]
}

@test "native: an unprivileged user can use the device (uverbs node opened up)" {
	run setpriv --reuid=64000 --regid=64000 --clear-groups ibv_devinfo -d rxe0
	assert_success
	assert_output --partial "PORT_ACTIVE"
}

@test "native: with-rxe picks the native backend and exports its device" {
	run "$COURSE/vm-setup/with-rxe" --info
	assert_output "backend native: device rxe0, GID index 1, IP 192.0.2.1, netdev rdma0"
	run "$COURSE/vm-setup/with-rxe" bash -c 'echo "$RDMA_BACKEND $RDMA_DEVICE $RDMA_GID_INDEX $RDMA_IP $RDMA_NETDEV"'
	assert_success
	assert_output "native rxe0 1 192.0.2.1 rdma0"
}

# (The client is tried again while the server has not come up: see
# device.bats.)
@test "native: ibv_rc_pingpong through native with-rxe" {
	run "$COURSE/vm-setup/with-rxe" bash -c \
		'timeout 120 ibv_rc_pingpong -g $RDMA_GID_INDEX -n 20 & srv=$!
		for _ in $(seq 120); do
			sleep 0.5
			ibv_rc_pingpong -g $RDMA_GID_INDEX -n 20 $RDMA_IP && c=0 && break
			c=$?
			kill -0 $srv 2>/dev/null || break
		done
		wait $srv; exit $((c | $?))'
	assert_success
	assert_output --partial "20 iters in"
}

@test "native: make grade LESSON=01 SRC=solutions gives full marks on the native backend" {
	needs_solutions
	cd "$COURSE"
	run make --no-print-directory grade LESSON=01 SRC=solutions
	assert_success
	score=$(sed -n 's/^Score: \([0-9]*\)\/\([0-9]*\).*/\1 \2/p' <<<"$output")
	[ -n "$score" ] || fail "no Score line in: $output"
	read -r got max <<<"$score"
	[ "$got" = "$max" ] || fail "expected full marks, got $got/$max"
	refute_output --partial "rxe-vm"
}

@test "native: setup-rxe.sh --teardown removes rxe0, and with-rxe has no device again" {
	run "$COURSE/vm-setup/setup-rxe.sh" --teardown
	assert_success
	assert_output "setup-rxe: deleted rxe0"
	[ -z "$(ls /sys/class/infiniband)" ]
	run "$COURSE/vm-setup/with-rxe" --backend native true
	assert_failure 1
	run "$COURSE/vm-setup/setup-rxe.sh" --teardown
	assert_output "setup-rxe: no device rxe0; nothing to do"
}
