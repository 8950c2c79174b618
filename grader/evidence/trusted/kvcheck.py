"""Lesson 15: is what a key-value client saw consistent with the writes
that were made? Pure Python (no pyverbs, no pytest): the grader's tests
call it with the reference peers' records (grader/evidence/trusted/kv.py)
and the student's programs' output.

The rule, per key (a register): a GET may return the state of a write W
(a value, or absent after a DELETE; absent before any write) only if

  - W could be read before the GET ended: W was published (its even
    version stored) before the GET's end, and
  - W was not yet overwritten when the GET started: the write after W
    (of that key) had not begun changing the slot's memory before the
    GET's start.

A READ that returns W's bytes consistent copied them after W was
published and before the next write touched them (the CRC covers every
byte the next write changes, the version included), so an honest client
passes; a torn copy accepted is a value no write made, a cached or
invented one fails the windows. Two ways to know the times:

  check_client_vs_server()  the student's client against the reference
      server, which logged its writes (t_mod: the first change of the
      slot's memory happened before; t_pub: the publication after) and
      each request of each client (t_arr: it had arrived; t_rep: its
      reply was posted). A GET the client made between two requests lies
      after the first's reply was posted and before the second arrived:
      its window in the server's clock (the client's own clock, maybe
      another machine's, is never used).
  check_clients_vs_server()  the reference clients against the student's
      server: each operation's start and end in the clients' shared
      clock (one host); a write's effect lies inside its request's
      interval. Writes are ordered by their slot's version (same slot)
      or by real time (one ended before the other began).

Both are sound, not complete: they never reject what a correct client
and server can produce, and they catch what the lesson's mistakes make
(a torn value accepted, a stale duplicate reply taken, a version reused).
"""

import math
import re

RESULT = re.compile(r"^(get|rget|put|del) (\S+): (.*)$")
FORMS = {
    "get": [(re.compile(r"^(\S+) \(slot (\d+), version (\d+), reads (\d+)\)$"),
             ("value", "slot", "version", "reads")),
            (re.compile(r"^absent \(reads (\d+)\)$"), ("reads",))],
    "rget": [(re.compile(r"^(\S+) \(slot (\d+), version (\d+)\)$"),
              ("value", "slot", "version")),
             (re.compile(r"^absent$"), ())],
    "put": [(re.compile(r"^ok \(slot (\d+), version (\d+)\)$"),
             ("slot", "version")),
            (re.compile(r"^full$"), ())],
    "del": [(re.compile(r"^ok \(slot (\d+), version (\d+)\)$"),
             ("slot", "version")),
            (re.compile(r"^absent$"), ())],
}
REQUESTS = ("rget", "put", "del")
INF = math.inf


def parse_results(stdout):
    """The client's result lines, in order: [{op, key, status, slot,
    version, value, reads, line}] (status ok/absent/full); a line that
    starts like a result but has another form: status 'unreadable'."""
    out = []
    for line in stdout.splitlines():
        m = RESULT.match(line.rstrip())
        if not m:
            continue
        op, key, rest = m.groups()
        rec = {"op": op, "key": key, "line": line.rstrip(),
               "status": "unreadable"}
        for regex, names in FORMS[op]:
            f = regex.match(rest)
            if not f:
                continue
            rec.update({n: (int(v) if n != "value" else v)
                        for n, v in zip(names, f.groups())})
            rec["status"] = ("ok" if "slot" in names else
                             "full" if rest == "full" else "absent")
            break
        out.append(rec)
    return out


def op_text(op):
    return " ".join(x for x in (op["op"], op["key"], op.get("value")) if x)


def show(rec):
    if rec["status"] != "ok":
        return rec["status"]
    v = f" {rec['value']!r}" if rec.get("value") is not None else ""
    return f"slot {rec['slot']} version {rec['version']}{v}"


# ---- the student's client against the reference server -------------------------

class Timeline:
    """One key's states in the reference server's order."""

    def __init__(self, key, writes):
        self.key = key
        self.states = [{"value": None, "slot": None, "version": None,
                        "t_mod": -INF, "t_pub": -INF, "origin": "start"}]
        self.states += sorted((w for w in writes if w["key"] == key),
                              key=lambda w: w["t_pub"])

    def readable(self, i, lo, hi):
        """Could state i be read by a GET made within (lo, hi)?"""
        nxt = self.states[i + 1] if i + 1 < len(self.states) else None
        return self.states[i]["t_pub"] < hi and (nxt is None or
                                                 lo < nxt["t_mod"])

    def why_not(self, i, lo, hi):
        s = self.states[i]
        if s["t_pub"] >= hi:
            return (f"that write was published {1e3 * (s['t_pub'] - hi):.3f}"
                    f" ms after the GET's window ended")
        nxt = self.states[i + 1]
        what = ("a DELETE" if nxt["value"] is None else
                f"version {nxt['version']} ({nxt['value']!r})")
        return (f"stale: {what} had begun to replace it "
                f"{1e3 * (lo - nxt['t_mod']):.3f} ms before the GET began")


def check_get(tl, got, lo, hi, writes_by_sv):
    """None when `got` (a parsed get result) is readable in (lo, hi) on
    the timeline, else why not."""
    if got["status"] == "absent":
        cands = [i for i, s in enumerate(tl.states) if s["value"] is None]
        if any(tl.readable(i, lo, hi) for i in cands):
            return None
        return (f"absent, but the key was present throughout the GET's "
                f"window (its states: "
                f"{', '.join(describe_state(s) for s in tl.states[1:])})")
    if got["status"] != "ok":
        return f"an unreadable result line: {got['line']!r}"
    sv = (got["slot"], got["version"])
    idx = [i for i, s in enumerate(tl.states)
           if (s["slot"], s["version"]) == sv]
    if not idx:
        w = writes_by_sv.get(sv)
        if w is None:
            return (f"no write made slot {sv[0]} version {sv[1]}: the "
                    f"version was invented, or a torn READ was accepted")
        return (f"slot {sv[0]} version {sv[1]} is key {w['key']!r}'s write, "
                f"not this key's")
    s = tl.states[idx[0]]
    if s["value"] is None:
        return (f"slot {sv[0]} version {sv[1]} is the DELETE of this key: "
                f"absent, not a value")
    if got["value"] != s["value"]:
        return (f"the value {got['value']!r} is not the value written with "
                f"slot {sv[0]} version {sv[1]} ({s['value']!r}): a torn READ "
                f"was accepted")
    if tl.readable(idx[0], lo, hi):
        return None
    return tl.why_not(idx[0], lo, hi)


def describe_state(s):
    if s["value"] is None:
        return "absent" if s["slot"] is None else \
            f"deleted (slot {s['slot']} version {s['version']})"
    return f"slot {s['slot']} version {s['version']}"


def check_client_vs_server(server, qpn, ops, stdout, who, partial=False):
    """Problems with one student client's run, as (kind, message): kind
    'form' (its result lines), 'request' (what reached the server),
    'reply' (a request's printed result is not the reply the server sent
    for it), 'get' (a GET that no write explains). `ops`: the workload it
    was given ([{op, key, value}]); `stdout`: what it printed; `server`:
    the reference server's peer-result; `qpn`: the client's QP.
    `partial`: the client ended early; check the ops it printed a line
    for (a reply taken wrongly often makes a client fail later: the real
    reply arrives when it waits for something else)."""
    got = parse_results(stdout)
    if partial:
        ops = ops[:len(got)]
    for j, op in enumerate(ops):
        if j >= len(got):
            return [("form", f"{who}: {len(got)} result lines for "
                     f"{len(ops)} ops; none for op {j + 1} "
                     f"({op_text(op)!r})")]
        if (got[j]["op"], got[j]["key"]) != (op["op"], op["key"]):
            return [("form", f"{who}: result line {j + 1}\n  expected: a "
                     f"line for {op_text(op)!r}\n  got:      "
                     f"{got[j]['line']!r}")]
        if got[j]["status"] == "unreadable":
            return [("form", f"{who}: result line {j + 1} is not in the "
                     f"documented form: {got[j]['line']!r}")]
    if len(got) > len(ops):
        return [("form", f"{who}: {len(got)} result lines for {len(ops)} "
                 f"ops: {got[len(ops)]['line']!r} is extra")]
    conn = next((c for c in server.get("clients", []) if c["qpn"] == qpn),
                None)
    if conn is None:
        return [("request", f"{who}: the reference server served no QP "
                 f"0x{qpn:06x} (the QP number of its 'local:' line)")]
    reqs = conn["requests"]
    want = [op for op in ops if op["op"] in REQUESTS]
    if partial:
        # The server may have ended (another client hung up) before this
        # client's last requests reached it; a result printed for one of
        # those is a reply taken that answered another (below).
        want = want[:len(reqs)]
    for j, op in enumerate(want):
        r = reqs[j] if j < len(reqs) else None
        sent = {"rget": "get"}.get(op["op"], op["op"])
        if r is None or (r["op"], r["key"], r.get("value")) != \
                (sent, op["key"], op.get("value")):
            shown = (f"{r['op']} {r['key']} {r.get('value') or ''}".strip()
                     if r else "nothing")
            return [("request", f"{who}: request {j + 1} that reached the "
                     f"reference server\n  expected: {op_text(op)!r} (its "
                     f"put/del/rget number {j + 1})\n  got:      {shown}")]
        if r.get("bad"):
            return [("request", f"{who}: the reference server could not "
                     f"read request {j + 1} ({op_text(op)}): {r['bad']}")]
    if not partial and (len(reqs) != len(want) + 1 or
                        reqs[-1]["op"] != "bye"):
        return [("request", f"{who}: the reference server received "
                 f"{len(reqs)} requests; expected the {len(want)} of its "
                 f"ops and a BYE")]
    if "t_go" not in conn:
        return [("request", f"{who}: the reference server never let it go "
                 f"('G'): it ended first ({server.get('error')})")]
    problems = []
    writes = server.get("writes", [])
    by_sv = {(w["slot"], w["version"]): w for w in writes}
    timelines = {}
    # The window of each op, in the server's clock.
    lo, k = conn["t_go"], 0
    arrivals = [r["t_arr"] for r in reqs]
    for j, op in enumerate(ops):
        res = got[j]
        if op["op"] in REQUESTS:
            if k >= len(reqs):      # partial: it never reached the server
                problems.append(("reply", reply_mixup(who, j, op, res, None,
                                                      reqs)))
                break
            r = reqs[k]
            k += 1
            lo = r["t_rep"]
            mine = {"status": r["status"], "slot": r["slot"],
                    "version": r["version"], "value": r.get("got")}
            theirs = {"status": res["status"], "slot": res.get("slot"),
                      "version": res.get("version"),
                      "value": res.get("value")}
            if r["status"] != "ok":
                mine.update(slot=None, version=None)
            if op["op"] != "rget" or r["status"] != "ok":
                mine["value"] = theirs["value"] = None
            if mine != theirs:
                problems.append(("reply", reply_mixup(
                    who, j, op, res, r, reqs[:k - 1])))
            continue
        if k >= len(arrivals):
            break           # partial: no request after this GET arrived
        hi = arrivals[k]
        tl = timelines.get(op["key"])
        if tl is None:
            tl = timelines[op["key"]] = Timeline(op["key"], writes)
        why = check_get(tl, res, lo, hi, by_sv)
        if why:
            problems.append(("get", f"{who}: op {j + 1}, {res['line']!r}: "
                             f"{why}"))
    return problems


def _printed(rec):
    """What a client prints of a reply: its status, and where it is when
    it is ok."""
    ok = rec.get("status") == "ok"
    return (rec.get("status"), rec.get("slot") if ok else None,
            rec.get("version") if ok else None)


def reply_mixup(who, j, op, res, r, earlier):
    """A request's reported result differs from the reply the server
    sent (`r`), or the server never received the request (`r` None: it
    had ended first): say whose reply the client took, when it is
    recognisable. `earlier`: the server's records of the requests before
    this one on the connection."""
    head = f"{who}: op {j + 1} ({op_text(op)}) printed {res['line']!r}, but "
    if r is None:
        head += (f"the reference server never received that request (it "
                 f"had received {len(earlier)} of this client's requests "
                 f"when it ended), so no reply answered it")
    else:
        head += (f"the reference server's reply to that request said "
                 f"{r['status']}")
        if r["status"] == "ok":
            head += f" (slot {r['slot']}, version {r['version']})"
    f = r and r.get("foreign_before")
    if f and (res.get("slot"), res.get("version")) == (f["slot"],
                                                        f["version"]):
        return (head + f": it took the reply the server sent just before, "
                f"which carries this request's seq but another client's id "
                f"(0x{f['client']:06x}) - a reply matched to the wrong "
                f"client")
    # The previous request's reply: its duplicate, sent just before this
    # one's, or the real one left over after an earlier duplicate was
    # taken in its place (which looked the same, so nothing showed then).
    prev = earlier[-1] if earlier else None
    if prev and _printed(res) == _printed(prev):
        this = f"not {r['seq']}" if r else "not this request's"
        if r and r.get("dup_before"):
            return (head + ": it took the duplicate of the previous "
                    "request's reply the server sent just before (seq "
                    f"{prev['seq']}, {this}) - a stale reply")
        if any(e.get("dup_before") for e in earlier):
            return (head + ": it took the previous request's reply (seq "
                    f"{prev['seq']}, {this}), left over since an "
                    "earlier request took a duplicate the server sent "
                    "in its place - a stale reply")
    return head


# ibv_wr_opcode / ibv_wc_opcode values, as the interposer records them
# (lesson 15's tests read its record with these too).
WR_RDMA_READ, WR_SEND = 4, 2
WC_RDMA_READ, WC_RECV = 2, 128


def moved_on_early(server, qpn, calls, who):
    """The first request a client left before its reply came, from the
    interposer's record `calls` ([(kind, fields)] in call order): the
    reference server sends its duplicate and another client's reply
    before the real one (kv.py), in order on the one connection, so a
    client that waits for its answer polls all of them before its next
    post_send. A client that went on after fewer took one of those. For
    a client that ended early with no printed result to show it (the
    duplicate looked like the answer); None when none is found, or when
    the record has no receive completion at all (a client that polls
    some other way)."""
    conn = next((c for c in server.get("clients", []) if c["qpn"] == qpn),
                None)
    if conn is None or not any(
            kind == "poll_cq" and f.get("opcode") == str(WC_RECV)
            for kind, f in calls):
        return None
    reqs, j, polled = conn["requests"], -1, 0
    for kind, f in calls:
        if kind == "poll_cq" and f.get("opcode") == str(WC_RECV) and \
                f.get("status") == "0":
            polled += 1
        if kind != "post_send" or f.get("rc", "0") != "0":
            continue
        if 0 <= j < len(reqs):
            r = reqs[j]
            sent = ([("the duplicate of the previous request's reply",
                      " - a stale reply")] if r.get("dup_before") else []) + \
                ([("another client's reply with this request's seq",
                   " - a reply matched to the wrong client")]
                 if r.get("foreign_before") else []) + [("its reply", "")]
            if polled < len(sent):
                took, tag = (sent[polled - 1] if polled else
                             ("no reply at all", ""))
                return (f"{who}: request {j + 1} ({r['op']} {r['key']}): "
                        f"the reference server sent {len(sent)} messages "
                        f"for it, its reply last; the client polled "
                        f"{polled} of them and went on (the interposer's "
                        f"record: its next post_send came after {polled} "
                        f"receive completions): it took {took}{tag}")
        if f.get("opcode") == str(WR_SEND):
            j, polled = j + 1, 0
    return None


def torn_reads_seen(server, read_sums):
    """The planted states (kv.py --race) whose bucket bytes a READ of the
    client brought back (the interposer's sums)."""
    sums = {p["sum"] for p in server.get("planted", [])}
    return sorted(sums & set(read_sums))


# ---- the reference clients against the student's server --------------------------

def check_clients_vs_server(clients):
    """Problems (strings) with what the reference clients saw of the
    student's server: `clients` their peer-results (ops with t0/t1)."""
    problems = []
    writes, reads = [], []
    for n, c in enumerate(clients, 1):
        for op in c.get("ops", []):
            op = dict(op, client=n)
            if op["op"] == "bad":
                continue
            if op["op"] in ("put", "del") and op["status"] == "ok":
                writes.append(op)
            if op["op"] in ("get", "rget") or (op["op"] == "del" and
                                               op["status"] == "absent"):
                reads.append(op)
            if op["op"] == "put" and op["status"] != "ok":
                problems.append(f"client {n}: put {op['key']}: {op['status']}"
                                f" (its bucket had room: the grader chose "
                                f"the keys so)")
    seen = {}
    for w in writes:
        sv = (w["slot"], w["version"])
        if w["version"] % 2 or w["version"] == 0:
            problems.append(f"client {w['client']}: {w['op']} {w['key']}: "
                            f"the reply's version {w['version']} is not a "
                            f"complete write's (even, not 0)")
        if sv in seen:
            o = seen[sv]
            problems.append(
                f"slot {sv[0]} version {sv[1]} names two writes: client "
                f"{o['client']}'s {op_text(o)} and client {w['client']}'s "
                f"{op_text(w)}: every write of a slot must raise its "
                f"version by 2")
        seen[sv] = w
    if problems:
        return problems
    for rd in reads:
        why = check_read(rd, writes, seen)
        if why:
            problems.append(f"client {rd['client']}: {rd['op']} {rd['key']} "
                            f"-> {show_op(rd)}: {why}")
    return problems


def show_op(op):
    if op["status"] != "ok":
        return op["status"]
    return (f"{op.get('got')!r} (slot {op['slot']}, version "
            f"{op['version']})")


def after(w2, w1):
    """Is write w2 known to come after w1 (same key)?"""
    if w2["slot"] == w1["slot"] and w2["version"] > w1["version"]:
        return True
    return w2["t0"] > w1["t1"]


def check_read(rd, writes, by_sv):
    key, t0, t1 = rd["key"], rd["t0"], rd["t1"]
    mine = [w for w in writes if w["key"] == key]
    if rd["status"] == "absent":
        # Absent before any write, or after a DELETE, if not certainly
        # overwritten by a PUT that ended before the read began.
        puts = [w for w in mine if w["op"] == "put"]
        if not any(w["t1"] < t0 for w in puts):
            return None
        for d in (w for w in mine if w["op"] == "del"):
            if d["t0"] < t1 and not any(after(p, d) and p["t1"] < t0
                                        for p in puts):
                return None
        return ("absent, but a PUT of the key had completed before the read "
                "began and no DELETE could have removed it since")
    if rd["status"] != "ok":
        return f"status {rd['status']}"
    w = by_sv.get((rd["slot"], rd["version"]))
    if w is None or w["key"] != key or w["op"] != "put":
        return (f"no PUT of this key got slot {rd['slot']} version "
                f"{rd['version']} as its reply")
    if rd.get("got") != w.get("value"):
        return (f"the value is not the one PUT with that slot and version "
                f"({w.get('value')!r}, by client {w['client']}): the slot "
                f"was read torn, or written out of order")
    if w["t0"] >= t1:
        return "that PUT was sent after the read had ended"
    for w2 in mine:
        if w2 is not w and after(w2, w) and w2["t1"] < t0:
            return (f"stale: client {w2['client']}'s {op_text(w2)} (slot "
                    f"{w2['slot']} version {w2['version']}) had replaced it "
                    f"before the read began")
    return None
