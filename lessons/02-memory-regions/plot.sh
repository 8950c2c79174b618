#!/bin/bash
# plot.sh BUILD_DIR OUT_DIR - measure registration cost and draw it.
#
# Runs BUILD_DIR/reg_cost (on an RDMA device: `make plot LESSON=02` runs this
# inside vm-setup/with-rxe) and writes OUT_DIR/reg_cost.csv and
# OUT_DIR/reg_cost.png (gnuplot, log-log axes). The reg_cost options can be
# changed with REG_COST_ARGS (default: --max-size 64M -n 5).
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 BUILD_DIR OUT_DIR" >&2
	exit 2
fi
build=$1 out=$2
prog=$build/reg_cost
[ -x "$prog" ] || { echo "plot.sh: $prog is not built (make build LESSON=02)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed (make deps)" >&2; exit 1; }
mkdir -p "$out"
csv=$out/reg_cost.csv png=$out/reg_cost.png

# A failed run leaves no half-written CSV behind.
trap 'rm -f "$csv.tmp"' EXIT
# shellcheck disable=SC2086 # REG_COST_ARGS is a list of options
"$prog" ${REG_COST_ARGS:---max-size 64M -n 5} >"$csv.tmp"
mv "$csv.tmp" "$csv"
[ "$(wc -l <"$csv")" -ge 2 ] || { echo "plot.sh: $csv has no rows" >&2; exit 1; }

gnuplot <<GNUPLOT
set terminal pngcairo size 900,560 font "sans,11" noenhanced
set output "$png"
set datafile separator ","
set key top left autotitle columnheader
set title "Memory registration cost on ${RDMA_DEVICE:-rdma} (median of the repetitions)"
set xlabel "region size"
set ylabel "time per call (µs)"
set logscale xy 2
set format x "%.0b%BB"
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set style data linespoints
plot "$csv" using 1:2 title "ibv_reg_mr" pt 7 lw 2, \
     "$csv" using 1:3 title "ibv_dereg_mr" pt 5 lw 2
GNUPLOT
echo "wrote $csv and $png"
