# Shared setup for the course's bats suites.
bats_load_library bats-support
bats_load_library bats-assert

COURSE=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
export COURSE

# run_as_user CMD... - run CMD as an unprivileged user (nobody), or skip the
# assertion set when we are not root (then we already are unprivileged).
run_unprivileged() {
	if [ "$(id -u)" = 0 ]; then
		run setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
	else
		run "$@"
	fi
}

# needs_solutions - the test grades the reference solutions: a student
# repository (make student-repo) has none, so there it does not apply.
needs_solutions() {
	[ -d "$COURSE/solutions" ] || skip "needs solutions/ (a student repository has none)"
}
