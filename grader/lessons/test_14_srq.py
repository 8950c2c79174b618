"""Lesson 14: a server for many clients on one shared receive queue (SRQ).

`srq` (no HOST) serves -c clients, one RC QP each, all taking their
receives from one SRQ and their completions from one CQ; it refills the SRQ
when the device reports IBV_EVENT_SRQ_LIMIT_REACHED and answers each
request, reversed, on the QP it came from.

Evidence:
- the replies: K reference clients at once (grader/evidence/trusted/peer.py
  14 client; K, the SRQ's size and limit, each client's request count and
  the message size random per run) send fresh random requests and check
  every reply in their own memory; a reply on another client's QP is a
  reply to a request they never sent. The kernel says whose QP each of them
  talked to;
- one SRQ, not K receive queues: the kernel (`rdma -j resource show srq`,
  asked by each reference client while the server's QP for it exists)
  lists every client's QP under one SRQ of the server's process; the
  interposer (verbs_spy.so) saw one ibv_create_srq() and every client's
  QP created with it, and the QPs the reference clients talked to are
  those;
- of --srq-size, throughout: that SRQ was asked for max_wr = --srq-size,
  never resized (ibv_modify_srq with IBV_SRQ_MAX_WR), and never held more
  than --srq-size receives - the interposer's count, posted minus the
  receive completions the program polled on the SRQ's QPs, is never below
  what the SRQ really holds - and held that many after the first fill. A
  bigger SRQ, or rxe's rounded-up room filled too (24 asked, 31 granted),
  would never run low, and the limit would be left untested. The kernel
  gives no size for an rxe SRQ (Linux 6.1's `rdma -j -dd resource show
  srq`: ifname, srqn, type, pdn, pid, comm), so the size is the
  interposer's, tied to the kernel's view by the QP numbers;
- the low-water mark: the interposer records, in order, the limit armed
  with ibv_modify_srq(IBV_SRQ_LIMIT) - at --limit, every time -, every
  IBV_EVENT_SRQ_LIMIT_REACHED the
  program took with ibv_get_async_event(), and the ibv_post_srq_recv()
  calls: each event must be followed by a refill and the limit armed
  again; the requests are many more than the SRQ holds, so the event
  must fire;
- the server's own numbers (requests per client, events, receives
  reposted) must be the reference clients' counts and the interposer's.

No check depends on speed: the limit is at least twice the clients plus
two and the SRQ that limit plus twice the clients and more, so that an
honest server, which looks at its async events once per pass of its loop,
never lets the SRQ run dry however slow it runs (each client has one
request outstanding at a time: lessons/14-srq/README.md, "How low is low").
The waits bound hangs only: a reference client waits at most 20 s for one
reply (milliseconds here), the server 60 s for its clients to connect
(their start included) and for any sign of life while it serves.
"""

from contextlib import ExitStack

import pytest

from grader import GradeFailure, expect, expect_match, points
from grader.evidence.interpose import Spy, build_interposer
from grader.evidence.trusted.run import (expect_owner, expect_peer_ok, host,
                                         rand_between, start_client, verdict)
from grader.session import pairs

PROG = "srq"
T_SERVER = "60"     # the server's waits include the reference clients' start
T_CLIENT = "20"     # a reference client's wait for one reply
T_GO = T_SERVER     # its wait for 'G', which includes the other clients' start
SRQ_LIMIT_REACHED = 15      # enum ibv_event_type in <infiniband/verbs.h>
IBV_SRQ_MAX_WR = 1          # enum ibv_srq_attr_mask
IBV_SRQ_LIMIT = 2


def _pow2(n):
    return n & (n - 1) == 0


def shape():
    k = rand_between(2, 5)
    limit = 2 * k + 2 + rand_between(0, 4)
    # Never a size a device grants exactly as asked (rxe: 2^n - 1, mlx5:
    # 2^n): there an SRQ filled to what ibv_query_srq() says it holds is
    # filled to --srq-size, and that mistake would lose points in one run
    # and not in the next (mutant 14/filled-to-granted kept its points at
    # --srq-size 31 in a make test).
    srq = limit + 2 * k + rand_between(4, 16)
    while _pow2(srq) or _pow2(srq + 1):
        srq = limit + 2 * k + rand_between(4, 16)
    least = (srq - limit) // k + 8        # the event fires at least once
    return dict(clients=k, limit=limit, srq=srq, size=rand_between(16, 2048),
                iters=[rand_between(least, least + 25) for _ in range(k)])


def server_args(s):
    return ["-c", s["clients"], "--srq-size", s["srq"], "--limit",
            s["limit"], "-s", s["size"], "-t", T_SERVER]


@pytest.fixture(scope="module")
def ref_run(build, rdma):
    """The program's server, under the interposer, and K reference clients
    at once."""
    s = shape()
    spy = Spy(build_interposer(build.course))
    with build.start(PROG, "--port", "0", *server_args(s),
                     env=spy.env) as server:
        pid = server.proc.pid
        with ExitStack() as stack:
            refs = [stack.enter_context(start_client(
                "14", "--host", host(rdma), "--port", server.port,
                "--iters", n, "--size", s["size"], "--timeout", T_CLIENT,
                "--go-timeout", T_GO))
                for n in s["iters"]]
            verdicts = [verdict(ref, timeout=120) for ref in refs]
        res = server.wait(timeout=60)
    how = (f"{spy.describe()} {build.command(PROG, '--port', '0', *server_args(s))}"
           f"  and {s['clients']} x grader/evidence/trusted/peer.py 14 client "
           f"--iters N --size {s['size']}")
    return dict(res=res, pid=pid, v=verdicts, spy=spy, s=s, how=how)


def served(run):
    """The server exited 0 and every reference client is content."""
    bad = [v for v in run["v"] if not v["ok"]]
    # the client that saw what went wrong first: a wrong reply, then a
    # completion error; the others only saw the server go away
    bad.sort(key=lambda v: ("not our request reversed" not in v["error"],
                            "completion error" not in v["error"]))
    for v in bad:
        expect_peer_ok(v, f"reference client {run['v'].index(v) + 1} of "
                       f"{len(run['v'])} (reproduce: {run['how']})")
    run["res"].ok(f"server of {run['s']['clients']} reference clients: "
                  f"{run['how']}")


def calls(run, kind):
    return [f for name, f in run["spy"].calls() if name == kind]


# ---- the replies ---------------------------------------------------------------------

@points(6, "K reference clients at once: every reply is its own request, reversed")
def test_replies(ref_run):
    served(ref_run)
    for i, (v, n) in enumerate(zip(ref_run["v"], ref_run["s"]["iters"])):
        expect(v.get("replies"), n, f"replies reference client {i + 1} "
               f"checked in its memory")
        expect_owner(v, ref_run["pid"], "server")


def srq_size(run, srq):
    """The SRQ the clients' QPs were created on (the interposer's
    create_srq line @srq) is one of --srq-size receives: asked so, never
    resized, never holding more, and full after the first fill."""
    w, how = run["s"]["srq"], run["how"]
    msg = f"the SRQ is not one of --srq-size {w}"
    if int(srq["max_wr"]) != w:
        raise GradeFailure(
            f"{msg}: ibv_create_srq() asked for attr.max_wr "
            f"{srq['max_wr']} (the interposer's record)\n  expected: "
            f"{w}: the SRQ is sized for the requests in flight, and the "
            f"limit event keeps it from running dry, not spare room\n"
            f"reproduce: {how}")
    resized = [f for f in calls(run, "modify_srq")
               if int(f["mask"], 0) & IBV_SRQ_MAX_WR]
    if resized:
        raise GradeFailure(
            f"{msg}: ibv_modify_srq(IBV_SRQ_MAX_WR) resized it to max_wr "
            f"{', '.join(f['max_wr'] for f in resized)}\n  expected: no "
            f"resize (IBV_SRQ_LIMIT only)\nreproduce: {how}")
    posts = [f for f in calls(run, "srq_posts")
             if f["handle"] == srq["handle"]]
    most = int(posts[0]["max_in"]) if posts else 0
    room = {f["max_wr"] for f in calls(run, "query_srq")
            if f["handle"] == srq["handle"] and f["rc"] == "0"}
    if most != w:
        raise GradeFailure(
            f"{msg}: the most receives it held at once, as the "
            f"interposer counts them (posted with ibv_post_srq_recv(), "
            f"minus the receive completions polled on its QPs: never less "
            f"than it really held)\n  expected: {w} (all --srq-size "
            f"slots posted at first, and no more ever: rxe rounds the SRQ "
            f"up (here to {' or '.join(sorted(room)) or '?'}), which is "
            f"not room for more buffers)\n  got:      {most}\nreproduce: "
            f"{how}")


@points(4, "one SRQ of --srq-size for every client's QP (kernel and interposer)")
def test_srq_used(ref_run, rdma):
    k = ref_run["s"]["clients"]
    srqs = [f for f in calls(ref_run, "create_srq") if f.get("ok") == "1"]
    qps = [f for f in calls(ref_run, "create_qp") if f.get("type") == "2"]
    if len(srqs) != 1:
        raise GradeFailure(
            f"ibv_create_srq() calls that succeeded, as the interposer saw "
            f"them\n  expected: 1 (one SRQ for all {k} clients)\n  got:      "
            f"{len(srqs)}\nreproduce: {ref_run['how']}")
    handle = int(srqs[0]["handle"]) + 1
    without = [f["qpn"] for f in qps if int(f.get("srq", 0)) != handle]
    if len(qps) != k or without:
        raise GradeFailure(
            f"the server's RC QPs, as created (ibv_create_qp): {len(qps)}, "
            f"of which {len(without)} were created without the SRQ "
            f"(init_attr.srq): each of the {k} clients' QPs must take its "
            f"receives from the one SRQ\nreproduce: {ref_run['how']}")
    served(ref_run)
    talked = sorted(v["theirs"]["qpn"] for v in ref_run["v"])
    created = sorted(int(f["qpn"]) for f in qps)
    if talked != created:
        raise GradeFailure(
            f"the server's QPs the reference clients talked to (their "
            f"qp_info) are not the QPs the interposer saw created on the "
            f"SRQ\n  expected: {[hex(q) for q in created]}\n  got:      "
            f"{[hex(q) for q in talked]}\nreproduce: {ref_run['how']}")
    srq_size(ref_run, srqs[0])
    if rdma.peer_jobs:
        return          # the clients ran on host B: the kernel there has no say
    found = [v.get("srq") for v in ref_run["v"]]
    if any(not f or "error" in f for f in found):
        raise GradeFailure(
            f"rdma resource show srq, asked by each reference client while "
            f"the server's QP for it existed: the SRQ each QP belongs to\n"
            f"  expected: one SRQ of the server (pid {ref_run['pid']}) for "
            f"every client\n  got:      {found}")
    srqns = {f["srqn"] for f in found}
    pids = {f["pid"] for f in found}
    if len(srqns) != 1 or pids != {ref_run["pid"]}:
        raise GradeFailure(
            f"rdma resource show srq: the SRQs the server's QPs of the "
            f"{k} clients belong to\n  expected: one SRQ, of pid "
            f"{ref_run['pid']} (the server)\n  got:      srqn {sorted(srqns)}"
            f", pid {sorted(pids)}")
    # each client found its own server-side QP on the SRQ it names: one
    # srqn for all means every client's QP is on that one SRQ


@points(4, "the SRQ limit fires, and each time the SRQ is refilled and the limit armed again")
def test_limit_events(ref_run):
    s = ref_run["s"]
    seq = []
    for name, f in ref_run["spy"].calls():
        if name == "modify_srq" and int(f["mask"], 0) & IBV_SRQ_LIMIT:
            seq.append(("arm", f))
        elif name == "async_event" and int(f["type"]) == SRQ_LIMIT_REACHED:
            seq.append(("event", f))
        elif name == "post_srq_recv":
            seq.append(("post", f))
    arms = [f for what, f in seq if what == "arm"]
    if not arms or arms[0]["rc"] != "0" or int(arms[0]["limit"]) != s["limit"]:
        raise GradeFailure(
            f"ibv_modify_srq(IBV_SRQ_LIMIT) calls the interposer saw: "
            f"{arms or 'none'}\n  expected: the limit armed at --limit "
            f"{s['limit']}, rc=0, before the first request\nreproduce: "
            f"{ref_run['how']}")
    created = [f for f in calls(ref_run, "create_srq") if f.get("ok") == "1"]
    other = [f for f in arms if int(f["limit"]) != s["limit"]]
    other += [f for f in created if int(f["limit"]) not in (0, s["limit"])]
    if other:
        raise GradeFailure(
            f"the SRQ's limit as armed (ibv_modify_srq(IBV_SRQ_LIMIT), "
            f"{len(arms)} calls, and ibv_create_srq()'s attr.srq_limit)\n"
            f"  expected: --limit {s['limit']} every time (the low-water "
            f"mark the SRQ's size is chosen for: README, 'How low is "
            f"low')\n  got:      ibv_create_srq() "
            f"{[int(f['limit']) for f in created]}, ibv_modify_srq() "
            f"{[int(f['limit']) for f in arms]}\nreproduce: "
            f"{ref_run['how']}")
    events = [i for i, (what, _) in enumerate(seq) if what == "event"]
    if not events:
        # What the reference clients saw says whether the requests went
        # through at all (a client that gave up before its first request
        # leaves the SRQ full).
        saw = "".join(f"\n  reference client {i + 1}: {v.get('error')}"
                      for i, v in enumerate(ref_run["v"]) if not v["ok"])
        raise GradeFailure(
            f"no IBV_EVENT_SRQ_LIMIT_REACHED taken with "
            f"ibv_get_async_event(), though {sum(s['iters'])} requests "
            f"were to go through an SRQ of {s['srq']} with limit "
            f"{s['limit']} (and the server {ref_run['res'].status()})"
            f"{saw}\nreproduce: {ref_run['how']}")
    for j, at in enumerate(events):
        after = seq[at + 1:events[j + 1] if j + 1 < len(events) else None]
        refilled = any(w == "post" and int(f["wrs"]) > 0 and f["rc"] == "0"
                       for w, f in after)
        rearmed = [f for w, f in after if w == "arm"]
        if not refilled or not rearmed or rearmed[-1]["rc"] != "0":
            raise GradeFailure(
                f"after SRQ limit event {j + 1} of {len(events)}: "
                f"{'a refill' if refilled else 'no ibv_post_srq_recv()'}, "
                f"{'the limit armed again' if rearmed else 'the limit never armed again'}"
                f" (the interposer's record, in order)\n  expected: the "
                f"free receives posted back, then ibv_modify_srq"
                f"(IBV_SRQ_LIMIT): the device disarms the limit when it "
                f"fires\nreproduce: {ref_run['how']}")
    served(ref_run)
    m = expect_match(ref_run["res"].stdout, r"^served \d+ requests from \d+ "
                     r"clients: (\d+) limit events, (\d+) receives "
                     r"reposted$", "server stdout")
    expect(int(m.group(1)), len(events), "limit events the server printed "
           "vs the ones it took with ibv_get_async_event()")
    posts = [int(f["wrs"]) for w, f in seq if w == "post" and f["rc"] == "0"]
    expect(int(m.group(2)), sum(posts[1:]), "receives reposted the server "
           "printed vs the ones it posted after its first post "
           "(ibv_post_srq_recv)")


@points(2, "the server's counts per client are the clients' own")
def test_counts(ref_run):
    served(ref_run)
    s, out = ref_run["s"], ref_run["res"].stdout
    for v, n in zip(ref_run["v"], s["iters"]):
        expect_match(out, rf"^client 0x{v['qpn']:06x}: {n} requests$",
                     f"server stdout (reference client QP 0x{v['qpn']:06x} "
                     f"sent {n})")
    expect_match(out, rf"^served {sum(s['iters'])} requests from "
                 rf"{s['clients']} clients: ", "server stdout")


@points(1, "the memory lines: one SRQ against a receive queue per client")
def test_memory_lines(ref_run):
    served(ref_run)
    s, out = ref_run["s"], ref_run["res"].stdout
    m = expect_match(out, rf"^srq: {s['srq']} receives of {s['size']} bytes "
                     rf"\(max_wr (\d+) granted\), limit {s['limit']}$",
                     "server stdout")
    asked = {f["max_wr"] for f in calls(ref_run, "query_srq")
             if f["rc"] == "0"}
    if asked != {m.group(1)}:
        raise GradeFailure(
            f"the SRQ's max_wr in the 'srq:' line is what ibv_query_srq() "
            f"said the SRQ holds (rxe rounds it up)\n  expected: "
            f"{' or '.join(sorted(asked)) or '(no ibv_query_srq() call)'}"
            f"\n  got:      {m.group(1)}\nreproduce: {ref_run['how']}")
    one = s["srq"] * s["size"] / 1024
    expect_match(out, rf"^memory: 1 SRQ x {s['srq']} x {s['size']} B = "
                 rf"{one:.1f} KiB for {s['clients']} clients; "
                 rf"{s['clients']} receive queues of {s['srq']} would be "
                 rf"{s['clients'] * one:.1f} KiB$", "server stdout")


# ---- the program's own clients, the command line -----------------------------------

@points(2, "the program's server and 2 of its clients: every reply checked")
def test_pair(build, rdma):
    n, size = rand_between(30, 60), rand_between(16, 1024)
    with build.start(PROG, "--port", "0", "-c", 2, "--srq-size", 24,
                     "--limit", 8, "-s", size, "-t", T_SERVER) as server:
        with ExitStack() as stack:
            procs = [stack.enter_context(build.start(
                PROG, "--port", server.port, "-n", n, "-s", size, "-t",
                T_CLIENT, host(rdma), ready=None)) for _ in range(2)]
            results = [p.wait(timeout=120) for p in procs]
        srv = server.wait(timeout=60)
    for i, res in enumerate(results):
        res.ok(f"client {i + 1}", peer=srv, peer_name="server")
        expect_match(res.stdout, rf"^client: {n} requests, every reply "
                     rf"checked$", f"client {i + 1} stdout")
    srv.ok("server -c 2", peer=results[0], peer_name="client 1")
    expect_match(srv.stdout, rf"^served {2 * n} requests from 2 clients: ",
                 "server stdout")


@points(1, "bad command line (--limit not below --srq-size): usage, exit 2")
def test_usage(build):
    res = build.run(PROG, "--srq-size", "8", "--limit", "8")
    res.fails(2, what="srq --srq-size 8 --limit 8")
    expect_match(res.stderr, r"^usage: srq ", "stderr")


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)
