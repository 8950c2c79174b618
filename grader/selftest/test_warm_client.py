"""The warm grader's client (grader/session/client.c), against a stand-in
server here on the host: its request is the JSON server.py reads, with
its stdin, stdout and stderr attached; it exits with the session's status;
it goes cold - PYTHON -m grader.session.shards - saying why, when the
grader is stale, refuses, or is not there."""

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from conftest import COURSE

sys.path.insert(0, str(COURSE))
from grader.core.build import grader_program  # noqa: E402

ARGS = ["-c", "grader/pytest.ini", "a b", 'quote " and \\ back',
        "tab\there", "é ☃"]


@pytest.fixture(scope="module")
def client():
    return str(grader_program(COURSE, "session/client.c"))


@pytest.fixture
def fake_python(tmp_path):
    """A PYTHON that records its arguments: the cold way's command."""
    py = tmp_path / "python"
    py.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$0.args\"\nexit 7\n")
    py.chmod(0o755)
    return py


def serve(path, replies, got):
    """Accept one client; record its request and descriptors; send
    `replies` in order."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(str(path))
    srv.listen(1)

    def run():
        conn, _ = srv.accept()
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        got["request"] = json.loads(msg)
        got["fds"] = len(fds)
        if fds:
            os.write(fds[1], b"written by the session\n")
        for fd in fds:
            os.close(fd)
        for r in replies:
            conn.send(json.dumps(r).encode())
        conn.close()
        srv.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def run_client(client, fake_python, sock, tmp_path):
    env = {"GRADER_SERVER": str(sock), "ODD": "line\nbreak \x01 \"q\"",
           "PATH": os.environ["PATH"]}
    return subprocess.run([client, str(fake_python), "--", *ARGS],
                          cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=30)


def test_a_session_on_the_warm_grader(client, fake_python, tmp_path):
    sock, got = tmp_path / "sock", {}
    t = serve(sock, [{"pid": 4242}, {"status": -9}], got)
    res = run_client(client, fake_python, sock, tmp_path)
    t.join(5)
    req = got["request"]
    assert req["argv"] == ARGS
    assert req["cwd"] == str(tmp_path)
    assert req["env"]["ODD"] == "line\nbreak \x01 \"q\""
    assert req["env"]["GRADER_SERVER"] == str(sock)
    assert got["fds"] == 3
    assert res.stdout == "written by the session\n"
    assert res.returncode == 128 + 9, res.stderr
    assert not (tmp_path / "python.args").exists()


@pytest.mark.parametrize("reply, why", [
    ({"stale": "grader/x.py changed since the warm grader started"},
     "grader/x.py changed since the warm grader started"),
    ({"error": "one request per connection"}, "one request per connection"),
    ({}, "the warm grader refused")])
def test_a_refusal_grades_cold(client, fake_python, tmp_path, reply, why):
    sock, got = tmp_path / "sock", {}
    t = serve(sock, [reply], got)
    res = run_client(client, fake_python, sock, tmp_path)
    t.join(5)
    assert res.returncode == 7                  # the fake PYTHON's
    assert f"grader: {why}: grading without the warm grader" in res.stderr
    assert (tmp_path / "python.args").read_text().splitlines() == [
        "-m", "grader.session.shards", "--", *ARGS]


def test_no_warm_grader_grades_cold_in_silence(client, fake_python, tmp_path):
    res = run_client(client, fake_python, tmp_path / "none", tmp_path)
    assert res.returncode == 7 and res.stderr == ""
    assert (tmp_path / "python.args").read_text().splitlines()[:2] == [
        "-m", "grader.session.shards"]


def test_a_grader_gone_mid_session_is_named(client, fake_python, tmp_path):
    sock, got = tmp_path / "sock", {}
    t = serve(sock, [{"pid": 1}], got)          # then it hangs up
    res = run_client(client, fake_python, sock, tmp_path)
    t.join(5)
    assert res.returncode == 125
    assert "the warm grader went away during the session" in res.stderr
