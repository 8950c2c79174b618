"""Lesson 17: datagrams. `ud` is a server (no HOST) of -c clients on one
Unreliable Datagram QP, or a client (HOST) that sends -n requests, each
waited for -t seconds, and counts the lost ones.

Evidence, none of it the program's word:
- the other side is the course's reference UD peer
  (grader/evidence/trusted/ud_peer.py, pyverbs), with a fresh random
  Q_Key, message size and request count per run: the reference server
  answers the program's clients and records every request it took (who
  sent it, its sequence number, its size); the reference clients send
  fresh random requests to the program's server and check every reply in
  their own memory. A reference client says nothing about its QP over TCP
  (lessons/17-ud/README.md, "The protocol"): a server that answers it
  found its address in the request's completion and GRH;
- the kernel (`rdma -j resource show qp`, asked by the reference peers
  while the program's QP exists): the QP that sent the requests or the
  replies is a UD QP of the program's own process;
- the interposer (verbs_spy.so): every receive the program posted has
  40 bytes of room for the GRH in front of the message, and every SEND
  names the remote QP and the Q_Key the protocol asks for (wr.wr.ud: the
  union's words where the record prints rkey and cmp);
- what is dropped: the reference server leaves one request unanswered,
  or answers one with a changed byte, or has another Q_Key; the client
  must say what its own timeout saw (the line and exit status of the
  README), and a Q_Key mismatch must reach no server at all (the
  reference server took no request).

Waits bound hangs only: the reference peers' waits are 60 s (the other
side's start) and 20 s per reply; only the loss runs use a short -t (1-2
s), and there the replies never come, whatever the speed.
"""

import os
import re
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.core.harness import prog_prefixed
from grader.evidence.interpose import Spy, build_interposer, parse_int
from grader.evidence.trusted.run import (REMOTE, expect_peer_ok, host,
                                         peer_host, rand_between, start_peer,
                                         verdict)
from grader.session import pairs

PROG = "ud"
UD_PEER = Path(__file__).resolve().parent.parent / "evidence/trusted/ud_peer.py"
READY = r"^listening on port (\d+)$"
T = "10"            # a client's wait for one reply (they take milliseconds)
START = "60"        # a wait that includes the other side's start
GRH = 40
QPT_UD = 4          # enum ibv_qp_type
MTU = 1024          # the course's rxe port (lessons/17-ud/README.md)


def qkey():
    """A fresh Q_Key, below 0x80000000 (a remote_qkey with the high bit set
    means 'use the QP's own Q_Key': README)."""
    return rand_between(1, 0x7FFFFFFF)


def ud_cmd(role, *opts, here=False):
    """The reference peer's command: on host B of a pair (make grade
    HOSTS=2), unless `here` (as lesson 15's kv_cmd: peers that run beside
    each other run here, on the program's host)."""
    cmd = [sys.executable, str(UD_PEER), role, *map(str, opts)]
    jobs = os.environ.get("RDMA_PEER_JOBS")
    return ([sys.executable, str(REMOTE), jobs, "--", *cmd]
            if jobs and not here else cmd)


def ref_server(*opts):
    return start_peer(ud_cmd("server", "--timeout", START,
                             "--accept-timeout", START, *opts), ready=READY,
                      timeout=60)


def ref_client(*opts, here=False):
    return start_peer(ud_cmd("client", "--timeout", T, *opts, here=here),
                      timeout=60)


@pytest.fixture(scope="module")
def spy_lib(build):
    return build_interposer(build.course)


def sends(spy):
    return [f for _, f in spy.calls("post_send")]


def recvs(spy):
    return [f for _, f in spy.calls("post_recv")]


def ud_fields(f):
    """(remote_qpn, remote_qkey) of a recorded UD SEND: wr.wr.ud's words
    are where the record prints rdma.rkey and atomic.compare_add."""
    return parse_int(f["rkey"]), parse_int(f["cmp"]) >> 32


def expect_ud_qp(q, pid, who):
    if not q or q.get("pid") != pid or q.get("type") != "UD":
        raise GradeFailure(
            f"the {who}'s QP as the kernel lists it (rdma -j resource show "
            f"qp, asked by the reference peer while it existed)\n  expected: "
            f"type UD, owned by pid {pid} (the {who})\n  got:      {q}")


def expect_grh_room(spy, size, how):
    bad = sorted({int(f["len"]) for f in recvs(spy)} - {GRH + size})
    if bad or not recvs(spy):
        raise GradeFailure(
            f"the receive buffers the program posted (ibv_post_recv, the "
            f"interposer's record)\n  expected: {GRH} + {size} = "
            f"{GRH + size} bytes each (the GRH, then the largest message)\n"
            f"  got:      {bad or 'no receive posted'}\nreproduce: {how}")


def expect_sends_to(spy, qpns, key, how, who):
    got = {ud_fields(f) for f in sends(spy)}
    want = {(q, key) for q in qpns}
    if not got or not got <= want:
        show = lambda s: sorted(f"qpn 0x{q:06x} qkey 0x{k:08x}" for q, k in s)
        raise GradeFailure(
            f"where the {who}'s SENDs went (wr.wr.ud.remote_qpn and "
            f"remote_qkey, the interposer's record)\n  expected: "
            f"{show(want)}\n  got:      {show(got) or 'no SEND'}\n"
            f"reproduce: {how}")


# ---- the program's clients against the reference server ------------------------

MET = prog_prefixed(r"^client: qpn 0x")


def peer_wait(results):
    """How long the reference server may still take once the program's
    clients have ended: enough to say 'D' back and report, when one of
    them got as far as the server's qp_info (its `client: qpn` line);
    a moment when none did (the server would wait for them until its
    accept timeout: a skeleton's client test would take a minute)."""
    met = any(re.search(MET, r.stdout, re.M) for r in results)
    return 60 if met else 2.5


def clients_run(build, rdma, spy_lib, n_clients=2, server_opts=(),
                client_args=(), iters=None, size=None, key=None, spies=True):
    size = size or rand_between(16, MTU)
    key = key or qkey()
    iters = iters or [rand_between(3, 8) for _ in range(n_clients)]
    out = dict(size=size, qkey=key, iters=iters, res=[], pids=[], spies=[])
    with ref_server("--clients", n_clients, "--qkey", hex(key), "--size",
                    size, *server_opts) as peer:
        with ExitStack() as stack:
            procs = []
            for n in iters:
                spy = Spy(spy_lib) if spies else None
                args = ["--port", peer.port, "-q", hex(key), "-s", size,
                        "-n", n, *(client_args or ["-t", T]),
                        peer_host(rdma)]
                procs.append(stack.enter_context(build.start(
                    PROG, *args, ready=None, env=spy.env if spy else None)))
                out["spies"].append(spy)
                out["how"] = (f"{spy.describe() + ' ' if spy else ''}"
                              f"{build.command(PROG, *args)} against "
                              f"grader/evidence/trusted/ud_peer.py server "
                              f"--clients {n_clients} --qkey {hex(key)} "
                              f"--size {size} {' '.join(map(str, server_opts))}")
            out["pids"] = [p.proc.pid for p in procs]
            out["res"] = [p.wait(timeout=120) for p in procs]
        out["v"] = verdict(peer, timeout=peer_wait(out["res"]),
                           other=out["res"][0])
    return out


@pytest.fixture(scope="module")
def client_run(build, rdma, spy_lib):
    return clients_run(build, rdma, spy_lib)


def clients_served(run):
    for i, res in enumerate(run["res"]):
        res.ok(f"client {i + 1} of {len(run['res'])} ({run['how']})")
    expect_peer_ok(run["v"], f"the reference server ({run['how']})")


@points(5, "2 clients against the reference server: every reply checked, none lost")
def test_client_replies(client_run):
    clients_served(client_run)
    for i, (res, n) in enumerate(zip(client_run["res"], client_run["iters"])):
        expect_match(res.stdout, rf"^client: {n} requests of "
                     rf"{client_run['size']} bytes, {n} replies checked, "
                     rf"0 lost$", f"client {i + 1} stdout")
    senders = client_run["v"]["senders"]
    got = sorted(s["requests"] for s in senders.values())
    expect(got, sorted(client_run["iters"]), "requests the reference server "
           "took from each sending QP (its own count)")
    for s in senders.values():
        expect(s["seqs"], list(range(len(s["seqs"]))), f"sequence numbers "
               f"of the requests from QP 0x{s['qpn']:06x}, in arrival order")


@points(3, "the clients' QPs are UD QPs of their own processes (kernel)")
def test_client_qp(client_run):
    clients_served(client_run)
    senders = list(client_run["v"]["senders"].values())
    pids = sorted(client_run["pids"])
    got = sorted((s["kernel"] or {}).get("pid") or 0 for s in senders)
    if got != pids:
        raise GradeFailure(
            f"the owners of the QPs the reference server's requests came "
            f"from (wc.src_qp; rdma -j resource show qp)\n  expected: the "
            f"clients' pids {pids}\n  got:      {[s['kernel'] for s in senders]}")
    for s in senders:
        expect_ud_qp(s["kernel"], s["kernel"]["pid"], "client")


@points(3, "each client's SENDs name the server's QP and the Q_Key; receives have room for the GRH (interposer)")
def test_client_addressing(client_run):
    clients_served(client_run)
    server_qpn = client_run["v"]["qpn"]
    for spy in client_run["spies"]:
        expect_sends_to(spy, [server_qpn], client_run["qkey"],
                        client_run["how"], "client")
        expect_grh_room(spy, client_run["size"], client_run["how"])
        created = [f for _, f in spy.calls("create_qp")]
        expect([int(f["type"]) for f in created], [QPT_UD],
               "the QPs the client created (ibv_create_qp's qp_type; 4 is "
               "IBV_QPT_UD)")


@points(2, "a reply that never comes: counted lost after -t, 'lost 1 of N', exit 1")
def test_client_counts_lost(build, rdma, spy_lib):
    # -t T, not less: the same -t bounds the client's wait for the server's
    # 'D' at the end, and the reference server asks the kernel about the
    # client's QP before it says 'D' (an `rdma` run: beside a second make
    # test, more than the 3 s this test once gave).
    n = rand_between(4, 8)
    drop = rand_between(1, n - 2)
    run = clients_run(build, rdma, spy_lib, 1, ["--drop", drop],
                      ["-t", T], [n], spies=False)
    res = run["res"][0]
    expect_peer_ok(run["v"], f"the reference server ({run['how']})")
    res.fails(1, what=run["how"])
    expect_match(res.stderr, rf"^request {drop}: no reply within {T} s$",
                 "client stderr")
    expect_match(res.stderr, rf"^lost 1 of {n} requests: no reply within "
                 rf"{T} s$", "client stderr")
    expect_match(res.stdout, rf"^client: {n} requests of {run['size']} "
                 rf"bytes, {n - 1} replies checked, 1 lost$", "client stdout")


@points(2, "a reply with a changed byte: 'not our request reversed', exit 1")
def test_client_checks_reply(build, rdma, spy_lib):
    n = rand_between(3, 8)
    seq, size = rand_between(0, n - 1), rand_between(16, MTU)
    off = rand_between(0, size - 5)
    run = clients_run(build, rdma, spy_lib, 1,
                      ["--corrupt", f"{seq}:{off}"], None, [n], size=size,
                      spies=False)
    res = run["res"][0]
    res.fails(1, what=run["how"])
    expect_match(res.stderr, rf"^request {seq}: the reply is not our "
                 rf"request reversed \(byte {off + 4}: ", "client stderr")


@points(2, "a Q_Key mismatch: the server never sees a request, the client counts all lost")
def test_client_qkey_mismatch(build, rdma):
    n, theirs, mine = rand_between(2, 3), qkey(), qkey()
    size = rand_between(16, MTU)
    with ref_server("--clients", 1, "--qkey", hex(theirs), "--size",
                    size) as peer:
        args = ["--port", peer.port, "-q", hex(mine), "-s", size, "-n", n,
                "-t", "1", peer_host(rdma)]
        res = build.run(PROG, *args, timeout=120)
        v = verdict(peer, timeout=peer_wait([res]), other=res)
    how = (f"{build.command(PROG, *args)} against ud_peer.py server "
           f"--qkey {hex(theirs)}")
    expect_peer_ok(v, f"the reference server ({how})")
    res.fails(1, what=how)
    expect_match(res.stderr, rf"^lost {n} of {n} requests: no reply within "
                 rf"1 s$", "client stderr")
    expect(sum(s["requests"] for s in v["senders"].values()), 0,
           f"requests the reference server (Q_Key {hex(theirs)}) took from "
           f"a client sending with Q_Key {hex(mine)}")


@points(2, "a message larger than the path MTU: refused with its line, exit 1")
def test_oversize(build, rdma):
    size = rand_between(MTU + 1, 4 * MTU)
    args = ["--port", pairs.free_port(), "-s", size, "-t", "1", host(rdma)]
    res = build.run(PROG, *args, timeout=60)
    res.fails(1, what=build.command(PROG, *args))
    expect_match(res.stderr, rf"^ud: a message of {size} bytes does not fit "
                 rf"the path MTU \({MTU} bytes\): a UD message is one "
                 rf"packet$", "stderr")


# ---- the program's server against reference clients ------------------------------

@pytest.fixture(scope="module")
def server_run(build, rdma, spy_lib):
    k, size, key = rand_between(2, 3), rand_between(16, MTU), qkey()
    iters = [rand_between(5, 15) for _ in range(k)]
    spy = Spy(spy_lib)
    args = ["--port", "0", "-c", k, "-q", hex(key), "-s", size, "-t", START]
    with build.start(PROG, *args, env=spy.env) as server:
        with ExitStack() as stack:
            refs = [stack.enter_context(ref_client(
                "--host", host(rdma), "--port", server.port, "--qkey",
                hex(key), "--size", size, "--iters", n, here=True))
                for n in iters]
            vs = [verdict(ref, timeout=120) for ref in refs]
        res = server.wait(timeout=60)
    how = (f"{spy.describe()} {build.command(PROG, *args)} and {k} x "
           f"grader/evidence/trusted/ud_peer.py client --qkey {hex(key)} "
           f"--size {size} --iters N")
    return dict(res=res, pid=server.proc.pid, v=vs, spy=spy, k=k, size=size,
                qkey=key, iters=iters, how=how)


def server_served(run):
    for i, v in enumerate(run["v"]):
        expect_peer_ok(v, f"reference client {i + 1} of {run['k']} "
                       f"(reproduce: {run['how']})")
    run["res"].ok(f"server of {run['k']} reference clients: {run['how']}")


@points(5, "K reference clients: every reply is its request, reversed, from the server's QP")
def test_server_replies(server_run):
    server_served(server_run)
    for i, (v, n) in enumerate(zip(server_run["v"], server_run["iters"])):
        expect(v["replies"], n, f"replies reference client {i + 1} checked "
               f"in its memory")
        expect(v["from_qps"], [v["theirs"]["qpn"]], f"the QPs reference "
               f"client {i + 1}'s replies came from (wc.src_qp) vs the QP "
               f"the server named over TCP")


@points(3, "the server's QP is a UD QP of its process (kernel)")
def test_server_qp(server_run):
    server_served(server_run)
    for v in server_run["v"]:
        expect_ud_qp(v["remote_qp"], server_run["pid"], "server")


@points(3, "replies addressed from each request (wc.src_qp), with the Q_Key; receives have room for the GRH (interposer)")
def test_server_addressing(server_run):
    server_served(server_run)
    spy = server_run["spy"]
    expect_sends_to(spy, [v["qpn"] for v in server_run["v"]],
                    server_run["qkey"], server_run["how"], "server")
    expect_grh_room(spy, server_run["size"], server_run["how"])


@points(2, "the server's counts per client are the clients' own")
def test_server_counts(server_run):
    server_served(server_run)
    out = server_run["res"].stdout
    for v, n in zip(server_run["v"], server_run["iters"]):
        expect_match(out, rf"^client 0x{v['qpn']:06x}: {n} requests$",
                     f"server stdout (reference client QP 0x{v['qpn']:06x} "
                     f"sent {n})")
    expect_match(out, rf"^served {sum(server_run['iters'])} requests from "
                 rf"{server_run['k']} clients$", "server stdout")


@points(2, "a client with another Q_Key is not served; the others are")
def test_server_qkey(build, rdma):
    size, key, other = rand_between(16, MTU), qkey(), qkey()
    n = rand_between(3, 8)
    args = ["--port", "0", "-c", 2, "-q", hex(key), "-s", size, "-t", START]
    with build.start(PROG, *args) as server:
        with ref_client("--host", host(rdma), "--port", server.port,
                        "--qkey", hex(key), "--size", size, "--iters",
                        n, here=True) as good, \
                start_peer(ud_cmd("client", "--timeout", "1", "--lost-ok",
                                  "--host",
                                  host(rdma), "--port", server.port,
                                  "--qkey", hex(other), "--size", size,
                                  "--iters", 2, here=True),
                           timeout=60) as bad:
            vg, vb = verdict(good, timeout=120), verdict(bad, timeout=120)
        res = server.wait(timeout=60)
    how = (f"{build.command(PROG, *args)}, a ud_peer.py client --qkey "
           f"{hex(key)} and one --qkey {hex(other)}")
    expect_peer_ok(vg, f"the reference client with the server's Q_Key ({how})")
    expect(vg["replies"], n, "replies to the client with the server's Q_Key")
    expect_peer_ok(vb, f"the reference client with another Q_Key ({how})")
    expect(vb["lost"], [0, 1], "requests lost by the client with another "
           "Q_Key (the device drops them: no reply)")
    res.ok(how)
    expect_match(res.stdout, rf"^served {n} requests from 1 clients$",
                 "server stdout")


# ---- the program's own pair, the command line ----------------------------------------

@points(2, "the program's server and 2 of its clients")
def test_pair(build, rdma):
    size, key = rand_between(16, MTU), qkey()
    n = [rand_between(5, 20) for _ in range(2)]
    with build.start(PROG, "--port", "0", "-c", 2, "-q", hex(key), "-s",
                     size, "-t", START) as server:
        with ExitStack() as stack:
            procs = [stack.enter_context(build.start(
                PROG, "--port", server.port, "-q", hex(key), "-s", size,
                "-n", k, "-t", T, host(rdma), ready=None)) for k in n]
            results = [p.wait(timeout=120) for p in procs]
        srv = server.wait(timeout=60)
    for i, (res, k) in enumerate(zip(results, n)):
        res.ok(f"client {i + 1}", peer=srv, peer_name="server")
        expect_match(res.stdout, rf"^client: {k} requests of {size} bytes, "
                     rf"{k} replies checked, 0 lost$", f"client {i + 1} stdout")
    srv.ok("server -c 2", peer=results[0], peer_name="client 1")
    expect_match(srv.stdout, rf"^served {sum(n)} requests from 2 clients$",
                 "server stdout")


@points(1, "bad command line (-c given to a client, a Q_Key that is no number): usage, exit 2")
def test_usage(build):
    res = build.run(PROG, "-c", "2", "localhost")
    res.fails(2, what="ud -c 2 localhost")
    expect_match(res.stderr, r"^usage: ud ", "stderr")
    res = build.run(PROG, "-q", "key")
    res.fails(2, what="ud -q key")
    expect_match(res.stderr, r"-q expects a number", "stderr")


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)
