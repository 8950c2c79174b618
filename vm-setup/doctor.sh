#!/bin/bash
# doctor.sh (make doctor) - can grading run here? One PASS/FAIL/WARN line per
# check, with the fix for each FAIL. Exit 0 only when grading can run: a
# native rxe device is ready, or the micro-VM boots with one.
#
# usage: vm-setup/doctor.sh [--no-vm]
#   --no-vm   skip the micro-VM boot check (about 10 s)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib/rxe.sh"
. "$here/microvm/pin.sh"
course=$(cd "$here/.." && pwd)
# modinfo and friends live in /usr/sbin, which an ordinary user's PATH
# does not hold on Debian and Ubuntu.
PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

boot_vm=1
case "${1:-}" in
"") ;;
--no-vm) boot_vm=0 ;;
-h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
*) echo "doctor: unknown option '$1' (usage: doctor.sh [--no-vm])" >&2; exit 2 ;;
esac

fails=0
pass() { printf 'PASS  %s\n' "$1"; }
warn() { printf 'WARN  %s\n      fix: %s\n' "$1" "$2"; }
fail() {
	printf 'FAIL  %s\n      fix: %s\n' "$1" "$2"
	fails=$((fails + 1))
}

# 0. where the checkout is: make and the micro-VM's shares cannot work with
# white space or quotes in its path (grader/run/grade.py refuses it too).
case "$course" in
*[[:space:]\'\"]*) fail "checkout: '$course' has white space or a quote in its path; make and the micro-VM cannot work there" \
	"move or clone the course to a path without (e.g. ~/rdma-course)" ;;
*) pass "checkout: $course" ;;
esac

# 1. packages
if missing=$("$here/install-deps.sh" --check 2>&1); then
	pass "packages: all installed"
else
	fail "packages: ${missing#install-deps: }" "vm-setup/install-deps.sh"
fi

# 2. a native device
native=$(rxe_find_ready)
if [ -n "$native" ]; then
	read -r dev gid ip netdev <<<"$native"
	pass "native RDMA device: $dev port 1 ACTIVE, GID index $gid is RoCE v2 $ip (on $netdev)"
	# Its kind, and what its counters can grade (grader/evidence/counters.py).
	if kind=$(cd "$course" && /usr/bin/python3 -m grader device-kind "$dev" 2>&1); then
		pass "native RDMA device: ${kind//$'\n'/$'\n      '}"
	else
		warn "native RDMA device: ${kind//$'\n'/$'\n      '}" \
			"grade on rxe (the micro-VM: RXE_BACKEND=vm), or add the kind's table to grader/evidence/counters.py"
	fi
else
	devs=$(ls "$SYSFS_IB" 2>/dev/null | tr '\n' ' ')
	if [ -n "$devs" ]; then
		for d in $devs; do
			st=$(rxe_port_state "$d")
			if [ "$st" != ACTIVE ]; then
				warn "native RDMA device $d: port 1 is $st" "bring its netdev up: ip link set IF up"
			elif ! rxe_gid_index "$d" >/dev/null; then
				warn "native RDMA device $d: no IPv4 RoCE v2 GID" "give its netdev an IPv4 address"
			fi
		done
	elif modinfo rdma_rxe >/dev/null 2>&1; then
		warn "native RDMA device: none, but this kernel has rdma_rxe" "sudo vm-setup/setup-rxe.sh (or let the micro-VM be used)"
	else
		warn "native RDMA device: none, and this kernel ($(uname -r)) has no rdma_rxe (WSL2, containers)" \
			"nothing to fix: the micro-VM is used (next checks)"
	fi
fi

# 3. memlock: registration pins pages against RLIMIT_MEMLOCK
lim=$(ulimit -l)
if [ "$lim" = unlimited ] || [ "$lim" -ge 65536 ]; then
	pass "memlock limit (ulimit -l): $lim"
elif [ "$(id -u)" = 0 ]; then
	pass "memlock limit (ulimit -l): $lim KiB, but root (CAP_IPC_LOCK) is not bound by it"
else
	warn "memlock limit (ulimit -l): $lim KiB; lesson 02 registers up to 64 MiB natively" \
		"add '$(id -un) - memlock unlimited' to /etc/security/limits.d/rdma.conf and log in again"
fi

# 4. UDP 4791 (RoCE v2) must not be filtered on a native device
if [ -n "$native" ]; then
	rules=$( { nft list ruleset 2>/dev/null; iptables -S 2>/dev/null; } | grep -w 4791 | grep -Ei 'drop|reject')
	if [ -n "$rules" ]; then
		fail "firewall filters UDP 4791 (RoCE v2): $rules" "allow UDP port 4791 on $netdev"
	else
		pass "no firewall rule drops UDP 4791 (RoCE v2)"
	fi
fi

# 5. the micro-VM: QEMU of the host's architecture, the pinned kernel
case "$(rxe_vm_arch)" in
amd64) qemu="qemu-system-x86_64" ;;
arm64) qemu="qemu-system-aarch64" ;;
*) qemu='' ;;
esac
if [ -z "$qemu" ]; then
	fail "micro-VM: this host is $(uname -m); the micro-VM runs on x86_64 and aarch64 hosts" "use an x86_64 or aarch64 machine, or a native rxe device"
elif command -v "$qemu" >/dev/null; then
	pass "QEMU: $("$qemu" --version | head -n 1)"
else
	fail "QEMU: $qemu is missing" "vm-setup/install-deps.sh"
	qemu=''
fi
if arch=$(rxe_vm_arch) && ver=$(pin_get "$arch" version) && pkg=$(pin_get "$arch" package); then
	pass "micro-VM kernel: pinned $pkg $ver ($(basename "$KERNEL_LOCK"))"
else
	fail "micro-VM kernel: $KERNEL_LOCK pins no $(uname -m) kernel" "make vm-kernel-update"
fi
# What the micro-VM will really use: its boot probe's verdict (cached).
if [ -n "$qemu" ]; then
	accel=$("$here/microvm/run.sh" --accel 2>&1)
	kvm=$(sed -n 's/^kvm: //p' <<<"$accel")
	if [ "$kvm" = ok ]; then
		pass "KVM: a probe guest booted with KVM; the micro-VM uses it"
	elif [ -n "$kvm" ] && [ -e "${RXE_VM_KVM_DEV:-/dev/kvm}" ] && [ "$(id -u)" != 0 ] && ! [ -w "${RXE_VM_KVM_DEV:-/dev/kvm}" ]; then
		# Ubuntu's and Debian's /dev/kvm is group kvm, 0660: a new user is
		# not in that group.
		warn "KVM: not used, the micro-VM runs under TCG emulation (works; grading takes several times longer): ${kvm#fail: }" \
			"sudo usermod -aG $(stat -c %G "${RXE_VM_KVM_DEV:-/dev/kvm}") $(id -un), then log out and in again"
	elif [ -n "$kvm" ]; then
		warn "KVM: not used, the micro-VM runs under TCG emulation (works; grading takes several times longer): ${kvm#fail: }" \
			"none needed; for speed, give this machine working KVM (RXE_VM_ACCEL=kvm forces it)"
	else
		warn "KVM: the probe did not run: $(tail -n 1 <<<"$accel")" "see vm-setup/microvm/run.sh --accel"
	fi
fi
# 6. the sandbox: one program of this checkout's build directory run as a
# lesson's program is, wherever grading runs it (grader/evidence/sandbox.py).
# Lessons without a device are graded on this host; as root that is the
# sandbox's unprivileged user, who may not enter the directory the checkout
# is in (a 0700 home, /root).
sandbox_line() {
	local line
	line=$(grep -E '^(PASS|FAIL)  sandbox' <<<"$1" | tail -n 1)
	if [ -z "$line" ]; then
		fail "sandbox ($2): the check printed no verdict:
$(sed 's/^/      | /' <<<"$1" | tail -n 15)" "read the lines above"
		return
	fi
	case "$line" in FAIL*) fails=$((fails + 1)) ;; esac
	# The verdict, and under a FAIL its fix line.
	sed -n '/^\(PASS\|FAIL\)  sandbox/,$p' <<<"$1" | head -n 2
}
host_out=$(cd "$course" && /usr/bin/python3 -m grader sandbox-check "this host" 2>&1)
sandbox_line "$host_out" "this host"
vm_ok=0
if [ $boot_vm = 1 ] && [ -n "$qemu" ]; then
	t0=$(date +%s%N)
	if out=$(cd "$course" && "$here/microvm/run.sh" bash -c 'ibv_devinfo -d "$RDMA_DEVICE" | grep -q PORT_ACTIVE && echo "$RDMA_DEVICE ACTIVE, GID index $RDMA_GID_INDEX" && /usr/bin/python3 -m grader sandbox-check "the micro-VM"' 2>&1) ||
		grep -q '^FAIL  sandbox' <<<"$out"; then
		vm_ok=1
		pass "micro-VM: $(grep -m1 ' ACTIVE, GID index ' <<<"$out") ($((($(date +%s%N) - t0) / 1000000)) ms)"
		sandbox_line "$out" "the micro-VM"
	else
		fail "micro-VM: it did not bring up rxe:
$(sed 's/^/      | /' <<<"$out" | tail -n 15)" "read the lines above; 'make vm-shell' opens a shell in the VM"
	fi
fi

if [ -n "$native" ] || [ $vm_ok = 1 ]; then
	[ $fails = 0 ] && { echo "doctor: grading can run here"; exit 0; }
fi
if [ $boot_vm = 0 ] && [ -z "$native" ] && [ $fails = 0 ]; then
	echo "doctor: no native device; the micro-VM was not checked (--no-vm)"
	exit 1
fi
echo "doctor: grading cannot run here until the FAIL lines are fixed"
exit 1
