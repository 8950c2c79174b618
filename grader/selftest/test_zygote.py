"""The reference peers' zygote (grader/evidence/trusted/zygote.py): a peer
forked per request behaves as `python3 SCRIPT ...` would, ends with its
test, and nobody but the grader can ask for one. udp_echo.py needs no
device, so all of it runs on the host."""

import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from grader.core import harness
from grader.evidence.trusted import zygote
from grader.evidence.trusted.run import UDP_ECHO

READY = r"^listening on port (\d+)$"


@pytest.fixture
def zyg():
    z = zygote.Zygote()
    z.start()
    yield z
    z.stop()


def _echo(z, *args, timeout=30):
    cmd = [sys.executable, str(UDP_ECHO), "--size", "8", *map(str, args)]
    return harness.start(cmd, ready=READY, timeout=timeout,
                         spawn=lambda a, e, c: z.popen(a, env=e, cwd=c))


def test_a_forked_peer_is_the_script(zyg, tmp_path):
    with _echo(zyg, "--count", "1", "--timeout", "5") as p:
        assert isinstance(p.proc, zygote.ZygoteProcess)
        # its own session, not the zygote's
        assert os.getsid(p.proc.pid) == p.proc.pid
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(5)
        s.sendto(b"12345678", ("127.0.0.1", p.port))
        assert s.recv(100) == b"12345678"
        res = p.wait()
    assert res.returncode == 0, res.describe()
    assert '"echoed": 1' in res.stdout
    # A usage error: argparse's message on stderr, exit 2, as python3 would.
    res = harness.run([sys.executable, str(UDP_ECHO), "--size", "8",
                       "--count", "1", "--bogus"],
                      spawn=lambda a, e, c: zyg.popen(a, env=e, cwd=c))
    assert isinstance(res, harness.Result) and res.returncode == 2, \
        res.describe()
    assert "unrecognized arguments: --bogus" in res.stderr


def test_a_peer_is_forked_not_started(zyg):
    """The peer is a child of the zygote (forked: pyverbs is imported
    already), not a fresh interpreter (make bench-grade times both)."""
    with _echo(zyg, "--count", "1", "--timeout", "5") as p:
        stat_ = Path(f"/proc/{p.proc.pid}/stat").read_text()
        assert int(stat_.rsplit(")", 1)[1].split()[1]) == zyg.pid()
        # pyverbs' extension modules are mapped: a fresh udp_echo.py
        # would not have loaded them.
        assert "/pyverbs/" in Path(f"/proc/{p.proc.pid}/maps").read_text()


def test_a_killed_or_abandoned_peer_ends(zyg):
    p = _echo(zyg, "--count", "1", "--timeout", "60")
    p.kill()
    res = p.wait(timeout=10)
    assert res.signal == "SIGKILL" and not res.timed_out, res.describe()
    # The grader hangs up without a word (its test ended): the peer goes.
    z = zyg.popen([sys.executable, str(UDP_ECHO), "--size", "8", "--count",
                   "1", "--timeout", "60"])
    pid = z.pid
    z.sock.close()
    assert _ends(pid), f"peer {pid} still runs after its client hung up"


def _ends(pid):
    """Does process `pid` end (or become a zombie) within 5 s?"""
    for _ in range(100):
        # (reaped between the two looks: reading /proc/PID/stat fails too)
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_only_the_peers_and_only_the_grader(zyg):
    with pytest.raises(OSError, match="not a reference peer"):
        zyg.popen([sys.executable, "/bin/sh", "-c", "id"])
    path = Path(zyg.ready())
    mode = stat.S_IMODE(path.parent.stat().st_mode)
    assert mode == 0o700, oct(mode)
    assert path.parent.stat().st_uid == os.getuid()


def test_the_zygote_ends_with_its_grader(tmp_path):
    z = zygote.Zygote()
    z.start()
    sock = Path(z.ready())
    peer = z.popen([sys.executable, str(UDP_ECHO), "--size", "8", "--count",
                    "1", "--timeout", "60"])
    z.proc.stdin.close()                    # the grader went away
    z.proc.wait(timeout=10)
    assert not sock.exists()
    assert peer.wait(timeout=10) is not None
    z.proc = None
    z.stop()


def _run_through(path, *args):
    """udp_echo.py as host B's jobs run a peer (remote.py: zygote.py
    --run SOCKET python3 SCRIPT ARG...)."""
    cmd = [sys.executable, str(zygote.HERE / "zygote.py"), "--run",
           str(path), sys.executable, str(UDP_ECHO), "--size", "8",
           *map(str, args)]
    return harness.start(cmd, ready=READY, timeout=30)


def _children(pid):
    """The live children of `pid` (its zombies aside)."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            if not d.name.isdigit():
                continue
            state, ppid = (d / "stat").read_text().rsplit(")", 1)[1] \
                .split()[:2]
            if int(ppid) == pid and state != "Z":
                out.append(int(d.name))
        except (OSError, ValueError, IndexError):
            pass
    return out


def _echoes(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(b"12345678", ("127.0.0.1", port))
    return s.recv(100) == b"12345678"


def test_run_through_the_zygote_forks_the_peer_there(zyg):
    path = zyg.ready()
    with _run_through(path, "--count", "1", "--timeout", "10") as p:
        # The echo is the zygote's child, not the client it ran through.
        assert _children(zyg.pid()) != [] and \
            p.proc.pid not in _children(zyg.pid())
        assert _echoes(p.port)
        res = p.wait()
    assert res.returncode == 0, res.describe()
    assert '"echoed": 1' in res.stdout
    # Its exit status, and its stderr, are the client's.
    res = harness.run([*p.cmd, "--bogus"], timeout=30)
    assert res.returncode == 2, res.describe()
    assert "unrecognized arguments: --bogus" in res.stderr
    # The client killed (host B's job ended by host A), the peer ends too.
    p = _run_through(path, "--count", "1", "--timeout", "60")
    peers = _children(zyg.pid())
    assert len(peers) == 1 and peers[0] != p.proc.pid
    p.kill()
    p.wait(timeout=10)
    assert _ends(peers[0]), "the peer still runs after its client was killed"


def test_run_through_no_zygote_is_the_command_itself(tmp_path):
    with _run_through(tmp_path / "none", "--count", "1", "--timeout",
                      "10") as p:
        # exec'd in place: the client's pid is the echo's
        cmdline = Path(f"/proc/{p.proc.pid}/cmdline").read_bytes()
        assert b"udp_echo.py" in cmdline and b"zygote.py" not in cmdline
        assert _echoes(p.port)
        res = p.wait()
    assert res.returncode == 0, res.describe()
