#!/usr/bin/env bats
# Setting up wherever students are: the pinned VM kernel fetched the same way
# on Debian and Ubuntu (and refused when its sha256 differs), the pin's
# update, arm64 hosts, install-deps on Ubuntu, the offline cache, the dev
# container. Runs on the host, boots no VM: a small stand-in kernel package
# (modules that are just named ELF objects) is served from 127.0.0.1.

bats_require_minimum_version 1.5.0

# One empty ELF object stands in for every module (depmod names a module
# after its file).
setup_file() {
	echo 'static const char v[] __attribute__((section(".modinfo"), used)) = "license=GPL";' >"$BATS_FILE_TMPDIR/m.c"
	gcc -c -o "$BATS_FILE_TMPDIR/m.ko" "$BATS_FILE_TMPDIR/m.c"
}

setup() {
	load helpers
	export BATS_LIB_PATH=/usr/lib/bats
	T=$BATS_TEST_TMPDIR
	export RXE_VM_CACHE=$T/cache TMPDIR=$T
	mkdir -p "$T/bin" "$T/mirror"
	export PATH="$T/bin:$PATH"
}

teardown() {
	[ -f "$T/http.pid" ] && kill "$(cat "$T/http.pid")" 2>/dev/null
	return 0
}

# fake_kernel ARCH VERSION - a stand-in Debian kernel package in
# $T/mirror/debian/pool/main/l/linux-test/, pinned in $T/kernel.lock (as
# make vm-kernel-update writes it). Its modules are one empty ELF object
# under the names build.sh needs; its kernel is a text file.
fake_kernel() {
	local arch=$1 ver=$2 kver="9.9.9-test-$1" d m file pool sha
	d=$T/pkg-$arch-$ver
	mkdir -p "$d/DEBIAN" "$d/boot" "$d/lib/modules/$kver/kernel/test"
	printf 'Package: linux-image-%s\nVersion: %s\nArchitecture: %s\nMaintainer: test <t@localhost>\nDescription: stand-in kernel\n' \
		"$kver" "$ver" "$arch" >"$d/DEBIAN/control"
	echo "kernel $kver $ver" >"$d/boot/vmlinuz-$kver"
	for m in virtio_pci 9pnet_virtio 9p overlay dummy virtio_net sch_netem crc32_generic rdma_rxe ib_uverbs rdma_ucm virtio_console; do
		cp "$BATS_FILE_TMPDIR/m.ko" "$d/lib/modules/$kver/kernel/test/$m.ko"
	done
	: >"$d/lib/modules/$kver/modules.order"
	: >"$d/lib/modules/$kver/modules.builtin"
	: >"$d/lib/modules/$kver/modules.builtin.modinfo"
	file=linux-image-${kver}_${ver}_$arch.deb
	pool=debian/pool/main/l/linux-test
	mkdir -p "$T/mirror/$pool"
	dpkg-deb --root-owner-group -b "$d" "$T/mirror/$pool/$file" >/dev/null
	sha=$(sha256sum "$T/mirror/$pool/$file" | cut -d' ' -f1)
	[ -f "$T/kernel.lock" ] || echo "suite = bookworm" >"$T/kernel.lock"
	sed -i "/^$arch\./d" "$T/kernel.lock"
	{
		echo "$arch.package = linux-image-$kver"
		echo "$arch.version = $ver"
		echo "$arch.path = $pool/$file"
		echo "$arch.size = $(stat -c %s "$T/mirror/$pool/$file")"
		echo "$arch.sha256 = $sha"
		echo "$arch.sha1 = $(sha1sum "$T/mirror/$pool/$file" | cut -d' ' -f1)"
	} >>"$T/kernel.lock"
	export RXE_VM_KERNEL_LOCK=$T/kernel.lock
	FAKE_FILE=$file FAKE_PATH=$pool/$file FAKE_SHA=$sha
}

# serve - an HTTP server on 127.0.0.1 for $T/mirror (Debian's archive and
# snapshot.debian.org both); its requests are logged in $T/http.log.
serve() {
	: >"$T/http.log"
	python3 -u -m http.server --bind 127.0.0.1 --directory "$T/mirror" 0 >"$T/http.log" 2>&1 3>&- &
	echo $! >"$T/http.pid"
	for _ in $(seq 100); do
		port=$(sed -n 's/.* port \([0-9]*\) .*/\1/p' "$T/http.log")
		[ -n "$port" ] && break
		sleep 0.05
	done
	[ -n "$port" ] || fail "the test's HTTP server did not start: $(cat "$T/http.log")"
	export RXE_VM_DEBIAN_MIRROR=http://127.0.0.1:$port RXE_VM_SNAPSHOT=http://127.0.0.1:$port/snapshot
}

# ubuntu_apt - stand-in apt-cache and apt-get that know no Debian kernel, as
# on Ubuntu; every call is logged in $T/apt.log.
ubuntu_apt() {
	for t in apt-cache apt-get; do
		printf '#!/bin/bash\necho "%s $*" >>"%s/apt.log"\necho "E: Unable to locate package ${*: -1}" >&2\nexit 100\n' "$t" "$T" >"$T/bin/$t"
		chmod +x "$T/bin/$t"
	done
}

@test "Ubuntu (apt knows no Debian kernel): the pin comes from Debian's archive by URL, sha256 checked, and the VM entry is built from it" {
	fake_kernel amd64 1.0-1
	ubuntu_apt
	serve
	run --separate-stderr "$COURSE/vm-setup/microvm/build.sh"
	assert_success
	entry=$output
	[[ "$entry" == "$T/cache/vm-"* ]]
	run cat "$entry/kernel-version"
	assert_output 9.9.9-test-amd64
	run cat "$entry/arch"
	assert_output amd64
	# The initramfs holds the modules of the pinned package.
	run bash -c "cpio -it <'$entry/initrd.cpio'"
	assert_output --partial "lib/modules/9.9.9-test-amd64/kernel/test/rdma_rxe.ko"
	# apt was asked for the pinned version and said no; the URL gave the file.
	run cat "$T/apt.log"
	assert_output --partial "apt-cache show linux-image-9.9.9-test-amd64:amd64=1.0-1"
	refute_output --partial "apt-get download"
	run grep -c "GET /$FAKE_PATH HTTP" "$T/http.log"
	assert_output 1
	run sha256sum "$T/cache/debs/$FAKE_FILE"
	assert_output "$FAKE_SHA  $T/cache/debs/$FAKE_FILE"
	# Built once: the next run answers from the cache, no download.
	run "$COURSE/vm-setup/microvm/build.sh"
	assert_success
	assert_output "$entry"
	run grep -c "GET /" "$T/http.log"
	assert_output 1
}

@test "a corrupted download is refused: nothing cached or built; snapshot.debian.org by hash is the last resort" {
	fake_kernel amd64 1.0-1
	ubuntu_apt
	good=$T/good.deb
	mv "$T/mirror/$FAKE_PATH" "$good"
	# The archive serves other bytes under the pinned name; no snapshot yet.
	cp "$good" "$T/mirror/$FAKE_PATH"
	printf 'X' | dd of="$T/mirror/$FAKE_PATH" bs=1 seek=100 conv=notrunc 2>/dev/null
	serve
	run "$COURSE/vm-setup/microvm/build.sh"
	assert_failure 1
	assert_output --partial "refused $FAKE_FILE from $RXE_VM_DEBIAN_MIRROR/$FAKE_PATH: its sha256 is"
	assert_output --partial "the pin's $FAKE_SHA"
	assert_output --partial "cannot get the pinned $FAKE_FILE"
	assert_output --partial "make vm-cache-import"
	run ls -A "$T/cache/debs"
	assert_output ".lock"
	run ls -d "$T/cache"/vm-*
	assert_failure
	# snapshot.debian.org keeps every file by hash: the good copy is there.
	sha1=$(sha1sum "$good" | cut -d' ' -f1)
	mkdir -p "$T/mirror/snapshot/file"
	cp "$good" "$T/mirror/snapshot/file/$sha1"
	run "$COURSE/vm-setup/microvm/build.sh"
	assert_success
	assert_output --partial "$FAKE_FILE verified (sha256 $FAKE_SHA) from $RXE_VM_SNAPSHOT/file/$sha1"
	run grep -c "GET /snapshot/file/$sha1 HTTP/1.1\" 200" "$T/http.log"
	assert_output 1
}

@test "a cached copy that is not the pin is replaced; RXE_VM_KERNEL_DEB must be the pinned file" {
	fake_kernel amd64 1.0-1
	ubuntu_apt
	serve
	mkdir -p "$T/cache/debs"
	echo "not a kernel" >"$T/cache/debs/$FAKE_FILE"
	run "$COURSE/vm-setup/microvm/fetch-kernel.sh"
	assert_success
	assert_output --partial "the cached $FAKE_FILE is not the pinned file"
	assert_line "$T/cache/debs/$FAKE_FILE"
	[ "$(sha256sum <"$T/cache/debs/$FAKE_FILE" | cut -d' ' -f1)" = "$FAKE_SHA" ]
	echo "another kernel" >"$T/other.deb"
	RXE_VM_KERNEL_DEB=$T/other.deb run "$COURSE/vm-setup/microvm/fetch-kernel.sh"
	assert_failure 1
	assert_output --partial "RXE_VM_KERNEL_DEB=$T/other.deb is not the pinned $FAKE_FILE"
	RXE_VM_KERNEL_DEB=$T/cache/debs/$FAKE_FILE run "$COURSE/vm-setup/microvm/fetch-kernel.sh"
	assert_success
	assert_output "$T/cache/debs/$FAKE_FILE"
}

@test "apt-get download is used only when apt lists the pinned version with the pinned sha256, and its file is checked" {
	fake_kernel amd64 1.0-1
	# A Debian host whose apt has the pinned version: it downloads it.
	cat >"$T/bin/apt-cache" <<-EOF
		#!/bin/bash
		echo "apt-cache \$*" >>"$T/apt.log"
		printf 'Package: linux-image-9.9.9-test-amd64\nVersion: 1.0-1\nSHA256: %s\n' "\${APT_SHA:-$FAKE_SHA}"
	EOF
	cat >"$T/bin/apt-get" <<-EOF
		#!/bin/bash
		echo "apt-get \$*" >>"$T/apt.log"
		cp "$T/mirror/$FAKE_PATH" .
	EOF
	chmod +x "$T/bin/apt-cache" "$T/bin/apt-get"
	run "$COURSE/vm-setup/microvm/fetch-kernel.sh"
	assert_success
	assert_output --partial "verified (sha256 $FAKE_SHA) from apt-get download"
	run cat "$T/apt.log"
	assert_output --partial "apt-get download linux-image-9.9.9-test-amd64:amd64=1.0-1"
	# apt listing another sha256 for that version: apt-get is not asked, and
	# with no archive reachable the fetch fails, naming what it tried.
	rm -rf "$T/cache" "$T/apt.log"
	APT_SHA=$(printf '0%.0s' {1..64}) RXE_VM_DEBIAN_MIRROR=http://127.0.0.1:9 RXE_VM_SNAPSHOT=http://127.0.0.1:9 \
		run "$COURSE/vm-setup/microvm/fetch-kernel.sh"
	assert_failure 1
	run cat "$T/apt.log"
	refute_output --partial "apt-get download"
}

@test "the cache entry's name changes with the architecture's pin, and only with it" {
	fake_kernel amd64 1.0-1
	fake_kernel arm64 1.0-1
	ubuntu_apt
	serve
	run "$COURSE/vm-setup/microvm/build.sh"
	assert_success
	first=${lines[-1]}
	# Another arm64 pin: the amd64 entry stays.
	fake_kernel arm64 2.0-1
	run "$COURSE/vm-setup/microvm/build.sh"
	assert_success
	assert_output "$first"
	# A new amd64 pin: a new entry, built from the new package.
	fake_kernel amd64 2.0-1
	run --separate-stderr "$COURSE/vm-setup/microvm/build.sh"
	assert_success
	[ "$output" != "$first" ]
	# shellcheck disable=SC2154 # run --separate-stderr sets $stderr
	[[ "$stderr" == *"the amd64 kernel pin differ"* ]]
	[[ "$stderr" == *"unpacking linux-image-9.9.9-test-amd64_2.0-1_amd64.deb"* ]]
}

# fake_uname M - uname -m says M (the test of another host architecture).
fake_uname() {
	printf '#!/bin/bash\n[ "$1" = -m ] && { echo %s; exit 0; }\nexec /bin/uname "$@"\n' "$1" >"$T/bin/uname"
	chmod +x "$T/bin/uname"
}

@test "arm64 host (uname -m: aarch64): the arm64 pin, no PVH kernel, qemu-system-aarch64's virt machine with virtio consoles" {
	fake_kernel amd64 1.0-1
	fake_kernel arm64 1.0-1
	ubuntu_apt
	serve
	fake_uname aarch64
	run --separate-stderr "$COURSE/vm-setup/microvm/build.sh"
	assert_success
	entry=$output
	run cat "$entry/kernel-version" "$entry/arch"
	assert_output "9.9.9-test-arm64
arm64"
	[ ! -e "$entry/vmlinux" ]
	run bash -c "cpio -it <'$entry/initrd.cpio'"
	assert_output --partial "kernel/test/virtio_console.ko"
	run grep -c "GET /debian/pool/main/l/linux-test/linux-image-9.9.9-test-arm64_1.0-1_arm64.deb" "$T/http.log"
	assert_output 1
	# No qemu-system-aarch64: the install command is named.
	mkdir "$T/bin2"
	for t in bash cat dirname mktemp rm sed awk; do ln -s "$(command -v $t)" "$T/bin2/$t"; done
	cp "$T/bin/uname" "$T/bin2/"
	PATH=$T/bin2 RXE_VM_COLD=1 RXE_VM_ACCEL=tcg run "$COURSE/vm-setup/microvm/run.sh" true
	assert_failure 1
	assert_output --partial "qemu-system-aarch64 is missing (run: vm-setup/install-deps.sh)"
	# A stand-in QEMU records how it would boot.
	printf '#!/bin/bash\nprintf "%%s\\n" "$*" >>"%s/qemu.args"\nexit 1\n' "$T" >"$T/bin/qemu-system-aarch64"
	chmod +x "$T/bin/qemu-system-aarch64"
	RXE_VM_COLD=1 RXE_VM_ACCEL=tcg run "$COURSE/vm-setup/microvm/run.sh" true
	assert_failure 125
	run cat "$T/qemu.args"
	assert_output --partial "-M virt,gic-version=max -accel tcg,thread=multi -cpu max,pauth-impdef=on "
	assert_output --partial "-kernel $entry/vmlinuz "
	assert_output --partial "console=ttyAMA0 "
	assert_output --partial "rxe_vm.ports=ttyAMA0,hvc0,hvc1"
	assert_output --partial "-device virtio-serial-pci,id=vser -chardev file,path="
	assert_output --partial "-device virtconsole,chardev=out"
	assert_output --partial "-device virtconsole,chardev=err"
	# KVM, when its probe passes: the host's CPU on the same machine.
	rm "$T/qemu.args"
	RXE_VM_COLD=1 RXE_VM_ACCEL=kvm run "$COURSE/vm-setup/microvm/run.sh" true
	run cat "$T/qemu.args"
	assert_output --partial "-M virt,gic-version=max -accel kvm -cpu host "
	# An architecture the micro-VM has no kernel for is refused by name.
	fake_uname riscv64
	run "$COURSE/vm-setup/microvm/build.sh"
	assert_failure 1
	assert_output --partial "this host is riscv64: the micro-VM runs on x86_64 and aarch64 hosts"
}

# debian_apt VERSION - stand-in apt-get and apt-cache for kernel-update.sh's
# own apt: Debian's current kernel for amd64 and arm64 is the stand-in
# package VERSION in $T/mirror. A stand-in make records the self-check and
# exits $MAKE_RC.
debian_apt() {
	cat >"$T/bin/apt-cache" <<-EOF
		#!/bin/bash
		a=\${*: -1}; arch=\${a#*:}
		case " \$* " in
		*" depends "*) printf 'linux-image-%s\n  Depends: linux-image-9.9.9-test-%s\n' "\$arch" "\$arch" ;;
		*" show "*) echo "Version: $1" ;;
		esac
	EOF
	cat >"$T/bin/apt-get" <<-EOF
		#!/bin/bash
		echo "apt-get \$*" >>"$T/apt.log"
		a=\${*: -1}; arch=\${a#*:}
		f=linux-image-9.9.9-test-\${arch}_$1_\$arch.deb
		p=$T/mirror/debian/pool/main/l/linux-test/\$f
		case " \$* " in
		*" update "*) ;;
		*" --print-uris "*) echo "'\$RXE_VM_DEBIAN_MIRROR/debian/pool/main/l/linux-test/\$f' \$f \$(stat -c %s "\$p") SHA256:\$(sha256sum <"\$p" | cut -d' ' -f1)" ;;
		*" download "*) cp "\$p" . ;;
		esac
	EOF
	printf '#!/bin/bash\necho "make $*" >>"%s/make.log"\nexit ${MAKE_RC:-0}\n' "$T" >"$T/bin/make"
	chmod +x "$T/bin/apt-cache" "$T/bin/apt-get" "$T/bin/make"
	echo keys >"$T/keyring"
	export RXE_VM_DEBIAN_KEYRING=$T/keyring RXE_VM_DEBIAN_MIRROR=http://mirror.test
}

@test "make vm-kernel-update: moves the pin, prints old -> new, grades the solutions on it, puts the old pin back when they fail" {
	fake_kernel amd64 2.0-1
	new_amd64=$FAKE_SHA
	fake_kernel arm64 2.0-1
	fake_kernel amd64 1.0-1
	old_amd64=$FAKE_SHA
	fake_kernel arm64 1.0-1
	cp "$T/kernel.lock" "$T/old.lock"
	debian_apt 2.0-1
	fake_uname x86_64
	MAKE_RC=1 run "$COURSE/vm-setup/microvm/kernel-update.sh"
	assert_failure 1
	assert_output --partial "amd64: linux-image-9.9.9-test-amd64 1.0-1 (sha256 ${old_amd64:0:16}...) -> linux-image-9.9.9-test-amd64 2.0-1 (sha256 ${new_amd64:0:16}...)"
	assert_output --partial "arm64: linux-image-9.9.9-test-arm64 1.0-1"
	assert_output --partial "the solutions lost points on the new kernel: the old pin is back"
	run cat "$T/make.log"
	assert_output --partial "grade SRC=solutions LESSON=01"
	cmp "$T/kernel.lock" "$T/old.lock"
	# The check passes: the new pin stays, and fetch-kernel.sh finds it cached.
	MAKE_RC=0 run "$COURSE/vm-setup/microvm/kernel-update.sh" --check 05,06
	assert_success
	assert_output --partial "the new pin passes"
	assert_output --partial "the new arm64 pin was not booted here (amd64): make bench-arm64"
	run grep -c "grade SRC=solutions LESSON=05,06" "$T/make.log"
	assert_output 1
	run grep -E '^amd64\.(version|path|sha256|sha1) = ' "$T/kernel.lock"
	assert_output "amd64.version = 2.0-1
amd64.path = debian/pool/main/l/linux-test/linux-image-9.9.9-test-amd64_2.0-1_amd64.deb
amd64.sha256 = $new_amd64
amd64.sha1 = $(sha1sum <"$T/cache/debs/linux-image-9.9.9-test-amd64_2.0-1_amd64.deb" | cut -d' ' -f1)"
	run "$COURSE/vm-setup/microvm/fetch-kernel.sh"
	assert_success
	assert_output "$T/cache/debs/linux-image-9.9.9-test-amd64_2.0-1_amd64.deb"
	# Nothing new: nothing written, nothing graded.
	rm "$T/make.log"
	run "$COURSE/vm-setup/microvm/kernel-update.sh"
	assert_success
	assert_output --partial "amd64: linux-image-9.9.9-test-amd64 2.0-1 (sha256 ${new_amd64:0:16}...): unchanged"
	assert_output --partial "nothing to do"
	[ ! -e "$T/make.log" ]
}

@test "offline lab: make vm-cache-export OUT=FILE carries the pinned package; vm-cache-import checks it against the pin and the VM builds offline" {
	fake_kernel amd64 1.0-1
	ubuntu_apt
	serve
	run make -C "$COURSE" --no-print-directory vm-cache-export
	assert_failure
	assert_output --partial "usage: make vm-cache-export OUT=FILE"
	run make -C "$COURSE" --no-print-directory vm-cache-export OUT="$T/lab.tar"
	assert_success
	assert_output --partial "wrote $T/lab.tar"
	assert_output --partial "$FAKE_FILE (amd64)"
	run tar -tf "$T/lab.tar"
	assert_line "rdma-course-vm-cache/debs/$FAKE_FILE"
	assert_line "rdma-course-vm-cache/kernel.lock"
	# Another machine, no network: the import fills its cache, the VM builds.
	kill "$(cat "$T/http.pid")"
	rm "$T/http.pid"
	export RXE_VM_CACHE=$T/lab-cache RXE_VM_DEBIAN_MIRROR=http://127.0.0.1:9 RXE_VM_SNAPSHOT=http://127.0.0.1:9
	run make -C "$COURSE" --no-print-directory vm-cache-import FILE="$T/lab.tar"
	assert_success
	assert_output --partial "imported $FAKE_FILE (amd64, sha256 verified)"
	run "$COURSE/vm-setup/microvm/build.sh"
	assert_success
	run cat "${lines[-1]}/kernel-version"
	assert_output 9.9.9-test-amd64
}

@test "vm-cache-import refuses a damaged package and one of another pin, and imports nothing" {
	fake_kernel amd64 1.0-1
	mkdir -p "$T/x/rdma-course-vm-cache/debs"
	cp "$T/mirror/$FAKE_PATH" "$T/x/rdma-course-vm-cache/debs/"
	printf 'X' | dd of="$T/x/rdma-course-vm-cache/debs/$FAKE_FILE" bs=1 seek=100 conv=notrunc 2>/dev/null
	tar -C "$T/x" -cf "$T/damaged.tar" rdma-course-vm-cache
	run "$COURSE/vm-setup/microvm/vm-cache.sh" import "$T/damaged.tar"
	assert_failure 1
	assert_output --partial "$FAKE_FILE: its sha256 is"
	assert_output --partial "the pin's $FAKE_SHA: the tarball is damaged or not what was exported; nothing imported"
	run ls -A "$T/cache/debs"
	assert_output ""
	# A tarball of an older pin.
	cp "$T/mirror/$FAKE_PATH" "$T/x/rdma-course-vm-cache/debs/$FAKE_FILE"
	tar -C "$T/x" -cf "$T/old.tar" rdma-course-vm-cache
	fake_kernel amd64 2.0-1
	run "$COURSE/vm-setup/microvm/vm-cache.sh" import "$T/old.tar"
	assert_failure 1
	assert_output --partial "linux-image-9.9.9-test-amd64_1.0-1_amd64.deb is not the kernel this checkout pins (kernel.lock: amd64 2.0-1)"
	run ls -A "$T/cache/debs"
	assert_output ""
	# Not an export at all.
	tar -C "$T" -cf "$T/other.tar" kernel.lock
	run "$COURSE/vm-setup/microvm/vm-cache.sh" import "$T/other.tar"
	assert_failure 1
	assert_output --partial "unexpected member 'kernel.lock'"
}

# os_release ID VERSION_ID PRETTY_NAME - a stand-in /etc/os-release.
os_release() {
	printf 'PRETTY_NAME="%s"\nNAME="x"\nVERSION_ID="%s"\nID=%s\nID_LIKE=debian\n' "$3" "$2" "$1" >"$T/os-release"
	export OS_RELEASE=$T/os-release
}

# stand_in_dpkg_apt - nothing is installed; apt has every package but those
# in $APT_NONE; apt-get's calls are logged in $T/apt.log.
stand_in_dpkg_apt() {
	printf '#!/bin/bash\nexit 1\n' >"$T/bin/dpkg-query"
	cat >"$T/bin/apt-cache" <<-'EOF'
		#!/bin/bash
		case " $APT_NONE " in *" ${*: -1} "*) echo "  Candidate: (none)" ;; *) echo "  Candidate: 1.0-1" ;; esac
	EOF
	printf '#!/bin/bash\necho "apt-get $*" >>"%s/apt.log"\n' "$T" >"$T/bin/apt-get"
	chmod +x "$T/bin/dpkg-query" "$T/bin/apt-cache" "$T/bin/apt-get"
}

@test "install-deps on Ubuntu 22.04: Ubuntu's names, and it says what it cannot install and what that costs" {
	os_release ubuntu 22.04 "Ubuntu 22.04.4 LTS"
	run --separate-stderr "$COURSE/vm-setup/install-deps.sh" --list
	assert_success
	for p in clang-format-14 qemu-system-x86 busybox-static python3-pyverbs python3-pytest-timeout bats debian-archive-keyring libpcap-dev tshark; do
		assert_line "$p"
	done
	refute_line bats-assert
	refute_line bats-support
	# shellcheck disable=SC2154 # run --separate-stderr sets $stderr
	[[ "$stderr" == *"cannot install on Ubuntu 22.04.4 LTS: bats-support bats-assert; make test's bats suites cannot run on Ubuntu 22.04"* ]]
	[[ "$stderr" == *"make grade, make doctor and the rest work"* ]]
}

@test "install-deps on Ubuntu 24.04 arm64: qemu-system-arm, every package; apt-get installs them; a package apt lacks is named with the fix" {
	[ "$(id -u)" = 0 ] || skip "installs as root (stand-in apt)"
	os_release ubuntu 24.04 "Ubuntu 24.04.1 LTS"
	fake_uname aarch64
	run --separate-stderr "$COURSE/vm-setup/install-deps.sh" --list
	assert_success
	assert_line qemu-system-arm
	refute_line qemu-system-x86
	assert_line bats-assert
	[ -z "$stderr" ]
	stand_in_dpkg_apt
	run "$COURSE/vm-setup/install-deps.sh"
	assert_success
	assert_output --partial "install-deps: installed rdma-core ibverbs-providers"
	run grep -c "apt-get install -y -qq --no-install-recommends rdma-core .* qemu-system-arm busybox-static .* debian-archive-keyring$" "$T/apt.log"
	assert_output 1
	rm "$T/apt.log"
	APT_NONE="perftest python3-pyverbs" run "$COURSE/vm-setup/install-deps.sh"
	assert_failure 1
	assert_output --partial "apt has no package named perftest python3-pyverbs on Ubuntu 24.04.1 LTS: they are in Ubuntu's 'universe' component: add-apt-repository universe"
	run grep -c "apt-get install" "$T/apt.log"
	assert_output 0
}

@test "install-deps: Debian 12 keeps its list; an unknown system is warned about; no root and no sudo says how to run it" {
	os_release debian 12 "Debian GNU/Linux 12 (bookworm)"
	run --separate-stderr "$COURSE/vm-setup/install-deps.sh" --list
	assert_success
	assert_line bats-assert
	assert_line libpcap-dev
	assert_line tshark
	refute_line debian-archive-keyring
	[ -z "$stderr" ]
	os_release linuxmint 21.3 "Linux Mint 21.3"
	run --separate-stderr "$COURSE/vm-setup/install-deps.sh" --list
	[[ "$stderr" == *"Linux Mint 21.3 is not one the course knows (Debian 12, Ubuntu 22.04, Ubuntu 24.04): trying Debian 12's package names"* ]]
	# A user without sudo (a container's): the command to run, as root.
	stand_in_dpkg_apt
	mkdir "$T/nosudo"
	for t in bash uname awk id cat sed mktemp dirname; do ln -s "$(command -v $t)" "$T/nosudo/$t"; done
	cp "$T/bin/dpkg-query" "$T/nosudo/"
	run_unprivileged env PATH="$T/nosudo" OS_RELEASE="$T/os-release" "$COURSE/vm-setup/install-deps.sh"
	assert_failure 1
	assert_output --partial "installing needs root, and there is no sudo here: run $COURSE/vm-setup/install-deps.sh as root"
}

@test "one code path to the kernel: Gradescope's setup.sh, the students' workflow and CI fetch none themselves" {
	# Wherever grader/ keeps them (the instructor's files; a student
	# repository has none of them).
	mapfile -t files < <(git -C "$COURSE" ls-files '*gradescope-files/setup.sh' '*student-repo/grade.yml' \
		'grader/gradescope.py' 'grader/*/gradescope.py' .ci/run)
	[ ${#files[@]} = 4 ] || skip "the instructor's files (not in a student repository): ${files[*]}"
	for f in "${files[@]}"; do
		run grep -nE 'curl|wget|apt-get download|snapshot\.debian|linux-image|sha1|\.deb\b' "$COURSE/$f"
		assert_failure
	done
	setup_sh=$(printf '%s\n' "${files[@]}" | grep 'gradescope-files/setup.sh$')
	run grep -c 'vm-setup/microvm/build.sh' "$COURSE/$setup_sh"
	assert_output 1
	# build.sh itself asks nothing of apt or the network: fetch-kernel.sh does.
	run grep -nE 'apt-get|apt-cache|urlopen|curl' "$COURSE/vm-setup/microvm/build.sh"
	assert_failure
	run grep -c '"$here/fetch-kernel.sh" --arch "$arch"' "$COURSE/vm-setup/microvm/build.sh"
	assert_output 1
}

@test "dev container: devcontainer.json parses (JSON with comments), Debian 12, C and Python extensions, and every command it runs exists here" {
	run python3 - "$COURSE" <<-'PY'
		import json, os, re, shlex, sys
		course = sys.argv[1]
		text = open(os.path.join(course, ".devcontainer/devcontainer.json")).read()
		# JSONC: drop // and /* */ comments outside strings.
		out, i, n = [], 0, len(text)
		while i < n:
		    c = text[i]
		    if c == '"':
		        j = i + 1
		        while text[j] != '"':
		            j += 2 if text[j] == "\\" else 1
		        out.append(text[i:j + 1]); i = j + 1
		    elif text.startswith("//", i):
		        i = text.find("\n", i) if "\n" in text[i:] else n
		    elif text.startswith("/*", i):
		        i = text.index("*/", i) + 2
		    else:
		        out.append(c); i += 1
		d = json.loads("".join(out))
		assert "bookworm" in d["image"], d["image"]
		ext = d["customizations"]["vscode"]["extensions"]
		assert "ms-vscode.cpptools" in ext and "ms-python.python" in ext, ext
		targets = set(re.findall(r"^([\w-]+):", open(os.path.join(course, "Makefile")).read(), re.M))
		cmds = [d[k] for k in ("onCreateCommand", "postCreateCommand", "postStartCommand") if k in d]
		assert cmds, "no command runs the set-up"
		ran = 0
		for cmd in cmds:
		    for part in re.split(r"&&|;|\|\|", cmd):
		        words = shlex.split(part)
		        assert words[0] != "sudo", f"{part}: root containers have no sudo"
		        if words[0] == "make":
		            assert words[1] in targets, f"make {words[1]}: no such target"
		        else:
		            path = os.path.join(course, words[0])
		            assert os.access(path, os.X_OK), f"{words[0]}: not an executable of the course"
		        ran += 1
		print("commands checked:", ran)
	PY
	assert_success
	assert_output "commands checked: 2"
}
