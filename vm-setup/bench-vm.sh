#!/bin/bash
# bench-vm.sh (make bench-vm) - how fast the micro-VM is ready.
#   ready:    kernel start to rxe0 ACTIVE with its RoCE v2 GID (guest uptime)
#   with-rxe: wall time of one `vm-setup/with-rxe true` (QEMU start to power-off)
# Median of N runs (default 5). Target: ready <= 4 s under TCG on 2 cores.
#
# usage: vm-setup/bench-vm.sh [RUNS]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:-5}
case "$runs" in '' | *[!0-9]* | 0) echo "bench-vm: RUNS must be a positive number, got '$runs'" >&2; exit 2 ;; esac

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

"$here/microvm/build.sh" >/dev/null || exit 1
ready=() wall=()
for i in $(seq "$runs"); do
	t0=$(date +%s%N)
	r=$(RXE_BACKEND=vm "$here/with-rxe" cat /run/rxe-vm/ready-uptime) || { echo "bench-vm: run $i failed" >&2; exit 1; }
	t1=$(date +%s%N)
	ready+=("$r")
	wall+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')")
	printf 'run %d: ready %.2f s, with-rxe %s s\n' "$i" "$r" "${wall[-1]}"
done
accel=$( [ -r /dev/kvm ] && [ -w /dev/kvm ] && echo "kvm if its probe passed, else tcg" || echo tcg)
printf 'micro-VM (%s, %s CPUs, %d runs): ready median %.2f s (target <= 4 s), with-rxe true median %.2f s\n' \
	"${RXE_VM_ACCEL:-$accel}" "${RXE_VM_SMP:-2}" "$runs" \
	"$(printf '%s\n' "${ready[@]}" | median)" "$(printf '%s\n' "${wall[@]}" | median)"
