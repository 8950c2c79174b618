"""Run a command on the other host of a linked pair, as if it ran here.

    python3 -m grader.evidence.remote JOBS -- CMD [ARG...]

(JOBS ssh://[USER@]HOST[:PORT][/COURSE]: host B is another machine, reached
over ssh; see ssh_main below.) Otherwise JOBS is RDMA_PEER_JOBS, the job directory host B serves when the pair was
started as `vm-setup/with-rxe --pair CMD_A ''` (vm-setup/microvm/stage2.sh
is the other side). CMD runs on B, as root, in the same working directory
(the course tree is shared by both hosts); its stdout and stderr stream here
and its exit status is this process's. SIGTERM or SIGINT here ends it there;
if this process dies without a word (SIGKILL), B ends it within about 3 s
(the lease this process keeps touching).

The grader uses it to run a trusted peer on B while the program under test
runs on A, so A's counters count the program's traffic alone. Programs
under test cannot use it: the job directory is read-only in their sandbox.
"""

import os
import shlex
import signal
import sys
import time
import uuid
from pathlib import Path

# The kernel's view of this host's QPs, for the reference peer's questions
# (grader/evidence/trusted/kernel.py; loaded alone: the package would import pytest).
sys.path.insert(0, str(Path(__file__).resolve().parent / "trusted"))
import kernel  # noqa: E402

POLL = 0.05
LEASE = 0.5

# What names this host's session stays here. Host A's environment is the
# guest's already (what vm-setup/lib/rxe.sh's rxe_vm_env let through, and
# what the guest set); host B sources this in the job's own shell, never
# in its stage2.sh's (whose variables it cannot change).
_LOCAL = {"HOSTNAME", "OLDPWD", "PWD", "SHLVL", "TMPDIR", "_", "HOME",
          "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "BASH_ENV", "ENV"}


def _env_sh():
    return "".join(f"export {k}={shlex.quote(v)}\n"
                   for k, v in os.environ.items()
                   if k.isidentifier() and k not in _LOCAL
                   and not k.startswith("BASH_"))


# Host B of a micro-VM pair serves a zygote of reference peers here
# (vm-setup/microvm/stage2.sh): pyverbs imported once for all its peers.
B_ZYGOTE = "/run/rdma-course-peers/sock"
TRUSTED = Path(__file__).resolve().parent / "trusted"


def through_zygote(cmd):
    """A reference peer's command (python3 trusted/SCRIPT ARG...) as host
    B's zygote runs it (zygote.py --run, which runs the command itself
    where there is no zygote, or one that serves no such SCRIPT); any
    other command as it is. (zygote.py is not imported here: 0.2 s under
    emulation, for every peer.)"""
    if len(cmd) > 1 and cmd[1].endswith(".py") and \
            Path(cmd[1]).parent == TRUSTED:
        return [cmd[0], str(TRUSTED / "zygote.py"), "--run", B_ZYGOTE, *cmd]
    return cmd


def submit(jobs, cmd, cwd):
    """Create the job; returns its directory once B may take it."""
    jobs = Path(jobs)
    if not jobs.is_dir():
        raise SystemExit(f"grader.evidence.remote: no job directory {jobs} (is host "
                         f"B serving? with-rxe --pair CMD_A '')")
    tmp = jobs / f".new-{uuid.uuid4().hex}"
    tmp.mkdir()
    (tmp / "spec.sh").write_text(
        f"CWD={shlex.quote(str(cwd))}\nCMD=({shlex.join(cmd)})\n")
    (tmp / "env.sh").write_text(_env_sh())
    (tmp / "lease").touch()
    job = jobs / tmp.name[len(".new-"):]
    tmp.rename(job)
    (job / "go").touch()
    return job


def _drain(path, pos, out, lines=None):
    """Copy what `path` has past `pos` to `out`; complete lines are also
    handed to `lines`. Returns the new position."""
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        return pos
    if lines is not None:
        # Only whole lines: the rest is read again next time.
        data = data[:data.rfind(b"\n") + 1]
        for line in data.splitlines():
            lines(line)
    if data:
        out.write(data)
        out.flush()
    return pos + len(data)


def _status(job):
    """The job's exit status once host B wrote it, else None. B writes rc
    in place (stage2.sh): an empty one is still being written."""
    try:
        text = (job / "rc").read_text().strip()
    except FileNotFoundError:
        return None
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return 1


def follow(job, deadline_after_kill=10):
    """Stream the job's output until its rc appears; return the rc."""
    pos = {"stdout": 0, "stderr": 0}
    outs = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
    stop = {"at": None}

    def on_signal(signum, _frame):
        (job / "kill").touch()
        stop["at"] = stop["at"] or time.monotonic()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    last_lease = 0.0
    while True:
        rc = _status(job)
        pos["stdout"] = _drain(job / "stdout", pos["stdout"], outs["stdout"],
                               lambda line: kernel.answer(job, line))
        pos["stderr"] = _drain(job / "stderr", pos["stderr"], outs["stderr"])
        if rc is not None:
            # A last line without its newline.
            _drain(job / "stdout", pos["stdout"], outs["stdout"])
            return rc
        now = time.monotonic()
        if now - last_lease >= LEASE:
            os.utime(job / "lease")
            last_lease = now
        if stop["at"] and now - stop["at"] > deadline_after_kill:
            print(f"grader.evidence.remote: host B did not end the command within "
                  f"{deadline_after_kill} s of the kill", file=sys.stderr)
            return 137
        time.sleep(POLL)


# ---- two real hosts: JOBS is ssh://[USER@]HOST[:PORT][/COURSE] ------------
#
# Host B is another machine with its own checkout of the course (at COURSE,
# by default the same path as here) and its own device: the command runs
# there under B's `vm-setup/with-rxe --backend native`, which picks B's
# device and GID index (RDMA_PEER_DEVICE and RDMA_PEER_GID_INDEX set here
# become B's RDMA_DEVICE and RDMA_GID_INDEX). Paths under this checkout in
# the command and the working directory are translated to B's. Nothing of
# this host's device settings crosses. The reference peer's questions about
# the program's QP (kernel.py: `peer-asks-qp`) are answered from this
# host's kernel into B's job directory with a second ssh. When this process
# ends, the ssh connection closes and B ends the command's process group
# (its watcher reads the session's stdin to its end). RDMA_PEER_SSH names
# the ssh program (default ssh; the host tests use a stand-in).

COURSE = Path(__file__).resolve().parents[2]
# This host's own: never sent to B (B's with-rxe sets B's).
_HOST_ONLY = {"RDMA_DEVICE", "RDMA_GID_INDEX", "RDMA_IP", "RDMA_NETDEV",
              "RDMA_DEVICES", "RDMA_BACKEND", "RDMA_PEER_IP", "RDMA_PEER_JOBS",
              "RDMA_PEER_SSH", "RDMA_PEER_DEVICE", "RDMA_PEER_GID_INDEX",
              "RDMA_DEVICE_KIND", "PATH", "TERM"}


def parse_ssh(spec):
    """ssh://[USER@]HOST[:PORT][/COURSE] -> (destination, port or None,
    B's course path)."""
    rest = spec[len("ssh://"):]
    dest, slash, path = rest.partition("/")
    port = None
    if ":" in dest:
        dest, port = dest.rsplit(":", 1)
        if not port.isdigit():
            raise SystemExit(f"grader.evidence.remote: bad port in {spec}")
    if not dest:
        raise SystemExit(f"grader.evidence.remote: no host in {spec} "
                         f"(ssh://[USER@]HOST[:PORT][/COURSE])")
    return dest, port, ("/" + path) if slash else str(COURSE)


def _on_b(arg, course_b):
    """@arg with this checkout's path replaced by B's."""
    here = str(COURSE)
    if arg == here or arg.startswith(here + "/"):
        return course_b + arg[len(here):]
    return arg


def ssh_script(cmd, cwd, course_b, env=os.environ):
    """The shell script B runs for @cmd."""
    exports = "".join(
        f"export {k}={shlex.quote(v)}\n" for k, v in env.items()
        if k.isidentifier() and k not in _LOCAL and k not in _HOST_ONLY
        and not k.startswith("BASH_"))
    for here, there in (("RDMA_PEER_DEVICE", "RDMA_DEVICE"),
                        ("RDMA_PEER_GID_INDEX", "RDMA_GID_INDEX")):
        if env.get(here):
            exports += f"export {there}={shlex.quote(env[here])}\n"
    run = shlex.join([f"{course_b}/vm-setup/with-rxe", "--backend", "native",
                      "--", *(_on_b(a, course_b) for a in cmd)])
    return f"""set -u
exec 3<&0
d=$(mktemp -d "${{TMPDIR:-/tmp}}/rdma-job.XXXXXX") || exit 125
trap 'rm -rf "$d"' EXIT
echo "rdma-job-dir $d" >&2
cd {shlex.quote(_on_b(str(cwd), course_b))} || exit 125
{exports}export RXE_JOB_DIR="$d"
setsid {run} </dev/null 3<&- &
pid=$!
(cat <&3 >/dev/null; kill -TERM -- -$pid 2>/dev/null; sleep 3
 kill -KILL -- -$pid 2>/dev/null) >/dev/null 2>&1 &
wait $pid
"""


def _ssh(dest, port, control):
    """The ssh command to B. @control: the job's connection's socket; the
    answers to the peer's questions go over that connection (a new ssh
    connection took seconds in the micro-VMs: longer than a program's
    wait for the peer)."""
    ssh = shlex.split(os.environ.get("RDMA_PEER_SSH", "ssh"))
    return [*ssh, "-T", "-o", "BatchMode=yes", "-o", "ControlMaster=auto",
            "-o", f"ControlPath={control}",
            *(["-p", port] if port else []), dest]


def ssh_main(spec, cmd, cwd):
    """Run @cmd on host B over ssh; stream its output; its exit status."""
    import subprocess
    import tempfile
    dest, port, course_b = parse_ssh(spec)
    here = tempfile.mkdtemp(prefix="rdma-peer-ssh.")
    control = f"{here}/cm"
    proc = subprocess.Popen([*_ssh(dest, port, control),
                             ssh_script(cmd, cwd, course_b)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)

    def on_signal(signum, _frame):
        # B's watcher reads its stdin to the end: closing it (and the
        # connection) ends the command's process group there.
        proc.stdin.close()
        proc.terminate()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    job_b = {}

    def err():
        for line in proc.stderr:
            if not job_b and line.startswith(b"rdma-job-dir "):
                job_b["dir"] = line.split(None, 1)[1].strip().decode()
                continue
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()

    import threading
    t = threading.Thread(target=err, daemon=True)
    t.start()
    try:
        for line in proc.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            m = kernel.ASK.match(line.rstrip(b"\n"))
            if m:
                # B named its job directory on stderr before the command.
                for _ in range(250):
                    if job_b:
                        break
                    time.sleep(0.02)
            if m and job_b:
                kernel.answer(here, line.rstrip(b"\n"))
                name = f"qp-{int(m.group(1))}.json"
                path = shlex.quote(f"{job_b['dir']}/{name}")
                subprocess.run(
                    [*_ssh(dest, port, control), f"cat > {path}.new && mv "
                     f"{path}.new {path}"],
                    input=(Path(here) / name).read_bytes(), timeout=30,
                    check=False)
        rc = proc.wait()
    finally:
        import shutil
        shutil.rmtree(here, ignore_errors=True)
    t.join(timeout=5)
    return rc


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python3 -m grader.evidence.remote JOBS -- CMD [ARG...]",
              file=sys.stderr)
        return 2
    if argv[0].startswith("ssh://"):
        return ssh_main(argv[0], argv[2:], os.getcwd())
    job = submit(argv[0], through_zygote(argv[2:]), os.getcwd())
    return follow(job)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
