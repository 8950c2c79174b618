#!/bin/bash
# watch.sh (make watch LESSON=NN [SRC=DIR]) - grade a lesson, then again on
# every save of its files, until Ctrl-C. Keeps a warm micro-VM up while it
# runs (make vm-up), so each regrade starts at once.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
lesson=${1:-}
src=${2:-skeletons}
PYTHON=${PYTHON:-/usr/bin/python3}
die() {
	echo "watch: $*" >&2
	exit 2
}
[ -n "$lesson" ] || die "usage: make watch LESSON=NN [SRC=DIR]"
name=$(cd lessons && ls -d "$lesson"-* "0$lesson"-* 2>/dev/null | head -n 1)
[ -n "$name" ] || die "no lesson '$lesson'; the lessons are: $(cd lessons && echo [0-9][0-9]-*)"
[ -d "$src/$name" ] || die "$src/$name/ does not exist: nothing to watch"
command -v inotifywait >/dev/null || die "inotifywait is missing (package inotify-tools; run: make deps)"

started=0
if ! grep -q '^device *= *false' "lessons/$name/lesson.toml" 2>/dev/null &&
	[ "$(vm-setup/with-rxe --info | awk '{ print $2 }')" = vm: ] &&
	! vm-setup/microvm/warm.sh alive; then
	vm-setup/microvm/run.sh --up && started=1
fi
waiter=''
stop() {
	[ -n "$waiter" ] && kill "$waiter" 2>/dev/null
	[ $started = 1 ] && vm-setup/microvm/run.sh --down >/dev/null
	exit 0
}
trap stop INT TERM

while :; do
	printf '\n== make watch: %s from %s, %s (Ctrl-C stops) ==\n' "$name" "$src" "$(date +%H:%M:%S)"
	make --no-print-directory grade LESSON="${name%%-*}" SRC="$src"
	echo "== waiting for a change in $src/$name/ =="
	# A save is a write, or an editor's rename over the file.
	# In the background: bash runs the INT/TERM trap during 'wait' at once,
	# but only after a foreground command has finished.
	inotifywait -q -q -r -e close_write,moved_to,create,delete "$src/$name" "lessons/$name" &
	waiter=$!
	wait "$waiter"
	waiter=''
	# Wait for a second with no event: an editor's rename dance, a git
	# checkout of several files or rm -r's deleting is one change, not
	# several (the first event of a removal comes while the directory
	# still exists; 0.2 s was too short on a loaded machine). inotifywait
	# exits 2 after a quiet second, 1 when the directory is gone.
	for _ in $(seq 30); do
		inotifywait -q -q -r -t 1 -e close_write,moved_to,create,delete \
			"$src/$name" "lessons/$name" 2>/dev/null &
		waiter=$!
		wait "$waiter" || break
	done
	waiter=''
	# Gone (deleted, or its disk unmounted): nothing is left to watch, and
	# inotifywait would fail at once, every time.
	[ -d "$src/$name" ] || {
		echo "watch: $src/$name/ is gone: stopping" >&2
		stop
	}
done
