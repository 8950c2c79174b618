#!/bin/bash
# microvm/fetch-kernel.sh - put the pinned Debian kernel package (kernel.lock)
# in the cache and print its path. Every copy is checked against the pin's
# sha256 before it is used; one that differs is refused. No root needed.
#
# usage: fetch-kernel.sh [--arch amd64|arm64]   (default: the host's)
# The first copy that matches the pin wins, from:
#   1. RXE_VM_KERNEL_DEB=FILE, when set (then nothing else is tried)
#   2. the cache: RXE_VM_CACHE/debs/ (default ~/.cache/rdma-course/microvm)
#   3. apt's own cache, /var/cache/apt/archives/
#   4. apt-get download, when apt knows the pinned version with its sha256
#   5. Debian's archive by the pin's pool path (RXE_VM_DEBIAN_MIRROR, default
#      http://deb.debian.org), also from the main pool once a security
#      update has moved there
#   6. snapshot.debian.org by the file's hash (RXE_VM_SNAPSHOT, default
#      http://snapshot.debian.org), which keeps every file Debian published
# RXE_VM_KERNEL_LOCK: another lock file (see pin.sh).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/pin.sh"
cache=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-course/microvm}
mirror=${RXE_VM_DEBIAN_MIRROR:-http://deb.debian.org}
snapshot=${RXE_VM_SNAPSHOT:-http://snapshot.debian.org}

die() {
	echo "microvm/fetch-kernel.sh: $*" >&2
	exit 1
}
say() { echo "microvm: $*" >&2; }

arch=''
while [ $# -gt 0 ]; do
	case "$1" in
	--arch) [ $# -ge 2 ] || die "--arch needs a value (amd64 or arm64)"; arch=$2; shift ;;
	-h | --help) sed -n '2,18s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown option '$1' (usage: fetch-kernel.sh [--arch amd64|arm64])" ;;
	esac
	shift
done
if [ -z "$arch" ]; then
	arch=$(rxe_vm_arch) || die "this host is $(uname -m): the micro-VM runs on x86_64 and aarch64 hosts (RXE_VM_ARCH=${RXE_VM_ARCH:-})"
fi
[ -r "$KERNEL_LOCK" ] || die "no lock file $KERNEL_LOCK (make vm-kernel-update writes one)"
pkg=$(pin_get "$arch" package) && ver=$(pin_get "$arch" version) &&
	path=$(pin_get "$arch" path) && sha=$(pin_get "$arch" sha256) ||
	die "$KERNEL_LOCK pins no $arch kernel (package, version, path, sha256); make vm-kernel-update adds it"
sha1=$(pin_get "$arch" sha1) || sha1=''
file=${path##*/}
case "$sha" in *[!0-9a-f]* | '') die "$KERNEL_LOCK: $arch.sha256 is not a sha256: '$sha'" ;; esac
[ ${#sha} = 64 ] || die "$KERNEL_LOCK: $arch.sha256 is not a sha256: '$sha'"

# matches FILE - FILE's sha256 is the pin's.
matches() { [ -f "$1" ] && [ "$(sha256_of "$1")" = "$sha" ]; }

if [ -n "${RXE_VM_KERNEL_DEB:-}" ]; then
	[ -f "$RXE_VM_KERNEL_DEB" ] || die "kernel package '$RXE_VM_KERNEL_DEB' does not exist (RXE_VM_KERNEL_DEB)"
	got=$(sha256_of "$RXE_VM_KERNEL_DEB")
	[ "$got" = "$sha" ] || die "RXE_VM_KERNEL_DEB=$RXE_VM_KERNEL_DEB is not the pinned $file: its sha256 is $got, the pin's $sha (make vm-kernel-update moves the pin)"
	echo "$RXE_VM_KERNEL_DEB"
	exit 0
fi

debs=$cache/debs
mkdir -p "$debs" || die "cannot make $debs"
dest=$debs/$file
# Fetches are serialised (build.sh's own lock is another file).
exec 8>"$debs/.lock"
flock 8
if [ -e "$dest" ]; then
	if matches "$dest"; then
		echo "$dest"
		exit 0
	fi
	say "the cached $file is not the pinned file (sha256 $(sha256_of "$dest")): removed"
	rm -f "$dest"
fi

part=$debs/.$file.part.$$
trap 'rm -rf "$part" "$part.d"' EXIT
tried=()
# take FILE WHERE - keep FILE as the cached package if it matches the pin.
take() {
	local got
	if [ ! -s "$1" ]; then
		tried+=("$2 (nothing)")
		return 1
	fi
	got=$(sha256_of "$1")
	if [ "$got" != "$sha" ]; then
		say "refused $file from $2: its sha256 is $got, the pin's $sha"
		tried+=("$2 (wrong sha256)")
		return 1
	fi
	if [ "$1" = "$part" ]; then mv -f "$part" "$dest"; else cp "$1" "$part" && mv -f "$part" "$dest"; fi ||
		die "cannot write $dest"
	say "$file verified (sha256 $sha) from $2"
	echo "$dest"
	exit 0
}

apt_file=/var/cache/apt/archives/$file
[ -f "$apt_file" ] && take "$apt_file" "$apt_file"

# apt-get download gives the pinned file only when apt's lists hold that
# version with that sha256 (not on Ubuntu, nor on another Debian release).
if command -v apt-cache >/dev/null && apt-cache show "$pkg:$arch=$ver" 2>/dev/null | grep -ix "SHA256: $sha" >/dev/null; then
	say "downloading $pkg $ver with apt-get (about 70 MB, once)"
	mkdir -p "$part.d"
	if (cd "$part.d" && apt-get download "$pkg:$arch=$ver" >/dev/null 2>"$part.d/apt.err"); then
		take "$part.d/$file" "apt-get download"
	else
		tried+=("apt-get download ($(tail -n 1 "$part.d/apt.err"))")
	fi
	rm -rf "$part.d"
fi

# download URL - fetch URL into $part (python3: no curl or wget needed).
download() {
	rm -f "$part"
	python3 - "$1" "$part" <<-'PY'
		import shutil, sys, urllib.request
		try:
		    with urllib.request.urlopen(sys.argv[1], timeout=60) as r, \
		            open(sys.argv[2], "wb") as f:
		        shutil.copyfileobj(r, f, 1 << 20)
		except Exception as e:
		    print(e, file=sys.stderr)
		    sys.exit(1)
	PY
}
urls=("$mirror/$path")
case "$path" in
debian-security/pool/updates/*) urls+=("$mirror/debian/pool/${path#debian-security/pool/updates/}") ;;
esac
[ -n "$sha1" ] && urls+=("$snapshot/file/$sha1")
for url in "${urls[@]}"; do
	say "downloading $file from $url"
	if err=$(download "$url" 2>&1); then
		take "$part" "$url"
	else
		tried+=("$url (${err##*$'\n'})")
	fi
done
printf -v list '\n  %s' "${tried[@]}"
die "cannot get the pinned $file (sha256 $sha); tried:$list
  Offline? make vm-cache-import FILE=... (a tarball from make vm-cache-export), or RXE_VM_KERNEL_DEB=/path/to/$file"
