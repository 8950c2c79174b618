"""vsref.py PROG MODE CLIENTS NUMBERS ROUNDS - lesson 18's bench (bench.sh):
seq's client and the reference client (grader/evidence/trusted/seq.py)
each against a fresh reference sequencer server, back to back, ROUNDS
times (seq first in odd rounds, the reference in even ones). Prints one
line per round:

    round R: seq RATE ref RATE

RATE in numbers per second (C x N / T: seq's summary line, the reference
client's `seconds`), `-` for a run that failed (its last lines on stderr).

The reference server and client are forked by the reference peers' zygote
(grader/evidence/trusted/zygote.py, pyverbs imported once): a fresh
`python3 seq.py` spends seconds importing pyverbs under the micro-VM's
emulation, and a round needs three of them. Without a zygote they start as
python3 seq.py. HOST is $RDMA_IP; the device and GID index come from the
environment as for seq.py.
"""

import importlib.util
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

TRUSTED = Path(__file__).resolve().parent.parent.parent / \
    "grader/evidence/trusted"
SEQ = TRUSTED / "seq.py"
SUMMARY = re.compile(r"^[a-z]+: (\d+) clients x (\d+) numbers in ([0-9.]+) s:",
                     re.M)


def load_zygote():
    """grader/evidence/trusted/zygote.py as a module of its own (the
    grader package's __init__ imports pytest)."""
    spec = importlib.util.spec_from_file_location("seq_bench_zygote",
                                                  TRUSTED / "zygote.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Peers:
    """Reference peers: forked by a zygote when one starts, else spawned."""

    def __init__(self):
        self.zygote = None
        try:
            self.zygote = load_zygote().Zygote()
            self.zygote.start(python=sys.executable)
            if not self.zygote.ready():
                print(f"vsref.py: no zygote ({self.zygote.failed}): the "
                      f"peers start as python3 seq.py", file=sys.stderr)
                self.zygote = None
        except OSError as e:
            print(f"vsref.py: no zygote ({e})", file=sys.stderr)
            self.zygote = None

    def start(self, *args):
        argv = [sys.executable, str(SEQ), *map(str, args)]
        proc = self.zygote.popen(argv) if self.zygote else None
        if proc is None:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        return proc

    def stop(self):
        if self.zygote:
            self.zygote.stop()


def read_until(proc, pattern, timeout):
    """Read the peer's stdout until a line matches `pattern` (the match),
    or it ends, or `timeout` passes (None); everything read in `got`."""
    deadline = time.monotonic() + timeout
    got = b""
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stdout], [], [],
                                deadline - time.monotonic())
        if not r:
            break
        line = proc.stdout.readline()
        if not line:
            break
        got += line
        m = re.search(pattern, line.decode(errors="replace"))
        if m:
            return m, got
    return None, got


def finish(proc, timeout=60):
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        proc.wait()


def one_run(peers, who, prog, mode, c, n, host):
    """One run of `who` (seq or ref) against a fresh reference server: its
    rate, or None (why on stderr)."""
    server = peers.start("server", "--mode", mode, "--clients", c,
                         "--iters", n, "--timeout", 30)
    rate, why = None, ""
    try:
        m, got = read_until(server, r"^listening on port (\d+)$", 60)
        if not m:
            why = f"the reference server did not listen: {got[-300:]!r}"
            return None
        port = m.group(1)
        if who == "seq":
            res = subprocess.run([prog, "--mode", mode, "-c", str(c), "-n",
                                  str(n), "-p", port, "-t", "30", host],
                                 capture_output=True, text=True, timeout=120)
            s = SUMMARY.search(res.stdout)
            if s and float(s.group(3)) > 0:
                rate = int(s.group(1)) * int(s.group(2)) / float(s.group(3))
            else:
                why = (res.stdout + res.stderr)[-300:]
        else:
            client = peers.start("client", "--mode", mode, "--clients", c,
                                 "--iters", n, "--host", host, "--port",
                                 port, "--timeout", 30)
            m, got = read_until(client, r"^peer-result (.*)$", 120)
            finish(client)
            result = json.loads(m.group(1)) if m else {}
            if result.get("ok") and result.get("seconds"):
                rate = c * n / result["seconds"]
            else:
                why = result.get("error") or got[-300:]
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        why = str(e)
    finally:
        finish(server)
        if rate is None:
            print(f"vsref.py: {who}'s client on the reference server failed "
                  f"(--mode {mode} -c {c}): {why}", file=sys.stderr)
    return rate


def main(argv):
    if len(argv) != 5:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    prog, mode = argv[0], argv[1]
    c, n, rounds = int(argv[2]), int(argv[3]), int(argv[4])
    host = os.environ.get("RDMA_IP", "localhost")
    peers = Peers()
    try:
        for r in range(1, rounds + 1):
            rates = {}
            for who in (("seq", "ref") if r % 2 else ("ref", "seq")):
                rates[who] = one_run(peers, who, prog, mode, c, n, host)
            print(f"round {r}: " + " ".join(
                f"{who} {rates[who]:.1f}" if rates[who] else f"{who} -"
                for who in ("seq", "ref")), flush=True)
    finally:
        peers.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
