#!/bin/bash
# plot.sh BUILD_DIR OUT_DIR - lesson 18's throughput against the number of
# clients, per mode (make plot LESSON=18 runs it inside vm-setup/with-rxe):
# bench.sh's measurements, written to OUT_DIR/seq.csv and drawn to
# OUT_DIR/seq-clients.png.
set -uo pipefail
if [ $# -ne 2 ]; then
	echo "usage: $0 BUILD_DIR OUT_DIR" >&2
	exit 2
fi
exec "$(dirname "$0")/bench.sh" "$1" "$2"
