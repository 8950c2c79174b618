# shellcheck shell=bash
# lib/rxe.sh - shell helpers shared by setup-rxe.sh, doctor.sh, with-rxe and the
# micro-VM's guest side. Source it; it defines functions only.

SYSFS_IB=${SYSFS_IB:-/sys/class/infiniband}

# rxe_gid_index DEV [PORT] - print the first GID index of DEV/PORT that is
# RoCE v2 and holds an IPv4-mapped address (::ffff:a.b.c.d), and that address,
# as "INDEX IPV4". Returns 1 when there is none.
rxe_gid_index() {
	local dev=$1 port=${2:-1} f idx gid type
	for f in "$SYSFS_IB/$dev/ports/$port/gids/"*; do
		[ -e "$f" ] || continue
		idx=${f##*/}
		IFS= read -r gid <"$f" 2>/dev/null || continue
		IFS= read -r type <"$SYSFS_IB/$dev/ports/$port/gid_attrs/types/$idx" 2>/dev/null || continue
		case "$type" in *"v2"*) ;; *) continue ;; esac
		case "$gid" in
		0000:0000:0000:0000:0000:ffff:*)
			local h=${gid#0000:0000:0000:0000:0000:ffff:}
			h=${h//:/}
			printf '%s %d.%d.%d.%d\n' "$idx" "0x${h:0:2}" "0x${h:2:2}" "0x${h:4:2}" "0x${h:6:2}"
			return 0
			;;
		esac
	done
	return 1
}

# rxe_port_state DEV [PORT] - print the port state word (ACTIVE, DOWN, ...).
rxe_port_state() {
	local s
	IFS= read -r s <"$SYSFS_IB/$1/ports/${2:-1}/state" 2>/dev/null || return 1
	echo "${s#*: }"
}

# rxe_gid_at DEV INDEX [PORT] - print "INDEX IPV4" for GID INDEX of DEV/PORT
# (IPV4 is ? when the GID is not IPv4-mapped). Returns 1 when the slot is
# empty or absent.
rxe_gid_at() {
	local gid h
	IFS= read -r gid <"$SYSFS_IB/$1/ports/${3:-1}/gids/$2" 2>/dev/null || return 1
	[ -n "$gid" ] && [ "$gid" != 0000:0000:0000:0000:0000:0000:0000:0000 ] || return 1
	case "$gid" in
	0000:0000:0000:0000:0000:ffff:*)
		h=${gid#0000:0000:0000:0000:0000:ffff:}
		h=${h//:/}
		printf '%s %d.%d.%d.%d\n' "$2" "0x${h:0:2}" "0x${h:2:2}" "0x${h:4:2}" "0x${h:6:2}"
		;;
	*) echo "$2 ?" ;;
	esac
}

# rxe_find_ready - print "DEV GID_INDEX IPV4 NETDEV" for the first RDMA device
# whose port 1 is ACTIVE and has an IPv4 RoCE v2 GID. Returns 1 when none is.
# RDMA_DEVICE, when set, is the only device considered (a machine with a
# real NIC beside others, an InfiniBand one included); RDMA_GID_INDEX, when
# set, is its GID index, whatever its type (each host of a pair its own).
rxe_find_ready() {
	local d dev gi netdev
	for d in "$SYSFS_IB"/*; do
		[ -e "$d" ] || continue
		dev=${d##*/}
		[ -z "${RDMA_DEVICE:-}" ] || [ "$dev" = "$RDMA_DEVICE" ] || continue
		[ "$(rxe_port_state "$dev")" = ACTIVE ] || continue
		if [ -n "${RDMA_GID_INDEX:-}" ]; then
			gi=$(rxe_gid_at "$dev" "$RDMA_GID_INDEX") || continue
		else
			gi=$(rxe_gid_index "$dev") || continue
		fi
		IFS= read -r netdev <"$SYSFS_IB/$dev/ports/1/gid_attrs/ndevs/${gi%% *}" 2>/dev/null
		echo "$dev $gi ${netdev:-?}"
		return 0
	done
	return 1
}

# rxe_wait_ready SECONDS - wait until rxe_find_ready succeeds; prints its line.
rxe_wait_ready() {
	local deadline=$((SECONDS + $1))
	while :; do
		rxe_find_ready && return 0
		[ "$SECONDS" -ge "$deadline" ] && return 1
		sleep 0.05
	done
}

# rxe_vm_env - what of the caller's exported environment the micro-VM's
# command gets, as bash source (run.sh's and warm.sh's env.sh; stage2.sh
# sources it in the shell that runs the command, never in its own). Only
# the names listed here pass, each on purpose:
#   RDMA_*  the course's device variables (the guest then sets RDMA_DEVICE
#           and the others its own way) and RDMA_CAPTURE (run.sh --capture)
#   PERFTEST_* BENCH_* PLOT_* LAT_* BW_* REG_COST_* SERVER_TIMEOUT  the
#           settings of the lessons' measure.sh, bench.sh, plot.sh,
#           bench.py and run-pair.sh
#   GRADE_* GRADER_* COURSE_QP_* ALLOW_MODIFIED_GRADER CC  the grader's
#   BATS_* MUTANTS* VARIANT_* SKIP_TEST AUTOGRADER_ROOT  the course's own
#           tests (bats and pytest run in the guest)
#   PATH TERM LANG LANGUAGE LC_* TZ COLUMNS LINES CI  the session's
#           basics (stage2.sh adds sbin to PATH: the guest runs as root)
# Nothing else: the rest names this host's session (HOME, PWD, TMPDIR,
# SHLVL: paths the guest may not have), changes how the guest's programs
# run (LD_PRELOAD, LD_LIBRARY_PATH, PYTHONPATH, BASH_ENV, MAKEFLAGS' job
# server), or is the guest's own (stage2.sh's OUT, RUN, CMD, ...). Not
# RXE_* either: they set up the micro-VM on this host, and in the guest
# with-rxe would read RXE_BACKEND=vm as "boot a VM inside this one".
# Each value is as declare -p quotes it (any newline, quote or $ comes
# through), with -x alone of its attributes (a readonly one would stop the
# guest from setting RDMA_DEVICE).
rxe_vm_env() {
	local n d
	for n in $(compgen -e | grep -E '^((RDMA|PERFTEST|BENCH|PLOT|LAT|BW|REG_COST|GRADE|GRADER|COURSE_QP|BATS|VARIANT|LC)_[A-Za-z0-9_]*|MUTANTS[A-Za-z0-9_]*|SERVER_TIMEOUT|ALLOW_MODIFIED_GRADER|CC|SKIP_TEST|AUTOGRADER_ROOT|PATH|TERM|LANG|LANGUAGE|TZ|COLUMNS|LINES|CI)$'); do
		d=$(declare -p "$n") || continue
		printf 'declare -x %s\n' "${d#declare -* }"
	done
}
