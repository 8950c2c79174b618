"""Verbs resources of the trusted peers, layered as in rdma-core's pyverbs
tests (tests/base.py): a context, then a PD, an MR, a CQ and an RC QP, each
created by one method, and the QP connected from the peer's qp_info.

The attributes are the lessons' own (lessons 05-07, TODOs 3 and 4): path
MTU 1024, min_rnr_timer 12, retry_cnt 6, rnr_retry 3, one READ in flight
each way, a global address on RoCE, and the ACK timeout 17 (4.096 us x
2^17, about 0.54 s; course.h's COURSE_QP_TIMEOUT): with 14 (67 ms), on a
loaded emulated host, a READ's response took longer than 67 ms, the READ
was sent again, and seven such resends in a row ended the reference
client's benchmark of a correct lesson 15 server in 'transport retry
counter exceeded' (a fresh-clone make test). The peer's timeout is not
graded: only how its own lost packets are resent.
"""

import random
import select
import socket
import time

import pyverbs.enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from grader.core.harness import Deadline

from .oob import PeerGone, QpInfo

# A peer with nothing to poll naps 0.5 ms, and 5 ms once it has waited
# 100 ms (a program still starting, a completion that never comes), as the
# lessons' programs do (course.h: COURSE_POLL_LONG_NS). Under the VM's
# emulation a Python loop woken every 0.5 ms costs about a tenth of a CPU,
# and a peer waiting out a broken program's --timeout, CPU seconds.
NAP, LONG_WAIT, LONG_NAP = 0.0005, 0.1, 0.005


def idle_nap(waited):
    """How long a peer that has polled nothing for `waited` s sleeps."""
    return LONG_NAP if waited >= LONG_WAIT else NAP

_rand = random.SystemRandom()
ACK_TIMEOUT = 17          # course.h's COURSE_QP_TIMEOUT: the docstring says why

WC_STATUS = {
    0: "success", 1: "local length error", 2: "local QP operation error",
    4: "local protection error", 5: "Work Request Flushed Error",
    9: "remote invalid request error", 10: "remote access error",
    11: "remote operation error", 12: "transport retry counter exceeded",
    13: "RNR retry counter exceeded",
}


class WcError(Exception):
    """A completion that did not succeed, or none in time."""


def gid_str(raw):
    h = raw.hex()
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


class RcResources:
    """One RC QP with one buffer, on the device the grader runs on."""

    def __init__(self, device, gid_index, size, mr_access, qp_access,
                 ib_port=1, max_wr=4):
        self.device, self.gid_index, self.ib_port = device, gid_index, ib_port
        self.size, self.max_wr = size, max_wr
        self.ctx = Context(name=device)
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, size, mr_access)
        self.cq = CQ(self.ctx, 4 * max_wr)
        self.create_qp()
        self.to_init(qp_access)
        self.psn = _rand.randrange(1 << 24)

    def create_qp(self):
        cap = QPCap(max_send_wr=self.max_wr, max_recv_wr=self.max_wr,
                    max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                          cap=cap, sq_sig_all=0)
        self.qp = QP(self.pd, init)

    def to_init(self, qp_access):
        attr = QPAttr(port_num=self.ib_port)
        attr.qp_access_flags = qp_access
        attr.pkey_index = 0
        self.qp.to_init(attr)

    def info(self, addr=0, rkey=0, length=0):
        raw = bytes.fromhex(self.ctx.query_gid(self.ib_port, self.gid_index)
                            .gid.replace(":", ""))
        lid = self.ctx.query_port(self.ib_port).lid
        return QpInfo(lid, self.qp.qp_num, self.psn, raw, addr, rkey, length)

    def advertise(self, length=None):
        return self.info(self.mr.buf, self.mr.rkey,
                         self.size if length is None else length)

    def connect(self, theirs):
        gid = GID()
        gid.gid = gid_str(theirs.gid)
        gr = GlobalRoute(dgid=gid, sgid_index=self.gid_index, hop_limit=64)
        attr = QPAttr(port_num=self.ib_port)
        attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=self.ib_port,
                              dlid=theirs.lid)
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = theirs.qpn
        attr.rq_psn = theirs.psn
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 12
        self.qp.to_rtr(attr)
        attr.sq_psn = self.psn
        attr.timeout = ACK_TIMEOUT
        attr.retry_cnt = 6
        attr.rnr_retry = 3
        attr.max_rd_atomic = 1
        self.qp.to_rts(attr)

    # ---- work requests ------------------------------------------------------

    def post_recv(self, wr_id, offset=0, length=None):
        """A receive for `length` bytes at `offset` (length 0: for an
        immediate only; pyverbs wants one SGE even then)."""
        length = self.size if length is None else length
        sge = SGE(self.mr.buf + offset, length, self.mr.lkey)
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]))

    def post_send(self, wr_id, opcode, offset=0, length=None, remote=None,
                  imm=None):
        length = self.size if length is None else length
        sge = SGE(self.mr.buf + offset, length, self.mr.lkey)
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge],
                    send_flags=e.IBV_SEND_SIGNALED)
        if imm is not None:
            wr.imm_data = socket.htonl(imm)
        if remote is not None:
            wr.set_wr_rdma(remote.rkey, remote.addr)
        self.qp.post_send(wr)

    def post_atomic(self, opcode, remote_addr, rkey, compare_add, swap=0,
                    offset=0):
        """One signaled atomic; its old value lands at `offset` of our MR."""
        sge = SGE(self.mr.buf + offset, 8, self.mr.lkey)
        wr = SendWR(wr_id=0, opcode=opcode, num_sge=1, sg=[sge],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_atomic(rkey, remote_addr, compare_add, swap)
        self.qp.post_send(wr)

    def poll(self, what, timeout, sock=None):
        """One completion within `timeout` s; while none comes, a closed TCP
        connection (`sock`) ends the wait at once (PeerGone)."""
        start = time.monotonic()
        deadline = Deadline(timeout)
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
            if deadline.passed():
                raise WcError(f"{what}: no completion within "
                              f"{deadline.seconds} s")
            spins += 1
            if spins % 64 == 0 and sock is not None:
                r, _, _ = select.select([sock], [], [], 0)
                if r and not sock.recv(1, socket.MSG_PEEK):
                    raise PeerGone(f"{what}: the program closed the TCP "
                                   f"connection (it has exited)")
            if spins > 200:
                time.sleep(idle_nap(time.monotonic() - start))

    def read(self, offset=0, length=None):
        return self.mr.read(self.size if length is None else length, offset)

    def write(self, data, offset=0):
        self.mr.write(data, len(data), offset)


class SharedRc(RcResources):
    """Another RC QP on the context, PD and MR of `first` (a server of
    several clients that all reach one memory region: lesson 12)."""

    def __init__(self, first, qp_access, max_wr=4):
        self.device, self.gid_index = first.device, first.gid_index
        self.ib_port, self.size, self.max_wr = first.ib_port, first.size, max_wr
        self.ctx, self.pd, self.mr = first.ctx, first.pd, first.mr
        self.cq = CQ(self.ctx, 4 * max_wr)
        self.create_qp()
        self.to_init(qp_access)
        self.psn = _rand.randrange(1 << 24)


class RcQp(RcResources):
    """An RC QP on a context, PD and CQ the caller made and may share
    among several QPs (lesson 15's reference server polls one CQ for all
    its clients: a completion's qp_num says whose it is). Its memory is
    the caller's too: connect() and info() are RcResources'."""

    def __init__(self, ctx, pd, cq, qp_access, device, gid_index,
                 ib_port=1, max_wr=4):
        self.device, self.gid_index, self.ib_port = device, gid_index, ib_port
        self.ctx, self.pd, self.cq, self.max_wr = ctx, pd, cq, max_wr
        self.mr, self.size = None, 0
        self.create_qp()
        self.to_init(qp_access)
        self.psn = _rand.randrange(1 << 24)
