#!/bin/bash
# Guest side of the micro-VM, PID 1 after switch_root: bring up rxe0 on the
# netdev init made (rdma0: a dummy, or a pair's NIC), run the command from /run/rxe-vm/spec.sh with its stdout on
# ttyS1 and stderr on ttyS2 (the host streams both; arm64: hvc0 and hvc1,
# as rxe_vm.ports= says), write its exit code to /run/rxe-vm/rc, power off.
# Its own PATH and HOME (init's PATH is /bin, and the guest runs as root);
# the command's environment is made apart (command_env, below).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
RUN=/run/rxe-vm
BB=/run/rxe-vm-bin/busybox
. "$RUN/spec.sh"
TTY=/dev/ttyS0 OUT=/dev/ttyS1 ERR=/dev/ttyS2
for w in $(</proc/cmdline); do
	case "$w" in rxe_vm.ports=*,*,*)
		IFS=, read -r TTY OUT ERR <<<"${w#rxe_vm.ports=}"
		TTY=/dev/$TTY OUT=/dev/$OUT ERR=/dev/$ERR
		;;
	esac
done
. "$COURSE_DIR/vm-setup/lib/rxe.sh"

# mark LABEL - with RXE_VM_VERBOSE=1, log the guest uptime at LABEL on the console.
mark() {
	local up
	[ "${VERBOSE:-0}" = 1 ] || return 0
	read -r up _ </proc/uptime
	echo "rxe-vm: $up $1" >/dev/console
}

poweroff_now() {
	sync
	echo o >/proc/sysrq-trigger
	sleep 10
}

fail() {
	echo "rxe-vm: $*" >&2
	echo "rxe-vm: $*" >"$RUN/setup-error"
	poweroff_now
}

mark "stage2 started"
$BB mkdir -p /dev/pts
$BB mount -t devpts -o gid=5,mode=620 devpts /dev/pts
$BB ln -sf /proc/self/fd /dev/fd
# A host of a linked pair (run.sh --pair) is rxe-vm-a or rxe-vm-b.
echo "rxe-vm${PAIR_HOST:+-${PAIR_HOST,,}}" >/proc/sys/kernel/hostname
if [ "${NO_RXE:-0}" = 1 ]; then
	# RXE_VM_NO_RXE=1: rdma0 and the rxe module, but no device: the command
	# sets one up itself, as on a native host (vm-setup/setup-rxe.sh).
	dev='' gid='' ip='' netdev=''
	read -r up _ </proc/uptime
	echo "$up" >"$RUN/ready-uptime"
else
	rdma link add rxe0 type rxe netdev rdma0 || fail "rdma link add rxe0 failed"
	mark "rxe0 added"
	ready=$(rxe_wait_ready 10) || fail "rxe0 did not become ACTIVE with a RoCE v2 IPv4 GID"
	$BB chmod 0666 /dev/infiniband/* 2>/dev/null
	read -r dev gid ip netdev <<<"$ready"
	devices="$dev,$gid,$ip,$netdev"
	# More devices (one VM alone, not a pair's host): one per vCPU, at most
	# three, or DEVICES (run.sh's RXE_VM_DEVICES). Each has its own dummy
	# netdev, address, counters: make grade's lessons run side by side,
	# one device each (grader/session/shards.py). Listed in RDMA_DEVICES.
	want=${DEVICES:-$($BB nproc)}
	[ -n "${PEER_IP:-}" ] && want=1
	n=1
	for addr in 198.51.100.1 203.0.113.1; do
		[ "$n" -lt "$want" ] || break
		ip link add "rdma$n" type dummy && ip addr add "$addr/24" dev "rdma$n" &&
			ip link set "rdma$n" up && rdma link add "rxe$n" type rxe netdev "rdma$n" || break
		for _ in $(seq 200); do
			[ "$(rxe_port_state "rxe$n")" = ACTIVE ] && g=$(rxe_gid_index "rxe$n") && break
			sleep 0.05
		done
		[ -n "${g:-}" ] || break
		devices+=" rxe$n,${g%% *},${g##* },rdma$n"
		n=$((n + 1)) g=''
	done
	$BB chmod 0666 /dev/infiniband/* 2>/dev/null
	read -r up _ </proc/uptime
	echo "$up" >"$RUN/ready-uptime"
	mark "rxe devices ready: $devices"
fi
# The pair's barrier: both hosts' commands start once both are ready (each
# says so in the meeting directory both share) and the link carries packets
# both ways (the other host answers ping).
if [ -n "${PEER_IP:-}" ]; then
	if [ "${PAIR_SERVE:-0}" = 1 ]; then
		mkdir -p "$PAIR_MEET/jobs" && : >"$PAIR_MEET/B.serves"
		SERVE=1 IDLE=999999999
	fi
	: >"$PAIR_MEET/$PAIR_HOST.ready"
	other=$([ "$PAIR_HOST" = A ] && echo B || echo A)
	$BB mkfifo /run/rxe-vm-meet
	exec 8<>/run/rxe-vm-meet
	n=0
	until [ -e "$PAIR_MEET/$other.ready" ]; do
		n=$((n + 1))
		[ $n -lt $((${PEER_WAIT:-60} * 10)) ] || fail "host $PAIR_HOST: host $other was not ready within ${PEER_WAIT:-60} s"
		read -r -t 0.1 -u 8
	done
	n=0
	until $BB ping -c 1 -W 1 "$PEER_IP" >/dev/null 2>&1; do
		n=$((n + 1))
		[ $n -lt 10 ] || fail "host $PAIR_HOST: no answer from host $other ($PEER_IP) over the link within 10 s ($(ip -br addr show dev rdma0 2>&1))"
	done
	exec 8<&-
	mark "peer $PEER_IP answers"
fi

# The command's environment, made in the shell that runs it and never in
# this one, whose OUT, ERR, RUN, CMD, ... nothing of the host's may change:
# the host's variables that vm-setup/lib/rxe.sh's rxe_vm_env lets through
# (env.sh), sbin on PATH (the command runs as root and the grader calls ip,
# rdma and mount; a Debian user's PATH has no sbin), then what the course
# promises every command (rdma_env). Shell code for bash -c or eval with
# env.sh in $1 and rdma_env in $2: positional parameters, which env.sh
# cannot set.
# shellcheck disable=SC2016 # expanded where it runs
command_env='. "$1"
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin ;; esac
case ":$PATH:" in *:/sbin:*) ;; *) PATH=$PATH:/sbin ;; esac
eval "$2"'
if [ "${NO_RXE:-0}" = 1 ]; then
	rdma_env='unset RDMA_BACKEND RDMA_DEVICE RDMA_GID_INDEX RDMA_IP RDMA_NETDEV'
else
	rdma_env="export RDMA_BACKEND=vm RDMA_DEVICE=$dev RDMA_GID_INDEX=$gid RDMA_IP=$ip RDMA_NETDEV=$netdev RDMA_DEVICES='$devices'"
fi
[ -n "${PEER_IP:-}" ] && rdma_env+="; export RDMA_PEER_IP=$PEER_IP RDMA_HOST=$PAIR_HOST"
# B serves A (with-rxe --pair CMD_A ''): A's root hands B commands as jobs
# in the meeting directory (grader/evidence/remote.py), which A's sandboxed programs
# see read-only.
[ "$PAIR_HOST" = A ] && [ -e "$PAIR_MEET/B.serves" ] &&
	rdma_env+="; export RDMA_PEER_JOBS=$PAIR_MEET/jobs"
eval "$rdma_env"
cd "$CWD" || fail "cannot cd to $CWD"

# A warm VM (run.sh --up) serves commands from $RUN/jobs/ID/ (warm.sh is the
# other side), host B of a serving pair from $PAIR_MEET/jobs/ID/ (A's
# grader/evidence/remote.py): spec.sh and env.sh, then "go"; it writes stdout, stderr
# and, last, rc. "kill" in the job directory ends the command's session, and
# so does a "lease" file its client stopped touching for 3 s (a client killed
# with SIGKILL). Between commands nothing of the last one is left: its
# session is killed, the sandbox's user has no process and no file in /tmp.
JOBS=$RUN/jobs
[ "${PAIR_SERVE:-0}" = 1 ] && JOBS=$PAIR_MEET/jobs
serve_job() {
	local j=$1 pid rc watcher
	: >"$j/started"
	# The job's spec.sh comes after its env.sh: CWD and CMD are its own.
	# A pair's host B tells the command its job directory (RXE_JOB_DIR):
	# the reference peer asks host A's kernel questions through it.
	# A subshell, not a new bash (0.15 s a start under emulation): what it
	# has of this script that env.sh does not set is not exported, and
	# setsid's exec leaves the command only its environment.
	(
		set -- "$j/env.sh" "$rdma_env" "$j" "${PAIR_SERVE:-0}"
		eval "$command_env"
		. "$3/spec.sh"
		[ "$4" = 1 ] && export RXE_JOB_DIR=$3
		cd "$CWD" && exec setsid "${CMD[@]}"
	) </dev/null >"$j/stdout" 2>"$j/stderr" 7<&- 9<&- &
	pid=$!
	# A watcher keeps the heartbeat and obeys "kill"; the command's end is
	# seen at once by wait. It looks as often as the serve loop below (a
	# warm VM's host rings the doorbell after "kill").
	(
		n=0
		while kill -0 "$pid" 2>/dev/null; do
			[ -e "$j/kill" ] && kill -9 -- "-$pid" 2>/dev/null
			[ $((n % per_s)) = 0 ] && : >"$RUN/heartbeat"
			if [ $((n % (3 * per_s))) = $((3 * per_s - 1)) ] && [ -e "$j/lease" ]; then
				[ "$j/lease" -nt "$j/lease.seen" ] || kill -9 -- "-$pid" 2>/dev/null
				: >"$j/lease.seen"
			fi
			n=$((n + 1))
			read -r -t "$nap" -u 9
		done
	) &
	watcher=$!
	wait "$pid"
	rc=$?
	kill "$watcher" 2>/dev/null
	wait "$watcher" 2>/dev/null
	kill -9 -- "-$pid" 2>/dev/null
	# The command is over: the host may read its status now. What follows
	# is done before the next command starts (this loop takes one at a
	# time), not before its caller goes on (0.1 s under emulation).
	# Written in place, not renamed (busybox's mv is a program's start,
	# 0.1 s under emulation): an empty rc is one being written, which
	# warm.sh and remote.py read again.
	echo "$rc" >"$j/rc"
	pkill -9 -U 64000 2>/dev/null
	# What the sandbox's user left in /tmp goes; nothing else does. Host
	# directories shared under /tmp (a course in /tmp/...) are 9p mounts
	# here: never descend into another file system.
	find /tmp -xdev -mindepth 1 -maxdepth 1 -user 64000 \
		-exec rm -rf --one-file-system {} + 2>/dev/null
}
if [ "${SERVE:-0}" = 1 ]; then
	cd /
	mkdir -p "$JOBS"
	# The warm grader (grader/session/server.py): pytest, the grader and
	# pyverbs imported once, a grading session forked per `make grade`.
	# Its socket is root's alone; a job that finds none grades cold, one
	# that finds it warming up waits for it (grader/session/client.c).
	# --ahead: once a grading of one lesson ended, the same grading is
	# made ready (configured and collected) for the student's regrade.
	if [ "${PAIR_SERVE:-0}" != 1 ] && [ -e "$COURSE_DIR/grader/session/server.py" ]; then
		$BB mkdir -p -m 0700 /run/rdma-course-grader
		: >/run/rdma-course-grader/warming
		(
			cd "$COURSE_DIR" || exit 1
			set -- "$RUN/env.sh" "$rdma_env"
			eval "$command_env"
			setsid /usr/bin/python3 -m grader.session.server --ahead /run/rdma-course-grader/sock
			rm -f /run/rdma-course-grader/warming
		) </dev/null >/run/rdma-course-grader/log 2>&1 &
	fi
	# Sleeping is bash's read -t on a FIFO nobody writes: no process per
	# tick (under TCG an idle loop of forks costs the host half a core).
	$BB mkfifo /run/rxe-vm-tick
	exec 7<>/run/rxe-vm-tick
	# Host B of a pair: the reference peers' zygote (grader/evidence/
	# trusted/zygote.py, pyverbs imported once: a peer's part of a job 1.3 s,
	# not 2.0-2.3 s). Host A's remote.py sends its peers through it, at the
	# socket it names (B_ZYGOTE); a job that finds none runs the peer
	# itself. Its stdin is the tick FIFO, which nobody writes and this loop
	# holds open: it serves until the poweroff.
	if [ "${PAIR_SERVE:-0}" = 1 ] && [ -e "$COURSE_DIR/grader/evidence/trusted/zygote.py" ]; then
		$BB mkdir -p -m 0700 /run/rdma-course-peers
		(
			cd "$COURSE_DIR" || exit 1
			set -- "$RUN/env.sh" "$rdma_env"
			eval "$command_env"
			exec setsid /usr/bin/python3 grader/evidence/trusted/zygote.py /run/rdma-course-peers/sock
		) <&7 >/run/rdma-course-peers/log 2>&1 &
	fi
	# The host rings a doorbell when it adds a job (run.sh: the OUT port,
	# which serving leaves unused, a FIFO; a warm VM's rung by warm.sh,
	# a serving host B's by an inotify relay on the meeting directory):
	# the loop sleeps in a read of it, up to a second between looks, not a
	# tenth. Each look into the 9p jobs directory costs the host: an idle
	# 2-vCPU warm VM took 18 % of a host core at ten looks a second, 3 %
	# at one. After a ring it looks ten times a second for a second (host
	# A's "go" follows its job's arrival). Without one: ten a second.
	nap=0.1 per_s=10
	if [ "${DOOR:-0}" = 1 ] && [ -c "$OUT" ] && $BB stty -F "$OUT" raw -echo 2>/dev/null; then
		exec 9<"$OUT"
		nap=1 per_s=1
	else
		exec 9<&7
	fi
	: >"$RUN/heartbeat"
	: >"$RUN/ready"
	idle=0 tick=0 hot=0
	while [ $idle -lt $((IDLE * per_s)) ]; do
		for go in "$JOBS"/*/go; do
			[ -e "$go" ] || continue
			# Its go goes once it is served (this loop takes one job at
			# a time): rm is a program's start, which the job's caller
			# would wait for.
			serve_job "${go%/go}"
			rm -f "$go"
			# (a job that came meanwhile rang while the watcher read)
			idle=0 hot=10
		done
		# The host takes a guest whose heartbeat stops for wedged.
		[ $((tick % per_s)) = 0 ] && : >"$RUN/heartbeat"
		tick=$((tick + 1))
		if [ $hot -gt 0 ]; then
			hot=$((hot - 1)) wait_s=0.1
		else
			idle=$((idle + 1)) wait_s=$nap
		fi
		# (a ring; the tick FIFO never has a line)
		read -r -t "$wait_s" -u 9 && hot=10
	done
	poweroff_now
fi

if [ "$INTERACTIVE" = 1 ]; then
	$BB stty -F "$TTY" sane
	echo "rxe-vm: $RDMA_DEVICE is ACTIVE, GID index $RDMA_GID_INDEX, IP $RDMA_IP. Leave with 'exit'."
	rc_opt=()
	if [ -n "${RDMA_PEER_JOBS:-}" ]; then
		# make vm-shell HOSTS=2: this is host A; 'b CMD' runs CMD on host B.
		rc_opt=(--rcfile /run/rxe-vm-bashrc)
		cat >/run/rxe-vm-bashrc <<-RC
			[ -f ~/.bashrc ] && . ~/.bashrc
			b() { /usr/bin/python3 "$COURSE_DIR/grader/evidence/remote.py" "\$RDMA_PEER_JOBS" -- bash -c "\$*" 2>&1 | sed -u 's/^/B| /'; }
		RC
		echo "rxe-vm: host A ($RDMA_IP) of two; host B is $RDMA_PEER_IP. 'b CMD' runs CMD on B, for example:"
		echo "rxe-vm:   b 'ibv_rc_pingpong -g \$RDMA_GID_INDEX' &  sleep 2; ibv_rc_pingpong -g \$RDMA_GID_INDEX \$RDMA_PEER_IP"
	fi
	(
		set -- "$RUN/env.sh" "$rdma_env" setsid -c bash "${rc_opt[@]}" -i
		eval "$command_env"
		shift 2
		exec "$@"
	) <>"$TTY" >&0 2>&0
	rc=$?
else
	(
		set -- "$RUN/env.sh" "$rdma_env" "${CMD[@]}"
		eval "$command_env"
		shift 2
		exec "$@"
	) </dev/null >"$OUT" 2>"$ERR"
	rc=$?
fi
# stty's tcsetattr(TCSADRAIN) waits until the ports have sent everything.
for t in "$OUT" "$ERR"; do $BB stty -F "$t" raw; done
echo "$rc" >"$RUN/rc"
mark "command done"
poweroff_now
