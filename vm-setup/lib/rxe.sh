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

# rxe_find_ready - print "DEV GID_INDEX IPV4 NETDEV" for the first RDMA device
# whose port 1 is ACTIVE and has an IPv4 RoCE v2 GID. Returns 1 when none is.
rxe_find_ready() {
	local d dev gi netdev
	for d in "$SYSFS_IB"/*; do
		[ -e "$d" ] || continue
		dev=${d##*/}
		[ "$(rxe_port_state "$dev")" = ACTIVE ] || continue
		gi=$(rxe_gid_index "$dev") || continue
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

# rxe_vm_env - the caller's exported environment as bash source for the
# guest, less what names this host's session.
rxe_vm_env() {
	export -p | grep -Ev '^declare -x (BASH_[A-Z_]*|HOSTNAME|OLDPWD|PWD|SHLVL|TMPDIR|_|DISPLAY|XAUTHORITY|SSH_[A-Z_]*|DBUS_[A-Z_]*)(=|$)'
}
