#!/usr/bin/env bats
# with-rxe through the micro-VM: exit codes, stdout and stderr, files, the
# global timeout. Each test boots the VM once (5-15 s under TCG).

bats_require_minimum_version 1.5.0

# On a fresh machine the first VM run fetches the kernel and says so on
# stderr; fetch it here so the tests see only their commands' output.
setup_file() {
	"$BATS_TEST_DIRNAME/../../vm-setup/microvm/build.sh" >/dev/null
}

setup() {
	load helpers
	export BATS_LIB_PATH=/usr/lib/bats
	# A hung test fails in minutes, not at the VM's default half hour,
	# and before BATS_TEST_TIMEOUT (600 s) stops the test unnamed. The
	# pair's make grade HOSTS=2 took 160-170 s whole on a slow host.
	export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-450}
}

# Host B's ibv_rc_pingpong against A's, as a guest command. Both hosts'
# commands start together; a connection refused (A not listening yet)
# changed nothing on A and is tried again, for up to 120 s. The run itself
# is bounded too; its output, stderr included, follows at its end.
# shellcheck disable=SC2016 # expanded in the guest
B_PINGPONG='for _ in $(seq 240); do
	out=$(timeout 120 ibv_rc_pingpong -g $RDMA_GID_INDEX -n 50 -s 1500 $RDMA_PEER_IP 2>&1)
	case $out in *"t connect to"*) sleep 0.5 ;; *) break ;; esac
done
echo "$out"'

# await_prompt PROMPT - read the coprocess VM's output until PROMPT and
# "# " (a root shell waiting); print what was read.
await_prompt() {
	local seen="" c
	while IFS= read -r -t 180 -n 1 c <&"${VM[0]}"; do
		seen+=$c
		case "$seen" in *"$1"*"# ") break ;; esac
	done
	printf '%s' "$seen"
}

# type_and_await_exit LINE - type LINE into the coprocess VM's shell; fail
# (VMs killed) unless it has exited 300 s later. A bound for a hang: 'b
# CMD' and the pair's poweroff took 8 s quiet, and more than 60 s (the
# bound before) with a second make test beside this one.
type_and_await_exit() {
	local pid=$VM_PID
	echo "$1" >&"${VM[1]}"
	for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
	if kill -0 "$pid" 2>/dev/null; then
		pkill -f "qemu-system-x86_64.*$BATS_TEST_TMPDIR"
		kill "$pid"
		fail "the shell did not act on the typed command within 300 s"
	fi
}

@test "micro-VM: stdout, stderr, exit code, RDMA_* and files written in the current directory come back" {
	cd "$BATS_TEST_TMPDIR"
	run --separate-stderr "$COURSE/vm-setup/with-rxe" --backend vm bash -c \
		'echo "out $RDMA_BACKEND $RDMA_DEVICE $RDMA_GID_INDEX $RDMA_IP"; echo "err line" >&2; echo kept >written.txt; exit 7'
	assert_failure 7
	assert_output "out vm rxe0 1 192.0.2.1"
	# shellcheck disable=SC2154 # run --separate-stderr sets $stderr
	[ "$stderr" = "err line" ]
	[ "$(cat written.txt)" = kept ]
}

@test "micro-VM: the command gets only the host variables rxe_vm_env lets through; none changes the guest's own; grader/ is a read-only share of its own" {
	cd "$BATS_TEST_TMPDIR"
	# The names the guest's stage2.sh uses for itself, and what would change
	# its programs: a preload that here does nothing but in the guest (which
	# does not share this directory) does not exist, so every program there
	# would say so; TMPDIR likewise; a Debian user's PATH, without sbin. A
	# value with a newline, quotes, $ and a byte above 127, under a locale
	# that is not UTF-8.
	cc -shared -o "$BATS_FILE_TMPDIR/empty.so" -x c /dev/null
	note=$'a "b" $c `d`\ne \xe9\\'
	run --separate-stderr env OUT=/tmp/x ERR=/tmp/y RUN=/nowhere CMD=false TTY=/dev/null BB=/nowhere \
		CWD=/nowhere JOBS=/nowhere SERVE=1 IDLE=0 VERBOSE=1 DEVICES=9 COURSE_DIR=/nowhere \
		TMPDIR="$BATS_FILE_TMPDIR" PYTHONPATH=/nowhere LD_PRELOAD="$BATS_FILE_TMPDIR/empty.so" \
		PATH=/usr/bin:/bin LC_ALL=C PERFTEST_TRIES=7 BENCH_NOTE="$note" RXE_VM_COLD=1 \
		"$COURSE/vm-setup/with-rxe" bash -c '
		for v in OUT ERR RUN CMD TTY BB CWD JOBS SERVE IDLE VERBOSE DEVICES COURSE_DIR TMPDIR PYTHONPATH LD_PRELOAD; do
			[ -z "${!v+set}" ] || echo "passed $v=${!v}"
		done
		echo "$RDMA_DEVICE $HOME $PATH $LC_ALL $PERFTEST_TRIES"
		printf "%s\n" "$BENCH_NOTE"
		if touch "$1/grader/.probe" 2>/dev/null; then rm "$1/grader/.probe"; echo "grader/ writable"; else echo "grader/ read-only"; fi
		awk -v d="$1/grader" '"'"'$2 == d { split($4, o, ","); print "grader/", $3, o[1] }'"'"' /proc/mounts
		echo "err line" >&2
		exit 7' _ "$(cd "$COURSE" && pwd -P)"
	assert_failure 7
	# A one-shot VM reads the course's grader/ through a read-only share of
	# its own (vm-setup/microvm/run.sh, the guest caches it): nothing in the
	# VM can change the grader, and the guest does not ask the host again.
	assert_output "rxe0 /root /usr/bin:/bin:/usr/sbin:/sbin C 7
$note
grader/ read-only
grader/ 9p ro"
	# shellcheck disable=SC2154 # run --separate-stderr sets $stderr
	[ "$stderr" = "err line" ]
}

@test "micro-VM: a command that does not exist fails with 127 and the shell's message" {
	run -127 "$COURSE/vm-setup/with-rxe" --backend vm no-such-command-xyz
	assert_failure 127
	assert_output --partial "no-such-command-xyz"
}

@test "micro-VM: a hung command is killed at RXE_VM_TIMEOUT and named (exit 124)" {
	# TMPDIR puts this run's directory, named on QEMU's command line, here.
	TMPDIR=$BATS_TEST_TMPDIR RXE_VM_TIMEOUT=20 run "$COURSE/vm-setup/with-rxe" --backend vm sleep 600
	assert_failure 124
	assert_output --partial "did not finish within 20 s"
	assert_output --partial "sleep 600"
	run pgrep -f "qemu-system-x86_64.*$BATS_TEST_TMPDIR"
	assert_failure
}

@test "micro-VM: --shell takes input from the terminal (make vm-shell)" {
	cd "$BATS_TEST_TMPDIR"
	# TMPDIR names this run's directory on QEMU's command line (see above).
	coproc VM { TMPDIR=$BATS_TEST_TMPDIR "$COURSE/vm-setup/microvm/run.sh" --shell 2>&1; }
	# Wait for the prompt, then type as a person would.
	seen=$(await_prompt "root@rxe-vm:")
	[[ "$seen" == *"rxe0 is ACTIVE"* ]]
	type_and_await_exit 'echo "shell $RDMA_DEVICE" >typed.txt; exit 3'
	[ "$(cat typed.txt)" = "shell rxe0" ]
}

# score_is_full - the last line of $output is "Score: N/N".
score_is_full() {
	local last
	last=$(tail -n 1 <<<"$output")
	[[ "$last" =~ ^Score:\ ([0-9]+)/([0-9]+)$ ]] || fail "last line is not a score: $last"
	[ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] || fail "not full marks: $last"
}

@test "make grade: SRC outside the course tree, no RESULTS, full marks" {
	needs_solutions
	mkdir -p "$BATS_TEST_TMPDIR/x/alice"
	cp -r "$COURSE/solutions/01-devices" "$BATS_TEST_TMPDIR/x/alice/"
	cd "$COURSE"
	run make --no-print-directory grade LESSON=01 SRC="$BATS_TEST_TMPDIR/x/alice"
	assert_success
	refute_output --partial "no such directory"
	score_is_full
}

@test "make -C COURSE grade from another directory, RESULTS directly in /tmp" {
	needs_solutions
	mkdir -p "$BATS_TEST_TMPDIR/bob"
	cp -r "$COURSE/solutions/04-work-requests" "$BATS_TEST_TMPDIR/bob/"
	results=/tmp/rdma-course-bats-$$-$RANDOM.json
	cd /tmp
	run make -C "$COURSE" --no-print-directory grade LESSON=00,04 SRC="$BATS_TEST_TMPDIR/bob" RESULTS="$results"
	assert_success
	score_is_full
	python3 - "$results" "$(tail -n 1 <<<"$output")" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
assert data["score"] == data["max_score"] > 0, data
assert sys.argv[2] == f"Score: {data['score']}/{data['max_score']}", sys.argv[2]
PY
	rm -f "$results"
}

@test "warm VM: make vm-up, then commands run in it at once; vm-down stops it" {
	cd "$COURSE"
	# A host directory under /tmp, shared: the guest's clean-up between
	# commands must leave it alone (a course cloned into /tmp is one).
	mkdir -p "$BATS_TEST_TMPDIR/shared"
	echo keep >"$BATS_TEST_TMPDIR/shared/canary"
	# The names the guest uses for itself are its own, in the warm VM
	# (IDLE=0 would stop it at once) and in its commands.
	run env RXE_VM_SHARE="$BATS_TEST_TMPDIR/shared" IDLE=0 SERVE=0 JOBS=/nowhere OUT=/tmp/x \
		make --no-print-directory vm-up
	assert_success
	assert_output --partial "warm VM up"
	run vm-setup/microvm/warm.sh alive
	assert_success
	# In the warm VM the run directory has 'ready'; a cold one has not.
	run --separate-stderr env OUT=/tmp/x CWD=/nowhere CMD=false PERFTEST_TRIES=7 \
		vm-setup/with-rxe bash -c 'test -e /run/rxe-vm/ready && echo "warm $RDMA_DEVICE ${OUT-unset} $PERFTEST_TRIES"; echo e >&2; exit 5'
	assert_failure 5
	assert_output "warm rxe0 unset 7"
	[ "$stderr" = e ]
	[ "$(cat "$BATS_TEST_TMPDIR/shared/canary")" = keep ]
	# A directory the warm VM does not share: a cold VM runs it.
	cd "$BATS_TEST_TMPDIR"
	run "$COURSE/vm-setup/with-rxe" bash -c 'test -e /run/rxe-vm/ready || echo cold'
	assert_success
	assert_output cold
	cd "$COURSE"
	run make --no-print-directory vm-down
	assert_output --partial "warm VM stopped"
	run vm-setup/microvm/warm.sh alive
	assert_failure
}

@test "warm grader: make grade is a session of the resident grader; a regrade is the session made ready ahead; a changed grader file warms it again; nothing of a grading outlives it" {
	cd "$COURSE"
	run make --no-print-directory vm-up
	assert_success
	log() { vm-setup/with-rxe cat /run/rdma-course-grader/log; }
	run make --no-print-directory grade LESSON=05 SRC=solutions TEST=bad_host
	assert_success
	assert_output --partial "Score: 1/1"
	# (shown if what follows fails: "grading without the warm grader" says why)
	echo "make grade said: $output"
	run log
	assert_line --regexp '^[0-9:]+ session [0-9]+ started: .*--test=bad_host'
	assert_line --regexp '^[0-9:]+ session [0-9]+ ended: exit 0'
	# The same grading again (a student's regrade): the session made
	# ready ahead once the first ended (server.py --ahead) takes it.
	run make --no-print-directory grade LESSON=05 SRC=solutions TEST=bad_host
	assert_success
	assert_output --partial "Score: 1/1"
	run log
	assert_line --regexp '^[0-9:]+ session [0-9]+ started \(made ready ahead\): .*--test=bad_host'
	# A grading whose program leaves a daemon behind (hostile/daemon.c: a
	# setsid double fork): gone with its session, before the next command
	# of the same job (whose own clean-up would hide a leftover).
	# (in the course tree: the warm VM shares it, not the host's /tmp)
	src=build/selftest/hostile-warm
	/usr/bin/python3 grader/selftest/hostile/tree.py "$src"
	/usr/bin/python3 -m grader build "$src" 01-devices
	run vm-setup/with-rxe bash -c "make --no-print-directory grade LESSON=01 SRC=$src TEST=device_line >/dev/null 2>&1
		ps -eo user:12,args | grep -E '^(64000|sandbox) |grader/lessons' | grep -v grep || echo clean"
	assert_output clean
	run log
	assert_line --regexp '^[0-9:]+ session [0-9]+ started: .*--lesson=01 .*--test=device_line$'
	# The grader as it is on disk, not as it was imported: a changed
	# file makes the warm grader import again (and the grading still runs).
	touch grader/session/pairs.py
	run make --no-print-directory grade LESSON=05 SRC=solutions TEST=bad_host
	assert_success
	assert_output --partial "Score: 1/1"
	run log
	assert_output --partial "grader/session/pairs.py changed since the warm grader started"
	run make --no-print-directory vm-down
	assert_output --partial "warm VM stopped"
}

@test "warm VM: a wedged guest is stopped and the command runs on a fresh VM" {
	cd "$COURSE"
	vm-setup/microvm/run.sh --up
	state=$(vm-setup/microvm/warm.sh state)
	pid=$(cat "$state/qemu.pid")
	kill -STOP "$pid"
	sleep 4
	RXE_VM_WEDGED=3 run vm-setup/with-rxe bash -c 'test -e /run/rxe-vm/ready || echo cold'
	kill -9 "$pid" 2>/dev/null || true
	assert_success
	assert_output --partial "stopped answering"
	assert_line cold
	run kill -0 "$pid"
	assert_failure
	[ ! -e "$state" ]
}

@test "two clones, one fresh cache, at the same time: one build, both run" {
	deb=$("$COURSE/vm-setup/microvm/fetch-kernel.sh")
	[ -n "$deb" ] || fail "no pinned kernel package (setup_file fetches it)"
	git clone -q "$COURSE" "$BATS_TEST_TMPDIR/c1"
	git clone -q "$COURSE" "$BATS_TEST_TMPDIR/c2"
	export RXE_VM_CACHE="$BATS_TEST_TMPDIR/cache" RXE_VM_KERNEL_DEB="$deb" RXE_VM_ACCEL=tcg RXE_VM_COLD=1
	pids=()
	for c in c1 c2; do
		"$BATS_TEST_TMPDIR/$c/vm-setup/with-rxe" bash -c "echo $c \$RDMA_DEVICE" \
			>"$BATS_TEST_TMPDIR/$c.out" 2>"$BATS_TEST_TMPDIR/$c.err" 3>&- &
		pids+=($!)
	done
	# These two only: a bare wait would also wait for bats' own
	# BATS_TEST_TIMEOUT watcher.
	wait "${pids[@]}"
	[ "$(cat "$BATS_TEST_TMPDIR/c1.out")" = "c1 rxe0" ]
	[ "$(cat "$BATS_TEST_TMPDIR/c2.out")" = "c2 rxe0" ]
	# Built once, by whichever came first; the other waited and reused it.
	[ "$(cat "$BATS_TEST_TMPDIR"/c?.err | grep -c 'ready in')" = 1 ]
	[ "$(find "$RXE_VM_CACHE" -maxdepth 1 -name 'vm-*' | wc -l)" = 1 ]
}

@test "pair: two hosts over a link, ibv_rc_pingpong across it, prefixed output, the failing host named" {
	cd "$BATS_TEST_TMPDIR"
	# TMPDIR names both runs' directories on QEMU's command lines.
	TMPDIR=$BATS_TEST_TMPDIR run --separate-stderr "$COURSE/vm-setup/with-rxe" --pair \
		'echo "env $RDMA_HOST $(hostname) $RDMA_DEVICE $RDMA_IP $RDMA_PEER_IP"; ibv_rc_pingpong -g $RDMA_GID_INDEX -n 50 -s 1500' \
		'echo "env $RDMA_HOST $(hostname) $RDMA_DEVICE $RDMA_IP $RDMA_PEER_IP"; '"$B_PINGPONG"'; exit 3'
	assert_failure 3
	assert_line "A| env A rxe-vm-a rxe0 192.0.2.1 192.0.2.2"
	assert_line "B| env B rxe-vm-b rxe0 192.0.2.2 192.0.2.1"
	# Each side's own GID is its host's; the remote one is the other's.
	assert_line --regexp '^A\|   local address: .* GID ::ffff:192\.0\.2\.1$'
	assert_line --regexp '^B\|   remote address: .* GID ::ffff:192\.0\.2\.1$'
	assert_line --regexp '^A\| 50 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
	assert_line --regexp '^B\| 50 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
	# shellcheck disable=SC2154 # run --separate-stderr sets $stderr
	[[ "$stderr" == *"rxe-vm: host B's command failed (exit 3)"* ]]
	[[ "$stderr" != *"host A's command failed"* ]]
	run pgrep -f "qemu-system-x86_64.*$BATS_TEST_TMPDIR"
	assert_failure
}

@test "pair: netem loss on A's link is retransmitted (A's counters), link down gives IBV_EVENT_PORT_ERR" {
	c=/sys/class/infiniband/rxe0/ports/1/hw_counters
	# Every wait here bounds a hang, not a speed (B's old 2 s head start
	# and 15 s ping-pong were speeds). B's last ping can stay unacknowledged (A's
	# ACK of it may be the packet dropped, and A has gone by then): B's
	# ping-pong is bounded (B_PINGPONG), A's must end. The link
	# goes down once ibv_asyncwatch has the device open, and B waits for
	# the event.
	run "$COURSE/vm-setup/with-rxe" --pair \
		"tc qdisc add dev rdma0 root netem loss 20% && ibv_rc_pingpong -g \$RDMA_GID_INDEX -n 50 -s 1500 && echo \"retries \$(cat $c/completer_retry_err)\"" \
		"$B_PINGPONG"'
		stdbuf -oL ibv_asyncwatch -d rxe0 >/tmp/watch 2>&1 &
		timeout 120 sh -c "until grep -q \"async event FD\" /tmp/watch; do sleep 0.2; done"
		ip link set rdma0 down
		timeout 120 sh -c "until grep -q PORT_ERR /tmp/watch; do sleep 0.2; done"
		kill $!; cat /tmp/watch'
	assert_success
	assert_line --regexp '^A\| 50 iters in '
	# One packet in five of A's is dropped: A's requests time out and go again.
	retries=$(sed -n 's/^A| retries //p' <<<"$output")
	[ -n "$retries" ] && [ "$retries" -gt 0 ] || fail "A's completer_retry_err did not move under 20% loss: '$retries'"
	assert_line --partial "B|   event_type IBV_EVENT_PORT_ERR"
}

@test "pair: when one host fails, the other is killed after RXE_VM_PAIR_GRACE and named; nothing is left" {
	TMPDIR=$BATS_TEST_TMPDIR RXE_VM_PAIR_GRACE=3 run "$COURSE/vm-setup/with-rxe" --pair 'sleep 600' 'echo bye; exit 4'
	assert_failure
	assert_line "B| bye"
	assert_output --partial "host A was still running 3 s after host B's command failed (exit 4); killed it"
	assert_output --partial "host B's command failed (exit 4)"
	run pgrep -f "qemu-system-x86_64.*$BATS_TEST_TMPDIR"
	assert_failure
	[ -z "$(ls -d "$BATS_TEST_TMPDIR"/rxe-pair.* 2>/dev/null)" ]
}

@test "pair: make vm-shell HOSTS=2 is a shell on host A in which 'b CMD' runs CMD on host B" {
	cd "$BATS_TEST_TMPDIR"
	# make -C: the current directory is the course; share the test's.
	coproc VM { TMPDIR=$BATS_TEST_TMPDIR RXE_VM_SHARE=$BATS_TEST_TMPDIR make --no-print-directory -C "$COURSE" vm-shell HOSTS=2 2>&1; }
	seen=$(await_prompt "root@rxe-vm-a:")
	[[ "$seen" == *"'b CMD' runs CMD on B"* ]] || fail "no greeting for host A in: $seen"
	type_and_await_exit "b 'echo \"on \$(hostname) \$RDMA_IP\"' >$BATS_TEST_TMPDIR/typed.txt; exit 3"
	[ "$(cat typed.txt)" = "B| on rxe-vm-b 192.0.2.2" ]
	run pgrep -f "qemu-system-x86_64.*$BATS_TEST_TMPDIR"
	assert_failure
}

@test "pair: make grade HOSTS=2 runs the reference peer on host B and counts host A's traffic alone" {
	needs_solutions
	cd "$COURSE"
	run make --no-print-directory grade LESSON=05 SRC=solutions HOSTS=2 TEST="every ping arrived intact"
	assert_success
	assert_line --partial "A|   reference server: every ping arrived intact in its memory ... OK"
	[[ "$(tail -n 1 <<<"$output")" =~ ^A\|\ Score:\ ([0-9]+)/([0-9]+)$ ]] || fail "no score line: $output"
	[ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && [ "${BASH_REMATCH[1]}" -gt 0 ]
}
