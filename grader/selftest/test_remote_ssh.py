"""Host B as another machine (grader/evidence/remote.py, RDMA_PEER_JOBS
ssh://HOST[:PORT][/COURSE]), with a stand-in ssh that runs B's script
here and a stand-in checkout of B whose vm-setup/with-rxe picks B's own
device: the command's output, exit status, working directory and paths
reach B's checkout, B's device settings are B's (A's never cross), the
reference peer's QP question is answered into B's job directory, and a
killed grader ends the command on B. No sshd, no device. And host B as
the pair's other micro-VM (JOBS a job directory, stage2.sh's side played
here): its status, written in place, is read once it is there."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

COURSE = Path(__file__).resolve().parent.parent.parent
# As the grader runs it (grader/evidence/trusted/run.py: REMOTE).
REMOTE = [sys.executable, str(COURSE / "grader" / "evidence" / "remote.py")]


@pytest.fixture
def hosts(tmp_path):
    """(env for remote.py, B's checkout, the stand-in ssh's log)."""
    log = tmp_path / "ssh.log"
    ssh = tmp_path / "fake-ssh"
    # Options up to the destination, then the remote command: run it here.
    ssh.write_text(f"""#!/bin/bash
echo "$*" >> {log}
while [ $# -gt 1 ]; do shift; done
exec env -i PATH=/usr/bin:/bin bash -c "$1"     # ssh passes no environment
""")
    ssh.chmod(0o755)
    b = tmp_path / "course-b"
    (b / "vm-setup").mkdir(parents=True)
    (b / "grader").mkdir()
    (b / "vm-setup" / "with-rxe").write_text("""#!/bin/bash
[ "$1 $2 $3" = "--backend native --" ] || { echo "with-rxe: $*" >&2; exit 2; }
shift 3
export RDMA_DEVICE=${RDMA_DEVICE:-bdev0} RDMA_GID_INDEX=${RDMA_GID_INDEX:-5}
exec "$@"
""")
    (b / "vm-setup" / "with-rxe").chmod(0o755)
    env = {**os.environ, "RDMA_PEER_SSH": str(ssh), "RDMA_DEVICE": "adev",
           "RDMA_GID_INDEX": "1", "FOO": "bar"}
    env.pop("RDMA_PEER_DEVICE", None)
    env.pop("RDMA_PEER_GID_INDEX", None)
    return env, b, log


def remote(env, b, *cmd, port="2222", **kw):
    return subprocess.run(
        [*REMOTE,
         f"ssh://me@hostb:{port}{b}", "--", *cmd],
        cwd=COURSE / "grader", env=env, capture_output=True, text=True,
        timeout=60, **kw)


def test_output_status_and_b_s_own_device(hosts):
    env, b, log = hosts
    res = remote(env, b, "sh", "-c", 'echo out; echo err >&2; echo '
                 '"$RDMA_DEVICE $RDMA_GID_INDEX $FOO"; pwd; echo "$1"; '
                 'exit 7', "sh", str(COURSE / "grader" / "x.py"))
    assert res.returncode == 7, res.stderr
    assert res.stdout.splitlines() == [
        "out", "bdev0 5 bar", str(b / "grader"), str(b / "grader" / "x.py")]
    assert res.stderr == "err\n"            # B's job line is not shown
    first = log.read_text().splitlines()[0]
    assert first.startswith("-T -o BatchMode=yes -o ControlMaster=auto -o "
                            "ControlPath="), first
    assert " -p 2222 me@hostb set -u" in first, first


def test_b_s_device_settings_from_here(hosts):
    env, b, _ = hosts
    env.update(RDMA_PEER_DEVICE="mlx5_3", RDMA_PEER_GID_INDEX="3")
    res = remote(env, b, "sh", "-c", 'echo "$RDMA_DEVICE $RDMA_GID_INDEX"')
    assert res.returncode == 0, res.stderr
    assert res.stdout == "mlx5_3 3\n"


def test_the_peer_s_qp_question_is_answered_on_b(hosts):
    env, b, log = hosts
    res = remote(env, b, "sh", "-c",
                 'echo "peer-asks-qp 1 4242"; i=0; '
                 'while [ ! -e "$RXE_JOB_DIR/qp-1.json" ] && [ $i -lt 500 ]; '
                 'do sleep 0.02; i=$((i+1)); done; '
                 'cat "$RXE_JOB_DIR/qp-1.json" || exit 9')
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "peer-asks-qp 1 4242"
    # This host's kernel's answer (no such QP here, or why not).
    assert lines[1] == "null" or lines[1].startswith('{"error"'), lines
    # Two ssh connections: the job and the answer.
    assert log.read_text().count("-T -o BatchMode=yes") == 2


def test_a_killed_grader_ends_the_command_on_b(hosts, tmp_path):
    env, b, _ = hosts
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen(
        [*REMOTE,
         f"ssh://hostb{b}", "--", "sh", "-c",
         f'echo $$ > {pidfile}; echo started; exec sleep 300'],
        cwd=COURSE, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "started\n"
    pid = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the command on B outlived the grader by 30 s")


def test_a_bad_destination_is_named():
    res = subprocess.run(
        [*REMOTE, "ssh://:22/x",
         "--", "true"], cwd=COURSE, capture_output=True, text=True,
        timeout=30)
    assert res.returncode != 0
    assert "no host in ssh://:22/x" in res.stderr


def test_a_status_written_in_place_is_read_once_it_is_there(tmp_path):
    """Host B of a pair (stage2.sh) writes the job's rc in place: remote.py
    reads an empty rc as one being written, not as a failure, and exits
    with the status once it is there, after all of the job's output."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    proc = subprocess.Popen([*REMOTE, str(jobs), "--", "true"],
                            cwd=COURSE / "grader", stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not list(jobs.glob("*/go")):
        assert time.monotonic() < deadline, "no job was submitted"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    job = next(jobs.glob("*/go")).parent
    (job / "stdout").write_bytes(b"one\n")
    (job / "stderr").write_bytes(b"")
    (job / "rc").write_text("")
    time.sleep(0.5)
    assert proc.poll() is None, "an empty rc ended it: " + repr(
        proc.communicate())
    (job / "stdout").write_bytes(b"one\ntwo")
    (job / "rc").write_text("3\n")
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (3, b"one\ntwo"), err


def test_a_pair_s_peers_go_through_host_b_s_zygote(tmp_path):
    """A reference peer's command (python3 trusted/SCRIPT ...) reaches the
    pair's host B as zygote.py --run (stage2.sh serves a zygote there);
    any other command as it is."""
    trusted = COURSE / "grader" / "evidence" / "trusted"
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for cmd, want in (
            ([sys.executable, str(trusted / "peer.py"), "05", "server"],
             [sys.executable, str(trusted / "zygote.py"), "--run",
              "/run/rdma-course-peers/sock", sys.executable,
              str(trusted / "peer.py"), "05", "server"]),
            (["bash", "-c", "true"], ["bash", "-c", "true"]),
            ([sys.executable, str(tmp_path / "peer.py")],
             [sys.executable, str(tmp_path / "peer.py")])):
        proc = subprocess.Popen([*REMOTE, str(jobs), "--", *cmd],
                                cwd=COURSE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not list(jobs.glob("*/go")):
            assert time.monotonic() < deadline, "no job was submitted"
            time.sleep(0.05)
        job = next(jobs.glob("*/go")).parent
        spec = subprocess.run(
            ["bash", "-c", f'. {job}/spec.sh; printf "%s\\n" "${{CMD[@]}}"'],
            capture_output=True, text=True, check=True).stdout
        (job / "rc").write_text("0\n")
        proc.communicate(timeout=30)
        (job / "go").unlink()
        assert spec.splitlines() == want
