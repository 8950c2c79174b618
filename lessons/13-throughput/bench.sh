#!/bin/bash
# bench.sh BUILD_DIR - the reference bw against perftest's ib_write_bw, in
# one run on one device (make bench-bw runs it in vm-setup/with-rxe):
#
#   ratio 64 KiB = bw MB/s / ib_write_bw MB/s            (target >= 0.8)
#   ratio 64 B   = bw Mmsg/s / ib_write_bw MsgRate Mpps  (target >= 0.8)
#
# bw runs with BENCH_ARGS (default --depth 128 --signal 32 --batch 16, and
# --inline at 64 B), ib_write_bw with its defaults (its settings are
# printed). A shared host preempts the guest's vCPUs, so the four are
# measured BENCH_ROUNDS times (default 3), interleaved, and each one's best
# round counts (every round is printed). Exit 1 below a target.
set -uo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 BUILD_DIR" >&2
	exit 2
fi
prog=$1/bw
[ -x "$prog" ] || { echo "bench.sh: $prog is not built" >&2; exit 1; }
# shellcheck source=lessons/13-throughput/measure.sh
. "$(dirname "$0")/measure.sh"
rounds=${BENCH_ROUNDS:-3} args=${BENCH_ARGS:---depth 128 --signal 32 --batch 16}
big=65536 small=64
nbig=${BENCH_ITERS_BIG:-2000} nsmall=${BENCH_ITERS_SMALL:-40000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "bench-bw: $rounds rounds; $nbig x $big B and $nsmall x $small B; $(nproc) CPU(s), device ${RDMA_DEVICE:-?}; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  bw: $args (and --inline at $small B)"
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b + 0 > a + 0) ? b : a }'; }
pb='' ps='' bb='' bs=''
for ((r = 1; r <= rounds; r++)); do
	perftest_bw "$big" "$nbig" >"$tmp/perf" || exit 1
	read -r mb _ <"$tmp/perf"
	[ "$r" = 1 ] && echo "  ib_write_bw $big B: $PERFTEST_SETTINGS"
	# shellcheck disable=SC2086 # BENCH_ARGS is a list of options
	lbig=$(bw_pair "$prog" "$big" "$nbig" "$tmp/bw.csv" $args) || exit 1
	perftest_bw "$small" "$nsmall" >"$tmp/perf" || exit 1
	read -r _ mps <"$tmp/perf"
	[ "$r" = 1 ] && echo "  ib_write_bw $small B: $PERFTEST_SETTINGS"
	# shellcheck disable=SC2086
	lsmall=$(bw_pair "$prog" "$small" "$nsmall" "$tmp/bw.csv" $args --inline) || exit 1
	echo "  round $r: ib_write_bw $big B: $mb MB/s; ib_write_bw $small B: $mps Mmsg/s"
	echo "  round $r: $lbig"
	echo "  round $r: $lsmall"
	pb=$(best "$pb" "$mb") ps=$(best "$ps" "$mps")
	bb=$(best "$bb" "$(before "$lbig" MB/s)") bs=$(best "$bs" "$(before "$lsmall" Mmsg/s)")
done
awk -v pb="$pb" -v ps="$ps" -v bb="$bb" -v bs="$bs" 'BEGIN {
	rb = bb / pb; rs = bs / ps
	printf "best of the rounds:\n"
	printf "  %d B: bw %.3f MB/s / ib_write_bw %.3f MB/s = %.2f (target >= 0.8): %s\n",
		65536, bb, pb, rb, rb >= 0.8 ? "OK" : "BELOW TARGET"
	printf "  %d B: bw %.6f Mmsg/s / ib_write_bw %.6f Mmsg/s = %.2f (target >= 0.8): %s\n",
		64, bs, ps, rs, rs >= 0.8 ? "OK" : "BELOW TARGET"
	exit (rb >= 0.8 && rs >= 0.8) ? 0 : 1
}'
