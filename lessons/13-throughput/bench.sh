#!/bin/bash
# bench.sh BUILD_DIR - the reference bw against perftest's ib_write_bw, in
# one run on one device (make bench-bw runs it in vm-setup/with-rxe):
#
#   ratio 64 KiB = bw MB/s / ib_write_bw MB/s              (target >= 0.8)
#   ratio 64 B   = bw Mmsg/s / ib_write_bw MsgRate (Mpps)  (target >= 0.8)
#
# Like for like: ib_write_bw runs with its defaults, and bw with the depth
# and the CQ moderation ib_write_bw printed (--depth TX_DEPTH --signal
# CQ_MODERATION, one WR per post, not inline, as ib_write_bw's defaults
# are); BENCH_ARGS replaces those options. A shared host preempts the
# guest's vCPUs, so the four are measured BENCH_ROUNDS times (default 3),
# interleaved, and each one's best round counts (every round is printed).
# Exit 1 below a target.
set -uo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 BUILD_DIR" >&2
	exit 2
fi
prog=$1/bw
[ -x "$prog" ] || { echo "bench.sh: $prog is not built" >&2; exit 1; }
# shellcheck source=lessons/13-throughput/measure.sh
. "$(dirname "$0")/measure.sh"
rounds=${BENCH_ROUNDS:-3}
nbig=${BENCH_ITERS_BIG:-2000} nsmall=${BENCH_ITERS_SMALL:-40000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "bench-bw: $rounds rounds; $nbig x 65536 B and $nsmall x 64 B; $(nproc) CPU(s), device ${RDMA_DEVICE:-?}; load $(cut -d' ' -f1-3 /proc/loadavg)"
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b + 0 > a + 0) ? b : a }'; }
# bw's options for ib_write_bw's settings: --depth TX_DEPTH --signal CQ_MOD
like() {
	local d q
	d=$(sed -n 's/.*TX depth \([0-9]*\).*/\1/p' <<<"$1")
	q=$(sed -n 's/.*CQ Moderation \([0-9]*\).*/\1/p' <<<"$1")
	echo "--depth ${d:-128} --signal ${q:-1}"
}
pb='' ps='' bb='' bs=''
for ((r = 1; r <= rounds; r++)); do
	for size in 65536 64; do
		n=$([ "$size" = 64 ] && echo "$nsmall" || echo "$nbig")
		perftest_bw "$size" "$n" >"$tmp/perf" || exit 1
		read -r mb mps <"$tmp/perf"
		args=${BENCH_ARGS:-$(like "$PERFTEST_SETTINGS")}
		[ "$r" = 1 ] && echo "  $size B: ib_write_bw $PERFTEST_SETTINGS; bw $args"
		# shellcheck disable=SC2086 # the options are a list
		line=$(bw_pair "$prog" "$size" "$n" "$tmp/bw.csv" $args) || exit 1
		echo "  round $r: ib_write_bw $size B: $mb MB/s, $mps Mmsg/s"
		echo "  round $r: $line"
		if [ "$size" = 64 ]; then
			ps=$(best "$ps" "$mps") bs=$(best "$bs" "$(before "$line" Mmsg/s)")
		else
			pb=$(best "$pb" "$mb") bb=$(best "$bb" "$(before "$line" MB/s)")
		fi
	done
done
awk -v pb="$pb" -v ps="$ps" -v bb="$bb" -v bs="$bs" 'BEGIN {
	rb = bb / pb; rs = bs / ps
	printf "best of the rounds:\n"
	printf "  65536 B: bw %.3f MB/s / ib_write_bw %.3f MB/s = %.2f (target >= 0.8): %s\n",
		bb, pb, rb, (rb >= 0.8 ? "OK" : "BELOW TARGET")
	printf "  64 B: bw %.6f Mmsg/s / ib_write_bw %.6f Mmsg/s = %.2f (target >= 0.8): %s\n",
		bs, ps, rs, (rs >= 0.8 ? "OK" : "BELOW TARGET")
	exit (rb >= 0.8 && rs >= 0.8) ? 0 : 1
}'
