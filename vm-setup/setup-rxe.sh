#!/bin/bash
# setup-rxe.sh - the native backend: create a SoftRoCE (rxe) device on this
# host's network interface. Idempotent; --teardown removes what it added.
#
# usage: sudo vm-setup/setup-rxe.sh [--netdev IF] [--name NAME] [--teardown]
#   --netdev IF   the interface to put rxe on (default: the default route's)
#   --name NAME   the RDMA device name (default: rxe0)
#   --teardown    delete the rxe device NAME
# Prints the device name and the GID index to use (IPv4, RoCE v2).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/rxe.sh"

netdev="" name=rxe0 teardown=0
die() {
	echo "setup-rxe: $*" >&2
	exit 1
}
usage() {
	echo "usage: sudo vm-setup/setup-rxe.sh [--netdev IF] [--name NAME] [--teardown]" >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case "$1" in
	--netdev) [ $# -ge 2 ] || { echo "setup-rxe: --netdev needs an interface name" >&2; usage; }; netdev=$2; shift ;;
	--name) [ $# -ge 2 ] || { echo "setup-rxe: --name needs a device name" >&2; usage; }; name=$2; shift ;;
	--teardown) teardown=1 ;;
	-h | --help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "setup-rxe: unknown argument '$1'" >&2; usage ;;
	esac
	shift
done
case "$name" in '' | *[!A-Za-z0-9_]*) die "bad device name '$name' (letters, digits and _ only)" ;; esac

[ "$(id -u)" = 0 ] || die "needs root (it loads a kernel module and adds an RDMA link); run: sudo $0 $*"
command -v rdma >/dev/null || die "the 'rdma' tool is missing (package iproute2); run: vm-setup/install-deps.sh"
ver=$(rdma -V 2>/dev/null | sed -n 's/.*iproute2-\{0,1\}\(ss\)\{0,1\}\([0-9]*\)\.\([0-9]*\).*/\2 \3/p')
read -r major minor <<<"${ver:-0 0}"
[ "$major" -gt 4 ] || { [ "$major" = 4 ] && [ "$minor" -ge 18 ]; } ||
	die "this 'rdma' tool ($(rdma -V 2>&1)) is too old to add links: iproute2 >= 4.18 is needed"

if [ $teardown = 1 ]; then
	if [ -e "$SYSFS_IB/$name" ]; then
		rdma link delete "$name" || die "rdma link delete $name failed"
		echo "setup-rxe: deleted $name"
	else
		echo "setup-rxe: no device $name; nothing to do"
	fi
	exit 0
fi

if [ -z "$netdev" ]; then
	netdev=$(ip -o route show default 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
	[ -n "$netdev" ] || die "no default route to pick an interface from; pass --netdev IF (interfaces: $(ls /sys/class/net | tr '\n' ' '))"
fi
[ -e "/sys/class/net/$netdev" ] ||
	die "no network interface '$netdev' (interfaces here: $(ls /sys/class/net | tr '\n' ' '))"
[ "$netdev" != lo ] || die "librdmacm cannot use rxe on 'lo' (127.0.0.0/8); pick a real interface with --netdev"
ipv4=$(ip -o -4 addr show dev "$netdev" | awk '{ print $4; exit }')
[ -n "$ipv4" ] || die "$netdev has no IPv4 address; RoCE v2 GIDs are made from it (ip addr add ... dev $netdev)"

# Already there? (idempotent)
for d in "$SYSFS_IB"/*; do
	[ -e "$d/ports/1/gid_attrs/ndevs/0" ] || continue
	if [ "$(cat "$d/ports/1/gid_attrs/ndevs/0" 2>/dev/null)" = "$netdev" ]; then
		dev=${d##*/}
		if gi=$(rxe_gid_index "$dev"); then
			echo "setup-rxe: $dev already exists on $netdev"
			echo "device $dev, GID index ${gi% *}, IP ${gi#* }, port $(rxe_port_state "$dev")"
			exit 0
		fi
	fi
done

# Loaded already (or built in): nothing to load. modprobe would need this
# kernel's module tree, which a VM booted from its own initramfs lacks.
if [ ! -d /sys/module/rdma_rxe ] && ! modprobe rdma_rxe 2>/dev/null; then
	die "cannot load the rdma_rxe kernel module: this kernel ($(uname -r)) does not ship it or
  modules cannot be loaded here. WSL2 kernels have no rxe; containers cannot load modules.
  Use the micro-VM instead: vm-setup/with-rxe CMD runs CMD in it (make grade does so by itself)."
fi
[ -e "$SYSFS_IB/$name" ] && die "an RDMA device named $name exists on another netdev; choose --name"
rdma link add "$name" type rxe netdev "$netdev" || die "rdma link add $name type rxe netdev $netdev failed"

deadline=$((SECONDS + 5))
until [ "$(rxe_port_state "$name")" = ACTIVE ] && gi=$(rxe_gid_index "$name"); do
	if [ $SECONDS -ge $deadline ]; then
		rdma link delete "$name" 2>/dev/null
		die "$name did not become ACTIVE with an IPv4 RoCE v2 GID within 5 s (is $netdev up?); removed it again"
	fi
	sleep 0.1
done
# Unprivileged programs open the device through /dev/infiniband/uverbsN.
# rdma-core's udev rule makes it 0666; where no udev runs (a container, a
# minimal VM) the node is the kernel's 0600 root: do what the rule does.
for f in /sys/class/infiniband_verbs/uverbs*/ibdev; do
	[ "$(cat "$f" 2>/dev/null)" = "$name" ] || continue
	node=/dev/infiniband/$(basename "$(dirname "$f")")
	[ -e "$node" ] && chmod 0666 "$node" /dev/infiniband/rdma_cm 2>/dev/null
done
echo "setup-rxe: added $name on $netdev"
echo "device $name, GID index ${gi% *}, IP ${gi#* }, port ACTIVE"
