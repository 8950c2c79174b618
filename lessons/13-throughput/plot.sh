#!/bin/bash
# plot.sh BUILD_DIR OUT_DIR - throughput against message size and depth,
# drawn, the program beside perftest's ib_write_bw in the same run.
#
# Runs BUILD_DIR/bw (RDMA WRITE) at each size of PLOT_SIZES and each depth
# of PLOT_DEPTHS (--signal and --batch grow with the depth: a quarter and
# an eighth of it, at least 1), and ib_write_bw at each size with its
# defaults, on one device (`make plot LESSON=13` runs this inside
# vm-setup/with-rxe), and writes to OUT_DIR:
#   bw.csv            bw's rows (its own --csv format), one per run
#   bw-perftest.csv   size,mb_per_s,mmsg_per_s of ib_write_bw
#   bw-size.png       MB/s and Mmsg/s against the message size, per depth
#   bw-depth.png      MB/s at the largest size and Mmsg/s at the smallest,
#                     against the depth
# PLOT_SIZES (default "64 1024 16384 65536"), PLOT_DEPTHS ("1 4 16 64 128")
# and BW_BYTES (bytes per run, 16 MiB; 200 to 20000 messages) change what is
# measured.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 BUILD_DIR OUT_DIR" >&2
	exit 2
fi
build=$1 out=$2
prog=$build/bw
[ -x "$prog" ] || { echo "plot.sh: $prog is not built (make build LESSON=13)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed (make deps)" >&2; exit 1; }
# shellcheck source=lessons/13-throughput/measure.sh
. "$(dirname "$0")/measure.sh"
sizes=${PLOT_SIZES:-64 1024 16384 65536} depths=${PLOT_DEPTHS:-1 4 16 64 128}
mkdir -p "$out"
csv=$out/bw.csv perf=$out/bw-perftest.csv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "size,mb_per_s,mmsg_per_s" >"$tmp/perf.csv"
for s in $sizes; do
	n=$(iters_for "$s")
	perftest_bw "$s" "$n" >"$tmp/perf" || exit 1
	read -r mb mps <"$tmp/perf"
	echo "ib_write_bw $s bytes: $mb MB/s, $mps Mmsg/s ($PERFTEST_SETTINGS)"
	echo "$s,$mb,$mps" >>"$tmp/perf.csv"
	for d in $depths; do
		sig=$((d / 4 > 0 ? d / 4 : 1)) bat=$((d / 8 > 0 ? d / 8 : 1))
		# --signal must be a multiple or a divisor of --batch
		[ $((sig % bat)) = 0 ] || sig=$bat
		bw_pair "$prog" "$s" "$n" "$tmp/bw.csv" --depth "$d" --signal "$sig" --batch "$bat" || exit 1
	done
done
mv "$tmp/bw.csv" "$csv"
mv "$tmp/perf.csv" "$perf"

read -r -a sz <<<"$sizes"
small=${sz[0]} large=${sz[${#sz[@]} - 1]}
# one data block per depth (gnuplot's index), rows by size
for d in $depths; do
	awk -F, -v d="$d" 'NR > 1 && $3 == d { print $2, $10, $9 }' "$csv"
	printf '\n\n'
done >"$tmp/by-depth"
awk -F, -v s="$large" 'NR > 1 && $2 == s { print $3, $10 }' "$csv" >"$tmp/depth-large"
awk -F, -v s="$small" 'NR > 1 && $2 == s { print $3, $9 }' "$csv" >"$tmp/depth-small"
tr , ' ' <"$perf" | tail -n +2 >"$tmp/perf.dat"
pl_mb=$(awk -F, -v s="$large" '$1 == s { print $2 }' "$perf")
ps_mps=$(awk -F, -v s="$small" '$1 == s { print $3 }' "$perf")
plots_mb='' plots_mps='' i=0
for d in $depths; do
	plots_mb+="\"$tmp/by-depth\" index $i using 1:2 title \"bw --depth $d\", "
	plots_mps+="\"$tmp/by-depth\" index $i using 1:3 title \"bw --depth $d\", "
	i=$((i + 1))
done
gnuplot <<GNUPLOT
set terminal pngcairo size 1100,480 font "sans,11" noenhanced
set output "$out/bw-size.png"
set multiplot layout 1,2 title "RDMA WRITE throughput on ${RDMA_DEVICE:-rdma} against the message size"
set logscale x 2
set logscale y
set format x "%.0b%BB"
set xlabel "message size"
set grid xtics ytics mxtics lc rgb "#dddddd"
set style data linespoints
set key top left
set ylabel "MB/s (2^20 bytes)"
plot $plots_mb "$tmp/perf.dat" using 1:2 dt 2 lw 2 lc rgb "#000000" title "ib_write_bw"
set key top right
set ylabel "million messages/s"
plot $plots_mps "$tmp/perf.dat" using 1:3 dt 2 lw 2 lc rgb "#000000" title "ib_write_bw"
unset multiplot
GNUPLOT
gnuplot <<GNUPLOT
set terminal pngcairo size 1100,480 font "sans,11" noenhanced
set output "$out/bw-depth.png"
set multiplot layout 1,2 title "bw on ${RDMA_DEVICE:-rdma} against the depth (outstanding WRs); dashed: ib_write_bw"
set logscale x 2
set logscale y
set xlabel "--depth"
set grid xtics ytics lc rgb "#dddddd"
set style data linespoints
set key bottom right
set ylabel "MB/s at $large B"
plot "$tmp/depth-large" using 1:2 lw 2 pt 7 title "bw $large B", $pl_mb dt 2 lw 2 lc rgb "#000000" title "ib_write_bw $large B"
set ylabel "million messages/s at $small B"
plot "$tmp/depth-small" using 1:2 lw 2 pt 7 title "bw $small B", $ps_mps dt 2 lw 2 lc rgb "#000000" title "ib_write_bw $small B"
unset multiplot
GNUPLOT
echo "wrote $csv, $perf, $out/bw-size.png and $out/bw-depth.png"
