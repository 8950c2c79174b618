#!/bin/bash
# bench-arm64.sh (make bench-arm64) - the arm64 micro-VM proven on an x86_64
# machine: an arm64 Debian root made with debootstrap (its second stage run
# through qemu-user-static's binfmt handler), the lock's arm64 kernel,
# qemu-system-aarch64's virt machine under TCG; then ibv_devinfo, and the
# solutions of a lesson graded inside that guest (built there by its own gcc).
# Slow: minutes. The first run needs root (packages, debootstrap).
#
# usage: vm-setup/bench-arm64.sh [--lesson NN]   (default: 01)
#   ARM64_DIR=DIR  the arm64 root and the course's copy (default
#                  /var/tmp/rdma-course-arm64)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
course=$(cd "$here/.." && pwd)
dir=${ARM64_DIR:-/var/tmp/rdma-course-arm64}
root=$dir/root
lesson=01

die() {
	echo "bench-arm64: $*" >&2
	exit 1
}
while [ $# -gt 0 ]; do
	case "$1" in
	--lesson) [ $# -ge 2 ] || die "--lesson needs a value"; lesson=$2; shift ;;
	-h | --help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown option '$1' (usage: bench-arm64.sh [--lesson NN])" ;;
	esac
	shift
done
if [ "$(uname -m)" = aarch64 ]; then
	echo "bench-arm64: this host is arm64: make doctor and make grade SRC=solutions prove it natively"
	exit 0
fi

# The guest's programs: what the course needs in a VM (install-deps.sh's
# packages less the host-only ones: QEMU, lint, plots).
PACKAGES=bash,iproute2,procps,util-linux,kmod,rdma-core,ibverbs-providers,ibverbs-utils,libibverbs-dev,librdmacm-dev,rdmacm-utils,perftest,python3,python3-pytest,python3-pytest-timeout,python3-pyverbs,python3-yaml,build-essential,make,git,busybox-static,cpio
as_root() { [ "$(id -u)" = 0 ] || die "$* needs root (run: sudo $0)"; }

missing=()
command -v qemu-system-aarch64 >/dev/null || missing+=(qemu-system-arm)
if [ ! -e "$root/.rdma-course-packages" ] || [ "$(cat "$root/.rdma-course-packages")" != "$PACKAGES" ]; then
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	[ -e /usr/libexec/qemu-binfmt/aarch64-binfmt-P ] || [ -e /usr/bin/qemu-aarch64-static ] || missing+=(qemu-user-static binfmt-support)
fi
if [ ${#missing[@]} -gt 0 ]; then
	as_root "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install ${missing[*]} failed"
fi

if [ ! -e "$root/.rdma-course-packages" ] || [ "$(cat "$root/.rdma-course-packages")" != "$PACKAGES" ]; then
	as_root "debootstrap"
	# debootstrap's second stage runs arm64 programs: binfmt_misc must hand
	# them to qemu-user-static.
	[ -e /proc/sys/fs/binfmt_misc/register ] ||
		mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || die "cannot mount binfmt_misc"
	[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64 ||
		die "no binfmt handler for arm64 programs (package qemu-user-static, binfmt-support)"
	rm -rf "$root"
	mkdir -p "$dir"
	echo "bench-arm64: debootstrap of an arm64 Debian 12 root in $root (a few minutes)"
	t0=$SECONDS
	debootstrap --arch=arm64 --variant=minbase --include="$PACKAGES" bookworm "$root" \
		"${RXE_VM_DEBIAN_MIRROR:-http://deb.debian.org}/debian" >"$dir/debootstrap.log" 2>&1 ||
		die "debootstrap failed: $(tail -n 3 "$dir/debootstrap.log")"
	echo "$PACKAGES" >"$root/.rdma-course-packages"
	echo "bench-arm64: root ready in $((SECONDS - t0)) s ($(du -sh "$root" | cut -f1))"
fi

# The course as it is in this checkout (tracked and new files), in a copy of
# its own: the guest's builds are arm64 programs, the checkout's are not.
rm -rf "$dir/course"
mkdir -p "$dir/course"
(cd "$course" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$dir/course" ||
	die "cannot copy the course to $dir/course"

export RXE_VM_ARCH=arm64 RXE_VM_ROOT=$root RXE_VM_ACCEL=${RXE_VM_ACCEL:-tcg} RXE_VM_COLD=1
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-3600}
run="$dir/course/vm-setup/microvm/run.sh"
"$dir/course/vm-setup/microvm/build.sh" >/dev/null || die "cannot build the arm64 micro-VM"
t0=$(date +%s%N)
out=$("$run" bash -c 'echo "guest: $(uname -m) $(uname -r)"; ibv_devinfo -d "$RDMA_DEVICE" | grep -E "hca_id|state"') ||
	die "the arm64 guest did not run ibv_devinfo: $out"
echo "$out"
echo "bench-arm64: boot + ibv_devinfo: $((($(date +%s%N) - t0) / 1000000)) ms"
t0=$(date +%s%N)
(cd "$dir/course" && "$run" make --no-print-directory grade LESSON="$lesson" SRC=solutions)
rc=$?
echo "bench-arm64: lesson $lesson graded in the arm64 guest: exit $rc, $((($(date +%s%N) - t0) / 1000000)) ms"
exit $rc
