#!/usr/bin/env bats
# The course on a machine with real RDMA NICs (issue 39), without one:
# stand-in sysfs trees (SYSFS_IB) with an InfiniBand mlx5 port, a RoCE mlx5
# port and rxe. Device selection (vm-setup/lib/rxe.sh: rxe_find_ready, the
# RDMA_DEVICE / RDMA_GID_INDEX overrides) and make doctor's word on the
# device's kind. Runs on the host, boots no VM.

bats_require_minimum_version 1.5.0

setup() {
	load helpers
	export BATS_LIB_PATH=/usr/lib/bats
	unset RDMA_DEVICE RDMA_GID_INDEX RDMA_DEVICE_KIND
	export SYSFS_IB="$BATS_TEST_TMPDIR/ib"
	mkdir -p "$SYSFS_IB"
}

# port DEV STATE - a device's port 1
port() {
	mkdir -p "$SYSFS_IB/$1/ports/1/gids" "$SYSFS_IB/$1/ports/1/gid_attrs/types" \
		"$SYSFS_IB/$1/ports/1/gid_attrs/ndevs" "$SYSFS_IB/$1/ports/1/hw_counters" \
		"$SYSFS_IB/$1/ports/1/counters"
	echo "$2" >"$SYSFS_IB/$1/ports/1/state"
}

# gid DEV INDEX GID TYPE NETDEV
gid() {
	echo "$3" >"$SYSFS_IB/$1/ports/1/gids/$2"
	echo "$4" >"$SYSFS_IB/$1/ports/1/gid_attrs/types/$2"
	echo "$5" >"$SYSFS_IB/$1/ports/1/gid_attrs/ndevs/$2"
}

# mlx5 DEV - the device's PCI function, driven by mlx5_core, and its counters
mlx5() {
	mkdir -p "$SYSFS_IB/../drivers/mlx5_core" "$SYSFS_IB/../pci/$1"
	ln -sfn "$SYSFS_IB/../drivers/mlx5_core" "$SYSFS_IB/../pci/$1/driver"
	ln -sfn "$SYSFS_IB/../pci/$1" "$SYSFS_IB/$1/device"
	for c in rx_write_requests rx_read_requests out_of_buffer rnr_nak_retry_err; do
		echo 0 >"$SYSFS_IB/$1/ports/1/hw_counters/$c"
	done
	for c in port_xmit_packets port_rcv_packets; do
		echo 0 >"$SYSFS_IB/$1/ports/1/counters/$c"
	done
}

# A lab machine: mlx5_0 is InfiniBand (a GID with no IPv4 RoCE v2 entry),
# mlx5_1 RoCE with v1 and v2 GIDs of 10.1.0.7 (index 3 is v2), mlx5_2 down.
lab() {
	port mlx5_0 "4: ACTIVE"
	mlx5 mlx5_0
	gid mlx5_0 0 fe80:0000:0000:0000:0c42:a103:0012:3456 "IB/RoCE v1" ""
	port mlx5_1 "4: ACTIVE"
	mlx5 mlx5_1
	gid mlx5_1 0 fe80:0000:0000:0000:0e42:a1ff:fe12:3457 "IB/RoCE v1" ens1f1
	gid mlx5_1 1 fe80:0000:0000:0000:0e42:a1ff:fe12:3457 "RoCE v2" ens1f1
	gid mlx5_1 2 0000:0000:0000:0000:0000:ffff:0a01:0007 "IB/RoCE v1" ens1f1
	gid mlx5_1 3 0000:0000:0000:0000:0000:ffff:0a01:0007 "RoCE v2" ens1f1
	port mlx5_2 "1: DOWN"
	mlx5 mlx5_2
}

find_ready() {
	# shellcheck source=../../vm-setup/lib/rxe.sh
	bash -c '. "$COURSE/vm-setup/lib/rxe.sh"; rxe_find_ready'
}

@test "device choice: the first ACTIVE device with an IPv4 RoCE v2 GID, never an InfiniBand port" {
	lab
	run find_ready
	assert_success
	assert_output "mlx5_1 3 10.1.0.7 ens1f1"
}

@test "device choice: RDMA_DEVICE is the only device considered" {
	lab
	RDMA_DEVICE=mlx5_0 run find_ready
	assert_failure
	RDMA_DEVICE=mlx5_2 run find_ready
	assert_failure
	RDMA_DEVICE=mlx5_9 run find_ready
	assert_failure
	RDMA_DEVICE=mlx5_1 run find_ready
	assert_output "mlx5_1 3 10.1.0.7 ens1f1"
}

@test "device choice: RDMA_GID_INDEX is the GID index, whatever its type" {
	lab
	RDMA_DEVICE=mlx5_1 RDMA_GID_INDEX=2 run find_ready
	assert_success
	assert_output "mlx5_1 2 10.1.0.7 ens1f1"
	RDMA_DEVICE=mlx5_1 RDMA_GID_INDEX=1 run find_ready
	assert_output "mlx5_1 1 ? ens1f1"
	# An empty slot is no GID.
	RDMA_DEVICE=mlx5_1 RDMA_GID_INDEX=7 run find_ready
	assert_failure
}

@test "with-rxe --info names the device RDMA_DEVICE picks" {
	lab
	RDMA_DEVICE=mlx5_1 RDMA_GID_INDEX=3 run "$COURSE/vm-setup/with-rxe" --info
	assert_success
	assert_output "backend native: device mlx5_1, GID index 3, IP 10.1.0.7, netdev ens1f1"
}

@test "make doctor names an mlx5 device's kind and what its counters can grade" {
	lab
	run "$COURSE/vm-setup/doctor.sh" --no-vm
	assert_output --partial "PASS  native RDMA device: mlx5_1 port 1 ACTIVE, GID index 3 is RoCE v2 10.1.0.7 (on ens1f1)"
	assert_output --partial "PASS  native RDMA device: device mlx5_1 is of kind mlx5 (its driver)"
	assert_output --regexp "lessons whose counter evidence it has: [0-9 ]*03"
	assert_output --regexp "lessons asking for counters it lacks [^:]*: 05 \(SENDs sent, receives consumed\)"
	assert_output --partial "lesson 09's predictions: no answer key for mlx5"
}

@test "make doctor warns about a device kind with no counter table" {
	lab
	ln -sfn "$SYSFS_IB/../drivers/bnxt_en" "$SYSFS_IB/../pci/mlx5_1/driver"
	mkdir -p "$SYSFS_IB/../drivers/bnxt_en"
	run "$COURSE/vm-setup/doctor.sh" --no-vm
	assert_output --partial "WARN  native RDMA device: device mlx5_1 is of kind 'bnxt_en': the course has no counter table for it"
}
