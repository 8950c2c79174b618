"""Lesson 17's reference UD server and client (pyverbs), run by the grader
against the student's `ud` client and server:

    python3 grader/evidence/trusted/ud_peer.py server [options]
    python3 grader/evidence/trusted/ud_peer.py client --host H --port P [options]

They speak lessons/17-ud/README.md's protocol: over TCP the server sends
each client its qp_info (QP number, GID, `length` SIZE) and takes the
client's (which says nothing but SIZE), and lets them go with 'G' once
--clients have connected; requests and replies are UD SENDs of SIZE bytes
(4 bytes of big-endian sequence number, then the payload; the reply has
the same number and the payload reversed), with the Q_Key --qkey; a client
that is done says 'D'.

The server answers every request at the address it came from (the
completion's src_qp and the sender's GID from the GRH: on RoCE v2 over
IPv4 the GRH's last 20 bytes are the packet's IPv4 header) and records,
for each sender, the requests, their sizes and sequence numbers, and what
the kernel (`rdma resource show qp`) says about the sender's QP: its type
and owner. It plants what a client must notice, when told to:
  --drop LIST     no reply to these requests (by sequence number): the
                  client must count them lost after its timeout
  --corrupt SEQ:OFF  the reply to request SEQ with byte OFF of its
                  payload changed: the client must say so and fail
The client sends --iters requests of fresh random bytes one at a time,
waits --timeout seconds for each reply, and checks it in its own memory
(the request reversed, from the server's QP); a request with no reply in
time is lost: that ends the client, or with --lost-ok it is counted and not
sent again (`lost`, `replies`). It asks
the kernel about the server's QP (type, owner) while it exists.

Both end with one line `peer-result {json}` (grader/evidence/trusted/
run.py reads it), whatever happened.
"""

import argparse
import json
import os
import secrets
import select
import socket
import struct
import sys
import time
import types
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script: import grader.evidence.trusted without
    # grader/__init__.py (which loads pytest).
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
from grader.evidence.trusted.kernel import program_qp, program_qps  # noqa: E402
from grader.evidence.trusted.oob import PeerGone, QpInfo        # noqa: E402
from grader.evidence.trusted.verbs import (WC_STATUS, WcError, gid_str,  # noqa: E402
                                           idle_nap)

GRH = 40
SEQ = 4
SEND = 1 << 32          # wr_id of a SEND: the slot | SEND


def sender_gid(grh):
    """The sender's GID from the 40 bytes in front of a UD message: on RoCE
    v2 over IPv4 an IPv4 header in the last 20 (ibv_init_ah_from_wc does
    the same), else a GRH or an IPv6 header with the source at 8..24."""
    if grh[20] >> 4 == 4:
        return b"\0" * 10 + b"\xff\xff" + grh[32:36]
    return grh[8:24]


class Ud:
    """One UD QP in RTS with Q_Key `qkey`, `slots` receive buffers of
    GRH + `size` bytes and `sends` send buffers of `size`."""

    def __init__(self, a, slots, sends):
        self.a, self.size, self.slots = a, a.size, slots
        self.ctx = Context(name=a.device)
        self.pd = PD(self.ctx)
        self.slot = GRH + a.size
        self.mr = MR(self.pd, slots * self.slot + sends * a.size,
                     e.IBV_ACCESS_LOCAL_WRITE)
        self.cq = CQ(self.ctx, 2 * slots + sends + 4)
        cap = QPCap(max_send_wr=slots + sends, max_recv_wr=slots,
                    max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq,
                                         rcq=self.cq, cap=cap, sq_sig_all=0))
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        attr.pkey_index = 0
        attr.qkey = a.qkey
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX |
                       e.IBV_QP_PORT | e.IBV_QP_QKEY)
        self.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.sq_psn = 0
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
        self.gid = bytes.fromhex(self.ctx.query_gid(1, a.gid_index).gid
                                 .replace(":", ""))
        self.lid = self.ctx.query_port(1).lid

    def info(self):
        return QpInfo(self.lid, self.qp.qp_num, 0, self.gid, 0, 0, self.size)

    def ah(self, gid, lid=0):
        g = GID()
        g.gid = gid_str(gid)
        gr = GlobalRoute(dgid=g, sgid_index=self.a.gid_index, hop_limit=64)
        return AH(self.pd, attr=AHAttr(gr=gr, is_global=1, port_num=1,
                                       dlid=lid))

    def post_slot(self, i):
        sge = SGE(self.mr.buf + i * self.slot, self.slot, self.mr.lkey)
        self.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[sge]))

    def send(self, ah, qpn, offset, wr_id):
        sge = SGE(self.mr.buf + offset, self.size, self.mr.lkey)
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_ud(ah, qpn, self.a.qkey)
        self.qp.post_send(wr)

    def poll(self, deadline):
        """The next completion, or None at `deadline`; an error raises."""
        spins, start = 0, time.monotonic()
        while True:
            n, wcs = self.cq.poll()
            if n:
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    what = "SEND" if wc.wr_id & SEND else "receive"
                    raise WcError(f"{what}: completion error: "
                                  f"{WC_STATUS.get(wc.status, wc.status)} "
                                  f"(status {wc.status})")
                return wc
            if time.monotonic() > deadline:
                return None
            spins += 1
            if spins > 200:
                time.sleep(idle_nap(time.monotonic() - start))

    def read(self, offset, length):
        return self.mr.read(length, offset)

    def write(self, data, offset):
        self.mr.write(data, len(data), offset)


def closed(sock):
    r, _, _ = select.select([sock], [], [], 0)
    return bool(r) and not sock.recv(1, socket.MSG_PEEK)


def ask_kernel(senders, device):
    """What the kernel says about each sender's QP not asked about yet
    (one `rdma` run for all)."""
    todo = [s["qpn"] for s in senders.values() if s["kernel"] is None]
    if todo:
        found = program_qps(todo, device)
        for s in senders.values():
            if s["kernel"] is None:
                s["kernel"] = found[s["qpn"]]


class Session:
    def __init__(self, a):
        self.a = a
        self.result = {"role": a.role, "ok": False, "error": None}

    def out(self, line):
        print(line, flush=True)

    def run(self):
        try:
            getattr(self, self.a.role)()
            self.result["ok"] = self.result["error"] is None
        except (PeerGone, WcError, OSError) as err:
            self.result["error"] = str(err)
        except Exception as err:            # pyverbs' errors: still report
            self.result["error"] = f"{type(err).__name__}: {err}"
        self.out("peer-result " + json.dumps(self.result))
        return 0

    # ---- the reference server ------------------------------------------------

    def server(self):
        a, r = self.a, self.result
        slots = 32
        ud = Ud(a, slots, 0)
        for i in range(slots):
            ud.post_slot(i)
        r["qpn"] = ud.qp.qp_num
        lsock = oob.listen(a.port)
        self.out(f"listening on port {lsock.getsockname()[1]}")
        socks = []
        try:
            for _ in range(a.clients):
                sock = oob.accept_one(lsock, a.accept_timeout or a.timeout)
                sock.settimeout(a.timeout)
                socks.append(sock)
                theirs = oob.exchange(sock, ud.info())
                r.setdefault("client_info", []).append(
                    {"qpn": theirs.qpn, "length": theirs.length})
            for sock in socks:
                oob.sync(sock, b"G")
            self._serve(ud, socks)
        finally:
            lsock.close()
            for sock in socks:
                sock.close()

    def _serve(self, ud, socks):
        a, r = self.a, self.result
        drop = {int(x) for x in a.drop.split(",") if x} if a.drop else set()
        corrupt = tuple(map(int, a.corrupt.split(":"))) if a.corrupt else None
        senders, ahs, active = {}, {}, list(socks)
        r["senders"] = senders
        last, idle = time.monotonic(), Bound(a.timeout)
        while active:
            wc = ud.poll(time.monotonic() + 0.05)
            for sock in list(active):
                if closed(sock):
                    active.remove(sock)
                    continue
                rr, _, _ = select.select([sock], [], [], 0)
                if rr:
                    # the client waits for our 'D' with its QP alive:
                    # the kernel's word about it now, not in the serving
                    # loop (an `rdma` run takes seconds on a loaded host)
                    ask_kernel(senders, a.device)
                    oob.sync(sock, b"D")
                    active.remove(sock)
            if wc is None:
                if idle.over(time.monotonic() - last):
                    raise WcError(f"no request from any client within "
                                  f"{idle.seconds} s")
                continue
            last = time.monotonic()
            if wc.wr_id & SEND:
                ud.post_slot(wc.wr_id & ~SEND)
                continue
            i = wc.wr_id
            grh = ud.read(i * ud.slot, GRH)
            key = str(wc.src_qp)
            s = senders.get(key)
            if s is None:
                s = senders[key] = {"qpn": wc.src_qp, "requests": 0,
                                    "seqs": [], "bad_sizes": [],
                                    "grh_flag": bool(wc.wc_flags &
                                                     e.IBV_WC_GRH),
                                    "gid": sender_gid(grh).hex(),
                                    "kernel": None}
            length = wc.byte_len - GRH
            if length != a.size:
                s["bad_sizes"].append(wc.byte_len)
                ud.post_slot(i)
                continue
            msg = bytearray(ud.read(i * ud.slot + GRH, a.size))
            seq = struct.unpack(">I", msg[:SEQ])[0]
            s["requests"] += 1
            s["seqs"].append(seq)
            if seq in drop:
                s.setdefault("dropped", []).append(seq)
                ud.post_slot(i)
                continue
            msg[SEQ:] = msg[SEQ:][::-1]
            if corrupt and seq == corrupt[0]:
                msg[SEQ + corrupt[1]] ^= 0x5a
                s.setdefault("corrupted", []).append(seq)
            ud.write(bytes(msg), i * ud.slot + GRH)
            gid = sender_gid(grh)
            if (gid, wc.src_qp) not in ahs:
                ahs[(gid, wc.src_qp)] = ud.ah(gid)
            sge_off = i * ud.slot + GRH
            sge = SGE(ud.mr.buf + sge_off, a.size, ud.mr.lkey)
            wr = SendWR(wr_id=i | SEND, opcode=e.IBV_WR_SEND, num_sge=1,
                        sg=[sge], send_flags=e.IBV_SEND_SIGNALED)
            wr.set_wr_ud(ahs[(gid, wc.src_qp)], wc.src_qp, a.qkey)
            ud.qp.post_send(wr)
        ask_kernel(senders, a.device)
        r["extra_tcp_bytes"] = sum(len(oob.expect_silence(s, 0.1))
                                   for s in socks)

    # ---- the reference client ------------------------------------------------

    def client(self):
        a, r = self.a, self.result
        ud = Ud(a, 1, 1)
        r["qpn"] = ud.qp.qp_num
        sock = oob.connect(a.host, a.port, a.timeout)
        try:
            sock.settimeout(max(a.timeout, 60))
            theirs = oob.exchange(sock, QpInfo(0, 0, 0, bytes(16), 0, 0,
                                               a.size))
            r["theirs"] = {"qpn": theirs.qpn, "gid": theirs.gid.hex(),
                           "length": theirs.length}
            r["remote_qp"] = program_qp(theirs.qpn, a.device)
            ah = ud.ah(theirs.gid, theirs.lid)
            ud.post_slot(0)
            oob.sync(sock, b"G")
            self._requests(ud, ah, theirs, sock)
            oob.sync(sock, b"D")
        finally:
            sock.close()

    def _requests(self, ud, ah, theirs, sock):
        a, r = self.a, self.result
        r.update(replies=0, lost=[], late=0, from_qps=[], wrong=None)
        for i in range(a.iters):
            req = struct.pack(">I", i) + secrets.token_bytes(a.size - SEQ)
            want = req[:SEQ] + req[SEQ:][::-1]
            ud.write(req, ud.slot)
            ud.send(ah, theirs.qpn, ud.slot, SEND)
            sent, got = False, None
            start, wait = time.monotonic(), Bound(a.timeout)
            while got is None:
                wc = ud.poll(start + wait.seconds + (0 if sent else 30))
                if wc is None:
                    if not sent:
                        raise WcError(f"request {i}: its SEND never "
                                      f"completed")
                    # a loss the test allows is not waited for longer
                    if a.lost_ok or wait.over(time.monotonic() - start):
                        break
                    continue
                if wc.wr_id & SEND:
                    sent = True
                    continue
                if closed(sock):
                    raise PeerGone(f"request {i}: the program closed the "
                                   f"TCP connection (it has exited)")
                if wc.src_qp not in r["from_qps"]:
                    r["from_qps"].append(wc.src_qp)
                if wc.byte_len != GRH + a.size:
                    raise PeerGone(f"request {i}: a reply of {wc.byte_len}"
                                   f" bytes with the GRH, expected "
                                   f"{GRH} + {a.size}")
                reply = ud.read(GRH, a.size)
                seq = struct.unpack(">I", reply[:SEQ])[0]
                if seq != i:
                    r["late"] += 1
                    ud.post_slot(0)
                    continue
                got = reply
            if got is None:
                r["lost"].append(i)
                if not a.lost_ok:
                    raise PeerGone(f"request {i}: no reply within "
                                   f"{wait.seconds} s (lost)")
                if closed(sock):
                    raise PeerGone(f"request {i}: no reply, and the program "
                                   f"closed the TCP connection (it has "
                                   f"exited)")
                continue
            if got != want:
                bad = next(k for k in range(a.size) if got[k] != want[k])
                raise PeerGone(
                    f"request {i}: the reply is not our request with its "
                    f"payload reversed (byte {bad}: got 0x{got[bad]:02x}, "
                    f"expected 0x{want[bad]:02x})")
            r["replies"] += 1
            ud.post_slot(0)
        r["remote_qp_end"] = program_qp(theirs.qpn, a.device)


def main(argv=None):
    p = argparse.ArgumentParser(prog="ud_peer.py", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--host", default=os.environ.get("RDMA_IP", "localhost"))
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--device", default=os.environ.get("RDMA_DEVICE", "rxe0"))
    p.add_argument("--gid-index", type=int,
                   default=int(os.environ.get("RDMA_GID_INDEX", "1")))
    p.add_argument("--qkey", type=lambda v: int(v, 0), default=0x11111111)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--timeout", type=int, default=10)
    p.add_argument("--accept-timeout", type=int, default=0)
    p.add_argument("--lost-ok", action="store_true")    # client
    p.add_argument("--drop", default="")
    p.add_argument("--corrupt", default="")
    return Session(p.parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
