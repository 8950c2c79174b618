#!/bin/bash
# Guest side of the micro-VM, PID 1 after switch_root: bring up rxe0 on a
# dummy netdev, run the command from /run/rxe-vm/spec.sh with its stdout on
# ttyS1 and stderr on ttyS2 (the host streams both), write its exit code to
# /run/rxe-vm/rc, power off.
RUN=/run/rxe-vm
. "$RUN/spec.sh"
. "$COURSE_DIR/vm-setup/lib/rxe.sh"

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

mkdir -p /dev/pts
mount -t devpts -o gid=5,mode=620 devpts /dev/pts
ln -sf /proc/self/fd /dev/fd
hostname rxe-vm
ip link set lo up
ip link add rdma0 type dummy &&
	ip addr add 192.0.2.1/24 dev rdma0 &&
	ip link set rdma0 up || fail "cannot create the dummy netdev rdma0"
rdma link add rxe0 type rxe netdev rdma0 || fail "rdma link add rxe0 failed"
ready=$(rxe_wait_ready 10) || fail "rxe0 did not become ACTIVE with a RoCE v2 IPv4 GID"
chmod 0666 /dev/infiniband/* 2>/dev/null
read -r dev gid ip netdev <<<"$ready"
echo "$(cut -d' ' -f1 /proc/uptime)" >"$RUN/ready-uptime"

# The host's environment, then what the course promises every command.
. "$RUN/env.sh"
export RDMA_BACKEND=vm RDMA_DEVICE=$dev RDMA_GID_INDEX=$gid RDMA_IP=$ip RDMA_NETDEV=$netdev
cd "$CWD" || fail "cannot cd to $CWD"

for t in /dev/ttyS1 /dev/ttyS2; do stty -F "$t" raw -echo; done
if [ "$INTERACTIVE" = 1 ]; then
	stty -F /dev/ttyS0 sane
	echo "rxe-vm: $RDMA_DEVICE is ACTIVE, GID index $RDMA_GID_INDEX, IP $RDMA_IP. Leave with 'exit'."
	setsid -c bash -i <>/dev/ttyS0 >&0 2>&0
	rc=$?
else
	"${CMD[@]}" </dev/null >/dev/ttyS1 2>/dev/ttyS2
	rc=$?
fi
# stty's tcsetattr(TCSADRAIN) waits until the ports have sent everything.
for t in /dev/ttyS1 /dev/ttyS2; do stty -F "$t" raw; done
echo "$rc" >"$RUN/rc"
poweroff_now
