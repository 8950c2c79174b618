"""The reference UDP server of lesson 11: it echoes --count datagrams of
--size bytes and reports, for each, when it arrived and when its echo
left.

    python3 grader/evidence/trusted/udp_echo.py --size N --count N [--warmup W --holds K]

It prints `listening on port N` once its socket is bound, and at the end
one line `peer-result {json}` (as grader/evidence/trusted/peer.py does): `ok`,
`error`, `echoed` (datagrams sent back), `sizes_wrong` (datagrams of
another size; not echoed), `senders` (how many distinct addresses sent),
and the round trips' times (`Holds.report()`): `arrived`, `answered`
(CLOCK_MONOTONIC, ns), `held` (which round trips it held) and `early`
(round trips whose next datagram was already waiting before their echo
left: the client did not wait for the echo).

--holds K: K round trips after the warm-up, drawn here (the program under
test cannot read them anywhere), are held before their echo, each at
least --hold-min-ms and 8 times the median round trip so far: whatever
the machine's speed, a held round trip is far longer than the others, and
a sample the client invented does not fit both the held ones and the
rest (lesson 11's test_udp_reference_server). The same class serves
lesson 11's RDMA reference server (peer.py 11 server). No verbs here, so
no pyverbs import.
"""

import argparse
import json
import random
import select
import socket
import sys
import time

HOLD_MAX_NS = 1_000_000_000     # a hold bounds the test's time, not a speed


class Holds:
    """A server's record of each round trip i (0 = the first warm-up):
    arrived[i], when its request was there; answered[i], just before its
    answer was posted or sent (time.monotonic_ns(): CLOCK_MONOTONIC, the
    clock of course_now_ns()). A client's sample of round trip i began
    before arrived[i] and ended after answered[i]: it lies in
    [answered[i] - arrived[i], arrived[i + 1] - answered[i - 1]]."""

    def __init__(self, warmup, total, count, min_ms):
        timed = range(min(warmup, total), total)
        self.held = set(random.SystemRandom().sample(
            timed, min(count, len(timed))))
        self.min_ns = min_ms * 1_000_000
        self.arrived, self.answered, self.held_ns = [], [], {}
        self.end = None

    def arrive(self):
        self.arrived.append(time.monotonic_ns())

    def hold(self):
        """Hold the round trip that just arrived if it is one of the held."""
        i = len(self.arrived) - 1
        if i not in self.held:
            return
        cycles = sorted(self.arrived[k + 1] - self.arrived[k]
                        for k in range(i) if k not in self.held)
        median = cycles[len(cycles) // 2] if cycles else 0
        ns = min(max(self.min_ns, 8 * median), HOLD_MAX_NS)
        self.held_ns[i] = ns
        end = time.monotonic_ns() + ns
        while (left := end - time.monotonic_ns()) > 0:
            time.sleep(left / 1e9)

    def answer(self):
        self.answered.append(time.monotonic_ns())

    def report(self):
        return {"arrived": self.arrived, "answered": self.answered,
                "held": sorted(self.held), "end": self.end}


def main(argv=None):
    p = argparse.ArgumentParser(prog="udp_echo.py")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--holds", type=int, default=0)
    p.add_argument("--hold-min-ms", type=int, default=20)
    p.add_argument("--timeout", type=float, default=10)
    a = p.parse_args(argv)
    r = {"lesson": "11", "role": "udp-server", "ok": False, "error": None,
         "echoed": 0, "sizes_wrong": 0, "senders": 0, "early": []}
    holds = Holds(a.warmup, a.count, a.holds, a.hold_min_ms)
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
            holds.arrive()
            holds.hold()
            # An honest client sends its next datagram only once this
            # echo has arrived: nothing may be waiting yet.
            if select.select([sock], [], [], 0)[0]:
                r["early"].append(r["echoed"])
            holds.answer()
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
    r |= holds.report()
    print("peer-result " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
