#!/bin/bash
# bench-vm.sh (make bench-vm) - how fast the micro-VM is ready.
#   ready:    kernel start to rxe0 ACTIVE with its RoCE v2 GID (guest uptime)
#   with-rxe: wall time of one `vm-setup/with-rxe true` (QEMU start to power-off),
#             then the same on a warm VM (make vm-up)
#   idle:     the host CPU a warm VM takes in a minute idle, then running sleep,
#             against one cold with-rxe run's
#   pingpong: ibv_rc_pingpong's time per round trip (1500 bytes), both sides
#             in one VM, then across a linked pair (with-rxe --pair), then
#             across a pair linked by QEMU's dgram netdev (RXE_VM_LINK=dgram)
# Median of N runs (default 5). Target: ready <= 4 s under TCG on 2 cores.
#
# usage: vm-setup/bench-vm.sh [RUNS]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:-5}
case "$runs" in '' | *[!0-9]* | 0) echo "bench-vm: RUNS must be a positive number, got '$runs'" >&2; exit 2 ;; esac

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

"$here/microvm/build.sh" >/dev/null || exit 1
# The CPU (1/100 s) this shell's waited-for children used, QEMU's included.
child_ticks() { awk '{ print $16 + $17 }' "/proc/$$/stat"; }
ready=() wall=() boot=()
for i in $(seq "$runs"); do
	t0=$(date +%s%N) c0=$(child_ticks)
	r=$(RXE_VM_COLD=1 RXE_BACKEND=vm "$here/with-rxe" cat /run/rxe-vm/ready-uptime) || { echo "bench-vm: run $i failed" >&2; exit 1; }
	t1=$(date +%s%N)
	boot+=("$(($(child_ticks) - c0))")
	ready+=("$r")
	wall+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')")
	printf 'run %d: ready %.2f s, with-rxe %s s\n' "$i" "$r" "${wall[-1]}"
done
# The same command on a warm VM (make vm-up), in the same run.
"$here/microvm/run.sh" --down >/dev/null
"$here/microvm/run.sh" --up >/dev/null || { echo "bench-vm: the warm VM did not start" >&2; exit 1; }
warm=()
for i in $(seq "$runs"); do
	t0=$(date +%s%N)
	"$here/with-rxe" true || { echo "bench-vm: warm run $i failed" >&2; exit 1; }
	t1=$(date +%s%N)
	warm+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')")
	printf 'warm run %d: with-rxe %s s\n' "$i" "${warm[-1]}"
done
# The warm VM idle (its grader warmed up), then running `sleep`: the host
# CPU its QEMU takes in a minute, against one cold VM's whole run (a
# ratio: both scale with the host). Its loops sleep on the doorbell
# warm.sh rings (stage2.sh); looking into the 9p jobs directory ten times
# a second, idle took 18 % of a core here, 11 s a minute (boot: 5 s).
sleep 60
qpid=$(cat "$("$here/microvm/warm.sh" state)/qemu.pid")
ticks() { awk '{ print $14 + $15 }' "/proc/$qpid/stat"; }
t0=$(ticks); sleep 20; t1=$(ticks)
"$here/with-rxe" sleep 20 || { echo "bench-vm: warm sleep failed" >&2; exit 1; }
t2=$(ticks)
idle_min=$(((t1 - t0) * 3)) sleep_min=$(((t2 - t1) * 3))
"$here/microvm/run.sh" --down >/dev/null
# ibv_rc_pingpong: one VM (server and client on rxe0) against a pair (server
# on A, client on B), alternated so that both see the same machine load.
pp='ibv_rc_pingpong -g $RDMA_GID_INDEX -n 500 -s 1500'
# The server says nothing before it listens: the client tries again while it
# is refused (a client that came too early left the server waiting until
# the VM's timeout: seen under load, 14 minutes), and nothing waits forever.
client() { echo "for i in \$(seq 20); do sleep 0.5; timeout 120 $pp $1 && break; done"; }
usec() { sed -n 's/.* = \([0-9.]*\) usec\/iter$/\1/p' | tail -n 1; }
single=() pair=() dgram=()
for i in $(seq "$runs"); do
	u=$(RXE_VM_COLD=1 RXE_BACKEND=vm "$here/with-rxe" bash -c "timeout 150 $pp & $(client '$RDMA_IP'); wait" 2>&1 | usec)
	[ -n "$u" ] || { echo "bench-vm: single-VM ibv_rc_pingpong run $i failed" >&2; exit 1; }
	single+=("$u")
	u=$("$here/with-rxe" --pair "timeout 150 $pp" "$(client '$RDMA_PEER_IP')" 2>&1 | grep '^B| ' | usec)
	[ -n "$u" ] || { echo "bench-vm: pair ibv_rc_pingpong run $i failed" >&2; exit 1; }
	pair+=("$u")
	u=$(RXE_VM_LINK=dgram "$here/with-rxe" --pair "timeout 150 $pp" "$(client '$RDMA_PEER_IP')" 2>&1 | grep '^B| ' | usec)
	[ -n "$u" ] || { echo "bench-vm: pair (dgram) ibv_rc_pingpong run $i failed" >&2; exit 1; }
	dgram+=("$u")
	printf 'run %d: ibv_rc_pingpong round trip: one VM %s us, pair %s us, pair (dgram) %s us\n' "$i" "${single[-1]}" "${pair[-1]}" "${dgram[-1]}"
done
accel=$("$here/microvm/run.sh" --accel | sed -n 's/^accel: //p')
cold_m=$(printf '%s\n' "${wall[@]}" | median)
warm_m=$(printf '%s\n' "${warm[@]}" | median)
printf 'micro-VM (%s, %s CPUs, %d runs): ready median %.2f s (target <= 4 s), with-rxe true median %.2f s\n' \
	"${RXE_VM_ACCEL:-$accel}" "${RXE_VM_SMP:-2}" "$runs" \
	"$(printf '%s\n' "${ready[@]}" | median)" "$cold_m"
awk -v c="$cold_m" -v w="$warm_m" 'BEGIN { printf "with-rxe true: cold %.2f s, warm %.2f s, warm/cold %.2f (target < 0.25)\n", c, w, w / c }'
boot_m=$(printf '%s\n' "${boot[@]}" | median)
awk -v i="$idle_min" -v s="$sleep_min" -v b="$boot_m" 'BEGIN { printf "warm VM, host CPU a minute: idle %.1f s, running sleep %.1f s; a cold run %.1f s; idle minute/cold run %.2f (target < 0.5)\n", i / 100, s / 100, b / 100, i / b }'
s_m=$(printf '%s\n' "${single[@]}" | median)
p_m=$(printf '%s\n' "${pair[@]}" | median)
d_m=$(printf '%s\n' "${dgram[@]}" | median)
awk -v s="$s_m" -v p="$p_m" -v d="$d_m" 'BEGIN { printf "ibv_rc_pingpong 1500 B round trip: one VM %.0f us, pair %.0f us (dgram netdev %.0f us), pair/one %.2f (target: pair < 1000 us)\n", s, p, d, p / s }'
