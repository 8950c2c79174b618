#!/bin/bash
# run-pair.sh - run lesson 08's cm_server and cm_client against each other.
#
# usage: lessons/08-rdma-cm/run-pair.sh BUILD_DIR [CLIENT_OPTION...]
#   e.g. vm-setup/with-rxe lessons/08-rdma-cm/run-pair.sh build/skeletons/08-rdma-cm -s 64k
#
# Starts BUILD_DIR/cm_server -p 0 (rdma_cm picks the port), waits for its
# "listening on port N" line, runs BUILD_DIR/cm_client -p N CLIENT_OPTION...
# $RDMA_IP, then shows the server's output and both exit statuses. Exits 0
# when both programs exited 0. Needs $RDMA_IP: run it through vm-setup/with-rxe.
set -u

usage() {
	echo "usage: $0 BUILD_DIR [CLIENT_OPTION...]" >&2
	exit 2
}
[ $# -ge 1 ] || usage
dir=$1
shift
if [ ! -x "$dir/cm_server" ] || [ ! -x "$dir/cm_client" ]; then
	echo "run-pair: no cm_server/cm_client in $dir (run: make build LESSON=08)" >&2
	exit 2
fi
if [ -z "${RDMA_IP:-}" ]; then
	echo "run-pair: RDMA_IP is not set: run me through vm-setup/with-rxe" >&2
	exit 2
fi

log=$(mktemp)
"$dir/cm_server" -p 0 -t "${SERVER_TIMEOUT:-10}" >"$log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null; rm -f "$log"' EXIT

# Wait (at most 10 s) for the readiness line, or for the server to die.
port=
for _ in $(seq 100); do
	port=$(sed -n 's/^listening on port \([0-9][0-9]*\)$/\1/p' "$log")
	[ -n "$port" ] && break
	kill -0 $spid 2>/dev/null || break
	sleep 0.1
done
if [ -z "$port" ]; then
	sed 's/^/  server| /' "$log"
	echo "run-pair: the server never printed 'listening on port N'"
	exit 1
fi

echo "run-pair: $dir/cm_client -p $port${*:+ $*} $RDMA_IP"
"$dir/cm_client" -p "$port" "$@" "$RDMA_IP" 2>&1 | sed 's/^/  client| /'
crc=${PIPESTATUS[0]}

# The server finishes right after the client; give it 5 s, no more.
for _ in $(seq 50); do
	kill -0 $spid 2>/dev/null || break
	sleep 0.1
done
if kill -0 $spid 2>/dev/null; then
	kill $spid
	src="killed (still running 5 s after the client)"
	wait $spid 2>/dev/null
else
	wait $spid
	src=$?
fi
sed 's/^/  server| /' "$log"
echo "run-pair: client exit status $crc, server exit status $src"
[ "$crc" = 0 ] && [ "$src" = 0 ]
