#!/usr/bin/env bats
# Smoke test on the rxe device; run inside vm-setup/with-rxe (make test does).

setup() {
	load helpers
	export BATS_LIB_PATH=/usr/lib/bats
	[ -n "${RDMA_DEVICE:-}" ] || fail "RDMA_DEVICE is not set: run this suite through vm-setup/with-rxe"
}

@test "ibv_devices lists the device" {
	run ibv_devices
	assert_success
	assert_output --regexp "${RDMA_DEVICE}[[:space:]]+[0-9a-f]{16}"
}

# Servers print nothing before a client connects, so the client may come too
# early; both tools' clients fail at once then, and are tried again while
# the server runs, for up to 60 s: a bound for a hang, not a speed (five
# tries in 2.5 s were a speed).
@test "ibv_rc_pingpong: 50 round trips over RC" {
	timeout 120 ibv_rc_pingpong -d "$RDMA_DEVICE" -g "$RDMA_GID_INDEX" -n 50 -p 18601 >"$BATS_TEST_TMPDIR/server" 2>&1 &
	srv=$!
	for _ in $(seq 120); do
		sleep 0.5
		run timeout 60 ibv_rc_pingpong -d "$RDMA_DEVICE" -g "$RDMA_GID_INDEX" -n 50 -p 18601 127.0.0.1
		[ "$status" = 0 ] && break
		kill -0 $srv 2>/dev/null || break
	done
	assert_success
	assert_output --regexp "50 iters in [0-9.]+ seconds"
	wait $srv || { echo "server exited with $?:"; cat "$BATS_TEST_TMPDIR/server"; false; }
	run cat "$BATS_TEST_TMPDIR/server"
	assert_output --regexp "50 iters in [0-9.]+ seconds"
}

@test "rping -C 3 over rdma_cm on RDMA_IP" {
	timeout 120 rping -s -a "$RDMA_IP" -p 18602 -C 3 >"$BATS_TEST_TMPDIR/server" 2>&1 &
	srv=$!
	for _ in $(seq 120); do
		sleep 0.5
		run timeout 30 rping -c -a "$RDMA_IP" -p 18602 -C 3 -v
		[ "$status" = 0 ] && break
		kill -0 $srv 2>/dev/null || break
	done
	assert_success
	wait $srv || { echo "server exited with $?:"; cat "$BATS_TEST_TMPDIR/server"; false; }
	assert_line --partial "ping data: rdma-ping-2"
}

@test "with-rxe inside the VM sees the device natively" {
	run "$COURSE/vm-setup/with-rxe" --info
	assert_success
	assert_output --partial "backend native: device $RDMA_DEVICE"
}
