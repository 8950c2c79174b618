"""Lesson 15's reference key-value server and client (pyverbs), run by the
grader against the student's client and server:

    python3 grader/evidence/trusted/kv.py server [options]
    python3 grader/evidence/trusted/kv.py client --host H --port P [options]

They speak lessons/15-kv-store/README.md's protocol: the table (buckets of
four 128-byte slots, each with a version and a CRC-32 of its bytes 4 up to
the end of its value) in one region the server advertises in its qp_info,
GETs as one RDMA READ of a key's bucket, PUT/DELETE/GET/BYE requests and
their replies as SENDs of 136-byte messages.

The server is the grader's instrument, not only a peer: it keeps the
history of every write it made (key, slot, version, value, and when the
slot's memory began to change and when the write was published, in this
host's CLOCK_MONOTONIC), and of every request of every client (when it
arrived, when its reply was posted, what the reply said). From those the
grader knows, for each GET a client reports, the window in which the client
made it (after the reply to its previous request, before its next request
arrived) and which values were readable then. It also plants, when told to:

  --race KEY:TRIGGER:HOLD_MS  when a client PUTs TRIGGER, before replying,
        start a slow write of KEY: first half a new value over the old one
        under the old, even version (what a READ assembles when it copies
        the version just before a write and the value in the middle of it),
        then HOLD_MS / 2 later the odd version with the rest, then at
        HOLD_MS the new even version. The bucket's bytes in each planted
        state are recorded (FNV-1a, as the grader's interposer sums what a
        READ brought): a client whose READ came back with one of them saw
        the tear.
  --dup-every N      before the reply to every Nth request of a client,
                     send again its previous reply (a stale duplicate)
  --foreign-every N  before the reply to every Nth request, send a reply
                     with this request's seq but another client's id

The client runs a random mix of operations on --keys (or --bench GETs) and
records each with its start and end time, what it sent and what it got;
every GET READs the bucket until all its slots are consistent (within
--timeout seconds), every reply must answer its request.

Both end with one line `peer-result {json}` (grader/evidence/trusted/run.py
reads it), whatever happened.
"""

import argparse
import json
import math
import os
import random
import secrets
import select
import string
import struct
import sys
import threading
import time
import types
import zlib
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
from pyverbs.cq import CQ                                       # noqa: E402
from pyverbs.device import Context                              # noqa: E402
from pyverbs.mr import MR                                       # noqa: E402
from pyverbs.pd import PD                                       # noqa: E402
from pyverbs.wr import SGE, RecvWR, SendWR                      # noqa: E402

from grader.core.harness import Bound, Deadline  # noqa: E402
from grader.evidence.trusted import oob                         # noqa: E402
from grader.evidence.trusted.kernel import program_qp, program_qps  # noqa: E402
from grader.evidence.trusted.oob import PeerGone                # noqa: E402
from grader.evidence.trusted.verbs import (WC_STATUS, RcQp,     # noqa: E402
                                           RcResources, WcError)

# ---- the protocol: lessons/15-kv-store/kv.h ------------------------------------

KEY_MAX, VAL_MAX, SLOTS, SLOT_SIZE = 16, 96, 4, 128
BUCKET = SLOTS * SLOT_SIZE
CRC_OFF, VERSION_OFF, KEY_OFF, VALUE_OFF = 4, 8, 16, 32
SLOT = struct.Struct("<IBBHQ16s96s")            # struct kv_slot
MSG = struct.Struct("<BBBBIIIQ16s96s")          # struct kv_msg
assert SLOT.size == SLOT_SIZE and MSG.size == 136
GET, PUT, DEL, BYE = (ord(c) for c in "GPDB")
OPS = {GET: "get", PUT: "put", DEL: "del", BYE: "bye"}
OK, ABSENT, FULL, BAD = 0, 1, 2, 3
STATUS = {OK: "ok", ABSENT: "absent", FULL: "full", BAD: "bad"}
RECVS = 4                   # receives each side keeps posted
WORD = string.ascii_letters + string.digits

_rand = random.Random(secrets.randbits(64))


def bucket_of(key, nbuckets):
    return zlib.crc32(key) % nbuckets


def slot_crc(img):
    """The CRC a slot's 128 bytes must carry (its val_len within range)."""
    return zlib.crc32(img[CRC_OFF:VALUE_OFF + img[5]])


def slot_image(key, value, version, tail=b""):
    """A consistent slot: `tail` fills the value area after the value."""
    body = SLOT.pack(0, len(key), len(value), 0, version, key,
                     (value + tail)[:VAL_MAX])
    return struct.pack("<I", slot_crc(body)) + body[4:]


def read_slot(img):
    """What a copy of a slot says: None when it is torn, else
    (key or b'' for a free slot, version, value)."""
    crc, klen, vlen, _, version, key, value = SLOT.unpack(img)
    if version & 1:
        return None
    if version == 0:
        return (b"", 0, b"")
    if klen > KEY_MAX or vlen > VAL_MAX or crc != slot_crc(img):
        return None
    return (key[:klen], version, value[:vlen])


def why_torn(img):
    crc, klen, vlen, _, version, _, _ = SLOT.unpack(img)
    if version & 1:
        return f"version {version} (odd)"
    if klen > KEY_MAX or vlen > VAL_MAX:
        return f"version {version}, key_len {klen}, val_len {vlen}"
    return (f"version {version}, key_len {klen}, val_len {vlen}, crc "
            f"0x{crc:08x} stored, 0x{slot_crc(img):08x} computed over "
            f"bytes {CRC_OFF}..{VALUE_OFF + vlen}")


def fnv1a(data):
    """FNV-1a 64 (grader/evidence/interpose/verbs_spy.c's checksum)."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


def word(lo, hi):
    return "".join(_rand.choice(WORD) for _ in range(_rand.randint(lo, hi)))


def now():
    return time.monotonic()


class Done(Exception):
    """The protocol ended early, on purpose (an answer was wrong)."""


# ---- the server ------------------------------------------------------------------

class Conn:
    def __init__(self, k, qp):
        self.k, self.qp = k, qp
        self.qpn = None             # the client's QP
        self.sock = None
        self.done = False
        self.sending = 0
        self.prev_reply = None
        self.asking = None          # the thread asking who owns its QP
        self.log = {"requests": []}


class KvServer:
    SEND_BASE = 1 << 20

    def __init__(self, a, r):
        self.a, self.r = a, r
        self.nb = a.buckets
        size = self.nb * BUCKET
        self.ctx = Context(name=a.device)
        self.pd = PD(self.ctx)
        self.table = MR(self.pd, size, e.IBV_ACCESS_LOCAL_WRITE |
                        e.IBV_ACCESS_REMOTE_READ)
        self.table.write(bytes(size), size, 0)
        self.per = RECVS + 3        # buffers per client: receives, replies
        self.msgs = MR(self.pd, a.clients * self.per * MSG.size,
                       e.IBV_ACCESS_LOCAL_WRITE)
        self.cq = CQ(self.ctx, a.clients * (RECVS + 8))
        self.slots = {}             # (bucket, index) -> [key, version, value]
        self.where = {}             # key -> (bucket, index)
        self.writes = []            # the history: publish()
        self.planted = []
        self.timers = []            # [(due, fn)]
        self.race = None
        self.counts = {"dups": 0, "foreign": 0}
        r["table"] = {"addr": self.table.buf, "rkey": self.table.rkey,
                      "length": size, "buckets": self.nb}
        r["writes"], r["planted"], r["planted_counts"] = (
            self.writes, self.planted, self.counts)

    # -- the table --

    def slot(self, b, i):
        return self.slots.setdefault((b, i), [b"", 0, b""])

    def write_slot(self, b, i, key, value, origin, name=None):
        """The documented update: version odd, the rest, version even.
        `name`: the key the write is about (a DELETE writes no key)."""
        off = (b * SLOTS + i) * SLOT_SIZE
        v = self.slot(b, i)[1] + 2
        tail = secrets.token_bytes(VAL_MAX - len(value))
        img = slot_image(key, value, v, tail)
        self.table.write(struct.pack("<Q", v - 1), 8, off + VERSION_OFF)
        t_mod = now()
        self.table.write(img[:VERSION_OFF], VERSION_OFF, off)
        self.table.write(img[KEY_OFF:], SLOT_SIZE - KEY_OFF, off + KEY_OFF)
        t_pub = now()
        self.table.write(struct.pack("<Q", v), 8, off + VERSION_OFF)
        self.publish(b, i, key, value, v, t_mod, t_pub, origin, name or key)
        return v

    def publish(self, b, i, key, value, v, t_mod, t_pub, origin, name):
        """The mirror and the history learn of a write that is complete:
        its memory began to change at t_mod (or before), and it could be
        read from t_pub (or after)."""
        st = self.slot(b, i)
        if st[0]:
            self.where.pop(st[0], None)
        st[:] = [key, v, value]
        if key:
            self.where[key] = (b, i)
        self.writes.append({"key": name.decode("latin-1"),
                            "slot": b * SLOTS + i, "version": v,
                            "value": value.decode("latin-1") if key else None,
                            "t_mod": t_mod, "t_pub": t_pub,
                            "origin": origin})

    def put(self, key, value, origin):
        """(status, slot, version)."""
        self.settle(key)
        b = bucket_of(key, self.nb)
        loc = self.where.get(key)
        if loc is None:
            free = [i for i in range(SLOTS) if not self.slot(b, i)[0]]
            if not free:
                return FULL, 0, 0
            loc = (b, free[0])
        v = self.write_slot(*loc, key, value, origin)
        return OK, loc[0] * SLOTS + loc[1], v

    def delete(self, key, origin):
        self.settle(key)
        loc = self.where.get(key)
        if loc is None:
            return ABSENT, 0, 0
        v = self.write_slot(*loc, b"", b"", origin, name=key)
        return OK, loc[0] * SLOTS + loc[1], v

    def lookup(self, key):
        self.settle(key)
        loc = self.where.get(key)
        if loc is None:
            return ABSENT, 0, 0, b""
        st = self.slot(*loc)
        return OK, loc[0] * SLOTS + loc[1], st[1], st[2]

    # -- the planted race --

    def settle(self, key):
        """A request about the key of a race in progress: finish it."""
        if self.race and key == self.race["key"]:
            while self.race:
                self.timers.pop(0)[1]()

    def plant(self):
        """Start the slow write of the race's key (see the module's doc)."""
        key, hold = self.race_key, self.race_hold
        self.settle(key)
        loc = self.where.get(key)
        if loc is None:
            raise PeerGone(f"--race: the key {key!r} is not in the table")
        b, i = loc
        old = self.slot(b, i)
        new = old[2]
        while new[:1] == old[2][:1]:
            new = word(8, 48).encode()
        h = max(1, min(len(new), len(old[2])) // 2)
        off = (b * SLOTS + i) * SLOT_SIZE
        v = old[1] + 2
        img = slot_image(key, new, v, secrets.token_bytes(VAL_MAX - len(new)))
        self.table.write(new[:h], h, off + VALUE_OFF)
        t_mod = now()
        self.record_plant(b, "torn, even version", t_mod)
        race = self.race = {"key": key}

        def odd():
            self.table.write(struct.pack("<Q", v - 1), 8, off + VERSION_OFF)
            self.table.write(img[:VERSION_OFF], VERSION_OFF, off)
            self.table.write(img[KEY_OFF:], SLOT_SIZE - KEY_OFF,
                             off + KEY_OFF)
            self.record_plant(b, "odd version", now())

        def done():
            t_pub = now()
            self.table.write(struct.pack("<Q", v), 8, off + VERSION_OFF)
            self.race = None
            self.publish(b, i, key, new, v, t_mod, t_pub, "race", key)
        self.timers += [(t_mod + hold / 2, odd), (t_mod + hold, done)]
        race["t_mod"] = t_mod

    def record_plant(self, b, state, t):
        image = self.table.read(BUCKET, b * BUCKET)
        self.planted.append({"sum": f"0x{fnv1a(image):016x}", "state": state,
                             "t": t})

    # -- the clients --

    def msg_off(self, k, j):
        return (k * self.per + j) * MSG.size

    def post_recv(self, conn, i):
        sge = SGE(self.msgs.buf + self.msg_off(conn.k, i), MSG.size,
                  self.msgs.lkey)
        conn.qp.qp.post_recv(RecvWR(wr_id=conn.k * RECVS + i, num_sge=1,
                                    sg=[sge]))

    def send(self, conn, j, data):
        off = self.msg_off(conn.k, RECVS + j)
        self.msgs.write(data, MSG.size, off)
        wr = SendWR(wr_id=self.SEND_BASE + conn.k, opcode=e.IBV_WR_SEND,
                    num_sge=1, sg=[SGE(self.msgs.buf + off, MSG.size,
                                       self.msgs.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        conn.qp.qp.post_send(wr)
        conn.sending += 1

    def run(self, lsock):
        a, r = self.a, self.r
        for spec in a.preload:
            key, _, value = spec.partition("=")
            status, _, _ = self.put(key.encode(), value.encode(), "preload")
            if status != OK:
                raise PeerGone(f"--preload {spec}: {STATUS[status]}")
        if a.race:
            key, trigger, hold = a.race.split(":")
            self.race_key, self.race_trigger = key.encode(), trigger.encode()
            self.race_hold = int(hold) / 1000
        self.conns = []
        r["clients"] = []
        for k in range(a.clients):
            conn = Conn(k, RcQp(self.ctx, self.pd, self.cq,
                                e.IBV_ACCESS_REMOTE_READ, a.device,
                                a.gid_index, max_wr=RECVS + 4))
            self.conns.append(conn)
            for i in range(RECVS):
                self.post_recv(conn, i)
        self.by_qpn = {c.qp.qp.qp_num: c for c in self.conns}
        self.lsock, self.accepted = lsock, 0
        self.start_wait, self.accept_from = Bound(a.start_timeout), now()
        self.last = None            # the last request (None: no 'G' yet)
        self.serve()

    def admit(self):
        """Accept the next client if one is connecting, and let go ('G')
        the connected ones once all have connected - or once the first of
        them has waited --go-within s: a client's wait for 'G' is bounded
        by its -t, and the others' start, under load, can be longer (the
        lesson's servers wait for all; the reference server must not make
        a correct client's -t run out)."""
        a = self.a
        # Before any 'G' nothing else can happen: wait here, not spin.
        ready, _, _ = select.select([self.lsock], [], [],
                                    0.05 if self.last is None else 0)
        if ready:
            conn = self.conns[self.accepted]
            conn.sock = oob.accept_one(self.lsock, a.start_timeout)
            theirs = oob.exchange(conn.sock, conn.qp.info(
                self.table.buf, self.table.rkey, self.nb * BUCKET))
            conn.qpn = theirs.qpn
            conn.log["qpn"] = theirs.qpn
            self.r["clients"].append(conn.log)
            conn.qp.connect(theirs)
            oob.sync(conn.sock, b"R")
            conn.log["t_conn"] = now()
            self.accepted += 1
            self.accept_from = now()
        elif self.start_wait.over(now() - self.accept_from):
            raise PeerGone(f"no client connected within "
                           f"{self.start_wait.seconds} s ({self.accepted} "
                           f"of {a.clients} had)")
        waiting = [c for c in self.conns[:self.accepted]
                   if "t_go" not in c.log]
        if waiting and (self.accepted == a.clients or (
                a.go_within and
                now() - waiting[0].log["t_conn"] >= a.go_within)):
            # Who owns each client's QP is asked beside the serving (an
            # `rdma` run, seconds when loaded: not inside the clients' wait
            # for 'G', which their -t bounds); a client's BYE is answered
            # once it is known, so its QP is still there when asked.
            asking = threading.Thread(target=self.ask_owners,
                                      args=(waiting,), daemon=True)
            asking.start()
            for conn in waiting:
                conn.asking = asking
            for conn in waiting:
                oob.sync(conn.sock, b"G")
                conn.log["t_go"] = now()
                if self.accepted < a.clients:
                    conn.log["go_early"] = self.accepted
            self.last = now()

    def ask_owners(self, conns):
        owners = program_qps([c.qpn for c in conns], self.a.device)
        for conn in conns:
            conn.log["remote_qp"] = owners[conn.qpn]

    def owners_asked(self, timeout=None):
        """Wait for the kernel's answers about the clients' QPs."""
        for conn in self.conns:
            if conn.asking is not None:
                conn.asking.join(timeout)

    def serve(self):
        a = self.a
        next_check = now() + 0.2
        idle = Bound(a.idle_timeout)
        while True:
            if self.accepted < a.clients or self.last is None:
                self.admit()
            n, wcs = self.cq.poll(8)
            for wc in wcs[:n]:
                self.handle(wc)
            t = now()
            while self.timers and self.timers[0][0] <= t:
                self.timers.pop(0)[1]()
            if n:
                self.last = t
                continue
            if all(c.done and not c.sending for c in self.conns) and \
                    not self.timers:
                return
            if t >= next_check:
                next_check = t + 0.2
                self.check_sockets()
            last = self.last if self.last is not None else t
            # (Its clients connected: one still starting is not idle.)
            if self.accepted == a.clients and idle.over(t - last):
                raise PeerGone(f"no request from any client within "
                               f"{idle.seconds} s")
            # Spin while busy, then nap: a sleeping server costs a
            # request at most a millisecond, and the CPU to its clients.
            time.sleep(0 if t - last < 0.002 else
                       0.0002 if t - last < 0.05 else 0.001)

    def check_sockets(self):
        # (Not one still waiting for its 'G': it has sent its own 'G'
        # already, and its sync reads it.)
        open_ = [c for c in self.conns if "t_go" in c.log and not c.done]
        if not open_:
            return
        ready, _, _ = select.select([c.sock for c in open_], [], [], 0)
        for conn in open_:
            if conn.sock in ready:
                # A request in flight comes first: look once more.
                n, wcs = self.cq.poll(8)
                for wc in wcs[:n]:
                    self.handle(wc)
                if not conn.done:
                    raise PeerGone(f"client 0x{conn.qpn:06x} closed its TCP "
                                   f"connection before its BYE")

    def handle(self, wc):
        if wc.status != e.IBV_WC_SUCCESS:
            raise WcError(f"client QP 0x{wc.qp_num:06x}: completion error: "
                          f"{WC_STATUS.get(wc.status, wc.status)} "
                          f"(status {wc.status})")
        if wc.wr_id >= self.SEND_BASE:
            self.conns[wc.wr_id - self.SEND_BASE].sending -= 1
            return
        k, i = divmod(wc.wr_id, RECVS)
        conn = self.conns[k]
        t_arr = now()
        raw = self.msgs.read(MSG.size, self.msg_off(k, i))
        op, _, klen, vlen, seq, client, _, _, key, value = MSG.unpack(raw)
        key, value = key[:min(klen, KEY_MAX)], value[:min(vlen, VAL_MAX)]
        rec = {"seq": seq, "op": OPS.get(op, f"0x{op:02x}"),
               "key": key.decode("latin-1"), "t_arr": t_arr}
        status, slot, version, got = BAD, 0, 0, b""
        why = None
        if wc.byte_len != MSG.size:
            why = f"{wc.byte_len} bytes, not {MSG.size}"
        elif client != conn.qpn:
            why = (f"client 0x{client:06x}, but it came from QP "
                   f"0x{conn.qpn:06x}")
        elif op not in OPS:
            why = f"op 0x{op:02x}"
        elif op != BYE and not 1 <= klen <= KEY_MAX:
            why = f"key_len {klen}"
        elif op == PUT and not 1 <= vlen <= VAL_MAX:
            why = f"val_len {vlen}"
        elif op == BYE:
            status = OK
            if conn.asking is not None:
                conn.asking.join()
            conn.done = True
            conn.log["t_end"] = t_arr
            if self.a.bench_stop:
                self.a.bench_stop = False
                for c in self.conns:
                    if c.sock and not c.done:
                        c.sock.sendall(b"S")
        elif op == GET:
            status, slot, version, got = self.lookup(key)
        elif op == PUT:
            rec["value"] = value.decode("latin-1")
            status, slot, version = self.put(key, value, conn.qpn)
        else:
            status, slot, version = self.delete(key, conn.qpn)
        if why:
            rec["bad"] = why
        rec.update(status=STATUS[status], slot=slot, version=version)
        if got:
            rec["got"] = got.decode("latin-1")
        conn.log["requests"].append(rec)
        if op == PUT and status == OK and self.a.race and \
                key == self.race_trigger:
            self.plant()
            rec["planted"] = True
        self.post_recv(conn, i)
        reply = MSG.pack(op, status, klen if status != BAD else 0, len(got),
                         seq, client, slot, version, key, got)
        if self.a.dup_every and conn.prev_reply and \
                seq % self.a.dup_every == 0:
            self.send(conn, 0, conn.prev_reply)
            rec["dup_before"] = True
            self.counts["dups"] += 1
        if self.a.foreign_every and seq % self.a.foreign_every == 1 and \
                seq > 1:
            # (A client not connected yet has no QP number: with an
            # early 'G' it is still starting.)
            others = [c.qpn for c in self.conns
                      if c is not conn and c.qpn is not None]
            other = others[0] if others else (conn.qpn ^ 0x5a5a) or 1
            fake_value = got[::-1] if got else b"foreign"
            fake = MSG.pack(op, OK, klen, len(fake_value), seq, other,
                            slot + 1, version + 1000, key, fake_value)
            self.send(conn, 1, fake)
            rec["foreign_before"] = {"client": other, "slot": slot + 1,
                                     "version": version + 1000}
            self.counts["foreign"] += 1
        rec["t_rep"] = now()
        self.send(conn, 2, reply)
        conn.prev_reply = reply


def run_server(a, r):
    srv = KvServer(a, r)
    lsock = oob.listen(a.port)
    print(f"listening on port {lsock.getsockname()[1]}", flush=True)
    try:
        srv.run(lsock)
        extra = sum(len(oob.expect_silence(c.sock, 0.05)) for c in srv.conns)
        if extra:
            r["extra_tcp_bytes"] = extra
    finally:
        # (A run that failed early: the answers it has, before the clients
        # may go.)
        if getattr(srv, "conns", None):
            srv.owners_asked(timeout=15)
        lsock.close()
        for c in getattr(srv, "conns", []):
            if c.sock:
                c.sock.close()


# ---- the client ------------------------------------------------------------------

class KvClient:
    WRID_SEND, WRID_READ, WRID_RECV = 0, 1, 2
    REQ_OFF = BUCKET

    def __init__(self, a, r):
        self.a, self.r = a, r
        size = BUCKET + (1 + RECVS) * MSG.size
        self.res = RcResources(a.device, a.gid_index, size,
                               e.IBV_ACCESS_LOCAL_WRITE, 0, max_wr=RECVS + 4)
        self.mr, self.qp, self.cq = self.res.mr, self.res.qp, self.res.cq
        for i in range(RECVS):
            self.post_recv(i)
        self.read_wr = SendWR(wr_id=self.WRID_READ,
                              opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                              sg=[SGE(self.mr.buf, BUCKET, self.mr.lkey)],
                              send_flags=e.IBV_SEND_SIGNALED)
        self.send_wr = SendWR(wr_id=self.WRID_SEND, opcode=e.IBV_WR_SEND,
                              num_sge=1,
                              sg=[SGE(self.mr.buf + self.REQ_OFF, MSG.size,
                                      self.mr.lkey)],
                              send_flags=e.IBV_SEND_SIGNALED)
        self.seq = 0
        self.reads = 0

    def post_recv(self, i):
        off = self.REQ_OFF + (1 + i) * MSG.size
        self.qp.post_recv(RecvWR(wr_id=self.WRID_RECV + i, num_sge=1,
                                 sg=[SGE(self.mr.buf + off, MSG.size,
                                         self.mr.lkey)]))

    def connect(self, sock):
        theirs = oob.exchange(sock, self.res.info())
        self.r["theirs"] = {"qpn": theirs.qpn, "addr": theirs.addr,
                            "rkey": theirs.rkey, "length": theirs.length}
        self.r["remote_qp"] = program_qp(theirs.qpn, self.a.device)
        self.res.connect(theirs)
        oob.sync(sock, b"R")
        if not theirs.addr or not theirs.length or theirs.length % BUCKET:
            raise PeerGone(f"the server advertised no table of whole "
                           f"{BUCKET}-byte buckets (addr 0x{theirs.addr:x} "
                           f"length {theirs.length})")
        self.base, self.rkey = theirs.addr, theirs.rkey
        self.nb = theirs.length // BUCKET
        self.id = self.qp.qp_num
        oob.sync(sock, b"G")

    def wait(self, what):
        """Busy-poll for the next completion (within --timeout s)."""
        deadline = Deadline(self.a.timeout)
        spins = 0
        while True:
            n, wcs = self.cq.poll()
            if n:
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    raise WcError(f"{what}: completion error: "
                                  f"{WC_STATUS.get(wc.status, wc.status)} "
                                  f"(status {wc.status})")
                return wc
            spins += 1
            if spins % 256 == 0 and deadline.passed():
                raise WcError(f"{what}: no completion within "
                              f"{deadline.seconds} s")

    def get(self, key):
        """One-sided GET: (status, slot, version, value, reads)."""
        b = bucket_of(key, self.nb)
        self.read_wr.set_wr_rdma(self.rkey, self.base + b * BUCKET)
        deadline = now() + self.a.timeout
        reads = 0
        while True:
            self.qp.post_send(self.read_wr)
            wc = self.wait(f"get {key.decode()}: rdma read")
            if wc.wr_id != self.WRID_READ:
                self.unexpected(wc, f"get {key.decode()}")
            reads += 1
            self.reads += 1
            data = self.mr.read(BUCKET, 0)
            slots = [read_slot(data[j:j + SLOT_SIZE])
                     for j in range(0, BUCKET, SLOT_SIZE)]
            if None not in slots:
                break
            if now() > deadline:
                j = slots.index(None)
                raise Done(f"get {key.decode()}: bucket {b} never read "
                           f"consistent within {self.a.timeout} s ({reads} "
                           f"READs): slot {j}: "
                           f"{why_torn(data[j * SLOT_SIZE:(j + 1) * SLOT_SIZE])}")
        for j, (k, v, value) in enumerate(slots):
            if k == key:
                return OK, b * SLOTS + j, v, value, reads
        return ABSENT, 0, 0, b"", reads

    def unexpected(self, wc, what):
        if self.WRID_RECV <= wc.wr_id < self.WRID_RECV + RECVS:
            off = self.REQ_OFF + (1 + wc.wr_id - self.WRID_RECV) * MSG.size
            m = MSG.unpack(self.mr.read(MSG.size, off))
            raise Done(f"{what}: a reply arrived that answers no request of "
                       f"this client: op {chr(m[0])!r}, seq {m[4]}, client "
                       f"0x{m[5]:06x} (this client is 0x{self.id:06x})")
        raise Done(f"{what}: a completion of wr_id {wc.wr_id} came")

    def rpc(self, op, key, value=b"", klen=None):
        """(status, slot, version, value of a GET)."""
        self.seq += 1
        klen = len(key) if klen is None else klen
        what = f"request {self.seq} ({OPS[op]} {key.decode()})"
        self.mr.write(MSG.pack(op, 0, klen, len(value), self.seq, self.id, 0,
                               0, key, value), MSG.size, self.REQ_OFF)
        self.qp.post_send(self.send_wr)
        sent = reply = None
        while sent is None or reply is None:
            wc = self.wait(what)
            if wc.wr_id == self.WRID_SEND:
                sent = True
                continue
            if not self.WRID_RECV <= wc.wr_id < self.WRID_RECV + RECVS:
                self.unexpected(wc, what)
            i = wc.wr_id - self.WRID_RECV
            m = MSG.unpack(self.mr.read(MSG.size,
                                        self.REQ_OFF + (1 + i) * MSG.size))
            self.post_recv(i)
            if wc.byte_len != MSG.size or m[0] != op or m[4] != self.seq or \
                    m[5] != self.id:
                raise Done(f"{what}: the reply that came is not its answer: "
                           f"{wc.byte_len} bytes, op {chr(m[0])!r}, seq "
                           f"{m[4]}, client 0x{m[5]:06x} (expected op "
                           f"{chr(op)!r}, seq {self.seq}, client "
                           f"0x{self.id:06x}: this client)")
            reply = m
        status, slot, version, vlen, got = (reply[1], reply[6], reply[7],
                                            reply[3], reply[9])
        return status, slot, version, got[:min(vlen, VAL_MAX)]

    def run_ops(self):
        a, r = self.a, self.r
        keys = [k.encode() for k in a.keys.split(",")]
        mix = [(op, int(w)) for op, w in
               (x.split("=") for x in a.mix.split(","))]
        ops = r["ops"] = []
        if a.bad_request:
            t0 = now()
            status, _, _, _ = self.rpc(PUT, b"", b"x", klen=0)
            ops.append({"op": "bad", "t0": t0, "t1": now(),
                        "status": STATUS.get(status, status)})
            if status != BAD:
                raise Done(f"a PUT with key_len 0 got the reply status "
                           f"{status} ({STATUS.get(status, '?')}), not "
                           f"{BAD} (KV_BAD)")
        for _ in range(a.ops):
            op = _rand.choices([m[0] for m in mix], [m[1] for m in mix])[0]
            key = _rand.choice(keys)
            rec = {"op": op, "key": key.decode()}
            t0 = now()
            if op == "get":
                status, slot, version, got, reads = self.get(key)
                rec["reads"] = reads
            elif op == "put":
                value = word(1, VAL_MAX).encode()
                rec["value"] = value.decode()
                status, slot, version, got = self.rpc(PUT, key, value)
            else:
                status, slot, version, got = self.rpc(
                    GET if op == "rget" else DEL, key)
            rec.update(t0=t0, t1=now(), status=STATUS.get(status, status),
                       slot=slot, version=version)
            if op in ("get", "rget") and status == OK:
                rec["got"] = got.decode("latin-1")
            ops.append(rec)
            if status not in (OK, ABSENT) or (op == "put" and status != OK):
                raise Done(f"{op} {key.decode()}: the reply status is "
                           f"{status} ({STATUS.get(status, '?')})")

    def run_bench(self, sock):
        """GETs of random keys of --bench-keys (key0, key1, ...): --bench
        of them, or with --until-stop as many as fit before the server
        says 'S' on TCP (kv.py server --bench-stop). Each GET's time
        (this host's clock) is kept for its percentiles."""
        a, r = self.a, self.r
        keys = [f"key{i}".encode() for i in range(a.bench_keys)]
        if not a.until_stop:
            for k in keys:
                status, _, _, _ = self.rpc(PUT, k, b"v" * a.value_size)
                if status != OK:
                    raise Done(f"put {k.decode()}: status {status}")
        print(f"preloaded {len(keys)} keys", flush=True)
        r["preloaded"] = len(keys)
        ns, stop = [], False
        t0 = time.perf_counter()
        while not stop:
            for _ in range(32):
                t = time.perf_counter()
                status, *_ = self.get(_rand.choice(keys))
                ns.append(time.perf_counter() - t)
                if status != OK:
                    raise Done("a preloaded key is absent")
                if len(ns) == a.bench and not a.until_stop:
                    stop = True
                    break
            if a.until_stop and select.select([sock], [], [], 0)[0]:
                got = sock.recv(1)
                if got != b"S":
                    raise PeerGone(f"the server sent {got!r} during the "
                                   f"benchmark, not b'S'")
                stop = True
        t = time.perf_counter() - t0
        ns.sort()
        r["bench"] = {"gets": len(ns), "seconds": t, "reads": self.reads,
                      "rate": len(ns) / t,
                      "p50_us": 1e6 * ns[math.ceil(0.5 * len(ns)) - 1],
                      "p99_us": 1e6 * ns[math.ceil(0.99 * len(ns)) - 1]}


def run_client(a, r):
    cli = KvClient(a, r)
    sock = oob.connect(a.host, a.port, a.start_timeout)
    try:
        cli.connect(sock)
        if a.bench or a.until_stop:
            cli.run_bench(sock)
        else:
            cli.run_ops()
        t0 = now()
        status, _, _, _ = cli.rpc(BYE, b"")
        r["bye"] = {"t0": t0, "t1": now(), "status": status}
    finally:
        sock.close()


def main(argv=None):
    p = argparse.ArgumentParser(prog="kv.py", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--host", default=os.environ.get("RDMA_IP", "localhost"))
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--device", default=os.environ.get("RDMA_DEVICE", "rxe0"))
    p.add_argument("--gid-index", type=int,
                   default=int(os.environ.get("RDMA_GID_INDEX", "1")))
    p.add_argument("--timeout", type=int, default=10)
    # The waits that include the other side's start (accepting a client,
    # connecting, the 'G' barrier): on host B of a pair, or loaded, a
    # peer may start seconds after its server's readiness line.
    p.add_argument("--start-timeout", type=int, default=0)
    # server
    p.add_argument("--clients", type=int, default=1)
    # Let the connected clients go ('G') once the first has waited this
    # long, all connected or not (0: only when all have; see admit()).
    p.add_argument("--go-within", type=float, default=0)
    # How long the server waits with no request from any client, its
    # clients connected (default: --timeout). A benchmark's GETs are READs
    # the server never sees: its clients are silent until their BYE.
    p.add_argument("--idle-timeout", type=int, default=0)
    p.add_argument("--buckets", type=int, default=64)
    p.add_argument("--preload", action="append", default=[])
    p.add_argument("--dup-every", type=int, default=0)
    p.add_argument("--foreign-every", type=int, default=0)
    p.add_argument("--race", default=None)
    # client
    p.add_argument("--keys", default="a,b,c")
    p.add_argument("--ops", type=int, default=20)
    p.add_argument("--mix", default="get=50,rget=10,put=30,del=10")
    p.add_argument("--bad-request", action="store_true")
    p.add_argument("--bench", type=int, default=0)
    p.add_argument("--bench-keys", type=int, default=64)
    p.add_argument("--value-size", type=int, default=32)
    p.add_argument("--until-stop", action="store_true")
    p.add_argument("--bench-stop", action="store_true")         # server
    a = p.parse_args(argv)
    a.start_timeout = a.start_timeout or a.timeout
    a.idle_timeout = a.idle_timeout or a.timeout
    r = {"role": a.role, "ok": False, "error": None}
    try:
        (run_server if a.role == "server" else run_client)(a, r)
        r["ok"] = True
    except (PeerGone, WcError, Done, OSError) as err:
        r["error"] = str(err)
    except Exception as err:                # pyverbs' errors: still report
        r["error"] = f"{type(err).__name__}: {err}"
    print("peer-result " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
