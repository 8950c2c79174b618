#!/bin/bash
# install-deps.sh - install the Debian packages the course needs. Idempotent:
# installs only what is missing and says what. Needs root (prints the sudo
# command otherwise).
#
# usage: vm-setup/install-deps.sh [--check]
#   --check   only list what is missing; exit 1 if anything is
set -uo pipefail

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
	# make lint; the grader's integrity check and make test read git
	shellcheck clang-format-14 git
	# make test reads the student repository's GitHub workflow (YAML)
	python3-yaml
	# the micro-VM: QEMU, a static busybox for its initramfs, cpio
	qemu-system-x86 busybox-static cpio
	# lesson tools: plots, leak checks, dropping privileges (setpriv)
	gnuplot-nox valgrind util-linux procps
	# make bench-stability: every host core busy beside the grading
	stress-ng
)

check=0
case "${1:-}" in
"") ;;
--check) check=1 ;;
-h | --help) sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 0 ;;
*) echo "install-deps.sh: unknown option '$1' (usage: install-deps.sh [--check])" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#PACKAGES[@]} packages are installed"
	exit 0
fi
echo "install-deps: missing: ${missing[*]}"
[ $check = 1 ] && exit 1
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: installing needs root; run:" >&2
	echo "  sudo $0" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || { echo "install-deps: apt-get update failed" >&2; exit 1; }
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/install-deps.$$.log 2>&1 || {
	tail -n 20 /tmp/install-deps.$$.log >&2
	echo "install-deps: apt-get install failed (full log: /tmp/install-deps.$$.log)" >&2
	exit 1
}
rm -f /tmp/install-deps.$$.log
echo "install-deps: installed ${missing[*]}"
