"""Lesson 15: the key-value store's own server with its own clients, and
the command line.

The pair proves little by itself (the student's server and clients could
agree on a wrong layout): each client works on keys of its own, so the
grader knows what every operation must print - the value last PUT, absent
after a DELETE, the slot in the key's bucket, an even version that grows -
and the server must count every request. The evidence that the layout,
the update order and the replies are the documented ones is in
test_15_kv_store_peer.py, against the grader's reference server and
clients.
"""

import secrets
import zlib
from contextlib import ExitStack

from grader import GradeFailure, expect, expect_match, points
from grader.evidence.trusted import kvcheck
from grader.evidence.trusted.run import T_ACCEPT, T_CLIENT
from grader.session import pairs

CLIENT, SERVER = "kv_client", "kv_server"
# The pair's waits that include another program's start: the server's
# for its two clients (T_ACCEPT), each client's for the 'G', which comes
# once both have connected (T_CLIENT). With -t 10 for all, two make tests
# side by side: the server gave up ('no client connected within 10 s')
# before a client had started, and that client was refused. They bound a
# hang; the solution waits milliseconds.


def host(rdma):
    return rdma.ip or "localhost"


def private_workload(prefix, nbuckets, n):
    """Ops on keys only this client uses, and what each must print."""
    keys = [f"{prefix}{secrets.token_hex(3)}" for _ in range(3)]
    model, ops = {}, []
    for _ in range(n):
        key = secrets.choice(keys)
        op = secrets.choice(["get", "get", "rget", "put", "put", "del"])
        rec = {"op": op, "key": key, "bucket": zlib.crc32(key.encode()) %
               nbuckets, "before": model.get(key)}
        if op == "put":
            rec["value"] = secrets.token_hex(1 + secrets.randbelow(40))
            model[key] = rec["value"]
        elif op == "del":
            model.pop(key, None)
        ops.append(rec)
    return ops


def check_private(res, ops, who):
    got = kvcheck.parse_results(res.stdout)
    expect(len(got), len(ops), f"{who}: result lines (one per op)")
    where = {}
    for j, (op, r) in enumerate(zip(ops, got)):
        line = f"{who}, op {j + 1} ({kvcheck.op_text(op)})"
        expect((r["op"], r["key"]), (op["op"], op["key"]),
               f"{line}: the op and key of its result line")
        want = ("ok" if op["op"] == "put" or op["before"] is not None
                else "absent")
        expect(r["status"], want, f"{line}: {r['line']!r}")
        if op["op"] in ("get", "rget") and want == "ok":
            expect(r["value"], op["before"], f"{line}: the value")
        if want != "ok":
            continue
        lo = op["bucket"] * 4
        if not lo <= r["slot"] < lo + 4 or r["version"] % 2 or \
                not r["version"]:
            raise GradeFailure(
                f"{line}: {r['line']!r}\n  expected: a slot of the key's "
                f"bucket {op['bucket']} ({lo}..{lo + 3}) and an even "
                f"version above 0")
        prev = where.get(op["key"])
        if prev and prev[0] == r["slot"] and (
                r["version"] < prev[1] or
                (op["op"] in ("put", "del") and r["version"] <= prev[1])):
            raise GradeFailure(f"{line}: {r['line']!r}: version "
                               f"{r['version']} after version {prev[1]} of "
                               f"the same slot (a write adds 2)")
        where[op["key"]] = (r["slot"], r["version"])
        if op["op"] == "del":
            where.pop(op["key"])


@points(4, "the program's server and 2 clients: each client's results are its ops'")
def test_pair(build, rdma):
    nbuckets = 8 + secrets.randbelow(24)
    loads = [private_workload(p, nbuckets, 25 + secrets.randbelow(15))
             for p in ("x", "y")]
    with build.start(SERVER, "--port", "0", "-c", "2", "--buckets",
                     nbuckets, "-t", T_ACCEPT) as server:
        with ExitStack() as stack:
            procs = [stack.enter_context(build.start(
                CLIENT, "--port", server.port, "-t", T_CLIENT, host(rdma),
                ready=None, input="".join(kvcheck.op_text(op) + "\n"
                                          for op in ops)))
                for ops in loads]
            results = [p.wait() for p in procs]
        srv = server.wait(timeout=30)
    for i, res in enumerate(results):
        res.ok(f"client {i + 1}", peer=srv, peer_name="server")
    srv.ok("server -c 2", peer=results[0], peer_name="client 1")
    for i, (res, ops) in enumerate(zip(results, loads)):
        check_private(res, ops, f"client {i + 1}")
    ops = [op for load in loads for op in load]
    n = {k: sum(op["op"] == k for op in ops) for k in ("put", "del", "rget")}
    expect_match(srv.stdout, rf"^served: {sum(n.values()) + 2} requests "
                 rf"\({n['put']} puts, {n['del']} deletes, {n['rget']} "
                 rf"gets, 0 bad\) from 2 clients$", "server stdout")


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, CLIENT)


@points(1, "a client leaves before 'G': the server says so, exit 1")
def test_client_vanishes(build, rdma):
    pairs.peer_vanishes(
        # -t 10: it also bounds the server's wait for the grader's connect
        # (under load, seconds); it sees the client leave at once.
        build, rdma, SERVER, ["-c", "1", "-t", "10"],
        "server whose only client left after connecting",
        (r"out-of-band (receive|send) failed", "server stderr"))


@points(1, "bad command line: usage, exit 2")
def test_usage(build):
    res = build.run(CLIENT, "-t", "1")
    res.fails(2, what="a client without HOST")
    expect_match(res.stderr, r"^usage: kv_client ", "stderr")
    res = build.run(SERVER, "-c", "0")
    res.fails(2, what="a server given -c 0")
    expect_match(res.stderr, r"^usage: kv_server ", "stderr")
