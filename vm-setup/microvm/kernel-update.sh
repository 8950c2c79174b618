#!/bin/bash
# microvm/kernel-update.sh (make vm-kernel-update) - move the kernel pin
# (kernel.lock) to Debian's current kernel package for each architecture,
# then grade the solutions on a micro-VM booted from the new pin. Prints
# what changed (old -> new version and sha256). On a failed check the old
# lock is put back and the exit status is 1.
#
# usage: kernel-update.sh [--check LESSONS|all|none]   (default: 01)
#   --check   which lessons of solutions/ to grade on the new kernel
# environment:
#   RXE_VM_DEBIAN_SUITE    the Debian release whose kernel to pin (default:
#                          the lock's suite); its -updates and -security too
#   RXE_VM_DEBIAN_MIRROR   where Debian's archive is (http://deb.debian.org)
#   RXE_VM_DEBIAN_KEYRING  the archive's keyring (package debian-archive-keyring)
# Asks Debian's archive through apt with lists of its own in a temporary
# directory (no root, the system's apt sources untouched, on Ubuntu too);
# apt checks the archive's signatures and each package's sha256.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
course=$(cd "$here/../.." && pwd)
. "$here/pin.sh"
cache=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-course/microvm}
mirror=${RXE_VM_DEBIAN_MIRROR:-http://deb.debian.org}
keyring=${RXE_VM_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
check=01

die() {
	echo "kernel-update: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--check) [ $# -ge 2 ] || die "--check needs a value (LESSONS, all or none)"; check=$2; shift ;;
	-h | --help) sed -n '2,18s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown option '$1' (usage: kernel-update.sh [--check LESSONS|all|none])" ;;
	esac
	shift
done

[ -r "$KERNEL_LOCK" ] || die "no lock file $KERNEL_LOCK"
suite=${RXE_VM_DEBIAN_SUITE:-$(awk '$1 == "suite" && $2 == "=" { print $3 }' "$KERNEL_LOCK")}
suite=${suite:-bookworm}
mapfile -t archs < <(pin_archs)
[ ${#archs[@]} -gt 0 ] || archs=(amd64 arm64)
for tool in apt-get apt-cache sha1sum python3; do
	command -v "$tool" >/dev/null || die "'$tool' is missing"
done
[ -r "$keyring" ] || die "no Debian archive keyring at $keyring (install the package debian-archive-keyring, or set RXE_VM_DEBIAN_KEYRING)"

apt_dir=$(mktemp -d "${TMPDIR:-/tmp}/kernel-update.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$apt_dir"' EXIT
mkdir -p "$apt_dir"/{lists/partial,archives/partial,parts,prefs} && : >"$apt_dir/status"
{
	echo "deb [signed-by=$keyring] $mirror/debian $suite main"
	echo "deb [signed-by=$keyring] $mirror/debian $suite-updates main"
	echo "deb [signed-by=$keyring] $mirror/debian-security $suite-security main"
} >"$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
	-o "Dir::Etc::Preferences=$apt_dir/prefs/none" -o "Dir::Etc::PreferencesParts=$apt_dir/prefs"
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir" -o "Dir::Cache::Archives=$apt_dir/archives"
	-o "Dir::State::status=$apt_dir/status" -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)"
	-o Acquire::Languages=none -o "APT::Architecture=${archs[0]}")
for a in "${archs[@]}"; do apt_opts+=(-o "APT::Architectures::=$a"); done

echo "kernel-update: reading Debian $suite's package lists ($mirror)"
apt-get "${apt_opts[@]}" -qq update >"$apt_dir/update.log" 2>&1 ||
	die "apt-get update of Debian $suite failed: $(tail -n 3 "$apt_dir/update.log")"

new="$apt_dir/kernel.lock"
{
	echo "# vm-setup/microvm/kernel.lock - the micro-VM's kernel: Debian's kernel package"
	echo "# for each architecture, pinned by sha256. fetch-kernel.sh fetches it (cache, apt,"
	echo "# Debian's archive by its path under http://deb.debian.org/, snapshot.debian.org by"
	echo "# its sha1) and refuses any copy whose sha256 differs. Written by"
	echo "# 'make vm-kernel-update'; the cache entry's name covers these lines."
	echo "suite = $suite"
} >"$new"
mkdir -p "$cache/debs" || die "cannot make $cache/debs"
changed=()
for a in "${archs[@]}"; do
	pkg=$(apt-cache "${apt_opts[@]}" depends "linux-image-$a:$a" 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/ { sub(/:.*/, "", $2); print $2; exit }')
	[ -n "$pkg" ] || die "Debian $suite has no linux-image-$a depending on a kernel package"
	# 'URL' FILE SIZE SHA256:HASH
	read -r url _ size hash < <(apt-get "${apt_opts[@]}" download --print-uris "$pkg:$a" 2>/dev/null)
	url=${url//\'/} sha=${hash#SHA256:}
	case "$url" in "$mirror"/*) ;; *) die "apt gave no URL under $mirror for $pkg:$a (got '$url')" ;; esac
	[ ${#sha} = 64 ] || die "apt gave no sha256 for $pkg:$a (got '$hash')"
	path=${url#"$mirror"/} file=${url##*/}
	ver=$(apt-cache "${apt_opts[@]}" show --no-all-versions "$pkg:$a" 2>/dev/null | awk '$1 == "Version:" { print $2; exit }')
	[ -n "$ver" ] || die "apt gave no version for $pkg:$a"
	deb=$cache/debs/$file
	if [ ! -f "$deb" ] || [ "$(sha256_of "$deb")" != "$sha" ]; then
		echo "kernel-update: downloading $file ($((size / 1048576)) MB)"
		(cd "$apt_dir/archives" && apt-get "${apt_opts[@]}" -qq download "$pkg:$a" >"$apt_dir/download.log" 2>&1) ||
			die "apt-get download $pkg:$a failed: $(tail -n 3 "$apt_dir/download.log")"
		[ "$(sha256_of "$apt_dir/archives/$file")" = "$sha" ] ||
			die "the downloaded $file does not have the sha256 apt listed ($sha)"
		mv -f "$apt_dir/archives/$file" "$deb" || die "cannot write $deb"
	fi
	sha1=$(sha1sum "$deb" | cut -d' ' -f1)
	{
		echo "$a.package = $pkg"
		echo "$a.version = $ver"
		echo "$a.path = $path"
		echo "$a.size = $size"
		echo "$a.sha256 = $sha"
		echo "$a.sha1 = $sha1"
	} >>"$new"
	old_ver=$(pin_get "$a" version) || old_ver=''
	old_sha=$(pin_get "$a" sha256) || old_sha=''
	if [ "$old_sha" = "$sha" ]; then
		echo "kernel-update: $a: $pkg $ver (sha256 ${sha:0:16}...): unchanged"
	else
		if old_pkg=$(pin_get "$a" package); then
			old="$old_pkg $old_ver (sha256 ${old_sha:0:16}...)"
		else
			old="(no $a pin)"
		fi
		echo "kernel-update: $a: $old -> $pkg $ver (sha256 ${sha:0:16}...)"
		changed+=("$a")
	fi
done

if [ ${#changed[@]} = 0 ] && cmp -s "$new" "$KERNEL_LOCK"; then
	echo "kernel-update: the pin is Debian $suite's current kernel: nothing to do"
	exit 0
fi
cp "$KERNEL_LOCK" "$apt_dir/kernel.lock.old"
cp "$new" "$KERNEL_LOCK" || die "cannot write $KERNEL_LOCK"
echo "kernel-update: wrote $KERNEL_LOCK"

[ "$check" = none ] && { echo "kernel-update: no check (--check none)"; exit 0; }
host_arch=$(rxe_vm_arch) || host_arch=''
lessons=()
[ "$check" = all ] || lessons=(LESSON="$check")
echo "kernel-update: grading solutions/ (${lessons[*]:-all lessons}) on an $host_arch micro-VM booted from the new pin"
if ALLOW_MODIFIED_GRADER=1 RXE_BACKEND=vm RXE_VM_COLD=1 make -C "$course" --no-print-directory grade SRC=solutions "${lessons[@]}"; then
	echo "kernel-update: the new pin passes; commit $KERNEL_LOCK"
	for a in "${changed[@]}"; do
		[ "$a" = "$host_arch" ] || echo "kernel-update: the new $a pin was not booted here ($host_arch): make bench-arm64 boots the arm64 one under emulation"
	done
	exit 0
fi
cp "$apt_dir/kernel.lock.old" "$KERNEL_LOCK"
echo "kernel-update: the solutions lost points on the new kernel: the old pin is back in $KERNEL_LOCK" >&2
exit 1
