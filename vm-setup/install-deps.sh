#!/bin/bash
# install-deps.sh - install the packages the course needs on Debian 12,
# Ubuntu 22.04 or Ubuntu 24.04 (x86_64 or aarch64). Idempotent: installs
# only what is missing and says what. Installing needs root: run as a user,
# it asks sudo itself; a root shell without sudo (a container) just runs it.
#
# usage: vm-setup/install-deps.sh [--check | --list]
#   --check   only list what is missing; exit 1 if anything is
#   --list    print the package names for this system, one a line
#   OS_RELEASE=FILE  read the distribution from FILE (default /etc/os-release)
set -uo pipefail

check=0 list=0
case "${1:-}" in
"") ;;
--check) check=1 ;;
--list) list=1 ;;
-h | --help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
*) echo "install-deps.sh: unknown option '$1' (usage: install-deps.sh [--check | --list])" >&2; exit 2 ;;
esac

# The distribution, from os-release: Debian 12 and Ubuntu 22.04/24.04 are
# known; another Debian-like system gets Debian 12's names, with a warning.
os_release=${OS_RELEASE:-/etc/os-release}
ID="" VERSION_ID="" PRETTY_NAME=""
# shellcheck disable=SC1090 # the system's file, or the test's
[ -r "$os_release" ] && . "$os_release"
case "$ID:$VERSION_ID" in
debian:12) distro=debian12 ;;
ubuntu:22.04) distro=ubuntu22.04 ;;
ubuntu:24.04) distro=ubuntu24.04 ;;
*) distro=other ;;
esac

# The micro-VM's QEMU is the host's architecture's (vm-setup/microvm/pin.sh).
case "$(uname -m)" in
aarch64 | arm64) qemu="qemu-system-arm" ;;
*) qemu="qemu-system-x86" ;;
esac

PACKAGES=(
	# RDMA: verbs and rdma_cm libraries, the rxe provider, tools, perftest
	rdma-core ibverbs-providers ibverbs-utils libibverbs-dev librdmacm-dev
	rdmacm-utils perftest iproute2 kmod
	# building the lessons
	build-essential make
	# the grader
	python3 python3-pytest python3-pytest-timeout bats bats-support bats-assert
	# trusted peers in the grader: rdma-core's Python binding
	python3-pyverbs
	# make watch
	inotify-tools
	# make lint (clang-format 14: the version .clang-format is written for);
	# the grader's integrity check and make test read git
	shellcheck clang-format-14 git
	# make test reads the student repository's GitHub workflow (YAML)
	python3-yaml
	# the micro-VM: QEMU, a static busybox for its initramfs, cpio
	"$qemu" busybox-static cpio
	# lesson tools: plots, leak checks, dropping privileges (setpriv)
	gnuplot-nox valgrind util-linux procps
	# make bench-stability: every host core busy beside the grading
	stress-ng
	# lesson 16 and the wire tests (make grade HOSTS=2): libpcap for
	# roce_dump, tshark to judge it (installed non-interactively: its
	# question about capturing as non-root keeps the default, no)
	libpcap-dev tshark
	# make similarity (make grade-class SIMILARITY=1): sim_c, the same
	# package name on Debian 12 and Ubuntu 22.04/24.04 (universe)
	similarity-tester
)
# Ubuntu lacks Debian's archive keyring, which make vm-kernel-update needs
# to check the archive's signatures (Debian's apt depends on it).
case "$distro" in ubuntu*) PACKAGES+=(debian-archive-keyring) ;; esac

# What a distribution does not have, and what that costs.
unavailable=() cost=''
case "$distro" in
ubuntu22.04)
	# Ubuntu 22.04 packages neither library, and its bats (1.2.1) is older
	# than the 1.5 the course's suites need.
	unavailable=(bats-support bats-assert)
	cost="make test's bats suites cannot run on Ubuntu 22.04 (its bats is 1.2.1; they need bats >= 1.5 with bats-support and bats-assert): make grade, make doctor and the rest work"
	;;
esac
wanted=()
for p in "${PACKAGES[@]}"; do
	case " ${unavailable[*]} " in *" $p "*) ;; *) wanted+=("$p") ;; esac
done

say_unavailable() {
	[ ${#unavailable[@]} = 0 ] || echo "install-deps: cannot install on ${PRETTY_NAME:-this system}: ${unavailable[*]}; $cost" >&2
	[ "$distro" != other ] ||
		echo "install-deps: ${PRETTY_NAME:-this system} is not one the course knows (Debian 12, Ubuntu 22.04, Ubuntu 24.04): trying Debian 12's package names" >&2
}

if [ $list = 1 ]; then
	say_unavailable
	printf '%s\n' "${wanted[@]}"
	exit 0
fi

missing=()
for p in "${wanted[@]}"; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#wanted[@]} packages are installed"
	say_unavailable
	exit 0
fi
echo "install-deps: missing: ${missing[*]}"
[ $check = 1 ] && exit 1
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null; then
		echo "install-deps: installing needs root: sudo $0"
		[ -z "${OS_RELEASE:-}" ] || exec sudo OS_RELEASE="$OS_RELEASE" "$0"
		exec sudo "$0"
	fi
	echo "install-deps: installing needs root, and there is no sudo here: run $0 as root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || { echo "install-deps: apt-get update failed" >&2; exit 1; }
# A package apt has no candidate for is named, not left to apt's error.
none=()
for p in "${missing[@]}"; do
	cand=$(apt-cache policy "$p" 2>/dev/null | awk '$1 == "Candidate:" { print $2 }')
	[ -n "$cand" ] && [ "$cand" != "(none)" ] || none+=("$p")
done
if [ ${#none[@]} -gt 0 ]; then
	hint="is its package list up to date?"
	case "$distro" in ubuntu*) hint="they are in Ubuntu's 'universe' component: add-apt-repository universe, then run this again" ;; esac
	echo "install-deps: apt has no package named ${none[*]} on ${PRETTY_NAME:-this system}: $hint" >&2
	exit 1
fi
log=$(mktemp "${TMPDIR:-/tmp}/install-deps.XXXXXX")
apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1 || {
	tail -n 20 "$log" >&2
	echo "install-deps: apt-get install failed (full log: $log)" >&2
	exit 1
}
rm -f "$log"
echo "install-deps: installed ${missing[*]}"
say_unavailable
