#!/bin/bash
# microvm/build.sh - fetch the pinned Debian kernel (kernel.lock, through
# fetch-kernel.sh) and build the micro-VM's initramfs. No root needed.
# Cached; prints the cache entry.
#
# usage: build.sh [--refresh]
#   RXE_VM_CACHE       cache directory (default ~/.cache/rdma-course/microvm)
#   RXE_VM_KERNEL_DEB  this copy of the pinned package (its sha256 is checked)
#   RXE_VM_ROOT        the guest's root directory (default /): its static
#                      busybox goes into the initramfs
#   RXE_VM_ARCH, RXE_VM_KERNEL_LOCK: see pin.sh; the mirrors: fetch-kernel.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/pin.sh"
cache=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-course/microvm}
refresh=0

die() {
	echo "microvm/build.sh: $*" >&2
	exit 1
}

case "${1:-}" in
"") ;;
--refresh) refresh=1 ;;
-h | --help)
	sed -n '2,12s/^# \{0,1\}//p' "$0"
	exit 0
	;;
*) die "unknown option '$1' (usage: build.sh [--refresh])" ;;
esac

arch=$(rxe_vm_arch) || die "this host is $(uname -m): the micro-VM runs on x86_64 and aarch64 hosts"
[ -r "$KERNEL_LOCK" ] || die "no lock file $KERNEL_LOCK"
pin=$(pin_lines "$arch")
[ -n "$pin" ] || die "$KERNEL_LOCK pins no $arch kernel (make vm-kernel-update adds one)"
root=${RXE_VM_ROOT:-}
root=${root%/}

# Modules the guest needs, in any order; their dependencies come along.
# virtio_net is the NIC of a linked pair (with-rxe --pair), sch_netem the
# fault injection on its link (tc qdisc ... netem loss/delay). arm64's
# command output travels on virtio consoles (hvc), its PCI virtio devices
# sit behind the built-in generic PCI host of QEMU's virt machine.
MODULES="virtio_pci 9pnet_virtio 9p overlay dummy virtio_net sch_netem crc32_generic rdma_rxe ib_uverbs rdma_ucm"
[ "$arch" = arm64 ] && MODULES+=" virtio_console"

# A cache entry is named by the content of what builds it (init, this
# script, the architecture's kernel pin), never by the checkout's path: any
# number of checkouts share one entry, and a checkout with another init or
# pin gets an entry of its own. Entries are complete before they appear
# (atomic rename) and are never replaced, so a VM booting from one is never
# pulled from under it.
stamp() { { cat "$here/init" "$here/build.sh"; echo "$pin"; } | sha256sum | cut -c1-16; }
entry="$cache/vm-$(stamp)"
[ -n "$root" ] && entry+="-root-$(echo "$root" | sha256sum | cut -c1-8)"

fresh() { [ $refresh = 0 ] && [ -e "$entry/ok" ]; }
if fresh; then
	echo "$entry"
	exit 0
fi
# Builds are serialised: several with-rxe runs may start at once.
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if fresh; then
	echo "$entry"
	exit 0
fi
if [ $refresh = 1 ]; then
	echo "microvm: rebuilding $entry (--refresh)" >&2
elif [ -n "$(ls -d "$cache"/vm-* 2>/dev/null)" ]; then
	echo "microvm: building a new cache entry: vm-setup/microvm/init, build.sh or the $arch kernel pin differ from every cached one" >&2
fi

# depmod and modprobe live in /usr/sbin, which an ordinary Debian or Ubuntu
# user's PATH does not hold: a student's first make grade stopped here.
PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin
for tool in dpkg-deb depmod modprobe cpio python3; do
	command -v "$tool" >/dev/null ||
		die "'$tool' is missing (run: vm-setup/install-deps.sh)"
done
# The initramfs has no libraries: its busybox must be the static build.
busybox=$root/bin/busybox
if ! readelf -h "$busybox" >/dev/null 2>&1 ||
	readelf -l "$busybox" 2>/dev/null | grep 'program interpreter' >/dev/null; then
	die "$busybox is missing or not the static build (package busybox-static; run: vm-setup/install-deps.sh)"
fi

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The pinned package, sha256 checked (the cache keeps it: a new entry, for
# another init, needs no download).
deb=$("$here/fetch-kernel.sh" --arch "$arch") || die "cannot get the pinned $arch kernel package (see above)"
[ -f "$deb" ] || die "kernel package '$deb' does not exist"

echo "microvm: unpacking $(basename "$deb")" >&2
dpkg-deb -x "$deb" "$work/root" || die "dpkg-deb -x $deb failed"
kver=$(ls "$work/root/lib/modules" | head -n 1)
[ -n "$kver" ] && [ -e "$work/root/boot/vmlinuz-$kver" ] ||
	die "$(basename "$deb") holds no kernel image and modules"
depmod -b "$work/root" "$kver"

# Module closure, in load order, from modprobe's own dependency resolution.
mods=$(for m in $MODULES; do
	modprobe -d "$work/root" -S "$kver" --show-depends "$m" 2>/dev/null ||
		die "$kver has no module '$m' (is this a Debian $arch kernel?)"
done | awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++')

ird="$work/initrd"
mkdir -p "$ird"/{bin,proc,sys,dev,lib/modules}
cp "$busybox" "$ird/bin/busybox"
cp "$here/init" "$ird/init"
for m in $mods; do
	rel=${m#"$work/root/lib/modules/"}
	mkdir -p "$ird/lib/modules/$(dirname "$rel")"
	cp "$m" "$ird/lib/modules/$rel"
	echo "$rel" >>"$ird/modules.load"
done
cp "$work/root/lib/modules/$kver/"modules.{order,builtin,builtin.modinfo} "$ird/lib/modules/$kver/"
depmod -b "$ird" "$kver"

new=$(mktemp -d "$cache/new.XXXXXX")
mkdir -p "$new"
cp "$work/root/boot/vmlinuz-$kver" "$new/vmlinuz"
# The uncompressed ELF kernel boots through PVH: no BIOS real-mode setup and
# no XZ decompression under emulation (about 3 s less per boot under TCG).
# Without an XZ stream in the bzImage, run.sh boots the bzImage. PVH is
# x86's: arm64's vmlinuz is an uncompressed Image that QEMU boots as it is.
[ "$arch" = amd64 ] && python3 - "$new/vmlinuz" "$new/vmlinux" <<'PY' || rm -f "$new/vmlinux"
import lzma, sys
data = open(sys.argv[1], "rb").read()
at = data.find(b"\xfd7zXZ\x00")
if at < 0:
    sys.exit(1)
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[at:])
if elf[:4] != b"\x7fELF":
    sys.exit(1)
open(sys.argv[2], "wb").write(elf)
PY
(cd "$ird" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$new/initrd.cpio"
echo "$kver" >"$new/kernel-version"
echo "$arch" >"$new/arch"
stamp >"$new/ok"
chmod 0755 "$new"
# --refresh: the old entry moves aside whole (a VM may still read it).
[ -e "$entry" ] && mv -T "$entry" "$entry.old.$$"
mv -T "$new" "$entry" || die "cannot install the cache entry $entry"
echo "microvm: kernel $kver ready in $entry" >&2
echo "$entry"
