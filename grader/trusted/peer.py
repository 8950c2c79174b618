"""The course's reference peer: the other end of a lesson's client/server,
written with rdma-core's pyverbs, run by the grader (never by the student).

    python3 grader/trusted/peer.py LESSON ROLE [options]

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
Every wait is bounded by --timeout; nothing is sent on TCP beyond what the
protocol requires.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import types
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script: import grader.trusted without grader/__init__.py
    # (which loads pytest: seconds under the micro-VM's emulation).
    _grader = Path(__file__).resolve().parent.parent
    _pkg = types.ModuleType("grader")
    _pkg.__path__ = [str(_grader)]
    sys.modules["grader"] = _pkg
    __package__ = "grader.trusted"

import pyverbs.enums as e                                       # noqa: E402

from grader.trusted import oob, patterns                        # noqa: E402
from grader.trusted.oob import PeerGone                         # noqa: E402
from grader.trusted.verbs import RcResources, WcError           # noqa: E402

WRID_SEND, WRID_RECV = 0, 1


def kernel_qp(qpn):
    """What `rdma -j resource show qp` says about local QP `qpn`."""
    try:
        out = subprocess.run(["rdma", "-j", "resource", "show", "qp"],
                             capture_output=True, text=True, timeout=10).stdout
        for q in json.loads(out or "[]"):
            if q.get("lqpn") == qpn:
                return {k: q.get(k) for k in ("lqpn", "pid", "comm", "state",
                                              "type", "ifname")}
    except (OSError, ValueError, subprocess.TimeoutExpired) as err:
        return {"error": str(err)}
    return None


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
        if a.role == "server":
            lsock = oob.listen(a.port)
            self.out(f"listening on port {lsock.getsockname()[1]}")
            self.sock = oob.accept(lsock, a.timeout)
        else:
            self.sock = oob.connect(a.host, a.port, a.timeout)

    def meet(self, res, mine):
        """Exchange qp_info, connect the QP, note who owns the peer's QP,
        then the 'R' barrier. Returns the program's qp_info."""
        theirs = oob.exchange(self.sock, mine)
        self.result["theirs"] = theirs._asdict() | {"gid": theirs.gid.hex()}
        self.result["remote_qp"] = kernel_qp(theirs.qpn)
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


def main(argv=None):
    p = argparse.ArgumentParser(prog="peer.py", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("lesson", choices=["05", "06", "07"])
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
    return Session(p.parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
