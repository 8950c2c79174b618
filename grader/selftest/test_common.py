"""lessons/common/course.c: the shared helpers keep their promises."""

import socket
import subprocess
import time

import pytest

from conftest import COURSE

DRIVER = r"""
#include "course.h"
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	int fd;

	if (argc != 4)
		return 2;
	fd = course_oob_connect(argv[1], atoi(argv[2]), atoi(argv[3]));
	printf("fd %d\n", fd);
	return fd < 0;
}
"""


@pytest.fixture(scope="module")
def connect_driver(tmp_path_factory):
    d = tmp_path_factory.mktemp("common")
    (d / "driver.c").write_text(DRIVER)
    exe = d / "driver"
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", f"-I{COURSE}/lessons/common",
                    "-o", str(exe), str(d / "driver.c"),
                    str(COURSE / "lessons/common/course.c"), "-libverbs"], check=True)
    return exe


def test_oob_connect_gives_up_at_its_timeout_on_a_silent_host(connect_driver):
    """A listener whose accept queue is full drops SYNs silently, like a
    firewalled host: connect() alone would block for about two minutes."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(0)
    port = lst.getsockname()[1]
    fill = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fill.append(c)
    t0 = time.monotonic()
    res = subprocess.run([connect_driver, "127.0.0.1", str(port), "2"],
                         capture_output=True, text=True, timeout=30)
    took = time.monotonic() - t0
    for c in fill + [lst]:
        c.close()
    assert res.returncode == 1
    assert took < 6, f"gave up after {took:.1f} s, not at its 2 s timeout"
    assert "Connection timed out" in res.stderr


def test_oob_connect_retries_until_the_server_listens(connect_driver):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    p = subprocess.Popen([connect_driver, "127.0.0.1", str(port), "5"],
                         stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)             # the client is refused, and retries
    s.listen(1)
    out, _ = p.communicate(timeout=10)
    s.close()
    assert p.returncode == 0 and out.startswith("fd ")


def test_oob_connect_refused_names_the_error(connect_driver):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = subprocess.run([connect_driver, "127.0.0.1", str(port), "1"],
                         capture_output=True, text=True, timeout=10)
    assert res.returncode == 1
    assert f"cannot connect to 127.0.0.1:{port}: Connection refused" in res.stderr
