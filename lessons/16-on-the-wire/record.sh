#!/bin/bash
# record.sh - record lesson 16's captures (lessons/16-on-the-wire/captures/)
# again, on a linked pair of micro-VMs whose link QEMU records:
#
#   lessons/16-on-the-wire/record.sh [SRC]
#
# SRC is a tree with lessons 06, 07 and 12 solved (default: solutions; a
# student's finished skeletons work as well). One pair boots; host B serves
# the servers (grader/evidence/remote.py), host A runs the clients, one
# scenario after another:
#   write.pcap    rdma_write -s 10240 (lesson 06): one RDMA WRITE WITH IMMEDIATE
#   read.pcap     rdma_read -s 10240 (lesson 07): one RDMA READ
#   atomics.pcap  atomics -n 3, one client (lesson 12)
#   rnr.pcap      ib_send_bw -r 1: SENDs faster than B posts receives
#   loss.pcap     ibv_rc_pingpong -s 2048 -n 40, 10% of A's frames dropped
#                 (netem, on A's rdma0: a dropped frame never reaches the wire)
# then cuts the one capture into a file per scenario (grader/evidence/wire.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
course=$PWD
out=lessons/16-on-the-wire/captures

if [ "${1:-}" = --on-host-a ]; then
	# Inside host A: $2 the tree's build directory, $3 where marks go.
	bin=$2 marks=$3
	b() { /usr/bin/python3 grader/evidence/remote.py "$RDMA_PEER_JOBS" -- bash -c "$1"; }
	# mark NAME - the capture's size now ends scenario NAME (the link is
	# quiet: every frame of it is written).
	mark() {
		sleep 1
		echo "$1 $(stat -c %s "$RDMA_CAPTURE")" >>"$marks"
	}
	# served READY SERVER CLIENT - SERVER on B until a line matches the
	# regex READY, then CLIENT on A with PORT replaced by the port of a
	# "listening on port N" line; both to their end. A client refused
	# (the server prints before it listens) tries again.
	served() {
		local fifo line port=''
		# (perftest and ibv_rc_pingpong write to a file through stdio:
		# stdbuf -oL, or their readiness line comes at their end.)
		fifo=$(mktemp -u /tmp/record.XXXXXX)
		mkfifo "$fifo"
		b "$2" >"$fifo" 2>&1 &
		exec 9<"$fifo"
		while read -r line <&9; do
			case "$line" in "listening on port "*) port=${line##* } ;; esac
			[[ "$line" =~ $1 ]] && break
		done
		for _ in $(seq 20); do
			bash -c "${3//PORT/$port}" 2>"$fifo.err" && break
			grep -qiE "couldn't connect|unable to|cannot connect" "$fifo.err" || { cat "$fifo.err" >&2; break; }
			sleep 1
		done
		cat <&9 >/dev/null
		wait
		exec 9<&-
		rm -f "$fifo" "$fifo.err"
	}
	g=$RDMA_GID_INDEX peer=$RDMA_PEER_IP
	echo "start $(stat -c %s "$RDMA_CAPTURE")" >"$marks"
	listening='^listening on port'
	served "$listening" "$bin/06-rdma-write/rdma_write -p 0 -s 10240" \
		"$bin/06-rdma-write/rdma_write -p PORT -s 10240 $peer >/dev/null"
	mark write
	served "$listening" "$bin/07-rdma-read/rdma_read -p 0 -s 10240" \
		"$bin/07-rdma-read/rdma_read -p PORT -s 10240 $peer >/dev/null"
	mark read
	served "$listening" "$bin/12-atomics/atomics -p 0 -c 1 -n 3" \
		"$bin/12-atomics/atomics -p PORT -n 3 $peer >/dev/null"
	mark atomics
	served 'Waiting for client' "timeout 60 stdbuf -oL ib_send_bw -x $g -n 16 -s 64 -r 1 -t 16" \
		"timeout 60 ib_send_bw -x $g -n 16 -s 64 -r 1 -t 16 $peer >/dev/null"
	mark rnr
	tc qdisc add dev rdma0 root netem loss 10%
	served 'local address' "timeout 60 stdbuf -oL ibv_rc_pingpong -g $g -s 2048 -n 40" \
		"timeout 60 ibv_rc_pingpong -g $g -s 2048 -n 40 $peer >/dev/null"
	tc qdisc del dev rdma0 root
	mark loss
	exit 0
fi

src=${1:-solutions}
for l in 06 07 12; do
	make -s --no-print-directory build LESSON=$l SRC="$src" >/dev/null
done
bin=build/${src#"$course"/}
case "$src" in /*) bin=build/abs$src ;; esac
tmp=$(mktemp -d "$course/build/record.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
vm-setup/with-rxe --pair --capture "$tmp/link.pcap" \
	"lessons/16-on-the-wire/record.sh --on-host-a $bin $tmp/marks" ''
mkdir -p "$out"
python3 - "$tmp/link.pcap" "$tmp/marks" "$out" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, ".")
from grader.evidence import wire

blob = Path(sys.argv[1]).read_bytes()
marks = [line.split() for line in Path(sys.argv[2]).read_text().splitlines()]
for (_, start), (name, end) in zip(marks, marks[1:]):
    seg = blob[:wire.FILE_HEADER] + blob[int(start):int(end)]
    _, records, _, problem = wire.read_pcap(seg)
    assert problem is None, f"{name}: {problem}"
    Path(sys.argv[3], f"{name}.pcap").write_bytes(seg)
    print(f"{sys.argv[3]}/{name}.pcap: {len(records)} frames")
EOF
