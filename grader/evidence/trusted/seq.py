"""Lesson 18's reference sequencer server and clients (pyverbs), run by the
grader against the student's clients and server:

    python3 grader/evidence/trusted/seq.py server --mode M --clients C
            --iters N --start S [options]
    python3 grader/evidence/trusted/seq.py client --mode M --clients C
            --iters N --host H --port P [options]

They speak lessons/18-sequencer/README.md's protocol: per client a TCP
connection and a qp_info exchange (course.c's), the 'R' barrier for the RC
modes, the server's 'G' once every client is connected and each client's
'D' when it has its numbers; then

  faa  the server advertises its counter (8 bytes, host order) for
       IBV_WR_ATOMIC_FETCH_AND_ADD of 1 from each client's RC QP;
  rc   a request is a SEND of 8 bytes (le64: the request's number, 0 to
       N-1, per client), the reply a SEND of 16 (le64 id, le64 number);
  ud   the same messages over UD (qkey 0x11111111): one server QP for
       every client, a receive buffer starts with the 40-byte GRH.

The server is the grader's instrument: it owns the counter (a fresh random
start), hands out each number once, checks every request's id, and after
every 'D' reports the counter and whom the kernel names as the owner of
each client's QP, and its type (`rdma resource show qp`, asked while they
exist). The client runs --clients clients at once (one request each in
flight, round robin over their QPs: the server sees them concurrently),
checks each reply's id, and reports every number it got, its own rate, and
the kernel's word on the server's QPs. --skip K: the first client takes K
numbers fewer (faa: the program's server must notice).

Both end with one line `peer-result {json}`, whatever happened.
"""

import argparse
import json
import os
import select
import socket
import struct
import sys
import time
import types
from pathlib import Path

if __package__ in (None, ""):
    _grader = Path(__file__).resolve().parent.parent.parent
    _pkg = types.ModuleType("grader")
    _pkg.__path__ = [str(_grader)]
    sys.modules["grader"] = _pkg
    __package__ = "grader.evidence.trusted"

import pyverbs.enums as e                                       # noqa: E402
from pyverbs.addr import AH, GID, AHAttr, GlobalRoute           # noqa: E402
from pyverbs.cq import CQ                                       # noqa: E402
from pyverbs.device import Context                              # noqa: E402
from pyverbs.mr import MR                                       # noqa: E402
from pyverbs.pd import PD                                       # noqa: E402
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr            # noqa: E402
from pyverbs.wr import SGE, RecvWR, SendWR                      # noqa: E402

from grader.core.harness import Bound                          # noqa: E402
from grader.evidence.trusted import oob                         # noqa: E402
from grader.evidence.trusted.kernel import program_qps          # noqa: E402
from grader.evidence.trusted.oob import PeerGone, QpInfo        # noqa: E402
from grader.evidence.trusted.verbs import (LONG_NAP, LONG_WAIT,  # noqa: E402
                                           WC_STATUS, RcResources, SharedRc,
                                           WcError, gid_str)

QKEY = 0x11111111
GRH = 40
REQ, REP, SLOT = 8, 16, 64
FAA_MR = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC)
FAA_QP = e.IBV_ACCESS_REMOTE_ATOMIC


def check(wc, what):
    if wc.status != e.IBV_WC_SUCCESS:
        raise WcError(f"{what}: completion error: "
                      f"{WC_STATUS.get(wc.status, wc.status)} "
                      f"(status {wc.status})")
    return wc


class Ud:
    """One UD QP with a send and a receive CQ and one buffer."""

    def __init__(self, a, depth, size):
        self.a = a
        self.ctx = Context(name=a.device)
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, size, e.IBV_ACCESS_LOCAL_WRITE)
        self.scq, self.rcq = CQ(self.ctx, depth), CQ(self.ctx, depth)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1,
                    max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.scq,
                                         rcq=self.rcq, cap=cap))
        attr = QPAttr(port_num=1)
        attr.qkey = QKEY
        attr.pkey_index = 0
        self.qp.to_init(attr)
        self.qp.to_rtr(attr)
        attr.sq_psn = 0
        self.qp.to_rts(attr)
        self.ahs = {}

    def info(self):
        raw = bytes.fromhex(self.ctx.query_gid(1, self.a.gid_index)
                            .gid.replace(":", ""))
        return QpInfo(self.ctx.query_port(1).lid, self.qp.qp_num, 0, raw,
                      0, 0, 0)

    def ah(self, gid):
        if gid not in self.ahs:
            g = GID()
            g.gid = gid_str(gid)
            gr = GlobalRoute(dgid=g, sgid_index=self.a.gid_index,
                             hop_limit=64)
            self.ahs[gid] = AH(self.pd, attr=AHAttr(gr=gr, is_global=1,
                                                    port_num=1))
        return self.ahs[gid]

    def write(self, data, offset=0):
        self.mr.write(data, len(data), offset)

    def post_recv(self, wr_id, offset, length):
        sge = SGE(self.mr.buf + offset, length, self.mr.lkey)
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]))

    def post_send(self, offset, length, gid, qpn):
        sge = SGE(self.mr.buf + offset, length, self.mr.lkey)
        wr = SendWR(wr_id=offset, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_ud(self.ah(gid), qpn, QKEY)
        self.qp.post_send(wr)


def with_tgid(owners):
    """The kernel names the task that created a QP: a thread's id for a
    QP made by a thread. Add the process it belongs to (`tgid`, from
    /proc while it lives) to each owner."""
    for q in owners.values():
        if q and q.get("pid"):
            try:
                status = Path(f"/proc/{q['pid']}/status").read_text()
                q["tgid"] = int(status.split("Tgid:")[1].split()[0])
            except (OSError, IndexError, ValueError):
                q["tgid"] = None
    return owners


def idle(last):
    """Between two polls that found nothing, `last` the time of the last
    progress: the CPU to rxe and the programs (sched_yield), and once
    nothing has come for LONG_WAIT s, naps of LONG_NAP: a peer spinning
    through a broken program's whole --timeout cost CPU seconds under the
    VM's emulation (no check of lesson 18 compares a speed with a limit)."""
    if time.monotonic() - last < LONG_WAIT:
        os.sched_yield()
    else:
        time.sleep(LONG_NAP)


def poll1(cq, what):
    n, wcs = cq.poll()
    return check(wcs[0], what) if n else None


class Session:
    def __init__(self, a):
        self.a = a
        self.r = {"role": a.role, "mode": a.mode, "ok": False, "error": None}
        self.socks = []

    def run(self):
        try:
            getattr(self, self.a.role)()
            self.r["ok"] = self.r["error"] is None
        except (PeerGone, WcError, OSError) as err:
            self.r["error"] = str(err)
        except Exception as err:                # noqa: BLE001 pyverbs
            self.r["error"] = f"{type(err).__name__}: {err}"
        finally:
            for s in self.socks:
                s.close()
        print("peer-result " + json.dumps(self.r), flush=True)
        return 0

    def sync_all(self, tag):
        for s in self.socks:
            oob.sync(s, tag)

    # ---- the server -------------------------------------------------------

    def server(self):
        a, r = self.a, self.r
        lsock = oob.listen(a.port)
        print(f"listening on port {lsock.getsockname()[1]}", flush=True)
        res, qpns = [], []
        if a.mode == "ud":
            depth = 2 * a.clients + 2
            ud = Ud(a, depth, 2 * depth * SLOT)
            for i in range(depth):
                ud.post_recv(i, i * SLOT, GRH + REQ)
        else:
            first = None
        try:
            for k in range(a.clients):
                if a.mode == "faa":
                    x = (RcResources(a.device, a.gid_index, 8, FAA_MR, FAA_QP)
                         if k == 0 else SharedRc(first, FAA_QP))
                    first = first or x
                    if k == 0:
                        x.write(struct.pack("=Q", a.start))
                    mine = x.advertise(8)
                elif a.mode == "rc":
                    x = RcResources(a.device, a.gid_index, 2 * SLOT,
                                    e.IBV_ACCESS_LOCAL_WRITE, 0, max_wr=8)
                    x.post_recv(1, 0, REQ)
                    mine = x.info()
                else:
                    x, mine = None, ud.info()
                res.append(x)
                sock = oob.accept_one(lsock, a.accept_timeout or a.timeout)
                sock.settimeout(a.timeout)
                self.socks.append(sock)
                theirs = oob.exchange(sock, mine)
                qpns.append((theirs.qpn, theirs.gid))
                if x is not None:
                    x.connect(theirs)
                    oob.sync(sock, b"R")
        finally:
            lsock.close()
        owners = with_tgid(program_qps([q for q, _ in qpns], a.device))
        r["clients"] = [{"qpn": q, "remote_qp": owners[q]} for q, _ in qpns]
        self.sync_all(b"G")
        nxt = a.start
        total = a.clients * a.iters
        if a.mode != "faa":
            nxt, r["bad_ids"] = self.serve(res, qpns, ud if a.mode == "ud"
                                           else None, total)
        self.sync_all(b"D")
        counter = (struct.unpack("=Q", first.read(0, 8))[0]
                   if a.mode == "faa" else nxt)
        r.update(counter=counter, expected=a.start + total)

    def serve(self, res, qpns, ud, total):
        """Serve rc or ud requests until `total` are answered; the number
        after the last, and the requests whose id was not the next of its
        client."""
        a = self.a
        nxt, served, bad = a.start, 0, 0
        want = {q: 0 for q, _ in qpns}
        gid_of = dict(qpns)
        last, wait = time.monotonic(), Bound(a.timeout)
        sends = 0
        while served < total:
            progress = False
            if ud:
                wc = poll1(ud.rcq, "request")
                while poll1(ud.scq, "reply"):
                    sends -= 1
                if wc:
                    progress = True
                    if wc.src_qp not in want:
                        raise PeerGone(f"a request from QP {wc.src_qp:#x}, "
                                       f"which is no client's (the clients: "
                                       f"{sorted(want)})")
                    off = wc.wr_id * SLOT
                    (rid,) = struct.unpack_from(
                        "<Q", ud.mr.read(REQ, off + GRH))
                    bad += rid != want[wc.src_qp]
                    want[wc.src_qp] = rid + 1
                    while sends >= 2 * a.clients:
                        while not poll1(ud.scq, "reply"):
                            pass
                        sends -= 1
                    rep = (len(want) * 2 + 2 + served % (2 * a.clients)) \
                        * SLOT
                    ud.mr.write(struct.pack("<QQ", rid, nxt), REP, rep)
                    ud.post_send(rep, REP, gid_of[wc.src_qp], wc.src_qp)
                    sends += 1
                    ud.post_recv(wc.wr_id, off, GRH + REQ)
                    nxt, served = nxt + 1, served + 1
            else:
                for k, x in enumerate(res):
                    wc = poll1(x.cq, "request")
                    if not wc or wc.opcode == e.IBV_WC_SEND:
                        progress = progress or bool(wc)
                        continue
                    progress = True
                    (rid,) = struct.unpack("<Q", x.read(0, REQ))
                    q = qpns[k][0]
                    bad += rid != want[q]
                    want[q] = rid + 1
                    x.post_recv(1, 0, REQ)
                    x.write(struct.pack("<QQ", rid, nxt), SLOT)
                    x.post_send(0, e.IBV_WR_SEND, SLOT, REP)
                    nxt, served = nxt + 1, served + 1
            if progress:
                last = time.monotonic()
                continue
            # rxe's kernel work needs the CPU too; a wait of 100 ms (a
            # client still starting, or gone) is napped through
            idle(last)
            # a client that speaks on TCP (its 'D') or leaves before it
            # had its numbers: no more requests will come from it
            early = [s for s, (q, _) in zip(self.socks, qpns)
                     if want[q] < a.iters]
            spoke, _, _ = select.select(early, [], [], 0)
            if spoke:
                k = self.socks.index(spoke[0])
                raise PeerGone(f"client {k} (QP {qpns[k][0]:#x}) said "
                               f"{spoke[0].recv(1, socket.MSG_PEEK)!r} on "
                               f"TCP after {want[qpns[k][0]]} of its "
                               f"{a.iters} requests ({served} of {total} "
                               f"served)")
            if wait.over(time.monotonic() - last):
                raise PeerGone(f"no request within {wait.seconds} s "
                               f"({served} of {total} served)")
        return nxt, bad

    # ---- the clients ------------------------------------------------------

    def client(self):
        a, r = self.a, self.r
        cl = []
        for k in range(a.clients):
            sock = oob.connect(a.host, a.port, a.timeout)
            self.socks.append(sock)
            if a.mode == "ud":
                x = Ud(a, 4, 2 * SLOT)
                theirs = oob.exchange(sock, x.info())
            else:
                x = RcResources(a.device, a.gid_index, 2 * SLOT,
                                e.IBV_ACCESS_LOCAL_WRITE, 0, max_wr=8)
                theirs = oob.exchange(sock, x.info())
                x.connect(theirs)
                oob.sync(sock, b"R")
                if a.mode == "faa" and (not theirs.addr or
                                        theirs.length < 8):
                    raise PeerGone(f"the server advertised no counter "
                                   f"(addr {theirs.addr:#x} length "
                                   f"{theirs.length})")
            want = a.iters - (a.skip if k == 0 else 0)
            cl.append({"x": x, "theirs": theirs, "left": want, "id": 0,
                       "busy": 0, "numbers": []})
        server_qpns = [c["theirs"].qpn for c in cl]
        owners = with_tgid(program_qps(sorted(set(server_qpns)), a.device))
        r["server_qps"] = {str(q): owners[q] for q in set(server_qpns)}
        r["server_qpns"] = server_qpns
        self.sync_all(b"G")
        t0 = time.monotonic()
        self.take(cl)
        r["seconds"] = time.monotonic() - t0
        r["numbers"] = [c["numbers"] for c in cl]
        r["bad_replies"] = sum(c.get("bad", 0) for c in cl)
        self.sync_all(b"D")

    def post(self, c):
        a, x, t = self.a, c["x"], c["theirs"]
        if a.mode == "faa":
            x.post_atomic(e.IBV_WR_ATOMIC_FETCH_AND_ADD, t.addr, t.rkey, 1)
            c["busy"] = 1                # the atomic's completion
            return
        x.write(struct.pack("<Q", c["id"]), 0)
        if a.mode == "ud":
            x.post_recv(2, SLOT, GRH + REP)
            x.post_send(0, REQ, t.gid, t.qpn)
        else:
            x.post_recv(2, SLOT, REP)
            x.post_send(1, e.IBV_WR_SEND, 0, REQ)
        c["busy"] = 2                    # the SEND's and the reply's

    def reply(self, c, wc):
        """A completion of client c: the number, when it brings one."""
        a, x = self.a, c["x"]
        if a.mode == "faa":
            return struct.unpack("=Q", x.read(0, 8))[0]
        if wc.opcode == e.IBV_WC_SEND:
            return None
        off = SLOT + (GRH if a.mode == "ud" else 0)
        rid, number = struct.unpack("<QQ", x.mr.read(REP, off))
        if rid != c["id"]:
            c["bad"] = c.get("bad", 0) + 1
            raise PeerGone(f"a reply with id {rid} to request {c['id']}")
        return number

    def take(self, cl):
        a = self.a
        last, wait = time.monotonic(), Bound(a.timeout)
        while any(c["left"] or c["busy"] for c in cl):
            progress = False
            for c in cl:
                if c["left"] and not c["busy"]:
                    self.post(c)
                if not c["busy"]:
                    continue
                cqs = ([c["x"].scq, c["x"].rcq] if a.mode == "ud"
                       else [c["x"].cq])
                for cq in cqs:
                    wc = poll1(cq, "reply" if a.mode != "faa"
                               else "fetch and add")
                    if not wc:
                        continue
                    progress = True
                    c["busy"] -= 1
                    number = self.reply(c, wc)
                    if number is not None:
                        c["numbers"].append(number)
                        c["left"] -= 1
                        c["id"] += 1
            if progress:
                last = time.monotonic()
                continue
            idle(last)
            if wait.over(time.monotonic() - last):
                raise PeerGone(f"no reply within {wait.seconds} s "
                               f"({sum(len(c['numbers']) for c in cl)} "
                               f"numbers taken)")


def main(argv=None):
    p = argparse.ArgumentParser(prog="seq.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--mode", choices=["faa", "rc", "ud"], required=True)
    p.add_argument("--host", default=os.environ.get("RDMA_IP", "localhost"))
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--device", default=os.environ.get("RDMA_DEVICE", "rxe0"))
    p.add_argument("--gid-index", type=int,
                   default=int(os.environ.get("RDMA_GID_INDEX", "1")))
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--skip", type=int, default=0)
    p.add_argument("--timeout", type=int, default=10)
    p.add_argument("--accept-timeout", type=int, default=0)
    return Session(p.parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
