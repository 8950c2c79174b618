"""The reference UDP server of lesson 11: it echoes --count datagrams of
--size bytes, each after holding it --delay-us microseconds, and reports
what it saw.

    python3 grader/evidence/trusted/udp_echo.py --size N --count N [--delay-us N]

It prints `listening on port N` once its socket is bound, and at the end
one line `peer-result {json}` (as grader/evidence/trusted/peer.py does): `ok`,
`error`, `echoed` (datagrams sent back), `sizes_wrong` (datagrams of
another size; not echoed), `senders` (how many distinct addresses sent).
The delay lets the grader check that the client's timings are real: no
round trip can take less than it. No verbs here, so no pyverbs import.
"""

import argparse
import json
import socket
import sys
import time


def main(argv=None):
    p = argparse.ArgumentParser(prog="udp_echo.py")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--delay-us", type=int, default=0)
    p.add_argument("--timeout", type=float, default=10)
    a = p.parse_args(argv)
    r = {"lesson": "11", "role": "udp-server", "ok": False, "error": None,
         "echoed": 0, "sizes_wrong": 0, "senders": 0}
    senders = set()
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", a.port))
    sock.settimeout(a.timeout)
    print(f"listening on port {sock.getsockname()[1]}", flush=True)
    try:
        while r["echoed"] < a.count:
            data, addr = sock.recvfrom(65536)
            senders.add(addr[:2])
            if len(data) != a.size:
                r["sizes_wrong"] += 1
                continue
            if a.delay_us:
                end = time.monotonic() + a.delay_us / 1e6
                while time.monotonic() < end:
                    time.sleep(max(0.0, end - time.monotonic()))
            sock.sendto(data, addr)
            r["echoed"] += 1
        r["ok"] = True
    except socket.timeout:
        r["error"] = (f"no datagram within {a.timeout:g} s after "
                      f"{r['echoed']} echoed (expected {a.count})")
    except OSError as err:
        r["error"] = str(err)
    finally:
        sock.close()
    r["senders"] = len(senders)
    print("peer-result " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
