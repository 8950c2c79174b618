#!/usr/bin/env bats
# Grading works for whoever runs it, wherever the course is: an ordinary
# user whose home others may not enter (Debian's adduser makes it 0700,
# Ubuntu's 0750), and root in a directory of its own (a container's /root)
# reached through a symbolic link. Each grades reference solutions through
# the real make targets; the user's also runs make doctor and the warm VM.
# Needs root (to make the user): make test's part 3 runs it, in CI as root.

bats_require_minimum_version 1.5.0

# Its own name per bats run: two make tests on one machine each make and
# remove theirs (with one name, one's useradd met the other's user, and
# one's teardown killed the other's processes).
STUDENT=rdma-course-student-$(printf %s "$BATS_RUN_TMPDIR" | md5sum | cut -c1-8)

setup_file() {
	[ "$(id -u)" = 0 ] || return 0
	"$BATS_TEST_DIRNAME/../../vm-setup/microvm/build.sh" >/dev/null
}

setup() {
	load helpers
	export BATS_LIB_PATH=/usr/lib/bats
	export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-600}
	[ "$(id -u)" = 0 ] || skip "needs root: it creates a user and a directory of root's"
	needs_solutions
}

teardown() {
	if [ "$(id -u)" = 0 ] && id "$STUDENT" >/dev/null 2>&1; then
		# Its warm VM, if the test left one, goes with it.
		pkill -9 -u "$STUDENT" 2>/dev/null
		userdel -r "$STUDENT" >/dev/null 2>&1
	fi
	return 0
}

# course_tar - this checkout's files as they are now (tracked ones,
# uncommitted changes included; no .git: nothing to compare the grader's
# files with), as a tar stream on stdout for another user's tar.
course_tar() {
	git -C "$COURSE" ls-files -z | tar -C "$COURSE" --null -T - -cf -
}

@test "an ordinary user, home 0700, odd environment: make doctor passes and make grade gives lessons 01 and 04's solutions full marks, in a warm VM" {
	userdel -r "$STUDENT" >/dev/null 2>&1 || true
	useradd -m -s /bin/bash "$STUDENT"
	home=$(getent passwd "$STUDENT" | cut -d: -f6)
	chmod 0700 "$home"
	course_tar | su -l "$STUDENT" -c 'mkdir rdma-course && tar -C rdma-course -xf -'
	# The pinned kernel, ready: what the user's first run would fetch.
	entry=$("$COURSE/vm-setup/microvm/build.sh")
	cache=$home/.cache/rdma-course/microvm
	mkdir -p "$cache"
	cp -a "$entry" "$cache/"
	cp -a "$(dirname "$entry")"/kvm-probe-* "$cache/" 2>/dev/null || true
	chown -R "$STUDENT:" "$home/.cache"
	# Names the VM's own scripts use, a TMPDIR only the user may enter,
	# a PYTHONPATH and a preload the grader must not care about, the C
	# locale: none may change a grade.
	run su -l "$STUDENT" -c 'cd rdma-course &&
		mkdir -m 0700 ~/tmp &&
		export OUT=/nonexistent/out ERR=/nonexistent/err RUN=/nonexistent CMD=false TTY=/dev/null \
			TMPDIR=$HOME/tmp PYTHONPATH=/nonexistent LD_PRELOAD=libm.so.6 LC_ALL=C LANG=C &&
		make vm-up && make doctor && make grade LESSON=01,04 SRC=solutions; rc=$?
		make vm-down; exit $rc'
	echo "$output"
	assert_success
	assert_line --regexp '^PASS  sandbox \(this host, uncontained\)'
	assert_line --regexp '^PASS  sandbox \(the micro-VM, contained\)'
	assert_line 'doctor: grading can run here'
	assert_line --regexp '^rxe-vm: warm VM up'
	assert_line '  01-devices: 20/20'
	assert_line '  04-work-requests: 14/14'
	assert_line 'Score: 34/34'
	# What grading left in the checkout is the user's to delete.
	run su -l "$STUDENT" -c 'cd rdma-course && rm -rf build .grade && echo removed'
	assert_success
	assert_output removed
}

@test "root, the checkout in a 0700 directory reached through a symbolic link: make grade gives lessons 04 and 16's solutions full marks (graded on this host)" {
	top=$BATS_TEST_TMPDIR/private
	mkdir -m 0700 "$top"
	mkdir "$top/course"
	course_tar | tar -C "$top/course" -xf -
	ln -s course "$top/link"
	cd "$top/link"
	run make grade LESSON=04,16 SRC=solutions
	echo "$output"
	assert_success
	assert_line '  04-work-requests: 14/14'
	assert_line '  16-on-the-wire: 33/33'
	refute_output --partial 'sandbox-exec'
}

@test "a checkout whose path has a space: make grade and make doctor refuse it at once, with the way out" {
	top="$BATS_TEST_TMPDIR/my course"
	mkdir -p "$top"
	course_tar | tar -C "$top" -xf -
	cd "$top"
	run make grade LESSON=04 SRC=solutions
	assert_failure
	assert_output --partial "a path with white space or a quote, where make and the micro-VM cannot work: move or clone it to a path without"
	refute_output --partial 'compile error'
	run vm-setup/doctor.sh --no-vm
	assert_failure
	assert_line --regexp "^FAIL  checkout: '.*/my course' has white space"
}
