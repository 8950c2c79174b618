#!/bin/bash
# measure.sh - what plot.sh and bench.sh share (sourced, not run): one
# latency pair, one perftest pair, both on the device with-rxe exported.
#
#   lat_pair PROG TRANSPORT SIZE ITERS CSV   -> the client's summary line
#   perftest_lat PROG SIZE ITERS             -> "TYPICAL P99" (us, one way)
#                                               (and $PERFTEST_INLINE set)
#   finite VALUE                             -> true for a positive number
#
# Every wait is bounded (LAT_TIMEOUT seconds, default 120); a failure
# prints the other side's output and returns 1.
#
# ib_send_lat now and then prints `inf` for t_typical (seen at 16 KiB, and
# in one round of make bench-latency), or no row at all when its clock
# calibration fails on a loaded VM: perftest_lat says so on stderr and
# runs it again, up to PERFTEST_TRIES times (default 3); when no run gave
# a number it prints "- -" and returns 3, and the caller says what it left
# out.

LAT_TIMEOUT=${LAT_TIMEOUT:-120}
PERFTEST_TRIES=${PERFTEST_TRIES:-3}

# A latency perftest can use: a positive number (not inf, nan, -nan, 0).
finite() {
	awk -v v="$1" 'BEGIN { exit !(v ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ && v + 0 > 0) }'
}

# Wait until FILE holds a line matching REGEX (the server is ready).
wait_for_line() {
	local file=$1 regex=$2 i
	for ((i = 0; i < LAT_TIMEOUT * 10; i++)); do
		grep -qE "$regex" "$file" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "measure.sh: no '$regex' from the server within $LAT_TIMEOUT s" >&2
	return 1
}

lat_pair() {
	local prog=$1 transport=$2 size=$3 iters=$4 csv=$5
	local out port server line
	out=$(mktemp)
	timeout "$LAT_TIMEOUT" "$prog" "--$transport" -p 0 -s "$size" -n "$iters" >"$out" 2>&1 &
	server=$!
	if ! wait_for_line "$out" '^listening on port'; then
		kill "$server" 2>/dev/null
		cat "$out" >&2
		rm -f "$out"
		return 1
	fi
	port=$(sed -n 's/^listening on port //p' "$out")
	line=$(timeout "$LAT_TIMEOUT" "$prog" "--$transport" -p "$port" -s "$size" \
		-n "$iters" --csv "$csv" "${RDMA_IP:-localhost}" | grep '^rtt ')
	if ! wait "$server" || [ -z "$line" ]; then
		echo "measure.sh: latency --$transport -s $size failed; server said:" >&2
		cat "$out" >&2
		rm -f "$out"
		return 1
	fi
	rm -f "$out"
	echo "$line"
}

perftest_lat() {
	local prog=$1 size=$2 iters=$3
	local try row typical p99
	for ((try = 1; try <= PERFTEST_TRIES; try++)); do
		perftest_once "$prog" "$size" "$iters" || return 1
		read -r typical p99 <<<"$PERFTEST_ROW"
		if finite "$typical" && finite "$p99"; then
			echo "$PERFTEST_ROW"
			return 0
		fi
		echo "measure.sh: $prog -s $size printed t_typical '$typical', 99% '$p99' (not a latency) in run $try of $PERFTEST_TRIES${PERFTEST_RAW:+: $PERFTEST_RAW}" >&2
	done
	echo "- -"
	return 3
}

# One ib_send_lat pair: $PERFTEST_ROW "TYPICAL P99" as it printed them,
# $PERFTEST_RAW its whole result row, $PERFTEST_INLINE what it said about
# inline data.
perftest_once() {
	local prog=$1 size=$2 iters=$3
	local out port server row
	out=$(mktemp)
	port=$((20000 + RANDOM % 20000))
	# stdbuf: perftest does not flush its "Waiting" line into a file.
	timeout "$LAT_TIMEOUT" stdbuf -oL "$prog" -d "$RDMA_DEVICE" \
		-x "$RDMA_GID_INDEX" -p "$port" -s "$size" -n "$iters" >"$out" 2>&1 &
	server=$!
	if ! wait_for_line "$out" 'Waiting for client'; then
		kill "$server" 2>/dev/null
		cat "$out" >&2
		rm -f "$out"
		return 1
	fi
	# The row under the header: bytes iterations t_min t_max t_typical
	# t_avg t_stdev 99% 99.9%.
	timeout "$LAT_TIMEOUT" "$prog" -d "$RDMA_DEVICE" -x "$RDMA_GID_INDEX" \
		-p "$port" -s "$size" -n "$iters" "$RDMA_IP" >"$out.client" 2>&1
	row=$(awk -v s="$size" '$1 == s && NF >= 8 { print $5, $8 }' "$out.client")
	PERFTEST_RAW=$(awk -v s="$size" '$1 == s && NF >= 8' "$out.client" | tr -s ' \t' ' ' | sed 's/^ //')
	# what perftest says about inline sends ("Inline data is used up to N
	# bytes message"), for whoever compares
	# shellcheck disable=SC2034 # read by bench.sh
	PERFTEST_INLINE=$(grep -m1 -i 'inline' "$out.client" | sed 's/^ *//' || true)
	if [ -z "$row" ] && grep -q "Can't produce a report" "$out.client"; then
		# perftest times with the CPU's cycle counter and calibrates it
		# against gettimeofday() after the run; on a loaded VM the two
		# disagree ("Correlation coefficient r^2: 0.53 < 0.9") and it
		# prints no row: no number this run, as with inf.
		row="- -"
		PERFTEST_RAW="its clock calibration failed: $(grep -m1 -F 'r^2' "$out.client" || true)"
	fi
	rm -f "$out.client"
	wait "$server"
	rm -f "$out"
	[ -n "$row" ] || { echo "measure.sh: $prog -s $size printed no result" >&2; return 1; }
	PERFTEST_ROW=$row
}

# The field after NAME in a summary line: field "$line" p50
field() {
	local line=$1 name=$2
	awk -v n="$name" '{ for (i = 1; i < NF; i++) if ($i == n) print $(i + 1) }' <<<"$line"
}
