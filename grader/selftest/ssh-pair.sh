#!/bin/bash
# ssh-pair.sh - the two-real-hosts transport tried between the linked
# micro-VMs as if they were two machines (issue 39): host B runs an sshd on
# the pair's link, host A grades LESSON's reference-peer tests with
# RDMA_PEER_JOBS=ssh://root@B/COURSE (grader/evidence/remote.py: the peers
# run on B over ssh, under B's own with-rxe; A's counters count the
# program's traffic alone). The machines have no sshd: Debian's
# openssh-server and libwrap0 packages are fetched with `apt-get download`
# and unpacked under build/ssh-pair/ (nothing is installed; B's /etc/passwd
# gets its sshd user in the guest's own overlay). A key made for the run
# lets A in; nothing of it outlives build/.
#
# usage: grader/selftest/ssh-pair.sh [LESSON]   (default 05; exit: pytest's)
set -uo pipefail
course=$(cd "$(dirname "$0")/../.." && pwd)
cd "$course" || exit 2
lesson=${1:-05}
h=$course/build/ssh-pair
mkdir -p "$h" || exit 2
rm -f "$h/stop"

if [ ! -x "$h/root/usr/sbin/sshd" ]; then
	(cd "$h" && apt-get download openssh-server libwrap0) || {
		echo "ssh-pair: apt-get download openssh-server libwrap0 failed (run apt-get update?)" >&2
		exit 2
	}
	for deb in "$h"/openssh-server_*.deb "$h"/libwrap0_*.deb; do
		dpkg-deb -x "$deb" "$h/root" || exit 2
	done
fi
[ -e "$h/key" ] || ssh-keygen -q -t ed25519 -N "" -f "$h/key" || exit 2

tests=$(ls grader/lessons/test_"${lesson}"_*_peer.py 2>/dev/null)
[ -n "$tests" ] || {
	echo "ssh-pair: lesson $lesson has no reference-peer tests (grader/lessons/test_${lesson}_*_peer.py)" >&2
	exit 2
}

# Host B: sshd on its link address until A says stop (20 minutes at most).
cat >"$h/b.sh" <<EOF
#!/bin/bash
export LD_LIBRARY_PATH=$h/root/usr/lib/x86_64-linux-gnu
grep -q '^sshd:' /etc/passwd || echo 'sshd:x:105:65534::/run/sshd:/usr/sbin/nologin' >>/etc/passwd
mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh
cp $h/key.pub /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys
ssh-keygen -q -t ed25519 -N "" -f /run/hostkey
$h/root/usr/sbin/sshd -D -f /dev/null -o HostKey=/run/hostkey \\
	-o PermitRootLogin=prohibit-password -o UsePAM=no -o StrictModes=no \\
	-o ListenAddress=\$RDMA_IP -o PidFile=/run/sshd.pid \\
	-o AuthorizedKeysFile=/root/.ssh/authorized_keys &
pid=\$!
for i in \$(seq 1200); do [ -e $h/stop ] && break; sleep 1; done
kill \$pid
EOF

# Host A: wait for B's sshd, time one connection, grade.
cat >"$h/a.sh" <<EOF
#!/bin/bash
trap 'touch $h/stop' EXIT
ssh="ssh -i $h/key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=20 -o LogLevel=ERROR"
for i in \$(seq 180); do \$ssh root@\$RDMA_PEER_IP true 2>/dev/null && break; sleep 1; done
s=\$(date +%s%N)
\$ssh root@\$RDMA_PEER_IP true || { echo "ssh-pair: host B's sshd did not answer" >&2; exit 2; }
echo "ssh-pair: one ssh connection A -> B: \$(( (\$(date +%s%N) - s) / 1000000 )) ms"
export RDMA_PEER_SSH="\$ssh" RDMA_PEER_JOBS=ssh://root@\$RDMA_PEER_IP$course
/usr/bin/python3 -m pytest -c grader/pytest.ini --rootdir . -p grader.session.plugin \\
	-q --color=no $(echo "$tests" | tr '\n' ' ') --src=solutions
EOF

vm-setup/with-rxe --pair "bash $h/a.sh" "bash $h/b.sh"
