# shellcheck shell=bash
# microvm/pin.sh - what build.sh, run.sh, fetch-kernel.sh, vm-cache.sh and
# kernel-update.sh share about the pinned kernel. Source it; it defines
# functions and two variables only.
#
#   RXE_VM_KERNEL_LOCK  the lock file (default: kernel.lock beside this file)
#   RXE_VM_ARCH         the guest's architecture, amd64 or arm64 (default: the
#                       host's, from uname -m; the guest shares the host's
#                       programs, so only a guest root of that architecture,
#                       RXE_VM_ROOT, makes another one useful)

pin_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KERNEL_LOCK=${RXE_VM_KERNEL_LOCK:-$pin_dir/kernel.lock}

# rxe_vm_arch - print the guest's Debian architecture name; 1 when the host's
# is none the micro-VM supports.
rxe_vm_arch() {
	local m
	if [ -n "${RXE_VM_ARCH:-}" ]; then
		case "$RXE_VM_ARCH" in amd64 | arm64) echo "$RXE_VM_ARCH"; return 0 ;; esac
		return 1
	fi
	m=$(uname -m)
	case "$m" in
	x86_64 | amd64) echo amd64 ;;
	aarch64 | arm64) echo arm64 ;;
	*) return 1 ;;
	esac
}

# pin_get ARCH KEY - print the lock's ARCH.KEY value; 1 when it has none.
pin_get() {
	local v
	v=$(awk -v k="$1.$2" '$1 == k && $2 == "=" { print $3; found = 1; exit } END { exit !found }' "$KERNEL_LOCK" 2>/dev/null) || return 1
	[ -n "$v" ] && echo "$v"
}

# pin_lines ARCH - the lock's lines for ARCH (what names a cache entry).
pin_lines() {
	awk -v a="$1." 'index($1, a) == 1' "$KERNEL_LOCK"
}

# pin_file ARCH - the pinned package's file name.
pin_file() {
	local path
	path=$(pin_get "$1" path) || return 1
	echo "${path##*/}"
}

# pin_archs - the architectures the lock pins, one a line.
pin_archs() {
	awk '$2 == "=" && $1 ~ /\.sha256$/ { sub(/\.sha256$/, "", $1); print $1 }' "$KERNEL_LOCK"
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
