#!/bin/bash
# bench.sh BUILD_DIR [OUT_DIR] - lesson 18's sequencer measured three ways,
# in one run on one device (make bench-seq and make plot LESSON=18 run it
# inside vm-setup/with-rxe):
#
#   the table  BUILD_DIR/seq's own server and client, --mode faa, rc and
#              ud at C = 1, 2, 4, 8 clients: Mops/s, p50, p99 (its
#              summary line)
#   the ratio  the same seq client against the reference sequencer server
#              (grader/evidence/trusted/seq.py, pyverbs), and the
#              reference client against a reference server right before
#              or after it (a fresh server each run, forked with the
#              reference client by the peers' zygote: vsref.py): one
#              round. Each
#              round's ratio is seq's rate / the reference client's; the
#              ratio is the median of BENCH_ROUNDS rounds (default 5; seq
#              first in odd rounds, the reference in even ones). Target
#              >= 0.8: a C client must not be slower than the reference's
#              Python one on the same server. The RPCs' rates moved up to
#              sevenfold from one round to the next on a loaded host
#              (bursts of load last longer than a run), far less between
#              the two runs of a round: a single pair of runs is decided
#              by a burst in either run, the median of rounds is not.
#
# BENCH_ITERS numbers per client (default 100), BENCH_CLIENTS the Cs
# (default "1 2 4 8"), BENCH_MODES (default "faa rc ud"). With OUT_DIR it
# writes OUT_DIR/seq.csv (one row per mode and C) and OUT_DIR/seq-clients.png
# (throughput against C, per mode). Exit 1 when a ratio is below the target
# or a run failed.
set -uo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 BUILD_DIR [OUT_DIR]" >&2
	exit 2
fi
prog=$1/seq out=${2:-}
[ -x "$prog" ] || { echo "bench.sh: $prog is not built (make build LESSON=18)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-/usr/bin/python3}
n=${BENCH_ITERS:-100} cs=${BENCH_CLIENTS:-1 2 4 8} modes=${BENCH_MODES:-faa rc ud}
rounds=${BENCH_ROUNDS:-5}
host=${RDMA_IP:-localhost}
tmp=$(mktemp -d)
pids=() spid=''
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

# launch NAME CMD...: a server in the background (its pid in $spid), its
# stdout in $tmp/NAME; port_of NAME: its port once it says 'listening on
# port N' (60 s at most)
launch() {
	local name=$1
	shift
	"$@" >"$tmp/$name" 2>"$tmp/$name.err" &
	spid=$!
	pids+=("$spid")
}
port_of() {
	local i port
	for ((i = 0; i < 600; i++)); do
		port=$(sed -n 's/^listening on port \([0-9]*\)$/\1/p' "$tmp/$1")
		[ -n "$port" ] && { echo "$port"; return 0; }
		sleep 0.1
	done
	echo "bench.sh: the $1 server did not listen within 60 s: $(cat "$tmp/$1.err")" >&2
	return 1
}

# the rate (C x N / T, in Mops/s to 6 decimals: the line's 4 are too few
# for rxe's RPCs), p50 and p99 of a seq client's summary line
summary() {
	sed -n 's/^[a-z]*: \([0-9]*\) clients x \([0-9]*\) numbers in \([0-9.]*\) s: [0-9.]* Mops\/s, p50 \([0-9.]*\) us, p99 \([0-9.]*\) us$/\1 \2 \3 \4 \5/p' "$1" |
		awk '$3 > 0 { printf "%.6f %s %s\n", $1 * $2 / $3 / 1e6, $4, $5 }'
}

# the median of the numbers given (an even count: the lower middle one)
median() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}

failed=0
rows=()
echo "bench-seq: $n numbers per client, $rounds rounds on the reference server; $(nproc) CPU(s), device ${RDMA_DEVICE:-?}; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-4s %2s | %-50s | %s\n' mode C "seq server + seq client" "on the reference server, each round seq/ref (Mops/s): ratio; median"
for mode in $modes; do
	for c in $cs; do
		own='' ratio=''
		# the program against itself
		launch own "$prog" --mode "$mode" -c "$c" -n "$n" -p 0 -t 30
		if port=$(port_of own); then
			"$prog" --mode "$mode" -c "$c" -n "$n" -p "$port" -t 30 "$host" >"$tmp/own.cli" 2>&1
			wait "$spid" || failed=1
			read -r own p50 p99 <<<"$(summary "$tmp/own.cli")"
		fi
		[ -n "$own" ] || { echo "bench.sh: seq --mode $mode -c $c failed: $(tail -n 2 "$tmp/own.cli" "$tmp/own.err")" >&2; failed=1; }
		# seq's client and the reference client on the reference
		# server, back to back, BENCH_ROUNDS times
		seen='' ratios=()
		while read -r _ _ _ vs _ refrate; do
			if [ "$vs" != - ] && [ "$refrate" != - ]; then
				ratio=$(awk -v a="$vs" -v b="$refrate" 'BEGIN { printf "%.2f", a / b }')
				ratios+=("$ratio")
				seen+=$(awk -v a="$vs" -v b="$refrate" -v r="$ratio" 'BEGIN { printf " %.6f/%.6f: %s;", a / 1e6, b / 1e6, r }')
			else
				seen+=" -;"
			fi
		done < <("$py" "$here/vsref.py" "$prog" "$mode" "$c" "$n" "$rounds")
		ratio=$(median "${ratios[@]}")
		if [ ${#ratios[@]} = "$rounds" ] && [ -n "$ratio" ]; then
			awk -v r="$ratio" 'BEGIN { exit !(r < 0.8) }' && failed=1
		else
			failed=1
		fi
		printf '%-4s %2s | %8s Mops/s p50 %7s us p99 %8s us |%s median %s\n' \
			"$mode" "$c" "${own:--}" "${p50:--}" "${p99:--}" "$seen" "${ratio:--}"
		rows+=("$mode,$c,$n,${own:-},${p50:-},${p99:-},${ratios[*]:-},${ratio:-}")
	done
done
echo "ratio = seq's client / the reference client on the reference server, run back to back; the median of $rounds rounds (target >= 0.8): $([ $failed = 0 ] && echo met || echo "NOT met or a run failed")"

if [ -n "$out" ]; then
	command -v gnuplot >/dev/null || { echo "bench.sh: gnuplot is not installed (make deps)" >&2; exit 1; }
	mkdir -p "$out"
	{
		echo "mode,clients,numbers,mops,p50_us,p99_us,round_ratios,ratio"
		printf '%s\n' "${rows[@]}"
	} >"$out/seq.csv"
	plots='' i=0
	for mode in $modes; do
		awk -F, -v m="$mode" '$1 == m && $4 != "" { print $2, $4 }' "$out/seq.csv" >"$tmp/$mode.dat"
		plots+="\"$tmp/$mode.dat\" using 1:2 lw 2 pt 7 title \"--mode $mode\", "
		i=$((i + 1))
	done
	gnuplot <<GNUPLOT
set terminal pngcairo size 800,480 font "sans,11" noenhanced
set output "$out/seq-clients.png"
set title "seq on ${RDMA_DEVICE:-rdma}: numbers handed out per second against the clients ($n each)"
set logscale x 2
set logscale y
set xlabel "clients (C)"
set ylabel "million numbers/s"
set grid xtics ytics lc rgb "#dddddd"
set style data linespoints
set key top left
plot ${plots%, }
GNUPLOT
	echo "wrote $out/seq.csv and $out/seq-clients.png"
fi
exit $failed
