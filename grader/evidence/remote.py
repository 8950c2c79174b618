"""Run a command on the other host of a linked pair, as if it ran here.

    python3 -m grader.evidence.remote JOBS -- CMD [ARG...]

JOBS is RDMA_PEER_JOBS, the job directory host B serves when the pair was
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
        done = (job / "rc").exists()
        pos["stdout"] = _drain(job / "stdout", pos["stdout"], outs["stdout"],
                               lambda line: kernel.answer(job, line))
        pos["stderr"] = _drain(job / "stderr", pos["stderr"], outs["stderr"])
        if done:
            # A last line without its newline.
            _drain(job / "stdout", pos["stdout"], outs["stdout"])
            try:
                return int((job / "rc").read_text().strip() or 1)
            except ValueError:
                return 1
        now = time.monotonic()
        if now - last_lease >= LEASE:
            os.utime(job / "lease")
            last_lease = now
        if stop["at"] and now - stop["at"] > deadline_after_kill:
            print(f"grader.evidence.remote: host B did not end the command within "
                  f"{deadline_after_kill} s of the kill", file=sys.stderr)
            return 137
        time.sleep(POLL)


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python3 -m grader.evidence.remote JOBS -- CMD [ARG...]",
              file=sys.stderr)
        return 2
    job = submit(argv[0], argv[2:], os.getcwd())
    return follow(job)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
