#!/bin/bash
# run-all.sh - the course's own tests (make test):
#   1. bats on the host: vm-setup scripts, Makefile, with-rxe through the micro-VM
#   2. in one vm-setup/with-rxe run: the device smoke test (bats), then pytest:
#      the grader against bad programs, the plugin end to end, and the course
#      self-check (grades solutions and skeletons)
# Exit 0 only when every part passed.
set -u
cd "$(dirname "$0")/../.." || exit 2
export BATS_LIB_PATH=/usr/lib/bats
PYTHON=${PYTHON:-/usr/bin/python3}

echo "== bats: vm-setup scripts and Makefile (host) =="
bats grader/bats/scripts.bats
host_scripts=$?
echo "== bats: with-rxe through the micro-VM (host) =="
bats grader/bats/with-rxe.bats
host_vm=$?
echo "== in vm-setup/with-rxe: device smoke test, grader and course self-check =="
# The self-check grades both trees in the VM; compile them here, natively.
"$PYTHON" -m grader build solutions && "$PYTHON" -m grader build skeletons
vm-setup/with-rxe bash -c '
	bats grader/bats/device.bats; b=$?
	'"$PYTHON"' -m pytest -c grader/pytest.ini --rootdir . grader/selftest -v "$@"; p=$?
	[ $b = 0 ] && [ $p = 0 ]' run-all "$@"
device=$?

status() { [ "$1" = 0 ] && echo ok || echo "FAILED ($1)"; }
echo "make test: scripts $(status $host_scripts), micro-VM $(status $host_vm), device+grader+self-check $(status $device)"
[ $host_scripts = 0 ] && [ $host_vm = 0 ] && [ $device = 0 ]
