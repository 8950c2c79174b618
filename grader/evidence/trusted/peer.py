"""The course's reference peer: the other end of a lesson's client/server,
written with rdma-core's pyverbs, run by the grader (never by the student).

    python3 grader/evidence/trusted/peer.py LESSON ROLE [options]

ROLE is the peer's side: `server` (prints the readiness line `listening on
port N` and waits for the program under test) or `client` (connects to
--host/--port). It speaks the lesson's out-of-band protocol exactly as the
lesson's README documents it, checks what arrived in its own memory, and
plants the corruption it is told to (--corrupt-*). It prints one line

    peer-result {json}

when it ends, whatever happened: `ok` (the protocol ran to its end),
`error` (what went wrong, from the peer's side), the checks it made, and
`remote_qp`, what the kernel (`rdma resource show qp`) says about the QP
the program named in its qp_info: its owner's pid, its state.
Every wait is bounded by --timeout (a server's wait for the program to
connect by --accept-timeout, when given); nothing is sent on TCP beyond what
the protocol requires. --pace-ms (lesson 05) makes each of the peer's SENDs
wait that long first: the program then waits for every message by
construction (lesson 10's CPU test).
"""

import argparse
import json
import os
import secrets
import socket
import struct
import sys
import time
import types
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script: import grader.evidence.trusted without grader/__init__.py
    # (which loads pytest: seconds under the micro-VM's emulation).
    _grader = Path(__file__).resolve().parent.parent.parent
    _pkg = types.ModuleType("grader")
    _pkg.__path__ = [str(_grader)]
    sys.modules["grader"] = _pkg
    __package__ = "grader.evidence.trusted"

import pyverbs.cm_enums as ce                                   # noqa: E402
import pyverbs.enums as e                                       # noqa: E402

from grader.core.harness import Deadline  # noqa: E402
from grader.evidence.trusted import oob, patterns                        # noqa: E402
from grader.evidence.trusted.kernel import (kernel_srq_of, program_qp,  # noqa: E402
                                            program_qps)
from grader.evidence.trusted.oob import PeerGone                         # noqa: E402
from grader.evidence.trusted.udp_echo import Holds                       # noqa: E402
from grader.evidence.trusted.verbs import (WC_STATUS, RcResources,       # noqa: E402
                                  SharedRc, WcError, idle_nap)

WRID_SEND, WRID_RECV = 0, 1


class Session:
    """One run of the protocol; `result` is what gets reported."""

    def __init__(self, args):
        self.args = args
        self.result = {"lesson": args.lesson, "role": args.role, "ok": False,
                       "error": None}
        self.sock = None

    def out(self, line):
        print(line, flush=True)

    def open_channel(self):
        a = self.args
        if a.lesson == "12" and a.role == "server":
            # several clients: the listener stays open (lesson12_server)
            self.lsock = oob.listen(a.port)
            self.out(f"listening on port {self.lsock.getsockname()[1]}")
        elif a.role == "server":
            lsock = oob.listen(a.port)
            self.out(f"listening on port {lsock.getsockname()[1]}")
            self.sock = oob.accept(lsock, a.accept_timeout or a.timeout)
            self.sock.settimeout(a.timeout)
        else:
            self.sock = oob.connect(a.host, a.port, a.timeout)

    def meet(self, res, mine):
        """Exchange qp_info, connect the QP, note who owns the peer's QP,
        then the 'R' barrier. Returns the program's qp_info."""
        theirs = oob.exchange(self.sock, mine)
        self.result["theirs"] = theirs._asdict() | {"gid": theirs.gid.hex()}
        self.result["remote_qp"] = program_qp(theirs.qpn, self.args.device)
        res.connect(theirs)
        oob.sync(self.sock, b"R")
        return theirs

    def finish(self):
        """The 'D' barrier, then nothing more may come on TCP."""
        oob.sync(self.sock, b"D")
        extra = oob.expect_silence(self.sock, 0.2)
        if extra:
            self.result["extra_tcp_bytes"] = len(extra)

    def run(self):
        try:
            self.open_channel()
            getattr(self, f"lesson{self.args.lesson}_{self.args.role}")()
            self.result["ok"] = self.result["error"] is None
        except (PeerGone, WcError, OSError) as err:
            self.result["error"] = str(err)
        except Exception as err:            # pyverbs' errors: still report
            self.result["error"] = f"{type(err).__name__}: {err}"
        finally:
            if self.sock:
                self.sock.close()
        self.out("peer-result " + json.dumps(self.result))
        return 0

    def resources(self, size, mr_access, qp_access):
        a = self.args
        return RcResources(a.device, a.gid_index, size, mr_access, qp_access)

    # ---- lesson 05: SEND/RECV ping-pong -----------------------------------

    def _pingpong(self, me, them):
        a, r = self.args, self.result
        size, iters = a.size, a.iters
        res = self.resources(2 * size, e.IBV_ACCESS_LOCAL_WRITE, 0)
        res.post_recv(WRID_RECV, 0, size)
        theirs = self.meet(res, res.info(length=size))
        if theirs.length != size:
            raise PeerGone(f"the program said its messages are "
                           f"{theirs.length} bytes, expected {size}")
        sends = recvs = 0
        r["verified"] = 0

        def wait_for(want_sends, want_recvs, i):
            nonlocal sends, recvs
            while sends < want_sends or recvs < want_recvs:
                wc = res.poll(f"round trip {i}", a.timeout, self.sock)
                if wc.wr_id == WRID_RECV:
                    if wc.byte_len != size:
                        raise PeerGone(f"message {i}: {wc.byte_len} bytes "
                                       f"arrived, expected {size}")
                    recvs += 1
                else:
                    sends += 1

        def check(i):
            got = res.read(0, size)
            bad = patterns.first_mismatch(got, patterns.msg(i, them, size))
            if bad is not None:
                raise PeerGone(f"message {i} from the program: byte {bad} is "
                               f"0x{got[bad]:02x}, expected "
                               f"0x{patterns.msg(i, them, size)[bad]:02x}")
            r["verified"] = i + 1

        def send(i):
            if a.pace_ms:
                # Paced (lesson 10's CPU test): the program under test
                # waits this long for every message, by construction.
                time.sleep(a.pace_ms / 1000)
            data = patterns.msg(i, me, size)
            if i == a.corrupt_msg:
                data = patterns.corrupt(data, a.corrupt_offset)
                r["corrupted"] = {"message": i, "offset": a.corrupt_offset,
                                  "sent": data[a.corrupt_offset],
                                  "expected": patterns.msg(i, me, size)
                                  [a.corrupt_offset]}
            res.write(data, size)
            res.post_send(WRID_SEND, e.IBV_WR_SEND, size, size)

        for i in range(iters):
            if me == "c":
                send(i)
                wait_for(i + 1, i + 1, i)
                check(i)
                if i + 1 < iters:
                    res.post_recv(WRID_RECV, 0, size)
            else:
                wait_for(i, i + 1, i)
                check(i)
                if i + 1 < iters:
                    res.post_recv(WRID_RECV, 0, size)
                send(i)
        if me == "s":
            wait_for(iters, iters, iters - 1)
        self.finish()

    def lesson05_server(self):
        self._pingpong("s", "c")

    def lesson05_client(self):
        self._pingpong("c", "s")

    # ---- lesson 11: the latency echo -----------------------------------------

    def lesson11_server(self):
        """Answer --iters pings (the warm-up's included) of --size bytes with
        a pong each, as lesson 11's server does; --holds of the timed ones,
        drawn here, held before their pong (udp_echo.Holds). Reports when
        each ping arrived and each pong was posted, and when the program's
        'D' came (after its last sample ended)."""
        a, r = self.args, self.result
        size = a.size
        holds = Holds(a.warmup, a.iters, a.holds, a.hold_min_ms)
        res = self.resources(2 * size, e.IBV_ACCESS_LOCAL_WRITE, 0)
        res.post_recv(WRID_RECV, 0, size)
        theirs = self.meet(res, res.info(length=size))
        if theirs.length != size:
            raise PeerGone(f"the program said its messages are "
                           f"{theirs.length} bytes, expected {size}")
        sends = 0
        try:
            for i in range(a.iters):
                while True:
                    wc = res.poll(f"round trip {i}", a.timeout, self.sock)
                    if wc.wr_id == WRID_RECV:
                        break
                    sends -= 1
                holds.arrive()
                if wc.byte_len != size:
                    raise PeerGone(f"round trip {i}: {wc.byte_len} bytes "
                                   f"arrived, expected {size}")
                if i + 1 < a.iters:
                    res.post_recv(WRID_RECV, 0, size)
                while sends >= res.max_wr - 1:
                    if res.poll(f"round trip {i}", a.timeout,
                                self.sock).wr_id == WRID_RECV:
                        raise PeerGone(f"round trip {i}: a message came "
                                       f"before its pong")
                    sends -= 1
                holds.hold()
                holds.answer()
                res.post_send(WRID_SEND, e.IBV_WR_SEND, size, size)
                sends += 1
            while sends:
                res.poll("the last pong", a.timeout, self.sock)
                sends -= 1
            self.finish()
            holds.end = time.monotonic_ns()
        finally:
            r["served"] = len(holds.answered)
            r |= holds.report()

    # ---- lesson 06: RDMA WRITE WITH IMMEDIATE -------------------------------

    def lesson06_server(self):
        """Advertise a zeroed buffer; after the immediate, compare it with
        the pattern ourselves."""
        a, r = self.args, self.result
        res = self.resources(a.size, e.IBV_ACCESS_LOCAL_WRITE |
                             e.IBV_ACCESS_REMOTE_WRITE,
                             e.IBV_ACCESS_REMOTE_WRITE)
        res.write(bytes(a.size))
        res.post_recv(WRID_RECV, length=0)
        self.meet(res, res.advertise())
        wc = res.poll("waiting for the program's RDMA WRITE", a.timeout,
                      self.sock)
        r["wc_opcode"] = wc.opcode
        r["with_imm"] = (wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM and
                         bool(wc.wc_flags & e.IBV_WC_WITH_IMM))
        r["imm_data"] = socket.ntohl(wc.imm_data) if r["with_imm"] else None
        got = res.read()
        bad = patterns.first_mismatch(got, patterns.lesson06(a.size))
        r["mismatch"] = bad
        if bad is not None:
            r["mismatch_got"] = got[bad]
            r["nonzero_bytes"] = a.size - got.count(0)
        self.finish()

    def lesson06_client(self):
        """WRITE the pattern (with one byte changed when told to) into the
        program's advertised buffer, with the immediate = bytes written."""
        a, r = self.args, self.result
        res = self.resources(a.size, e.IBV_ACCESS_LOCAL_WRITE, 0)
        data = patterns.lesson06(a.size)
        if a.corrupt_offset is not None:
            data = patterns.corrupt(data, a.corrupt_offset)
            r["corrupted"] = {"offset": a.corrupt_offset,
                              "sent": data[a.corrupt_offset],
                              "expected": patterns.lesson06(a.size)
                              [a.corrupt_offset]}
        res.write(data)
        theirs = self.meet(res, res.info())
        if not theirs.addr or theirs.length < a.size:
            raise PeerGone(f"the program advertised addr 0x{theirs.addr:x} "
                           f"length {theirs.length}: cannot write {a.size} "
                           f"bytes there")
        res.post_send(WRID_SEND, e.IBV_WR_RDMA_WRITE_WITH_IMM, remote=theirs,
                      imm=a.size)
        res.poll("rdma write", a.timeout, self.sock)
        r["written"] = a.size
        self.finish()

    # ---- lesson 07: RDMA READ ------------------------------------------------

    def lesson07_server(self):
        """Serve the pattern with one byte changed (when told to); only an
        RDMA READ can fetch it: the MR and the QP allow nothing else."""
        a, r = self.args, self.result
        res = self.resources(a.size, e.IBV_ACCESS_LOCAL_WRITE |
                             e.IBV_ACCESS_REMOTE_READ,
                             e.IBV_ACCESS_REMOTE_READ)
        data = patterns.lesson06(a.size)
        if a.corrupt_offset is not None:
            data = patterns.corrupt(data, a.corrupt_offset)
            r["corrupted"] = {"offset": a.corrupt_offset,
                              "served": data[a.corrupt_offset],
                              "expected": patterns.lesson06(a.size)
                              [a.corrupt_offset]}
        res.write(data)
        self.meet(res, res.advertise())
        self.finish()
        r["unchanged"] = res.read() == data

    def lesson07_client(self):
        """READ the program's advertised buffer and compare it ourselves."""
        a, r = self.args, self.result
        res = self.resources(a.size, e.IBV_ACCESS_LOCAL_WRITE, 0)
        theirs = self.meet(res, res.info())
        if not theirs.addr or theirs.length < a.size:
            raise PeerGone(f"the program advertised addr 0x{theirs.addr:x} "
                           f"length {theirs.length}: cannot read {a.size} "
                           f"bytes there")
        res.post_send(WRID_SEND, e.IBV_WR_RDMA_READ, remote=theirs)
        res.poll("rdma read", a.timeout, self.sock)
        got = res.read()
        bad = patterns.first_mismatch(got, patterns.lesson06(a.size))
        r["mismatch"] = bad
        if bad is not None:
            r["mismatch_got"] = got[bad]
        self.finish()

    # ---- lesson 12: atomics on a shared region ---------------------------------

    # The region of lessons/12-atomics/README.md: counter, lock, tail, log[].
    OFF_COUNTER, OFF_LOCK, OFF_TAIL, OFF_LOG = 0, 8, 16, 24
    AT_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC |
                 e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE)
    AT_QP = (e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_REMOTE_READ |
             e.IBV_ACCESS_REMOTE_WRITE)

    def lesson12_server(self):
        """Serve the region to --clients clients ('R' each, then 'G' each),
        wait for every 'D', then read the counter, the lock, the tail and
        the log in our own memory."""
        a, r = self.args, self.result
        n_log = a.clients * a.iters
        size = self.OFF_LOG + 8 * n_log
        first = self.resources(size, self.AT_ACCESS, self.AT_QP)
        first.write(struct.pack("=QQQ", a.start, 0, 0) + bytes(8 * n_log))
        socks, qps, r["clients"] = [], [], []
        try:
            for k in range(a.clients):
                # every QP must stay referenced: a collected one is destroyed
                res = first if k == 0 else SharedRc(first, self.AT_QP)
                qps.append(res)
                sock = oob.accept_one(self.lsock,
                                      a.accept_timeout or a.timeout)
                sock.settimeout(a.timeout)
                socks.append(sock)
                theirs = oob.exchange(sock, res.advertise())
                r["clients"].append({"qpn": theirs.qpn})
                res.connect(theirs)
                oob.sync(sock, b"R")
            # who owns the QPs, asked once while all of them are alive
            owners = program_qps([c["qpn"] for c in r["clients"]], a.device)
            for c in r["clients"]:
                c["remote_qp"] = owners[c["qpn"]]
            for sock in socks:
                oob.sync(sock, b"G")
            for sock in socks:
                oob.sync(sock, b"D")
            counter, lock, tail = struct.unpack_from("=QQQ", first.read())
            log = struct.unpack_from(f"={n_log}Q", first.read(), self.OFF_LOG)
            qpns = [c["qpn"] for c in r["clients"]]
            r.update(counter=counter, expected=a.start + n_log, lock=lock,
                     tail=tail,
                     log_counts={str(q): log.count(q) for q in qpns},
                     foreign_entries=sum(1 for x in log if x not in qpns))
            extra = sum(len(oob.expect_silence(sock, 0.1)) for sock in socks)
            if extra:
                r["extra_tcp_bytes"] = extra
        finally:
            # What the clients left in the region, whatever happened: a
            # failed client's test shows it.
            try:
                counter, lock, tail = struct.unpack_from("=QQQ",
                                                         first.read())
                r["region"] = {"start": a.start, "counter": counter,
                               "lock": lock, "tail": tail}
            except Exception:                   # noqa: BLE001
                pass
            self.lsock.close()
            for sock in socks:
                sock.close()

    def lesson12_client(self):
        """Play one client: --iters increments (fewer by --skip: the
        program's server must notice) and --iters appends under the lock,
        as the README describes."""
        a, r = self.args, self.result
        res = self.resources(32, e.IBV_ACCESS_LOCAL_WRITE, 0)
        theirs = self.meet(res, res.info())
        oob.sync(self.sock, b"G")
        me, rkey, base = res.qp.qp_num, theirs.rkey, theirs.addr

        def atomic(opcode, off, compare_add, swap=0):
            res.post_atomic(opcode, base + off, rkey, compare_add, swap)
            res.poll("atomic", a.timeout, self.sock)
            return struct.unpack("=Q", res.read(0, 8))[0]

        def rdma(opcode, off, local):
            res.post_send(0, opcode, local, 8,
                          remote=types.SimpleNamespace(addr=base + off,
                                                       rkey=rkey))
            res.poll("rdma", a.timeout, self.sock)

        done = 0
        for i in range(a.iters):
            if i >= a.skip:
                atomic(e.IBV_WR_ATOMIC_FETCH_AND_ADD, self.OFF_COUNTER, 1)
                done += 1
            while atomic(e.IBV_WR_ATOMIC_CMP_AND_SWP, self.OFF_LOCK, 0,
                         me) != 0:
                pass
            rdma(e.IBV_WR_RDMA_READ, self.OFF_TAIL, 8)
            tail = struct.unpack("=Q", res.read(8, 8))[0]
            res.write(struct.pack("=QQ", me, tail + 1), 16)
            rdma(e.IBV_WR_RDMA_WRITE, self.OFF_LOG + 8 * tail, 16)
            rdma(e.IBV_WR_RDMA_WRITE, self.OFF_TAIL, 24)
            atomic(e.IBV_WR_ATOMIC_CMP_AND_SWP, self.OFF_LOCK, me, 0)
        r["increments"] = done
        self.finish()


    # ---- lesson 13: a stream of WRITEs or SENDs into slots --------------------

    def lesson13_server(self):
        """Advertise --slots zeroed slots of --size bytes (with --send, post
        one receive per message up front, message i into slot i % M, so
        that no SEND ever waits for one); after the client's 'D' check our
        own memory: slot j must hold the last message aimed at it, the
        pattern of --seed with the message's number in its first and last
        8 bytes (lessons/13-throughput/README.md)."""
        a, r = self.args, self.result
        size, n, m = a.size, a.iters, a.slots
        res = RcResources(a.device, a.gid_index, m * size,
                          e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE,
                          e.IBV_ACCESS_REMOTE_WRITE,
                          max_wr=n + 1 if a.send else 4)
        res.write(bytes(m * size))
        for i in range(n if a.send else 0):
            res.post_recv(i, (i % m) * size, size)
        self.meet(res, res.advertise(m * size))
        self.finish()
        if a.send:
            wrong = 0
            for i in range(n):
                wc = res.poll(f"receive {i}", 5, None)
                wrong += wc.byte_len != size
            r["receives"], r["wrong_length"] = n, wrong
        base = patterns.cycle(size, a.seed)
        memory = res.read()
        r["slots_checked"], r["mismatch"] = min(m, n), None
        for j in range(min(m, n)):
            i = j + (n - 1 - j) // m * m
            want = bytearray(base)
            want[:8] = want[-8:] = struct.pack("<Q", i)
            got = memory[j * size:(j + 1) * size]
            bad = patterns.first_mismatch(got, bytes(want))
            if bad is not None:
                r["mismatch"] = {
                    "slot": j, "offset": bad, "message": i,
                    "got": got[bad], "expected": want[bad],
                    "found_message": struct.unpack("<Q", got[:8])[0],
                    "nonzero_bytes": size - got.count(0)}
                break

    # ---- lesson 14: one client of a server on a shared receive queue ----------

    def lesson14_client(self):
        """Connect, wait for the server's 'G', send --iters requests of
        --size fresh random bytes one at a time, and check each reply in
        our own memory: it must be the request reversed
        (lessons/14-srq/README.md). Before 'D', while the server's QP
        for us exists, ask the kernel which SRQ that QP takes its
        receives from."""
        a, r = self.args, self.result
        size = a.size
        res = RcResources(a.device, a.gid_index, 2 * size,
                          e.IBV_ACCESS_LOCAL_WRITE, 0)
        r["qpn"] = res.qp.qp_num
        theirs = self.meet(res, res.info(length=size))
        # The server lets its clients go once all K have connected: this
        # wait includes the other reference clients' start.
        self.sock.settimeout(a.go_timeout or a.timeout)
        oob.sync(self.sock, b"G")
        self.sock.settimeout(a.timeout)
        r["replies"] = 0
        for i in range(a.iters):
            req = secrets.token_bytes(size)
            res.write(req, 0)
            res.post_recv(WRID_RECV, size, size)
            res.post_send(WRID_SEND, e.IBV_WR_SEND, 0, size)
            got = {}
            while len(got) < 2:
                wc = res.poll(f"request {i}", a.timeout, self.sock)
                got[wc.wr_id] = wc
            if got[WRID_RECV].byte_len != size:
                raise PeerGone(f"request {i}: a reply of "
                               f"{got[WRID_RECV].byte_len} bytes, expected "
                               f"{size}")
            reply, want = res.read(size, size), req[::-1]
            bad = patterns.first_mismatch(reply, want)
            if bad is not None:
                raise PeerGone(
                    f"request {i}: the reply is not our request reversed "
                    f"(byte {bad}: got 0x{reply[bad]:02x}, expected "
                    f"0x{want[bad]:02x}; {size - reply.count(0)} of its "
                    f"{size} bytes are not zero)")
            r["replies"] = i + 1
        r["srq"] = kernel_srq_of(theirs.qpn, self.args.device)
        self.finish()

# ---- lesson 08: rdma_cm --------------------------------------------------------

# struct cm_msg in lessons/08-rdma-cm/cm_common.h, big-endian on the wire.
CM_MSG = struct.Struct("!IIQII")
CM_BUF, CM_DONE, CM_VERDICT = 1, 2, 3


class CmSession(Session):
    """Lesson 08's protocol (its README, "The protocol"), over rdma_cm in
    pyverbs' synchronous mode: messages are SENDs of struct cm_msg, data
    moves by RDMA WRITE/READ. Completions are polled on our own CQ, every
    wait bounded."""

    def open_channel(self):
        pass                                    # no TCP in this lesson

    def setup(self, cmid, ctx, pd, size):
        from pyverbs.cq import CQ
        from pyverbs.mr import MR
        from pyverbs.qp import QPCap, QPInitAttr
        self.cmid, self.pd = cmid, pd
        self.cq = CQ(ctx, 16)
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1,
                    max_recv_sge=1)
        cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq,
                                  rcq=self.cq, cap=cap, sq_sig_all=0))
        local = e.IBV_ACCESS_LOCAL_WRITE
        self.out_mr = MR(self.pd, CM_MSG.size, local)
        self.in_mrs = [MR(self.pd, CM_MSG.size, local) for _ in range(2)]
        self.buf = MR(self.pd, size, local | e.IBV_ACCESS_REMOTE_WRITE |
                      e.IBV_ACCESS_REMOTE_READ)
        self.check = MR(self.pd, size, local)
        self.size = size
        for mr in self.in_mrs:
            cmid.post_recv(mr, CM_MSG.size)
        self.recvs = 0
        self.early = []

    def poll(self, what, want_opcode):
        """The next completion of kind `want_opcode` (one CQ holds sends
        and receives: the others wait in self.early)."""
        for wc in self.early:
            if wc.opcode == want_opcode:
                self.early.remove(wc)
                return wc
        start = time.monotonic()
        deadline = Deadline(self.args.timeout)
        while True:
            n, wcs = self.cq.poll()
            if n:
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    raise WcError(f"{what}: completion error: "
                                  f"{WC_STATUS.get(wc.status, wc.status)} "
                                  f"(status {wc.status})")
                if wc.opcode == want_opcode:
                    return wc
                self.early.append(wc)
                continue
            if deadline.passed():
                raise WcError(f"{what}: no completion within "
                              f"{deadline.seconds} s")
            time.sleep(idle_nap(time.monotonic() - start))

    def send_msg(self, mtype, status=0, addr=0, rkey=0, length=0):
        self.out_mr.write(CM_MSG.pack(mtype, status, addr, rkey, length),
                          CM_MSG.size, 0)
        self.cmid.post_send(self.out_mr, e.IBV_SEND_SIGNALED, CM_MSG.size)
        self.poll("SEND", e.IBV_WC_SEND)

    def recv_msg(self, mtype):
        wc = self.poll("RECV", e.IBV_WC_RECV)
        mr = self.in_mrs[self.recvs % 2]
        self.recvs += 1
        msg = CM_MSG.unpack(mr.read(CM_MSG.size, 0))
        if wc.byte_len != CM_MSG.size or msg[0] != mtype:
            raise PeerGone(f"RECV: expected message type {mtype} "
                           f"({CM_MSG.size} bytes), got type {msg[0]} "
                           f"({wc.byte_len} bytes)")
        return msg

    def rdma(self, opcode, mr, addr, rkey, what):
        post = (self.cmid.post_write if opcode == e.IBV_WR_RDMA_WRITE
                else self.cmid.post_read)
        post(mr, self.size, addr, rkey, e.IBV_SEND_SIGNALED)
        self.poll(what, e.IBV_WC_RDMA_WRITE if opcode == e.IBV_WR_RDMA_WRITE
                  else e.IBV_WC_RDMA_READ)

    def note_remote_qp(self):
        attr, _ = self.cmid.query_qp(e.IBV_QP_DEST_QPN | e.IBV_QP_STATE)
        self.remote_qpn = attr.dest_qp_num
        self.result["theirs"] = {"qpn": attr.dest_qp_num}
        self.result["remote_qp"] = program_qp(attr.dest_qp_num,
                                              self.args.device)

    def lesson08_server(self):
        """Receive the client's BUF, advertise a zeroed buffer of that
        length, and after DONE READ the client's source ourselves and compare
        it with what the client's WRITE left in our buffer."""
        from pyverbs.cmid import CMID, AddrInfo, ConnParam
        a, r = self.args, self.result
        for _ in range(20):
            port = a.port or 20000 + secrets.randbelow(40000)
            try:
                ai = AddrInfo(src=a.host, src_service=str(port),
                              port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
                listener = CMID(creator=ai)
                listener.listen()
                break
            except Exception:                   # port taken: another one
                if a.port:
                    raise
        self.out(f"listening on port {port}")
        cmid = listener.get_request()
        # pyverbs keeps the new connection's context and PD on the listener
        self.setup(cmid, listener.context, listener.pd, a.size)
        self.buf.write(bytes(a.size), a.size, 0)
        cmid.accept(ConnParam(resources=1, depth=1))
        self.note_remote_qp()
        _, _, caddr, crkey, clen = self.recv_msg(CM_BUF)
        if clen != a.size:
            raise PeerGone(f"the client's BUF says {clen} bytes, expected "
                           f"{a.size} (its -s)")
        self.send_msg(CM_BUF, 0, self.buf.buf, self.buf.rkey, a.size)
        _, client_verdict, _, _, _ = self.recv_msg(CM_DONE)
        r["client_status"] = client_verdict
        self.rdma(e.IBV_WR_RDMA_READ, self.check, caddr, crkey, "RDMA READ")
        src, got = self.check.read(a.size, 0), self.buf.read(a.size, 0)
        bad = patterns.first_mismatch(got, src)
        r["mismatch"] = bad
        r["nonzero_bytes"] = a.size - got.count(0)
        self.send_msg(CM_VERDICT, 0 if bad is None else 1, bad or 0)
        # The client disconnects after the verdict (its QP leaves RTS);
        # answer its DREQ as lesson 08's server does.
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            q = program_qp(self.remote_qpn, a.device)
            if not q or q.get("state") != "RTS":
                break
            time.sleep(0.05)
        cmid.disconnect()

    def lesson08_client(self):
        """Play the client: BUF (a random source), WRITE it into the server's
        buffer, READ it back, then (when told to) change one byte of the
        source at a random offset, and send DONE with status 0 - the
        server's verdict must come from its own READ."""
        from pyverbs.cmid import (CMID, AddrInfo, CMEvent, CMEventChannel,
                                  ConnParam)
        a, r = self.args, self.result
        ch = CMEventChannel()

        def event(want, what):
            ev = CMEvent(ch)
            got = ev.event_type
            ev.ack_cm_event()
            if got != want:
                raise PeerGone(f"{what}: rdma_cm event {got}, expected "
                               f"{want}")

        cmid = CMID(creator=ch, port_space=ce.RDMA_PS_TCP)
        ai = AddrInfo(dst=a.host, dst_service=str(a.port),
                      port_space=ce.RDMA_PS_TCP)
        cmid.resolve_addr(ai, 2000)
        event(ce.RDMA_CM_EVENT_ADDR_RESOLVED, "rdma_resolve_addr")
        cmid.resolve_route(2000)
        event(ce.RDMA_CM_EVENT_ROUTE_RESOLVED, "rdma_resolve_route")
        self.setup(cmid, cmid.context, cmid.pd, a.size)
        src = secrets.token_bytes(a.size)
        self.buf.write(src, a.size, 0)
        cmid.connect(ConnParam(resources=1, depth=1))
        event(ce.RDMA_CM_EVENT_ESTABLISHED, "rdma_connect")
        self.note_remote_qp()
        self.send_msg(CM_BUF, 0, self.buf.buf, self.buf.rkey, a.size)
        _, _, saddr, srkey, slen = self.recv_msg(CM_BUF)
        if slen < a.size:
            raise PeerGone(f"the server's BUF says {slen} bytes, need "
                           f"{a.size}")
        self.rdma(e.IBV_WR_RDMA_WRITE, self.buf, saddr, srkey, "RDMA WRITE")
        self.rdma(e.IBV_WR_RDMA_READ, self.check, saddr, srkey, "RDMA READ")
        r["readback_ok"] = self.check.read(a.size, 0) == src
        if a.corrupt_offset is not None:
            self.buf.write(patterns.corrupt(src, a.corrupt_offset), a.size, 0)
            r["corrupted"] = {"offset": a.corrupt_offset}
        self.send_msg(CM_DONE, 0)
        _, status, addr, _, _ = self.recv_msg(CM_VERDICT)
        r["server_verdict"] = {"status": status, "offset": addr}
        cmid.disconnect()


def main(argv=None):
    p = argparse.ArgumentParser(prog="peer.py", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("lesson", choices=["05", "06", "07", "08", "11", "12",
                                      "13", "14"])
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--host", default=os.environ.get("RDMA_IP", "localhost"))
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--device", default=os.environ.get("RDMA_DEVICE", "rxe0"))
    p.add_argument("--gid-index", type=int,
                   default=int(os.environ.get("RDMA_GID_INDEX", "1")))
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--iters", type=int, default=1)
    p.add_argument("--timeout", type=int, default=10)
    p.add_argument("--corrupt-msg", type=int, default=None)
    p.add_argument("--corrupt-offset", type=int, default=None)
    p.add_argument("--pace-ms", type=int, default=0)     # 05: each send waits
    # A server's wait for the program to connect (default: --timeout): it
    # includes the program's start, slow on a loaded machine.
    p.add_argument("--accept-timeout", type=int, default=0)
    # A client's wait for the server's 'G' (default: --timeout): the server
    # waits for all its clients, so it includes the others' start.
    p.add_argument("--go-timeout", type=int, default=0)  # 14, client
    p.add_argument("--clients", type=int, default=2)     # 12, server
    p.add_argument("--start", type=int, default=0)       # 12, server
    p.add_argument("--skip", type=int, default=0)        # 12, client
    p.add_argument("--slots", type=int, default=16)      # 13, server
    p.add_argument("--seed", type=int, default=1)        # 13, server
    p.add_argument("--send", action="store_true")        # 13, server
    p.add_argument("--warmup", type=int, default=0)      # 11, server
    p.add_argument("--holds", type=int, default=0)       # 11, server
    p.add_argument("--hold-min-ms", type=int, default=20)  # 11, server
    args = p.parse_args(argv)
    return (CmSession if args.lesson == "08" else Session)(args).run()


if __name__ == "__main__":
    sys.exit(main())
