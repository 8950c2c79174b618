#!/bin/bash
# microvm/warm.sh - the host side of a warm micro-VM (run.sh --up): one per
# course tree, kept in the cache under warm/KEY/ (KEY: the tree's path).
#
# usage: warm.sh job CMD [ARG...]   run CMD in the warm VM, stream its stdout
#                                   and stderr, exit with its status; exit 200
#                                   (before anything ran) when it cannot:
#                                   none up, busy, wedged (then stopped), or
#                                   CMD needs a directory it does not share
#        warm.sh alive              exit 0 when this tree's warm VM is up
#        warm.sh down               stop it
#        warm.sh state              print its state directory
# RXE_VM_TIMEOUT applies as in run.sh (exit 124, the command killed).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/rxe.sh"
course=$(cd "$here/../.." && pwd -P)
cache=${RXE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-course/microvm}
state="$cache/warm/$(printf '%s' "$course" | sha256sum | cut -c1-16)"
run=$state/run

# alive - 0: up; 1: none; 2: wedged (QEMU there, no heartbeat for
# RXE_VM_WEDGED seconds, default 60). A bound for a hang, not a speed: the
# guest's loops write it every second, and a loaded host (load
# 15, make test's other VMs) has held it back for over 10 s.
wedged=${RXE_VM_WEDGED:-60}
alive() {
	local pid
	pid=$(cat "$state/qemu.pid" 2>/dev/null) || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	[ -e "$run/ready" ] || return 1
	[ -n "$(find "$run/heartbeat" -newermt "-$wedged seconds" 2>/dev/null)" ] || return 2
}

down() {
	local pid
	pid=$(cat "$state/qemu.pid" 2>/dev/null) && kill -9 "$pid" 2>/dev/null
	rm -rf "$state"
}

# covered DIR - is DIR inside one of the warm VM's shares?
covered() {
	local d s
	d=$(cd "$1" 2>/dev/null && pwd -P) || return 1
	case "$d" in / | /tmp | /var/tmp | /run | /dev | /dev/shm | /proc | /sys) return 0 ;; esac
	while read -r s; do
		case "$d/" in "$s"/*) return 0 ;; esac
	done <"$state/shares"
	return 1
}

# ring - the doorbell (run.sh --up): the guest looks at its jobs now, not
# within its second. O_RDWR: the open never blocks, whoever reads the FIFO.
ring() {
	[ -p "$state/door.in" ] && { echo >&9; } 9<>"$state/door.in"
}

job() {
	local id j pid timeout deadline rc
	alive
	case $? in
	0) ;;
	2)
		echo "rxe-vm: the warm VM stopped answering; stopping it and booting a fresh VM" >&2
		down
		return 200 ;;
	*) return 200 ;;
	esac
	covered "$PWD" || return 200
	IFS=: read -ra extra <<<"${RXE_VM_SHARE:-}"
	for d in "${extra[@]}"; do
		[ -z "$d" ] || covered "$d" || return 200
	done
	# One command at a time; another caller boots a cold VM instead.
	exec 8>"$state/lock"
	flock -n 8 || return 200
	timeout=${RXE_VM_TIMEOUT:-1800}
	id="$$-$RANDOM"
	j=$run/jobs/$id
	mkdir -p "$j" || return 200
	{
		printf 'CWD=%q\nCMD=(' "$(pwd -P)"
		printf '%q ' "$@"
		printf ')\n'
	} >"$j/spec.sh"
	rxe_vm_env >"$j/env.sh"
	: >"$j/stdout"
	: >"$j/stderr"
	: >"$j/go"
	ring
	# Taken while the guest's heartbeat goes on (within RXE_VM_WEDGED s),
	# or the guest is wedged: stop it, boot cold. Not a fixed few seconds:
	# a guest whose one vCPU warms the grader up again, on a loaded host,
	# took over 5 s (fresh-clone make test, with-rxe.bats).
	local n=0
	until [ -e "$j/started" ]; do
		n=$((n + 1))
		if [ $((n % 20)) = 0 ]; then
			alive
			case $? in
			0) [ "$n" -lt $((wedged * 20)) ] || break ;;
			2) echo "rxe-vm: the warm VM stopped answering; stopping it and booting a fresh VM" >&2
				down
				return 200 ;;
			*) return 200 ;;
			esac
		fi
		sleep 0.05
	done
	if [ ! -e "$j/started" ]; then
		echo "rxe-vm: the warm VM did not take the command within $wedged s; stopping it and booting a fresh VM" >&2
		down
		return 200
	fi
	sleep 1000000 &
	pid=$!
	tail -q -s 0.05 -n +1 -f --pid="$pid" "$j/stdout" &
	local t_out=$!
	tail -q -s 0.05 -n +1 -f --pid="$pid" "$j/stderr" >&2 &
	local t_err=$!
	# (+ 1: SECONDS, whole seconds, can be a second ahead of the time
	# elapsed; a 3 s limit killed a command after 2.2 s)
	deadline=$((SECONDS + timeout + 1))
	rc=''
	n=0
	while [ -z "$rc" ]; do
		n=$((n + 1))
		if [ -e "$j/rc" ]; then
			# (empty: the guest is writing it; look again shortly)
			read -r rc <"$j/rc" || [ -n "$rc" ] || sleep 0.01
		# (alive is two programs' starts: once a second, not at every
		# look, which cost the host 60 starts a second beside the VM)
		elif [ $((n % 20)) = 0 ] && ! alive; then
			rc=125
			echo "rxe-vm: the warm VM stopped before the command finished" >&2
		elif [ "$SECONDS" -ge "$deadline" ]; then
			: >"$j/kill"
			ring
			for _ in $(seq 100); do [ -e "$j/rc" ] && break; sleep 0.05; done
			rc=124
			echo "rxe-vm: the command did not finish within ${timeout} s; it was killed" >&2
			echo "rxe-vm: command: $*" >&2
		else
			sleep 0.05
		fi
	done
	kill "$pid" 2>/dev/null
	wait "$t_out" "$t_err" 2>/dev/null
	rm -rf "$j"
	return "$rc"
}

case "${1:-}" in
job) shift; job "$@" ;;
alive) alive ;;
down)
	if alive; then down; echo "rxe-vm: warm VM stopped"; else down; echo "rxe-vm: no warm VM was up"; fi ;;
state) echo "$state" ;;
*) sed -n '2,14s/^# \{0,1\}//p' "$0"; exit 2 ;;
esac
