#!/bin/bash
# microvm/run.sh - boot the rxe micro-VM, run one command in it, return its
# output and exit code, power off. Normally reached through vm-setup/with-rxe.
#
# usage: run.sh [--shell] [--] CMD [ARG...]
#        run.sh --pair [--capture FILE] CMD_A CMD_B
#        run.sh --accel | --up | --down
#   --shell            an interactive shell in the VM instead of CMD
#   --pair             two VMs, hosts A (192.0.2.1) and B (192.0.2.2), each
#                      with rxe0 on a NIC linked to the other's; runs the
#                      shell command CMD_A on A and CMD_B on B, both once the
#                      link answers, with RDMA_PEER_IP (the other's address)
#                      and RDMA_HOST (A or B) exported besides the usual;
#                      output lines are prefixed "A| " and "B| "; exits with
#                      the first non-zero status (A's, then B's), naming it.
#                      An empty CMD_B: B runs the commands A's root hands it
#                      in RDMA_PEER_JOBS (grader/evidence/remote.py), until A's ends
#   --capture FILE     with --pair: record every frame on the link, both
#                      directions, to FILE (pcap, written by QEMU on this
#                      host as the frames pass: readable while the pair
#                      runs). FILE is made mode 0600 (the guests' root reads
#                      it, their unprivileged users cannot); host A sees it
#                      as RDMA_CAPTURE when its directory is shared (any
#                      directory but /tmp and the like: it is, then)
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
#   RXE_VM_MEM=M  guest memory (2G; in a cgroup limit: less)  RXE_VM_SMP=N  CPUs (2; 1 on one CPU, and for a pair on fewer than 4)
#   RXE_VM_SHARE=D:D   more host directories to share read-write (the course
#                      tree and the current directory always are, unless the
#                      latter is /, /tmp or another of the guest's own)
#   RXE_VM_VERBOSE=1   keep the guest's console log (kernel messages and boot
#                      timings) in the run directory, whose path is printed
#   RXE_VM_COLD=1      never use the warm VM
#   RXE_VM_CAPTURE=F   what --capture F does
#   RXE_VM_LINK=L      a pair's link: socket (default) or dgram, QEMU 7.2's
#                      datagram netdev (INSTRUCTORS.md, 'The linked pair's speed')
#   RXE_VM_APPEND=S    more of the guest kernel's command line
#   RXE_VM_NO_RXE=1    no rxe device: the command makes one itself, as on
#                      a native host (vm-setup/setup-rxe.sh); RDMA_* unset
#   RXE_VM_DEVICES=N   rxe devices, each on its own netdev and address (1-3;
#                      default one per vCPU): make grade's lessons run side
#                      by side on them (grader/session/shards.py)
#   RXE_VM_ROOT=DIR    the guest's root file system (default /, the host's:
#                      the guest runs the host's programs)
#   RXE_VM_CACHE, RXE_VM_KERNEL_DEB: see build.sh; RXE_VM_ARCH: see pin.sh
# The guest is the host's architecture (uname -m): x86_64 boots the pinned
# amd64 kernel on qemu-system-x86_64, aarch64 the arm64 one on
# qemu-system-aarch64's virt machine.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/rxe.sh"
. "$here/pin.sh"
course=$(cd "$here/../.." && pwd)
cache=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-course/microvm}
timeout=${RXE_VM_TIMEOUT:-}
interactive=0
probe_only=0
serve=0
pair=0
# A host of a pair (set by --pair for its two children): "HOST LOCAL_PORT
# PEER_PORT", HOST A or B, the ports those of the link's UDP sockets.
member=${_RXE_VM_PAIR:-}
# --capture: the pcap file host A's QEMU writes (_RXE_VM_CAPTURE to A).
capture=${RXE_VM_CAPTURE:-}

# die MESSAGE [STATUS]
die() {
	echo "rxe-vm: $1" >&2
	exit "${2:-1}"
}

while [ $# -gt 0 ]; do
	case "$1" in
	--shell) interactive=1 ;;
	--accel) probe_only=1 ;;
	--up) serve=1 ;;
	--pair) pair=1 ;;
	--capture) [ $# -ge 2 ] || die "--capture needs a FILE" 2; capture=$2; shift ;;
	--capture=*) capture=${1#*=} ;;
	--down) exec "$here/warm.sh" down ;;
	--) shift; break ;;
	-h | --help) sed -n '2,53s/^# \{0,1\}//p' "$0"; exit 0 ;;
	-*) die "unknown option '$1' (see: $0 --help)" 2 ;;
	*) break ;;
	esac
	shift
done
[ $interactive = 1 ] || [ $probe_only = 1 ] || [ $serve = 1 ] || [ $pair = 1 ] || [ $# -gt 0 ] || die "no command given (usage: run.sh [--shell] [--] CMD [ARG...])" 2
[ $pair = 0 ] || [ $interactive = 1 ] || [ $# = 2 ] || die "--pair takes two commands, host A's and host B's, got $# (usage: run.sh --pair CMD_A CMD_B)" 2
[ $pair = 0 ] || [ $interactive = 0 ] || [ $# = 0 ] || die "--shell --pair takes no command: a shell on host A, and 'b CMD' in it runs CMD on host B" 2
[ $pair = 1 ] || [ -z "$capture" ] || [ -n "$member" ] || die "--capture records a linked pair's wire: it needs --pair" 2
# A command is killed after 30 minutes; a shell lives until you leave it.
[ -n "$timeout" ] || { [ $interactive = 1 ] && timeout=999999999 || timeout=1800; }
case "$timeout" in '' | *[!0-9]*) die "RXE_VM_TIMEOUT must be a number of seconds, got '$timeout'" 2 ;; esac

# --- a linked pair: this script twice, one per host, outputs prefixed ------
if [ $pair = 1 ]; then
	# Two free UDP ports on the loopback, one per end of the link.
	ports=$(python3 -c 'import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))') || die "cannot find two free UDP ports on 127.0.0.1"
	read -r port_a port_b <<<"$ports"
	# The capture: made here, empty and private (QEMU's filter-dump would
	# create it 0644 and truncates it: the mode stays), then host A's.
	cap_a=''
	if [ -n "$capture" ]; then
		case "$capture" in /*) ;; *) capture=$PWD/$capture ;; esac
		[ -d "$(dirname "$capture")" ] || die "--capture $capture: no such directory" 2
		(umask 077 && : >"$capture") && chmod 600 "$capture" || die "--capture $capture: cannot write it" 2
		cap_a=$(cd "$(dirname "$capture")" && pwd -P)/${capture##*/}
	fi
	# The hosts' meeting point: each writes HOST.ready there once its rxe0
	# is ACTIVE and starts its command when the other's is there too.
	meet=$(mktemp -d "${TMPDIR:-/tmp}/rxe-pair.XXXXXX") || die "mktemp failed"
	# host H CMD - run CMD (a shell command) on host H; output prefixed "H| ".
	host() {
		_RXE_VM_CAPTURE=$([ "$1" = A ] && echo "$cap_a") _RXE_VM_PAIR="$1 $2 $3 $meet" RXE_VM_COLD=1 "$0" -- bash -c "$4" \
			> >(sed -u "s/^/$1| /") 2> >(sed -u "s/^/$1| /" >&2) &
	}
	if [ $interactive = 1 ]; then
		# make vm-shell HOSTS=2: B serves, A's shell is ours (see stage2.sh).
		_RXE_VM_PAIR="B $port_b $port_a $meet serve" RXE_VM_COLD=1 "$0" -- true \
			> >(sed -u "s/^/B| /") 2> >(sed -u "s/^/B| /" >&2) &
		pid_b=$!
		_RXE_VM_CAPTURE=$cap_a _RXE_VM_PAIR="A $port_a $port_b $meet" "$0" --shell
		rc_a=$?
		kill $pid_b 2>/dev/null
		wait
		rm -rf "$meet"
		exit $rc_a
	fi
	host A "$port_a" "$port_b" "$1"
	pid_a=$!
	if [ -n "$2" ]; then
		host B "$port_b" "$port_a" "$2"
	else
		_RXE_VM_PAIR="B $port_b $port_a $meet serve" RXE_VM_COLD=1 "$0" -- true \
			> >(sed -u "s/^/B| /") 2> >(sed -u "s/^/B| /" >&2) &
	fi
	pid_b=$!
	trap 'kill $pid_a $pid_b 2>/dev/null; wait; rm -rf "$meet"; echo "rxe-vm: interrupted" >&2; exit 130' INT TERM HUP
	if [ -z "$2" ]; then
		# B serves A: done when A is.
		wait $pid_a
		rc_a=$?
		kill $pid_b 2>/dev/null
		wait
		rm -rf "$meet"
		[ $rc_a = 0 ] || echo "rxe-vm: host A's command failed (exit $rc_a)" >&2
		exit $rc_a
	fi
	wait -n -p first $pid_a $pid_b
	rc_first=$?
	if [ "$first" = "$pid_a" ]; then
		other=$pid_b first_host=A other_host=B
	else
		other=$pid_a first_host=B other_host=A
	fi
	# A host that failed leaves the other waiting for a peer that may never
	# answer again (a server for its client): the other gets RXE_VM_PAIR_GRACE
	# seconds (default 15) to end by itself, then it is killed and named.
	if [ $rc_first != 0 ]; then
		grace=${RXE_VM_PAIR_GRACE:-15}
		for _ in $(seq $((grace * 5))); do
			kill -0 "$other" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$other" 2>/dev/null; then
			echo "rxe-vm: host $other_host was still running $grace s after host $first_host's command failed (exit $rc_first); killed it" >&2
			kill "$other" 2>/dev/null
		fi
	fi
	wait "$other"
	rc_other=$?
	if [ "$first" = "$pid_a" ]; then rc_a=$rc_first rc_b=$rc_other; else rc_a=$rc_other rc_b=$rc_first; fi
	wait # the prefixing seds
	rm -rf "$meet"
	[ $rc_a = 0 ] || echo "rxe-vm: host A's command failed (exit $rc_a)" >&2
	[ $rc_b = 0 ] || echo "rxe-vm: host B's command failed (exit $rc_b)" >&2
	[ $rc_a = 0 ] && exit "$rc_b"
	exit "$rc_a"
fi

# A warm VM of this course tree runs the command at once if it can; it
# answers 200 when it cannot (none, busy, or not sharing what CMD needs).
if [ $interactive = 0 ] && [ $probe_only = 0 ] && [ $serve = 0 ] && [ "${RXE_VM_COLD:-0}" != 1 ] && [ "${RXE_VM_NO_RXE:-0}" != 1 ]; then
	"$here/warm.sh" job "$@"
	rc=$?
	[ $rc = 200 ] || exit $rc
fi
if [ $serve = 1 ] && "$here/warm.sh" alive; then
	echo "rxe-vm: a warm VM is already up for $course (make vm-down stops it)"
	exit 0
fi

# --- the host's architecture: QEMU, machine, console and output ports -------
# ports CHARDEV_OUT CHARDEV_ERR - QEMU options for the command's stdout and
# stderr ports, the guest's OUT and ERR (x86: serial ports; arm64's virt
# machine has one UART: virtio consoles).
arch=$(rxe_vm_arch) || die "this host is $(uname -m): the micro-VM runs on x86_64 and aarch64 hosts"
case "$arch" in
amd64)
	qemu_name=qemu-system-x86_64 machine=() con=ttyS0 ports_arg=''
	ports() { printf '%s\n' -chardev "$1,id=out" -serial chardev:out -chardev "$2,id=err" -serial chardev:err; }
	;;
arm64)
	qemu_name=qemu-system-aarch64 machine=(-M virt,gic-version=max) con=ttyAMA0
	ports_arg=' rxe_vm.ports=ttyAMA0,hvc0,hvc1'
	ports() { printf '%s\n' -device virtio-serial-pci,id=vser -chardev "$1,id=out" -device virtconsole,chardev=out \
		-chardev "$2,id=err" -device virtconsole,chardev=err; }
	;;
esac
guest_root=${RXE_VM_ROOT:-/}
qemu=$(command -v "$qemu_name") ||
	die "$qemu_name is missing (run: vm-setup/install-deps.sh)"
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
qpid='' keep=0 relay=''
cleanup() {
	[ $serve = 1 ] && return
	[ -n "$qpid" ] && kill -9 "$qpid" 2>/dev/null && wait "$qpid" 2>/dev/null
	[ -n "$relay" ] && kill "$relay" 2>/dev/null
	if [ $keep = 1 ]; then
		rm -f "$run/env.sh"
		echo "rxe-vm: kept the guest console log and spec in $run" >&2
	else
		rm -rf "$run"
	fi
}
trap cleanup EXIT
# A serving host B is stopped this way when host A is done: no news then.
trap '[ "${pair_serve:-}" = serve ] || echo "rxe-vm: interrupted" >&2; exit 130' INT TERM HUP

# A host of a pair: a virtio NIC whose frames travel as UDP datagrams to the
# other VM's (QEMU's socket netdev: no root, no bridge, nothing leaves the
# loopback). Its own MAC per host; no option ROM (nothing boots from it).
nic=()
if [ -n "$member" ]; then
	read -r pair_host port_local port_peer meet pair_serve <<<"$member"
	case "$pair_host" in
	A) my_ip=192.0.2.1 peer_ip=192.0.2.2 mac=52:54:00:c0:02:01 ;;
	B) my_ip=192.0.2.2 peer_ip=192.0.2.1 mac=52:54:00:c0:02:02 ;;
	*) die "internal: pair host must be A or B, got '$pair_host'" 2 ;;
	esac
	# (RXE_VM_LINK=dgram: QEMU 7.2's dgram netdev on the same two UDP
	# ports instead, for make bench-vm's comparison; socket is the default.)
	case "${RXE_VM_LINK:-socket}" in
	socket) nic=(-netdev "socket,id=link,udp=127.0.0.1:$port_peer,localaddr=127.0.0.1:$port_local") ;;
	dgram) nic=(-netdev "dgram,id=link,local.type=inet,local.host=127.0.0.1,local.port=$port_local,remote.type=inet,remote.host=127.0.0.1,remote.port=$port_peer") ;;
	*) die "RXE_VM_LINK must be socket or dgram, got '$RXE_VM_LINK'" 2 ;;
	esac
	nic+=(-device "virtio-net-pci,netdev=link,mac=$mac,romfile=")
	# Host A records the link (--capture): QEMU's filter-dump sees every
	# frame of the netdev, sent and received, and writes each at once.
	cap=${_RXE_VM_CAPTURE:-}
	unset RDMA_CAPTURE RXE_VM_CAPTURE _RXE_VM_CAPTURE
	if [ "$pair_host" = A ] && [ -n "$cap" ]; then
		case "$cap" in *,*) die "--capture $cap: QEMU's options cannot hold a comma in a path" 2 ;; esac
		nic+=(-object "filter-dump,id=dump,netdev=link,file=$cap")
	fi
fi
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
[ -n "$member" ] && add_share "$meet"
# Host A sees its capture where it is on this host (RDMA_CAPTURE), unless
# the directory is one of the guest's own.
if [ -n "${cap:-}" ] && [ "$pair_host" = A ]; then
	if ! system_dir "$(cd "$(dirname "$cap")" && pwd -P)"; then
		add_share "$(dirname "$cap")"
		export RDMA_CAPTURE=$cap
	fi
fi
virtfs=()
for i in "${!shares[@]}"; do
	case "${shares[$i]}" in *[[:space:]\'\"]*) die "cannot share '${shares[$i]}': its path has white space or quotes" ;; esac
	tags+="share$i=${shares[$i]} "
	virtfs+=(-virtfs "local,path=${shares[$i]},mount_tag=share$i,security_model=none,multidevs=remap")
done
# A one-shot command's VM sees the course's grader/ through a read-only
# share of its own that the guest caches (9p cache=loose): Python's imports
# of the grader's modules and the stats of its files then cost no round
# trip to this host after the first (MUTANTS=05,06: 4.5 of 45 CPU s). A
# change made here to grader/ while such a VM runs may not be seen in it;
# the warm VM (--up: the warm grader sees a changed grader file) and a
# shell (--shell: edit here, run there) keep the course share's live view.
course_real=$(cd "$course" && pwd -P)
grader_share=''
if [ $serve = 0 ] && [ $interactive = 0 ] && [ -d "$course_real/grader" ]; then
	virtfs+=(-virtfs "local,path=$course_real/grader,mount_tag=grader,security_model=none,readonly=on,multidevs=remap")
	grader_share=grader
fi
printf "SHARES='%s'\nCOURSE_DIR='%s'\nGRADER_SHARE='%s'\n" "$tags" "$course_real" "$grader_share" >"$run/boot.sh"
verbose=${RXE_VM_VERBOSE:-0}
[ "$verbose" = 1 ] && keep=1
# A doorbell on the guest's OUT port (stage2.sh): a warm VM's, rung by
# warm.sh; a serving host B's, rung by an inotify relay (below).
door=0
[ $serve = 1 ] && door=1
[ "${pair_serve:-}" = serve ] && command -v inotifywait >/dev/null && door=1
{
	printf 'DOOR=%s\n' "$door"
	printf 'COURSE_DIR=%q\nCWD=%q\nINTERACTIVE=%s\nVERBOSE=%s\nSERVE=%s\nIDLE=%s\nNO_RXE=%s\nDEVICES=%s\n' \
		"$course_real" "$(pwd -P)" "$interactive" "$verbose" \
		"$serve" "${RXE_VM_IDLE:-900}" "${RXE_VM_NO_RXE:-0}" "${RXE_VM_DEVICES:-}"
	if [ -n "$member" ]; then
		printf 'PAIR_HOST=%s\nPEER_IP=%s\nPEER_WAIT=%s\nPAIR_MEET=%q\nPAIR_SERVE=%s\n' \
			"$pair_host" "$peer_ip" "${RXE_VM_PEER_WAIT:-60}" "$(cd "$meet" && pwd -P)" "$([ "${pair_serve:-}" = serve ] && echo 1 || echo 0)"
	fi
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
		out=$(timeout 20 "$qemu" "${machine[@]}" -enable-kvm -cpu host -m 256M -nodefaults -display none \
			-no-reboot -kernel "$kernel" -append "console=$con panic=-1 rdinit=/bin/busybox" \
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
# arm64's max CPU has pointer authentication; QEMU's own (non-QARMA) hash for
# it boots an arm64 guest in 10 s instead of 16-20 s under TCG.
[ "$arch" = arm64 ] && tcg[3]=max,pauth-impdef=on

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
	# A host of a pair: one vCPU each unless the host's CPUs hold both
	# VMs' two. A vCPU is a host thread; a program that busy-polls keeps
	# it runnable, and on an oversubscribed host a runnable thread waits
	# its turn before the guest sees a packet (INSTRUCTORS.md, "The
	# linked pair's round trip").
	[ -z "$member" ] || [ -n "${RXE_VM_SMP:-}" ] || [ "$(nproc)" -ge 4 ] || RXE_VM_SMP=1
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

append="console=$con panic=-1 rdinit=/init$ports_arg ${RXE_VM_APPEND:-}"
# Under emulation on a busy host the guest's clock can look too slow to the
# kernel's IO-APIC timer check, which then panics at boot ("IO-APIC + timer
# doesn't work!", seen with make test beside four other VMs): skip it.
[ "$arch" = amd64 ] && append+=" no_timer_check"
# Boot work that is slow under emulation and of no use to a throwaway
# guest: the crypto algorithms' self-tests, and (x86) PCI interrupt routing
# through ACPI's interpreter (each virtio device's link, evaluated in AML
# under TCG: a quarter of the modules' loading), which SeaBIOS's PIR and MP
# tables give as well. A cold 1-vCPU `with-rxe true`: 6.0-7.2 CPU s
# without them, 5.2-5.8 with them (medians of 6-10 boots, alternating).
append+=" cryptomgr.notests=1"
[ "$arch" = amd64 ] && append+=" acpi=noirq"
[ -n "$member" ] && append+=" rxe_vm.nic=1 rxe_vm.ip=$my_ip"
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
	# The guest's OUT port is the doorbell warm.sh rings for each job
	# (stage2.sh): QEMU reads door.in; door.out takes nothing (no echo).
	rm -f "$state/door.in" "$state/door.out"
	mkfifo "$state/door.in" "$state/door.out" || die "mkfifo failed in $state"
	mapfile -t serve_ports < <(ports "pipe,path=$state/door" null)
	setsid "$qemu" "${machine[@]}" "${accel[@]}" -m "${RXE_VM_MEM:-2G}" -smp "${RXE_VM_SMP:-2}" \
		-nodefaults -no-user-config -display none -no-reboot \
		-kernel "$kernel" -initrd "$entry/initrd.cpio" -append "$append" \
		-virtfs "local,path=$guest_root,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$run,mount_tag=run,security_model=none,multidevs=remap" \
		"${virtfs[@]}" -serial "file:$state/console.log" \
		"${serve_ports[@]}" </dev/null >/dev/null 2>"$state/qemu.err" &
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

# The guest's OUT/ERR ports reach our stdout/stderr through FIFOs that cat
# drains: cat shares our descriptors, so output to a regular file lands at
# the right offset (QEMU reopening /dev/fd/1 would write over it). Each
# FIFO's read end is opened here, before QEMU starts, and handed to cat;
# fds 7 and 8 are our own write ends (an O_RDWR open never blocks), so a
# cat sees end-of-file only once QEMU has exited and we close them -
# whether QEMU ever opened its end or not, and however late cat starts.
mkfifo "$run/stdout" "$run/stderr" || die "mkfifo failed in $run"
exec 7<>"$run/stdout" 8<>"$run/stderr"
exec 9<"$run/stdout"
cat <&9 7>&- 8>&- 9<&- &
cat_out=$!
exec 9<"$run/stderr"
cat <&9 >&2 7>&- 8>&- 9<&- &
cat_err=$!
exec 9<&-

# The shell gets our terminal (fd 5: a background job's stdin would be
# /dev/null); a command gets no input.
if [ $interactive = 1 ]; then exec 5<&0; else exec 5</dev/null; fi
out_port="file,path=$run/stdout"
if [ $door = 1 ]; then
	# A serving host B's OUT port is its doorbell (stage2.sh), as a warm
	# VM's: rung here when host A moves a job into the meeting directory
	# (grader/evidence/remote.py), which inotify sees on this side of 9p.
	mkdir -p "$meet/jobs"
	mkfifo "$run/door.in" "$run/door.out" || die "mkfifo failed in $run"
	inotifywait -m -q -e moved_to --format x "$meet/jobs" 2>/dev/null 9<>"$run/door.in" >&9 7>&- 8>&- &
	relay=$!
	out_port="pipe,path=$run/door"
fi
mapfile -t out_ports < <(ports "$out_port" "file,path=$run/stderr")
"$qemu" "${machine[@]}" "${accel[@]}" -m "${RXE_VM_MEM:-2G}" -smp "${RXE_VM_SMP:-2}" \
	-nodefaults -no-user-config -display none -no-reboot \
	-kernel "$kernel" -initrd "$entry/initrd.cpio" -append "$append" \
	-virtfs "local,path=$guest_root,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
	-virtfs "local,path=$run,mount_tag=run,security_model=none,multidevs=remap" \
	"${virtfs[@]}" "${nic[@]}" \
	"${console[@]}" "${out_ports[@]}" \
	<&5 2>"$run/qemu.err" 7>&- 8>&- &
qpid=$!
# SECONDS counts whole seconds from the shell's start, so it can be up to a
# second ahead of the time elapsed: the limit is never reached early.
deadline=$((SECONDS + timeout + 1))
while kill -0 "$qpid" 2>/dev/null; do
	if [ "$SECONDS" -ge "$deadline" ]; then
		kill -9 "$qpid" 2>/dev/null
		wait "$qpid" 2>/dev/null
		exec 7>&- 8>&-
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
# QEMU is gone: our write ends were the last ones.
exec 7>&- 8>&-
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
