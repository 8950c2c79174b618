#!/bin/bash
# setup.sh - Gradescope runs this once, when it builds the autograder's image
# (Ubuntu 22.04): the course's packages, then the micro-VM (Debian's kernel
# package, the same one the course was tested with, verified by its SHA-1,
# unpacked with its initramfs), so that grading never downloads anything.
#   AUTOGRADER_ROOT=DIR   instead of /autograder (a local run)
#   SETUP_NO_APT=1        the packages are there already: only check them
#   RXE_VM_KERNEL_DEB=F   this kernel package instead of downloading it
set -euo pipefail
root=${AUTOGRADER_ROOT:-/autograder}
course=$root/source/course
export RXE_VM_CACHE=$root/vm-cache DEBIAN_FRONTEND=noninteractive

if [ "${SETUP_NO_APT:-0}" = 1 ]; then
	"$course/vm-setup/install-deps.sh" --check
else
	apt-get update -qq
	"$course/vm-setup/install-deps.sh"
	apt-get install -y -qq curl ca-certificates >/dev/null
fi

read -r device deb sha1 < <(/usr/bin/python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
k = c["kernel"] or ["-", "-"]
print(str(c["device"]).lower(), k[0], k[1])' "$course/gradescope.json")
if [ "$device" = true ]; then
	if [ -z "${RXE_VM_KERNEL_DEB:-}" ]; then
		mkdir -p "$root/vm-cache/debs"
		RXE_VM_KERNEL_DEB=$root/vm-cache/debs/$deb
		if [ ! -s "$RXE_VM_KERNEL_DEB" ]; then
			# snapshot.debian.org keeps every package ever published, by hash.
			curl -fsSL --retry 3 -o "$RXE_VM_KERNEL_DEB.part" \
				"https://snapshot.debian.org/file/$sha1" ||
				curl -fsSL --retry 3 -o "$RXE_VM_KERNEL_DEB.part" \
					"https://deb.debian.org/debian/pool/main/l/linux-signed-amd64/$deb"
			echo "$sha1  $RXE_VM_KERNEL_DEB.part" | sha1sum -c --quiet
			mv "$RXE_VM_KERNEL_DEB.part" "$RXE_VM_KERNEL_DEB"
		fi
	fi
	RXE_VM_KERNEL_DEB=$RXE_VM_KERNEL_DEB "$course/vm-setup/microvm/build.sh" >/dev/null
	# The KVM boot probe's verdict is cached too (no KVM on Gradescope: TCG).
	"$course/vm-setup/microvm/run.sh" --accel
	echo "setup.sh: the micro-VM is ready in $root/vm-cache"
fi
# The grader's own programs, compiled once here.
cd "$course" && /usr/bin/python3 -c 'from grader.run.grade import prepare_grader; prepare_grader()'
echo "setup.sh: done"
