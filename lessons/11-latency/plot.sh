#!/bin/bash
# plot.sh BUILD_DIR OUT_DIR - latency distributions, drawn.
#
# Runs BUILD_DIR/latency --udp and --rdma at several message sizes, and
# perftest's ib_send_lat at the same sizes, in one run on one device
# (`make plot LESSON=11` runs this inside vm-setup/with-rxe), and writes to
# OUT_DIR:
#   latency-SIZE-udp.csv, latency-SIZE-rdma.csv   every round trip (ns)
#   latency.csv       per size: p50 and p99 of each, ib_send_lat x 2
#   latency-cdf.png   the CDFs of the round trips at two sizes
#   latency-size.png  p50 and p99 against the message size
# PLOT_SIZES (default "2 64 1024 4096 16384") and PLOT_ITERS (500) change
# what is measured. A size at which ib_send_lat printed no number (`inf`,
# after PERFTEST_TRIES runs: measure.sh) has empty fields in latency.csv,
# no point in the plot, and its key says so.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 BUILD_DIR OUT_DIR" >&2
	exit 2
fi
build=$1 out=$2
prog=$build/latency
[ -x "$prog" ] || { echo "plot.sh: $prog is not built (make build LESSON=11)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed (make deps)" >&2; exit 1; }
# shellcheck source=lessons/11-latency/measure.sh
. "$(dirname "$0")/measure.sh"
sizes=${PLOT_SIZES:-2 64 1024 4096 16384} iters=${PLOT_ITERS:-500}
mkdir -p "$out"
summary=$out/latency.csv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "size,udp_p50,udp_p99,rdma_p50,rdma_p99,ib_send_lat_typical_x2,ib_send_lat_p99_x2" >"$tmp/summary"
missing=()
for s in $sizes; do
	for t in udp rdma; do
		line=$(lat_pair "$prog" "$t" "$s" "$iters" "$out/latency-$s-$t.csv")
		echo "$line"
		eval "${t}50=$(field "$line" p50) ${t}99=$(field "$line" p99)"
		# the CDF: the sorted samples in us against their rank / N
		tail -n +2 "$out/latency-$s-$t.csv" | cut -d, -f2 | sort -n |
			awk -v n="$iters" '{ printf "%.3f %.5f\n", $1 / 1000, NR / n }' \
				>"$tmp/cdf-$s-$t"
	done
	rc=0
	perftest_lat ib_send_lat "$s" "$iters" >"$tmp/perf" || rc=$?
	[ "$rc" = 0 ] || [ "$rc" = 3 ] || exit 1
	read -r typical p99 <"$tmp/perf"
	if [ "$rc" = 0 ]; then
		echo "ib_send_lat $s bytes: t_typical $typical us, 99% $p99 us (one way)"
		isl50=$(awk -v t="$typical" 'BEGIN { print 2 * t }')
		isl99=$(awk -v t="$p99" 'BEGIN { print 2 * t }')
	else
		# An empty field: no point in the plot, and the key says so.
		echo "ib_send_lat $s bytes: no latency in $PERFTEST_TRIES runs (it printed inf or nan, or no row when its clock calibration failed): latency.csv leaves its fields empty, the plot has no point there"
		isl50='' isl99=''
		missing+=("$s")
	fi
	# shellcheck disable=SC2154 # udp50 ... are set by the eval above
	echo "$s,$udp50,$udp99,$rdma50,$rdma99,$isl50,$isl99" >>"$tmp/summary"
done
mv "$tmp/summary" "$summary"
isl_note=''
[ ${#missing[@]} = 0 ] || isl_note=" (none at ${missing[*]} B: perftest printed inf)"

read -r -a sz <<<"$sizes"
small=${sz[0]} big=${sz[$((${#sz[@]} > 3 ? 3 : ${#sz[@]} - 1))]}
isl_small=$(awk -F, -v s="$small" '$1 == s { print $6 }' "$summary")
marker="set label \"ib_send_lat x 2: no value at $small B (perftest printed inf)\" at graph 0.02, graph 0.95"
[ -z "$isl_small" ] || marker="set arrow from $isl_small, graph 0 to $isl_small, graph 1 nohead dt 2 lc rgb \"#555555\"
set label \"ib_send_lat x 2, $small B\" at $isl_small, graph 0.05 offset 0.5,0"
gnuplot <<GNUPLOT
set terminal pngcairo size 900,560 font "sans,11" noenhanced
set output "$out/latency-cdf.png"
set title "Round-trip latency on ${RDMA_DEVICE:-rdma}: CDF of $iters round trips"
set xlabel "round trip (µs, log scale)"
set ylabel "fraction of round trips <= x"
set logscale x
set yrange [0:1]
set key bottom right
set grid xtics ytics mxtics lc rgb "#dddddd"
$marker
plot "$tmp/cdf-$small-rdma" using 1:2 with lines lw 2 lc rgb "#1f77b4" title "rdma $small B", \
     "$tmp/cdf-$small-udp" using 1:2 with lines lw 2 lc rgb "#d62728" title "udp $small B", \
     "$tmp/cdf-$big-rdma" using 1:2 with lines lw 2 dt 2 lc rgb "#1f77b4" title "rdma $big B", \
     "$tmp/cdf-$big-udp" using 1:2 with lines lw 2 dt 2 lc rgb "#d62728" title "udp $big B"
GNUPLOT
gnuplot <<GNUPLOT
set terminal pngcairo size 900,560 font "sans,11" noenhanced
set output "$out/latency-size.png"
set datafile separator ","
set title "Round-trip latency against message size on ${RDMA_DEVICE:-rdma} ($iters round trips each)"
set xlabel "message size"
set ylabel "round trip (µs)"
set logscale xy 2
set format x "%.0b%BB"
set key top left
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set style data linespoints
plot "$summary" using 1:2 title "udp p50" pt 7 lw 2 lc rgb "#d62728", \
     "$summary" using 1:3 title "udp p99" pt 6 lw 1 dt 2 lc rgb "#d62728", \
     "$summary" using 1:4 title "rdma p50" pt 7 lw 2 lc rgb "#1f77b4", \
     "$summary" using 1:5 title "rdma p99" pt 6 lw 1 dt 2 lc rgb "#1f77b4", \
     "$summary" using 1:6 title "ib_send_lat typical x 2$isl_note" pt 5 lw 2 lc rgb "#2ca02c", \
     "$summary" using 1:7 title "ib_send_lat 99% x 2$isl_note" pt 4 lw 1 dt 2 lc rgb "#2ca02c"
GNUPLOT
echo "wrote $summary, $out/latency-cdf.png and $out/latency-size.png"
