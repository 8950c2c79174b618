#!/bin/bash
# microvm/vm-cache.sh - carry the micro-VM's pinned kernel to machines without
# Internet access (an offline lab): one machine exports it, the others import
# it; the VM is then built on each from its cache, offline.
#
# usage: vm-cache.sh export FILE   (make vm-cache-export OUT=FILE)
#        vm-cache.sh import FILE   (make vm-cache-import FILE=FILE)
#   export  a tarball with the pinned kernel package of this host's
#           architecture (fetched first if need be) and of every other
#           architecture the cache already holds, and the lock they match
#   import  put the tarball's packages in this machine's cache, each checked
#           against this checkout's kernel.lock: a package that is not
#           pinned, or whose sha256 is not the pin's, is refused and nothing
#           is imported
# RXE_VM_CACHE, RXE_VM_KERNEL_LOCK, RXE_VM_ARCH: see build.sh and pin.sh.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/pin.sh"
cache=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-course/microvm}
top=rdma-course-vm-cache

die() {
	echo "vm-cache: $*" >&2
	exit 1
}
usage() {
	echo "vm-cache: $* (usage: vm-cache.sh export FILE | import FILE)" >&2
	exit 2
}

[ $# = 2 ] || { [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; } || usage "takes a command and a file"
case "$1" in
-h | --help) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
export | import) ;;
*) usage "unknown command '$1'" ;;
esac
[ -r "$KERNEL_LOCK" ] || die "no lock file $KERNEL_LOCK"
cmd=$1 file=$2

if [ "$cmd" = export ]; then
	host=$(rxe_vm_arch) || die "this host is $(uname -m): the micro-VM runs on x86_64 and aarch64 hosts"
	stage=$(mktemp -d "${TMPDIR:-/tmp}/vm-cache.XXXXXX") || die "mktemp failed"
	trap 'rm -rf "$stage"' EXIT
	mkdir -p "$stage/$top/debs"
	cp "$KERNEL_LOCK" "$stage/$top/kernel.lock"
	names=()
	for a in $(pin_archs); do
		f=$(pin_file "$a") || continue
		if [ "$a" = "$host" ]; then
			deb=$("$here/fetch-kernel.sh" --arch "$a") || die "cannot get the pinned $a kernel package (see above)"
		elif [ -f "$cache/debs/$f" ] && [ "$(sha256_of "$cache/debs/$f")" = "$(pin_get "$a" sha256)" ]; then
			deb=$cache/debs/$f
		else
			continue
		fi
		ln -s "$deb" "$stage/$top/debs/$f"
		names+=("$f ($a)")
	done
	tmp="$file.part.$$"
	tar -C "$stage" -chf "$tmp" "$top" && mv -f "$tmp" "$file" || {
		rm -f "$tmp"
		die "cannot write $file"
	}
	echo "vm-cache: wrote $file ($(($(stat -c %s "$file") / 1048576)) MB): ${names[*]}"
	echo "vm-cache: on each machine of the lab: make vm-cache-import FILE=$(basename "$file")"
	exit 0
fi

# import
[ -f "$file" ] || die "no such file: $file"
mapfile -t members < <(tar -tf "$file" 2>/dev/null) || true
[ ${#members[@]} -gt 0 ] || die "$file is not a tarball from make vm-cache-export"
debs=()
for m in "${members[@]}"; do
	case "$m" in
	"$top/" | "$top/debs/" | "$top/kernel.lock") ;;
	"$top"/debs/*.deb)
		n=${m#"$top"/debs/}
		case "$n" in */* | .* | *[!A-Za-z0-9.+~_-]*) die "$file holds an unexpected member '$m': not imported" ;; esac
		debs+=("$n")
		;;
	*) die "$file holds an unexpected member '$m' (not a tarball from make vm-cache-export): not imported" ;;
	esac
done
[ ${#debs[@]} -gt 0 ] || die "$file holds no kernel package"
mkdir -p "$cache/debs" || die "cannot make $cache/debs"
stage=$(mktemp -d "$cache/import.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$stage"' EXIT
tar -C "$stage" --no-same-owner -xf "$file" || die "cannot unpack $file"

# Every package must be one this checkout pins, byte for byte.
declare -A arch_of
for a in $(pin_archs); do arch_of[$(pin_file "$a")]=$a; done
for n in "${debs[@]}"; do
	a=${arch_of[$n]:-}
	if [ -z "$a" ]; then
		pinned=$(for x in $(pin_archs); do printf ' %s %s' "$x" "$(pin_get "$x" version)"; done)
		die "$n is not the kernel this checkout pins (kernel.lock:$pinned): nothing imported; export again from a checkout with the same kernel.lock"
	fi
	got=$(sha256_of "$stage/$top/debs/$n")
	want=$(pin_get "$a" sha256)
	[ "$got" = "$want" ] ||
		die "$n: its sha256 is $got, the pin's $want: the tarball is damaged or not what was exported; nothing imported"
done
exec 8>"$cache/debs/.lock"
flock 8
for n in "${debs[@]}"; do
	mv -f "$stage/$top/debs/$n" "$cache/debs/$n" || die "cannot write $cache/debs/$n"
	echo "vm-cache: imported $n (${arch_of[$n]}, sha256 verified) into $cache/debs"
done
if host=$(rxe_vm_arch) && [ -z "$(for n in "${debs[@]}"; do [ "${arch_of[$n]}" = "$host" ] && echo y; done)" ]; then
	echo "vm-cache: note: $file has no $host package, this host's architecture" >&2
fi
echo "vm-cache: the micro-VM is built from it on its first use (make doctor checks), without a download"
