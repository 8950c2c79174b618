#!/bin/bash
# measure.sh - what plot.sh and bench.sh share (sourced, not run): one bw
# pair, one perftest ib_write_bw pair, both on the device with-rxe exported.
#
#   bw_pair PROG SIZE ITERS CSV [CLIENT OPTION...]  -> the client's summary
#                                   line (and a row appended to CSV)
#   perftest_bw SIZE ITERS [OPTION...]  -> "MB_PER_S MMSG_PER_S" (MB: 2^20
#                                   bytes, as perftest prints them), and
#                                   $PERFTEST_SETTINGS set (its TX depth, CQ
#                                   moderation, post list, inline lines)
#
# Every wait is bounded (BW_TIMEOUT seconds, default 120); a failure prints
# the other side's output and returns 1.

BW_TIMEOUT=${BW_TIMEOUT:-120}

# Wait until FILE holds a line matching REGEX (the server is ready).
wait_for_line() {
	local file=$1 regex=$2 i
	for ((i = 0; i < BW_TIMEOUT * 10; i++)); do
		grep -qE "$regex" "$file" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "measure.sh: no '$regex' from the server within $BW_TIMEOUT s" >&2
	return 1
}

bw_pair() {
	local prog=$1 size=$2 iters=$3 csv=$4 out port server line
	shift 4
	out=$(mktemp)
	timeout "$BW_TIMEOUT" "$prog" -p 0 -s "$size" -n "$iters" -t "$BW_TIMEOUT" >"$out" 2>&1 &
	server=$!
	if ! wait_for_line "$out" '^listening on port'; then
		kill "$server" 2>/dev/null
		cat "$out" >&2
		rm -f "$out"
		return 1
	fi
	port=$(sed -n 's/^listening on port //p' "$out")
	line=$(timeout "$BW_TIMEOUT" "$prog" -p "$port" -s "$size" -n "$iters" \
		--csv "$csv" "$@" "${RDMA_IP:-localhost}" | grep '^bw ')
	if ! wait "$server" || [ -z "$line" ]; then
		echo "measure.sh: bw -s $size $* failed; server said:" >&2
		cat "$out" >&2
		rm -f "$out"
		return 1
	fi
	rm -f "$out"
	echo "$line"
}

# perftest times with the CPU's cycle counter and calibrates it against
# gettimeofday() after the run; on a loaded VM the two can disagree
# ("Correlation coefficient r^2: 0.53 < 0.9", "Can't produce a report",
# exit 1): the pair is run again, up to PERFTEST_TRIES times (default 3).
perftest_bw() {
	local try rc
	for ((try = 1; try <= ${PERFTEST_TRIES:-3}; try++)); do
		rc=0
		perftest_bw_once "$@" || rc=$?
		[ $rc = 2 ] || return $rc
		echo "measure.sh: ib_write_bw -s $1: its clock calibration failed (no result) in run $try of ${PERFTEST_TRIES:-3}" >&2
	done
	return 1
}

perftest_bw_once() {
	local size=$1 iters=$2 out port server row
	shift 2
	out=$(mktemp)
	port=$((20000 + RANDOM % 20000))
	# stdbuf: perftest does not flush its "Waiting" line into a file.
	timeout "$BW_TIMEOUT" stdbuf -oL ib_write_bw -d "$RDMA_DEVICE" \
		-x "$RDMA_GID_INDEX" -p "$port" -s "$size" -n "$iters" "$@" >"$out" 2>&1 &
	server=$!
	if ! wait_for_line "$out" 'Waiting for client'; then
		kill "$server" 2>/dev/null
		cat "$out" >&2
		rm -f "$out"
		return 1
	fi
	# The row under the header: bytes iterations BW_peak BW_average
	# MsgRate (MB/sec are 2^20 bytes: --report_gbits says "instead of
	# MiB/sec"; MsgRate is in millions of messages per second).
	timeout "$BW_TIMEOUT" ib_write_bw -d "$RDMA_DEVICE" -x "$RDMA_GID_INDEX" \
		-p "$port" -s "$size" -n "$iters" "$@" "$RDMA_IP" >"$out.client" 2>&1
	row=$(awk -v s="$size" '$1 == s && NF >= 5 { print $4, $5 }' "$out.client")
	# shellcheck disable=SC2034 # read by bench.sh and plot.sh
	PERFTEST_SETTINGS=$(grep -E 'TX depth|CQ Moderation|Post List|Max inline' "$out.client" |
		sed 's/^ *//; s/ *: */ /' | paste -sd, - | sed 's/,/, /g')
	local lost=0
	[ -n "$row" ] || ! grep -q "Can't produce a report" "$out.client" || lost=1
	rm -f "$out.client"
	wait "$server"
	rm -f "$out"
	[ $lost = 0 ] || return 2
	[ -n "$row" ] || { echo "measure.sh: ib_write_bw -s $size printed no result" >&2; return 1; }
	echo "$row"
}

# The number before NAME in a summary line: before "$line" MB/s
before() {
	local line=$1 name=$2
	awk -v n="$name" '{ for (i = 2; i <= NF; i++) if ($i == n || $i == n ",") print $(i - 1) }' <<<"$line"
}

# ITERS for SIZE: about BW_BYTES (default 16 MiB) per run, 200 to 20000.
iters_for() {
	awk -v s="$1" -v b="${BW_BYTES:-16777216}" 'BEGIN {
		n = int(b / s); if (n < 200) n = 200; if (n > 20000) n = 20000; print n }'
}
