#!/bin/bash
# lint.sh - the course's static checks, host side, no device needed: every
# shell script the repository tracks (bash, sh and bats) through shellcheck
# at warning level, and lessons/common/ (the code every lesson builds
# against) through clang-format with the repository's .clang-format.
# Prints each finding and exits 1 when there is one, 0 when all is clean.
# Usage: grader/selftest/lint.sh [DIR]   (DIR: a git checkout, default this course;
# make lint and grader/selftest/test_lint.py run it)
set -u
cd "${1:-$(dirname "$0")/../..}" || exit 2

for tool in shellcheck clang-format-14; do
	command -v "$tool" >/dev/null || {
		echo "lint.sh: $tool is missing (vm-setup/install-deps.sh installs it)" >&2
		exit 2
	}
done

status=0

# Every tracked file that is a shell script by name or by its #! line.
scripts=() bats=() ash=()
while IFS= read -r f; do
	case "$f" in
	*.bats) bats+=("$f") ;;
	*.sh | *.bash) scripts+=("$f") ;;
	*)
		case "$(head -n 1 "$f" 2>/dev/null | tr -d '\0')" in
		'#!/bin/busybox sh'*) ash+=("$f") ;;
		'#!'*bash* | '#!'*/sh*) scripts+=("$f") ;;
		esac
		;;
	esac
done < <(git ls-files)

# SC2054 (commas in an array element) is excluded: QEMU's options are
# comma-separated inside one word on purpose (-accel tcg,thread=multi).
sc=(shellcheck --severity=warning --exclude=SC2054 --external-sources)
"${sc[@]}" "${scripts[@]}" || status=1
# busybox ash: checked as POSIX sh.
[ ${#ash[@]} -eq 0 ] || "${sc[@]}" --shell=sh "${ash[@]}" || status=1
[ ${#bats[@]} -eq 0 ] || "${sc[@]}" --shell=bats "${bats[@]}" || status=1

# clang-format 14 on the shared C code; attribute masks stay one flag per
# line between /* clang-format off */ and /* clang-format on */.
clang-format-14 --dry-run --Werror lessons/common/*.[ch] || status=1

[ $status -eq 0 ] && echo "lint: clean"
exit $status
