#!/bin/bash
# microvm/run.sh - boot the rxe micro-VM, run one command in it, return its
# output and exit code, power off. Normally reached through vm-setup/with-rxe.
#
# usage: run.sh [--shell] [--] CMD [ARG...]
#        run.sh --accel | --up | --down
#   --shell            an interactive shell in the VM instead of CMD
#   --accel            say which accelerator a run would use and why (the
#                      KVM boot probe's verdict), run nothing
#   --up               start a warm VM for this course tree (make vm-up): later
#                      commands run in it at once (see warm.sh) until --down
#                      or RXE_VM_IDLE seconds without a command (default 900)
#   --down             stop this course tree's warm VM (make vm-down)
# environment:
#   RXE_VM_TIMEOUT=S   kill the VM after S seconds (default 1800, none for
#                      --shell); exit 124
#   RXE_VM_ACCEL=A     auto (default: KVM if a boot probe passes, else TCG), kvm, tcg
#   RXE_VM_MEM=M  guest memory (2G; in a cgroup limit: less)  RXE_VM_SMP=N  CPUs (2; 1 on one CPU)
#   RXE_VM_SHARE=D:D   more host directories to share read-write (the course
#                      tree and the current directory always are, unless the
#                      latter is /, /tmp or another of the guest's own)
#   RXE_VM_VERBOSE=1   keep the guest's console log (kernel messages and boot
#                      timings) in the run directory, whose path is printed
#   RXE_VM_COLD=1      never use the warm VM
#   RXE_VM_CACHE, RXE_VM_KERNEL_DEB: see build.sh
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/rxe.sh"
course=$(cd "$here/../.." && pwd)
cache=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-course/microvm}
timeout=${RXE_VM_TIMEOUT:-}
interactive=0
probe_only=0
serve=0

die() {
	echo "rxe-vm: $*" >&2
	exit "${2:-1}"
}

while [ $# -gt 0 ]; do
	case "$1" in
	--shell) interactive=1 ;;
	--accel) probe_only=1 ;;
	--up) serve=1 ;;
	--down) exec "$here/warm.sh" down ;;
	--) shift; break ;;
	-h | --help) sed -n '2,25s/^# \{0,1\}//p' "$0"; exit 0 ;;
	-*) die "unknown option '$1' (see: $0 --help)" 2 ;;
	*) break ;;
	esac
	shift
done
[ $interactive = 1 ] || [ $probe_only = 1 ] || [ $serve = 1 ] || [ $# -gt 0 ] || die "no command given (usage: run.sh [--shell] [--] CMD [ARG...])" 2
# A command is killed after 30 minutes; a shell lives until you leave it.
[ -n "$timeout" ] || { [ $interactive = 1 ] && timeout=999999999 || timeout=1800; }
case "$timeout" in '' | *[!0-9]*) die "RXE_VM_TIMEOUT must be a number of seconds, got '$timeout'" 2 ;; esac

# A warm VM of this course tree runs the command at once if it can; it
# answers 200 when it cannot (none, busy, or not sharing what CMD needs).
if [ $interactive = 0 ] && [ $probe_only = 0 ] && [ $serve = 0 ] && [ "${RXE_VM_COLD:-0}" != 1 ]; then
	"$here/warm.sh" job "$@"
	rc=$?
	[ $rc = 200 ] || exit $rc
fi
if [ $serve = 1 ] && "$here/warm.sh" alive; then
	echo "rxe-vm: a warm VM is already up for $course (make vm-down stops it)"
	exit 0
fi

qemu=$(command -v qemu-system-x86_64) ||
	die "qemu-system-x86_64 is missing (run: sudo vm-setup/install-deps.sh)"
entry=$("$here/build.sh") || die "cannot prepare the micro-VM kernel (see above)"

if [ $serve = 1 ]; then
	state=$("$here/warm.sh" state)
	rm -rf "$state"
	mkdir -p "$state/run" || die "cannot make $state"
	run=$state/run
	timeout=999999999
else
	run=$(mktemp -d "${TMPDIR:-/tmp}/rxe-vm.XXXXXX") || die "mktemp failed"
fi
qpid='' keep=0
cleanup() {
	[ $serve = 1 ] && return
	[ -n "$qpid" ] && kill -9 "$qpid" 2>/dev/null
	if [ $keep = 1 ]; then
		rm -f "$run/env.sh"
		echo "rxe-vm: kept the guest console log and spec in $run" >&2
	else
		rm -rf "$run"
	fi
}
trap cleanup EXIT
trap 'echo "rxe-vm: interrupted" >&2; exit 130' INT TERM HUP

# --- what the guest needs to know: boot.sh (for init), spec.sh and env.sh --
shares=() tags=""
# The guest has its own /, /tmp, /run, ...: sharing one of those over it would
# break the guest (e.g. programs' unlinked temporary files on a 9p /tmp).
system_dir() {
	case "$1" in / | /tmp | /var/tmp | /run | /dev | /dev/shm | /proc | /sys) return 0 ;; esac
	return 1
}
add_share() {
	local d i
	d=$(cd "$1" 2>/dev/null && pwd -P) || die "cannot share '$1': no such directory"
	system_dir "$d" && die "cannot share '$d' itself: the guest has its own; share a directory inside it" 2
	for i in "${shares[@]}"; do
		case "$d/" in "$i"/*) return ;; esac
	done
	shares+=("$d")
}
add_share "$course"
# The current directory comes along, unless it is one of the guest's own
# (then the command starts in the guest's directory of that name).
system_dir "$(pwd -P)" || add_share "$PWD"
IFS=: read -ra extra <<<"${RXE_VM_SHARE:-}"
for d in "${extra[@]}"; do [ -n "$d" ] && add_share "$d"; done
virtfs=()
for i in "${!shares[@]}"; do
	case "${shares[$i]}" in *[[:space:]\'\"]*) die "cannot share '${shares[$i]}': its path has white space or quotes" ;; esac
	tags+="share$i=${shares[$i]} "
	virtfs+=(-virtfs "local,path=${shares[$i]},mount_tag=share$i,security_model=none,multidevs=remap")
done
printf "SHARES='%s'\nCOURSE_DIR='%s'\n" "$tags" "$(cd "$course" && pwd -P)" >"$run/boot.sh"
verbose=${RXE_VM_VERBOSE:-0}
[ "$verbose" = 1 ] && keep=1
{
	printf 'COURSE_DIR=%q\nCWD=%q\nINTERACTIVE=%s\nVERBOSE=%s\nSERVE=%s\nIDLE=%s\n' \
		"$(cd "$course" && pwd -P)" "$(pwd -P)" "$interactive" "$verbose" \
		"$serve" "${RXE_VM_IDLE:-900}"
	printf 'CMD=('
	printf '%q ' "$@"
	printf ')\n'
} >"$run/spec.sh"
rxe_vm_env >"$run/env.sh"

# The ELF kernel boots through PVH, faster than the bzImage (see build.sh).
kernel=$entry/vmlinux
[ -e "$kernel" ] || kernel=$entry/vmlinuz

# --- accelerator: KVM only when a short boot probe proves it works ---------
# kvm_probe prints "ok" or "fail: WHY". The verdict is cached per kernel
# entry, QEMU version and host kernel: what it depends on.
kvm_dev=${RXE_VM_KVM_DEV:-/dev/kvm}
kvm_probe() {
	local key out why
	if [ ! -e "$kvm_dev" ]; then
		echo "fail: $kvm_dev does not exist (no KVM here: a VM without nested virtualisation, WSL without it, a container)"
		return
	fi
	if [ ! -r "$kvm_dev" ] || [ ! -w "$kvm_dev" ]; then
		echo "fail: $kvm_dev is not readable and writable by $(id -un) (add yourself to its group: $(stat -c %G "$kvm_dev"))"
		return
	fi
	key="$cache/kvm-probe-$(basename "$entry")-qemu$("$qemu" --version | head -n1 | grep -o '[0-9][0-9.]*' | head -n1)-$(uname -r)"
	if [ ! -s "$key" ]; then
		out=$(timeout 20 "$qemu" -enable-kvm -cpu host -m 256M -nodefaults -display none \
			-no-reboot -kernel "$kernel" -append "console=ttyS0 panic=-1 rdinit=/bin/busybox" \
			-initrd "$entry/initrd.cpio" -serial stdio 2>&1 </dev/null)
		if grep -q 'Run /bin/busybox' <<<"$out"; then
			echo ok >"$key.$$"
		else
			why=$(grep -v '^ *$' <<<"$out" | grep -m1 -iE 'error|fail|abort|unsupported|denied' | tr -d '\r' | cut -c1-200)
			echo "fail: ${why:-a KVM guest did not boot within 20 s}" >"$key.$$"
		fi
		mv -f "$key.$$" "$key"
	fi
	cat "$key"
}
tcg=(-accel tcg,thread=multi -cpu max)

# --- a guest that fits the container: memory limit (cgroup) and CPUs ---------
# Unless RXE_VM_MEM / RXE_VM_SMP say otherwise: under a cgroup memory limit
# (a container; Gradescope's is 768 MB) the guest gets the limit less 320 MB
# for QEMU and the grader beside it (at least 256 MB, at most 2G), and TCG's
# translation cache is capped at 128 MB (QEMU's default reserves 1 GB); with
# one CPU available, one vCPU.
fit_guest_to_limits() {
	local line dir file v limit='' total mb
	while IFS= read -r line; do
		case "$line" in
		0::*) dir=/sys/fs/cgroup${line#0::} file=memory.max ;;
		*:memory:*) dir=/sys/fs/cgroup/memory${line#*:memory:} file=memory.limit_in_bytes ;;
		*) continue ;;
		esac
		# The limit may be set on any ancestor; inside a container the path
		# may not exist at all (its cgroup is the mount's root).
		while :; do
			v=$(cat "$dir/$file" 2>/dev/null) || v=''
			case "$v" in '' | *[!0-9]*) ;; *) [ -n "$limit" ] && [ "$v" -ge "$limit" ] || limit=$v ;; esac
			case "$dir" in /sys/fs/cgroup | /sys/fs/cgroup/memory | '') break ;; esac
			dir=${dir%/*}
		done
	done </proc/self/cgroup
	total=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
	if [ -z "${RXE_VM_MEM:-}" ] && [ -n "$limit" ] && [ $((limit / 1024)) -lt "$total" ]; then
		mb=$((limit / 1048576 - 320))
		[ $mb -ge 256 ] || mb=256
		[ $mb -le 2048 ] || mb=2048
		RXE_VM_MEM=${mb}M
		tcg[1]+=,tb-size=128
	fi
	[ -n "${RXE_VM_SMP:-}" ] || [ "$(nproc)" -ge 2 ] || RXE_VM_SMP=1
}
fit_guest_to_limits
case "${RXE_VM_ACCEL:-auto}" in
auto)
	verdict=$(kvm_probe)
	if [ "$verdict" = ok ]; then
		accel=(-accel kvm -cpu host)
	else
		accel=("${tcg[@]}")
		[ "${RXE_VM_VERBOSE:-0}" = 1 ] && echo "rxe-vm: KVM not used, TCG instead: ${verdict#fail: }" >&2
	fi
	;;
kvm) accel=(-accel kvm -cpu host) ;;
tcg) accel=("${tcg[@]}") ;;
*) die "RXE_VM_ACCEL must be auto, kvm or tcg, got '$RXE_VM_ACCEL'" 2 ;;
esac
if [ $probe_only = 1 ]; then
	[ "${RXE_VM_ACCEL:-auto}" = auto ] || verdict="not probed: RXE_VM_ACCEL=$RXE_VM_ACCEL"
	echo "kvm: $verdict"
	echo "accel: ${accel[1]%%,*}"
	exit 0
fi

append="console=ttyS0 panic=-1 rdinit=/init ${RXE_VM_APPEND:-}"
if [ "$verbose" = 1 ]; then
	append+=" loglevel=4 rxe_vm.verbose=1"
elif [ $interactive = 1 ]; then
	append+=" quiet loglevel=4"
else
	append+=" quiet loglevel=1"
fi
if [ $interactive = 1 ]; then
	console=(-serial mon:stdio)
else
	console=(-serial "file:$run/console.log")
fi

if [ $serve = 1 ]; then
	printf '%s\n' "${shares[@]}" >"$state/shares"
	setsid "$qemu" "${accel[@]}" -m "${RXE_VM_MEM:-2G}" -smp "${RXE_VM_SMP:-2}" \
		-nodefaults -no-user-config -display none -no-reboot \
		-kernel "$kernel" -initrd "$entry/initrd.cpio" -append "$append" \
		-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$run,mount_tag=run,security_model=none,multidevs=remap" \
		"${virtfs[@]}" -serial "file:$state/console.log" \
		-serial null -serial null </dev/null >/dev/null 2>"$state/qemu.err" &
	echo $! >"$state/qemu.pid"
	for _ in $(seq 600); do
		[ -e "$run/ready" ] && break
		kill -0 "$(cat "$state/qemu.pid")" 2>/dev/null || break
		sleep 0.1
	done
	if [ ! -e "$run/ready" ]; then
		"$here/warm.sh" down >/dev/null
		die "the warm VM did not come up (see $state/console.log)"
	fi
	echo "rxe-vm: warm VM up (pid $(cat "$state/qemu.pid")); commands run in it until 'make vm-down' or ${RXE_VM_IDLE:-900} s idle"
	exit 0
fi

# The guest's ttyS1/ttyS2 reach our stdout/stderr through FIFOs that cat
# drains: cat shares our descriptors, so output to a regular file lands at
# the right offset (QEMU reopening /dev/fd/1 would write over it).
mkfifo "$run/stdout" "$run/stderr" || die "mkfifo failed in $run"
cat "$run/stdout" &
cat_out=$!
cat "$run/stderr" >&2 &
cat_err=$!

# The shell gets our terminal (fd 5: a background job's stdin would be
# /dev/null); a command gets no input.
if [ $interactive = 1 ]; then exec 5<&0; else exec 5</dev/null; fi
"$qemu" "${accel[@]}" -m "${RXE_VM_MEM:-2G}" -smp "${RXE_VM_SMP:-2}" \
	-nodefaults -no-user-config -display none -no-reboot \
	-kernel "$kernel" -initrd "$entry/initrd.cpio" -append "$append" \
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
	-virtfs "local,path=$run,mount_tag=run,security_model=none,multidevs=remap" \
	"${virtfs[@]}" \
	"${console[@]}" \
	-chardev "file,id=out,path=$run/stdout" -serial chardev:out \
	-chardev "file,id=err,path=$run/stderr" -serial chardev:err \
	<&5 2>"$run/qemu.err" &
qpid=$!
deadline=$((SECONDS + timeout))
while kill -0 "$qpid" 2>/dev/null; do
	if [ "$SECONDS" -ge "$deadline" ]; then
		kill -9 "$qpid" 2>/dev/null
		wait "$qpid" 2>/dev/null
		for f in stdout stderr; do : <>"$run/$f"; done
		wait "$cat_out" "$cat_err"
		qpid='' keep=1
		echo "rxe-vm: the command did not finish within ${timeout} s; the VM was killed" >&2
		echo "rxe-vm: command: $*" >&2
		exit 124
	fi
	sleep 0.2
done
wait "$qpid"
qrc=$?
qpid=
# If QEMU died before opening the FIFOs, a reader is still waiting: an
# O_RDWR open (never blocks) gives it a writer and, at once, end-of-file.
for f in stdout stderr; do : <>"$run/$f"; done
wait "$cat_out" "$cat_err"

if [ -e "$run/rc" ]; then
	exit "$(cat "$run/rc")"
fi
keep=1
echo "rxe-vm: the VM stopped before the command finished (qemu exit $qrc)" >&2
[ -s "$run/setup-error" ] && cat "$run/setup-error" >&2
[ -s "$run/qemu.err" ] && sed 's/^/rxe-vm: qemu: /' "$run/qemu.err" >&2
if [ -s "$run/console.log" ]; then
	echo "rxe-vm: last lines of the guest console:" >&2
	tail -n 20 "$run/console.log" | tr -d '\r' | sed 's/^/  | /' >&2
fi
exit 125
