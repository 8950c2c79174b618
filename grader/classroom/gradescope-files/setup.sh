#!/bin/bash
# setup.sh - Gradescope runs this once, when it builds the autograder's image
# (Ubuntu 22.04): the course's packages, then the micro-VM (the kernel the
# course pins in vm-setup/microvm/kernel.lock, fetched and checked by its
# sha256 as everywhere else, unpacked with its initramfs), so that grading
# never downloads anything.
#   AUTOGRADER_ROOT=DIR   instead of /autograder (a local run)
#   SETUP_NO_APT=1        the packages are there already: only check them
#   RXE_VM_KERNEL_DEB=F   a copy of the pinned kernel package (checked too)
set -euo pipefail
root=${AUTOGRADER_ROOT:-/autograder}
course=$root/source/course
export RXE_VM_CACHE=$root/vm-cache DEBIAN_FRONTEND=noninteractive

if [ "${SETUP_NO_APT:-0}" = 1 ]; then
	"$course/vm-setup/install-deps.sh" --check
else
	"$course/vm-setup/install-deps.sh"
fi

device=$(/usr/bin/python3 -c '
import json, sys
print(str(json.load(open(sys.argv[1]))["device"]).lower())' "$course/gradescope.json")
if [ "$device" = true ]; then
	# The same code path as every other machine: build.sh fetches the pin
	# (vm-setup/microvm/fetch-kernel.sh) and refuses a file that is not it.
	"$course/vm-setup/microvm/build.sh" >/dev/null
	# The KVM boot probe's verdict is cached too (no KVM on Gradescope: TCG).
	"$course/vm-setup/microvm/run.sh" --accel
	echo "setup.sh: the micro-VM is ready in $root/vm-cache"
fi
# The grader's own programs, compiled once here.
cd "$course" && /usr/bin/python3 -c 'from grader.run.grade import prepare_grader; prepare_grader()'
echo "setup.sh: done"
