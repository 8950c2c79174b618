#!/bin/bash
# bench-stability.sh (make bench-stability [N=5] [LESSON=..]) - does a correct
# program get full marks on every run, whatever the machine's speed? Grades
# the solutions, and the skeletons, N times under each of three conditions:
#
#   quiet   nothing else started by the bench
#   loaded  every host core busy beside the grading (stress-ng --cpu, or a
#           shell busy loop per core when stress-ng is missing)
#   half    the whole grading (QEMU included) in a cgroup of half a CPU,
#           Gradescope's default container: systemd-run --scope -p
#           CPUQuota=50% where systemd runs, else a cgroup made here
#           (v2 cpu.max, or v1 cpu.cfs_quota_us; needs root)
#
# then prints, per test, in how many runs the solutions lost points, and the
# skeleton tests whose score was not the same in every run. Exits 1 when a
# solution lost a point or a skeleton's score changed, 2 when a condition
# could not be set up. Every grading boots its own VM (RXE_VM_COLD=1), so
# that the condition holds for QEMU too.
#
#   N=5             runs per condition
#   LESSON=10,11    only these lessons (default: all)
#   TEST=cpu        only the tests whose name or title has this
#   CONDITIONS="quiet loaded half"   which conditions, in this order
#   SKELETONS=0     grade only the solutions
#   KEEP=DIR        keep every run's results.json and log in DIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
PYTHON=${PYTHON:-/usr/bin/python3}
n=${N:-5}
lesson=${LESSON:-}
conditions=${CONDITIONS:-quiet loaded half}
trees=solutions
[ "${SKELETONS:-1}" = 0 ] || trees="solutions skeletons"
case "$n" in '' | *[!0-9]* | 0) echo "bench-stability: N must be a positive number, got '$n'" >&2; exit 2 ;; esac
for c in $conditions; do
	case "$c" in quiet | loaded | half) ;; *) echo "bench-stability: unknown condition '$c' (quiet, loaded, half)" >&2; exit 2 ;; esac
done

out=${KEEP:-$(mktemp -d)}
mkdir -p "$out"
export RXE_VM_COLD=1

# ---- the conditions ---------------------------------------------------------

load_pids=()
start_load() {
	local i cores
	cores=$(nproc --all)
	if command -v stress-ng >/dev/null; then
		stress-ng --cpu "$cores" --quiet >/dev/null 2>&1 &
		load_pids+=($!)
		load_how="stress-ng --cpu $cores"
	else
		for ((i = 0; i < cores; i++)); do
			bash -c 'while :; do :; done' &
			load_pids+=($!)
		done
		load_how="$cores shell busy loops"
	fi
}
stop_load() {
	local p
	for p in "${load_pids[@]}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	load_pids=()
}

# half_cpu CMD...: CMD in a cgroup limited to 50 ms of CPU per 100 ms.
cg=''
half_cpu() {
	if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null; then
		systemd-run --quiet --scope -p CPUQuota=50% "$@"
		return
	fi
	(echo "$BASHPID" >"$cg/cgroup.procs" && exec "$@")
}
make_cgroup() {
	[ -d /run/systemd/system ] && command -v systemd-run >/dev/null && {
		half_how="systemd-run --scope -p CPUQuota=50%"
		return 0
	}
	local name=rdma-course-bench.$$
	if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
			echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
		cg=/sys/fs/cgroup/$name
		mkdir "$cg" 2>/dev/null && echo "50000 100000" >"$cg/cpu.max" 2>/dev/null &&
			half_how="cgroup v2 $cg, cpu.max 50000 100000" && return 0
	elif [ -w /sys/fs/cgroup/cpu ]; then
		cg=/sys/fs/cgroup/cpu/$name
		mkdir "$cg" 2>/dev/null && echo 100000 >"$cg/cpu.cfs_period_us" &&
			echo 50000 >"$cg/cpu.cfs_quota_us" &&
			half_how="cgroup v1 $cg, cfs_quota_us 50000 of 100000" && return 0
	fi
	[ -z "$cg" ] || rmdir "$cg" 2>/dev/null
	cg=''
	return 1
}
cleanup() {
	stop_load
	[ -z "$cg" ] || rmdir "$cg" 2>/dev/null
}
trap 'cleanup; [ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT
trap 'exit 130' INT TERM

# ---- the runs ---------------------------------------------------------------

echo "bench-stability: $(nproc --all) host CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
	"guest vCPUs ${RXE_VM_SMP:-default}, lessons ${lesson:-all}, N=$n, trees: $trees"
setup_failed=0
for c in $conditions; do
	how=''
	case "$c" in
	loaded) start_load; how=" ($load_how)" ;;
	half)
		if ! make_cgroup; then
			echo "half: cannot limit a cgroup to half a CPU here (no systemd, no" \
				"writable cgroup cpu controller: run as root): not run" >&2
			setup_failed=1
			continue
		fi
		how=" ($half_how)"
		;;
	esac
	for ((i = 1; i <= n; i++)); do
		for tree in $trees; do
			t0=$(date +%s)
			wrap=()
			[ "$c" != half ] || wrap=(half_cpu)
			"${wrap[@]}" "$PYTHON" -m grader grade --src="$tree" ${lesson:+--lesson="$lesson"} \
				${TEST:+--test="$TEST"} --results="$out/$c-$i-$tree.json" \
				>"$out/$c-$i-$tree.log" 2>&1
			echo "$c$how run $i/$n, $tree: $(tail -n 1 "$out/$c-$i-$tree.log")," \
				"$(($(date +%s) - t0)) s, load average $(cut -d' ' -f1 /proc/loadavg)"
		done
	done
	[ "$c" != loaded ] || stop_load
done

"$PYTHON" - "$out" "$n" "$conditions" "$trees" <<'PY'
import json, sys
from pathlib import Path
out, n, conds, trees = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
bad = 0
lost = {}                        # test -> condition -> runs that lost points
seen = {}                        # skeleton test -> {score: runs}
missing = []
for c in conds:
    for i in range(1, n + 1):
        for tree in trees:
            f = out / f"{c}-{i}-{tree}.json"
            if not f.exists():
                if (out / f"{c}-{i}-{tree}.log").exists():
                    missing.append(f"{c} run {i} {tree}")
                continue
            for t in json.loads(f.read_text())["tests"]:
                if tree == "solutions":
                    d = lost.setdefault(t["name"], {})
                    d.setdefault(c, 0)
                    if t["score"] < t["max_score"]:
                        d[c] += 1
                else:
                    seen.setdefault(t["name"], {}).setdefault(t["score"], []).append(f"{c}{i}")
ran = [c for c in conds if any((out / f"{c}-{i}-solutions.json").exists()
                               for i in range(1, n + 1))]
print()
print(f"solutions: runs that lost points, per test ({n} per condition)")
width = max((len(k) for k in lost), default=10)
print(f"  {'test':{width}s}  " + "  ".join(f"{c:>6s}" for c in ran))
flaky = {k: v for k, v in lost.items() if any(v.values())}
for name, per in sorted(flaky.items()):
    print(f"  {name:{width}s}  " + "  ".join(f"{per.get(c, 0):>4d}/{n}" for c in ran))
if not flaky:
    print(f"  (none: every one of the {len(lost)} tests kept its points in every run)")
bad |= bool(flaky)
if "skeletons" in trees:
    varied = {k: v for k, v in seen.items() if len(v) > 1}
    print(f"skeletons: tests whose score changed between runs: {len(varied)} of {len(seen)}")
    for name, scores in sorted(varied.items()):
        print(f"  {name}: " + ", ".join(f"{s} in {len(r)} runs ({' '.join(r[:6])})"
                                         for s, r in sorted(scores.items())))
    bad |= bool(varied)
if missing:
    print("no results (grading did not finish): " + ", ".join(missing))
    bad = 1
sys.exit(1 if bad else 0)
PY
rc=$?
[ $setup_failed = 0 ] || exit 2
exit $rc
