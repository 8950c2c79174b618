"""The wire between the two hosts of a linked pair: every frame that
crossed it, recorded outside both guests (QEMU's filter-dump on host A's
netdev, `vm-setup/with-rxe --pair --capture FILE`), decoded.

    cap = Capture.from_env()        # RDMA_CAPTURE on host A, else None
    mark = cap.mark()
    ... a program on A against a reference peer on B ...
    seg = cap.since(mark)           # what crossed meanwhile: a Segment
    seg.messages(src=A)             # RoCEv2 messages, packet by packet
    seg.tcp(src=A)                  # what A's TCP connections carried

The file is QEMU's: written as frames pass, mode 0600 (the grader, root in
the guest, reads it; the sandboxed program cannot). It only grows: a mark
is the end of its last complete record, and a Segment is a pcap of its own
(the file's header and the records after the mark).

RoCEv2 is decoded here, in Python: BTH, then the extension headers the
opcode carries (IBTA vol. 1, 9.2-9.5; rxe's rxe_opcode.c), then the payload
(less the pad and the 4-byte ICRC). tshark decodes the same (the course's
self-check compares the two on real captures, test_wire.py), but costs ~6 s
of CPU per start under the micro-VM's emulation: `tshark_packets()` is for
where the decoding itself is graded (lesson 16) and for the self-check.
"""

import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections import namedtuple
from dataclasses import dataclass, field
from pathlib import Path

ROCE_PORT = 4791
LINKTYPE_ETHERNET = 1
PCAP_MAGIC_US = 0xa1b2c3d4
PCAP_MAGIC_NS = 0xa1b23c4d
FILE_HEADER = 24
RECORD_HEADER = 16

# Extension headers, in the order they follow the BTH, and their sizes.
HDR_SIZE = {"RDETH": 4, "DETH": 8, "RETH": 16, "AtomicETH": 28,
            "AETH": 4, "AtomicAckETH": 8, "ImmDt": 4, "IETH": 4}
_ORDER = ["RDETH", "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH",
          "ImmDt", "IETH"]

# The RC operations: low 5 bits of the opcode -> (name, headers).
_RC = {
    0x00: ("SEND_FIRST", ()),
    0x01: ("SEND_MIDDLE", ()),
    0x02: ("SEND_LAST", ()),
    0x03: ("SEND_LAST_WITH_IMMEDIATE", ("ImmDt",)),
    0x04: ("SEND_ONLY", ()),
    0x05: ("SEND_ONLY_WITH_IMMEDIATE", ("ImmDt",)),
    0x06: ("RDMA_WRITE_FIRST", ("RETH",)),
    0x07: ("RDMA_WRITE_MIDDLE", ()),
    0x08: ("RDMA_WRITE_LAST", ()),
    0x09: ("RDMA_WRITE_LAST_WITH_IMMEDIATE", ("ImmDt",)),
    0x0a: ("RDMA_WRITE_ONLY", ("RETH",)),
    0x0b: ("RDMA_WRITE_ONLY_WITH_IMMEDIATE", ("RETH", "ImmDt")),
    0x0c: ("RDMA_READ_REQUEST", ("RETH",)),
    0x0d: ("RDMA_READ_RESPONSE_FIRST", ("AETH",)),
    0x0e: ("RDMA_READ_RESPONSE_MIDDLE", ()),
    0x0f: ("RDMA_READ_RESPONSE_LAST", ("AETH",)),
    0x10: ("RDMA_READ_RESPONSE_ONLY", ("AETH",)),
    0x11: ("ACKNOWLEDGE", ("AETH",)),
    0x12: ("ATOMIC_ACKNOWLEDGE", ("AETH", "AtomicAckETH")),
    0x13: ("COMPARE_SWAP", ("AtomicETH",)),
    0x14: ("FETCH_ADD", ("AtomicETH",)),
    0x16: ("SEND_LAST_WITH_INVALIDATE", ("IETH",)),
    0x17: ("SEND_ONLY_WITH_INVALIDATE", ("IETH",)),
}


def _opcodes():
    ops = {}
    for low, (name, hdrs) in _RC.items():
        ops[low] = (f"RC_{name}", hdrs)
        if low <= 0x0b:                 # UC: SENDs and WRITEs
            ops[0x20 | low] = (f"UC_{name}", hdrs)
    ops[0x64] = ("UD_SEND_ONLY", ("DETH",))
    ops[0x65] = ("UD_SEND_ONLY_WITH_IMMEDIATE", ("DETH", "ImmDt"))
    return ops


# opcode -> (name, extension headers in wire order). What is not here
# (RD, CNP, reserved codes) is not decoded past the BTH.
OPCODES = _opcodes()
NAMES = {name: code for code, (name, _) in OPCODES.items()}

# The data-carrying kinds of a message, by the opcode's low bits.
FIRST = {0x00, 0x06, 0x0d}
MIDDLE = {0x01, 0x07, 0x0e}
LAST = {0x02, 0x03, 0x08, 0x09, 0x0f, 0x16}
ONLY = {0x04, 0x05, 0x0a, 0x0b, 0x10, 0x17}
SENDS = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x16, 0x17}
WRITES = {0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b}
READ_RESPONSES = {0x0d, 0x0e, 0x0f, 0x10}
ATOMICS = {0x13, 0x14}

AETH_KINDS = {0: "ACK", 1: "RNR_NAK", 3: "NAK"}
NAK_CODES = {0: "PSN_SEQUENCE_ERROR", 1: "INVALID_REQUEST",
             2: "REMOTE_ACCESS_ERROR", 3: "REMOTE_OPERATIONAL_ERROR",
             4: "INVALID_RD_REQUEST"}


def aeth_meaning(syndrome):
    """(kind, value): ('ACK', credits), ('RNR_NAK', timer), ('NAK', code
    name) or ('RESERVED', syndrome)."""
    kind = AETH_KINDS.get(syndrome >> 5)
    low = syndrome & 0x1f
    if kind == "NAK":
        return kind, NAK_CODES.get(low, f"NAK_0x{low:02x}")
    if kind:
        return kind, low
    return "RESERVED", syndrome


@dataclass
class Roce:
    """One RoCEv2 packet (UDP port 4791), decoded."""
    frame: int                  # 1-based, in its Segment (tshark's frame.number)
    src: str
    dst: str
    opcode: int
    name: str                   # OPCODES' name, or "OPCODE_0xNN"
    se: bool
    ackreq: bool
    pkey: int
    destqp: int
    psn: int
    padcnt: int
    reth: tuple = None          # (va, rkey, dmalen)
    aeth: tuple = None          # (syndrome, msn)
    atomic: tuple = None        # (va, rkey, swap_or_add, compare)
    orig: int = None            # AtomicAckETH: the remote data before
    imm: int = None             # ImmDt, as the 32-bit big-endian value
    ieth: int = None
    deth: tuple = None          # (qkey, srcqp)
    payload: bytes = b""
    decoded: bool = True        # False: an opcode whose headers are unknown
    malformed: str = None       # why the packet is shorter than its headers
    intact: bool = True         # False: its frame was cut short or its ICRC
                                # is wrong (IPv4): its receiver dropped it

    @property
    def low(self):
        return self.opcode & 0x1f


Tcp = namedtuple("Tcp", "frame src sport dst dport seq flags payload")


def _ip_text(b):
    if len(b) == 4:
        return ".".join(map(str, b))
    import ipaddress
    return str(ipaddress.IPv6Address(b))


def decode_frame(data, number=0):
    """An Ethernet frame -> Roce, Tcp, or None (anything else)."""
    if len(data) < 14:
        return None
    etype = struct.unpack_from("!H", data, 12)[0]
    off = 14
    if etype == 0x0800:
        if len(data) < off + 20:
            return None
        vihl = data[off]
        ihl = (vihl & 0x0f) * 4
        total = struct.unpack_from("!H", data, off + 2)[0]
        frag = struct.unpack_from("!H", data, off + 6)[0]
        proto = data[off + 9]
        src, dst = _ip_text(data[off + 12:off + 16]), _ip_text(data[off + 16:off + 20])
        if frag & 0x1fff:
            return None             # not the first fragment
        whole = len(data) >= off + total
        end = min(len(data), off + total)
        ip = data[off:off + ihl]
        off += ihl
    elif etype == 0x86dd:
        if len(data) < off + 40:
            return None
        plen = struct.unpack_from("!H", data, off + 4)[0]
        proto = data[off + 6]
        src, dst = _ip_text(data[off + 8:off + 24]), _ip_text(data[off + 24:off + 40])
        whole = len(data) >= off + 40 + plen
        end = min(len(data), off + 40 + plen)
        ip = None                   # (the ICRC is checked for IPv4 only)
        off += 40
    else:
        return None
    if proto == 6 and end - off >= 20:
        sport, dport, seq = struct.unpack_from("!HHI", data, off)
        doff = (data[off + 12] >> 4) * 4
        flags = data[off + 13]
        return Tcp(number, src, sport, dst, dport, seq, flags,
                   bytes(data[off + doff:end]))
    if proto != 17 or end - off < 8:
        return None
    dport = struct.unpack_from("!H", data, off + 2)[0]
    ulen = struct.unpack_from("!H", data, off + 4)[0]
    if dport != ROCE_PORT:
        return None
    udp_end = min(end, off + ulen) if ulen >= 8 else end
    p = decode_bth(bytes(data[off + 8:udp_end]), number, src, dst)
    p.intact = whole and off + ulen == end and not p.malformed and (
        ip is None or struct.unpack_from("<I", data, end - 4)[0] ==
        icrc(bytes(ip), bytes(data[off:off + 8]), bytes(data[off + 8:end - 4])))
    return p


def decode_bth(b, number=0, src="", dst=""):
    """The UDP payload of a RoCEv2 packet -> Roce."""
    if len(b) < 12:
        return Roce(number, src, dst, -1, "", False, False, 0, 0, 0, 0,
                    decoded=False,
                    malformed=f"BTH needs 12 bytes, got {len(b)}")
    opcode, flags, pkey = struct.unpack_from("!BBH", b, 0)
    destqp = struct.unpack_from("!I", b, 4)[0] & 0xffffff
    apsn = struct.unpack_from("!I", b, 8)[0]
    name, hdrs = OPCODES.get(opcode, (f"OPCODE_0x{opcode:02x}", None))
    p = Roce(number, src, dst, opcode, name, bool(flags & 0x80),
             bool(apsn >> 31), pkey, destqp, apsn & 0xffffff,
             (flags >> 4) & 3)
    if hdrs is None:
        p.decoded = False
        return p
    need = 12 + sum(HDR_SIZE[h] for h in hdrs) + 4
    if len(b) < need:
        p.malformed = f"{name} needs {need} bytes, got {len(b)}"
        return p
    off = 12
    for h in hdrs:
        if h == "RETH":
            p.reth = struct.unpack_from("!QII", b, off)
        elif h == "AETH":
            v = struct.unpack_from("!I", b, off)[0]
            p.aeth = (v >> 24, v & 0xffffff)
        elif h == "AtomicETH":
            p.atomic = struct.unpack_from("!QIQQ", b, off)
        elif h == "AtomicAckETH":
            p.orig = struct.unpack_from("!Q", b, off)[0]
        elif h == "ImmDt":
            p.imm = struct.unpack_from("!I", b, off)[0]
        elif h == "IETH":
            p.ieth = struct.unpack_from("!I", b, off)[0]
        elif h == "DETH":
            p.deth = struct.unpack_from("!II", b, off)
            p.deth = (p.deth[0], p.deth[1] & 0xffffff)
        off += HDR_SIZE[h]
    end = len(b) - 4 - p.padcnt
    p.payload = b[off:max(off, end)]
    return p


# ---- pcap files -------------------------------------------------------------------

Record = namedtuple("Record", "ts caplen origlen data")


def read_pcap(blob):
    """(linktype, records, end, problem): the complete records of a pcap
    file's bytes, the offset where the last one ends, and what stopped the
    reading early (None, or 'a record cut short')."""
    if len(blob) < FILE_HEADER:
        raise ValueError(f"not a pcap file: {len(blob)} bytes, a header "
                         f"is {FILE_HEADER}")
    magic = struct.unpack_from("<I", blob, 0)[0]
    if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
        e = "<"
    elif struct.unpack_from(">I", blob, 0)[0] in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
        e = ">"
    else:
        raise ValueError(f"not a pcap file (magic 0x{magic:08x})")
    ns = struct.unpack_from(e + "I", blob, 0)[0] == PCAP_MAGIC_NS
    linktype = struct.unpack_from(e + "I", blob, 20)[0] & 0x0fffffff
    records, off, problem = [], FILE_HEADER, None
    while off < len(blob):
        if off + RECORD_HEADER > len(blob):
            problem = "a record header cut short"
            break
        sec, frac, caplen, origlen = struct.unpack_from(e + "IIII", blob, off)
        if off + RECORD_HEADER + caplen > len(blob):
            problem = "a record cut short"
            break
        data = blob[off + RECORD_HEADER:off + RECORD_HEADER + caplen]
        records.append(Record(sec + frac / (1e9 if ns else 1e6), caplen,
                              origlen, data))
        off += RECORD_HEADER + caplen
    return linktype, records, off, problem


def pcap_header(linktype=LINKTYPE_ETHERNET, snaplen=65535):
    return struct.pack("<IHHiIII", PCAP_MAGIC_US, 2, 4, 0, 0, snaplen,
                       linktype)


def pcap_record(data, ts=0.0, origlen=None):
    sec = int(ts)
    return struct.pack("<IIII", sec, int((ts - sec) * 1e6), len(data),
                       len(data) if origlen is None else origlen) + data


def write_pcap(path, frames, linktype=LINKTYPE_ETHERNET):
    """frames: bytes, or (bytes, origlen) for a frame captured short."""
    out = [pcap_header(linktype)]
    for i, f in enumerate(frames):
        data, origlen = (f, None) if isinstance(f, (bytes, bytearray)) else f
        out.append(pcap_record(bytes(data), 1000.0 + i / 1000, origlen))
    Path(path).write_bytes(b"".join(out))


# ---- building packets (lesson 16's synthesized captures, the self-check) ---------

def _csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def icrc(ip, udp, rest):
    """RoCEv2's invariant CRC (IBTA annex A17.3.3): CRC-32 over 8 bytes of
    ones, the IPv4 header with TOS, TTL and checksum set to ones, the UDP
    header with its checksum set to ones, and the BTH (its byte 4, the
    FECN/BECN/resv8a, set to ones) onwards."""
    ip = bytearray(ip)
    ip[1] = 0xff
    ip[8] = 0xff
    ip[10:12] = b"\xff\xff"
    udp = bytearray(udp)
    udp[6:8] = b"\xff\xff"
    rest = bytearray(rest)
    rest[4] = 0xff
    return zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(rest)) & 0xffffffff


def roce_frame(src, dst, opcode, destqp, psn, *, se=False, ackreq=False,
               pkey=0xffff, padcnt=None, reth=None, aeth=None, atomic=None,
               orig=None, imm=None, ieth=None, deth=None, payload=b"",
               sport=0xc000, cut=None, extra=b""):
    """An Ethernet/IPv4/UDP frame carrying one RoCEv2 packet with these
    fields. `cut`: keep only the first N bytes of the UDP payload (a
    malformed packet: the headers go past it). `extra`: raw bytes in place
    of the headers the opcode has (for opcodes this module does not know)."""
    if padcnt is None:
        padcnt = -len(payload) % 4
    flags = (0x80 if se else 0) | (padcnt << 4)
    bth = struct.pack("!BBHII", opcode, flags, pkey, destqp & 0xffffff,
                      (0x80000000 if ackreq else 0) | (psn & 0xffffff))
    hdrs = OPCODES.get(opcode, (None, ()))[1]
    ext = b""
    for h in hdrs:
        if h == "RETH":
            ext += struct.pack("!QII", *reth)
        elif h == "AETH":
            ext += struct.pack("!I", (aeth[0] << 24) | (aeth[1] & 0xffffff))
        elif h == "AtomicETH":
            ext += struct.pack("!QIQQ", *atomic)
        elif h == "AtomicAckETH":
            ext += struct.pack("!Q", orig)
        elif h == "ImmDt":
            ext += struct.pack("!I", imm)
        elif h == "IETH":
            ext += struct.pack("!I", ieth)
        elif h == "DETH":
            ext += struct.pack("!II", deth[0], deth[1] & 0xffffff)
    body = bth + ext + extra + payload + b"\0" * padcnt
    ulen = 8 + len(body) + 4
    udp = struct.pack("!HHHH", sport, ROCE_PORT, ulen, 0)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ulen, 0, 0x4000,
                               64, 17, 0, bytes(map(int, src.split("."))),
                               bytes(map(int, dst.split(".")))))
    ip[10:12] = struct.pack("!H", _csum(bytes(ip)))
    crc = struct.pack("<I", icrc(bytes(ip), udp, body))
    roce = body + crc
    if cut is not None:
        roce = roce[:cut]
        ulen = 8 + len(roce)
        udp = struct.pack("!HHHH", sport, ROCE_PORT, ulen, 0)
        ip[2:4] = struct.pack("!H", 20 + ulen)
        ip[10:12] = b"\0\0"
        ip[10:12] = struct.pack("!H", _csum(bytes(ip)))
    return ether(bytes(ip) + udp + roce)


def ether(ip_packet, etype=0x0800, src=b"\x52\x54\x00\xc0\x02\x01",
          dst=b"\x52\x54\x00\xc0\x02\x02"):
    return dst + src + struct.pack("!H", etype) + ip_packet


# ---- what crossed: a Segment of the capture ----------------------------------------

@dataclass
class Message:
    """One RoCE message in one direction: its packets, first to last."""
    packets: list = field(default_factory=list)

    @property
    def kind(self):
        low = self.packets[0].low
        if low in SENDS:
            return "SEND"
        if low in WRITES:
            return "RDMA_WRITE"
        if low == 0x0c:
            return "RDMA_READ_REQUEST"
        if low in READ_RESPONSES:
            return "RDMA_READ_RESPONSE"
        return self.packets[0].name

    @property
    def data(self):
        return b"".join(p.payload for p in self.packets)

    def _offset(self, psn):
        return (psn - self.packets[0].psn) % (1 << 24)

    def before(self, psn):
        """Is `psn` before this message's first packet?"""
        return bool(self.packets) and self._offset(psn) >= 1 << 23

    def spans(self, psn):
        """Is `psn` after this message's first packet and before its last
        (a packet of it that came late)?"""
        return (bool(self.packets) and self.packets[0].low in FIRST and
                0 < self._offset(psn) < self._offset(self.packets[-1].psn))

    def place(self, p):
        """Add packet `p` in its place by PSN (after the first packet)."""
        i = len(self.packets)
        if self.packets and self.packets[0].low in FIRST:
            while i > 1 and self._offset(self.packets[i - 1].psn) > \
                    self._offset(p.psn):
                i -= 1
        self.packets.insert(i, p)

    @property
    def reth(self):
        return next((p.reth for p in self.packets if p.reth), None)

    @property
    def imm(self):
        return next((p.imm for p in self.packets if p.imm is not None), None)

    def describe(self):
        p0 = self.packets[0]
        text = (f"{p0.src} > {p0.dst} qp 0x{p0.destqp:06x} psn {p0.psn}: "
                + " ".join(p.name.split("_", 1)[1] for p in self.packets[:4])
                + (f" ... ({len(self.packets)} packets)"
                   if len(self.packets) > 4 else ""))
        if self.reth:
            text += (f", RETH va 0x{self.reth[0]:x} rkey 0x{self.reth[1]:x} "
                     f"len {self.reth[2]}")
        if self.imm is not None:
            text += f", imm {self.imm}"
        if p0.atomic:
            text += (f", AtomicETH va 0x{p0.atomic[0]:x} rkey "
                     f"0x{p0.atomic[1]:x} swap/add {p0.atomic[2]} cmp "
                     f"{p0.atomic[3]}")
        if self.data:
            text += f", {len(self.data)} payload bytes"
        return text


class Segment:
    """The frames of a capture between two marks."""

    def __init__(self, blob, first_frame=1):
        self.blob = blob
        linktype, self.records, _, _ = read_pcap(blob)
        if linktype != LINKTYPE_ETHERNET:
            raise ValueError(f"capture of link type {linktype}, not Ethernet")
        self.first_frame = first_frame
        self.decoded = [decode_frame(r.data, first_frame + i)
                        for i, r in enumerate(self.records)]
        for r, d in zip(self.records, self.decoded):
            if isinstance(d, Roce) and r.caplen < r.origlen:
                d.intact = False

    @property
    def roce(self):
        return [d for d in self.decoded if isinstance(d, Roce)]

    def packets(self, src=None, dst=None):
        return [p for p in self.roce if (src is None or p.src == src)
                and (dst is None or p.dst == dst)]

    def messages(self, src=None, dst=None, retransmits=False):
        """The RoCE messages from src to dst, in order: a FIRST starts one,
        MIDDLEs and a LAST continue it (per destination QP), each in its
        place by PSN (a MIDDLE that came after its LAST - lost on the way
        and sent again - joins the message whose PSNs surround it); an ONLY,
        an ACK, a READ request or an atomic is one by itself. A packet whose
        PSN its QP already carried (a retransmission) is left out unless
        `retransmits`; so is a READ request for the rest of an earlier one
        (the requester asks again from the first response it lacks: a later
        PSN, the address that far on, the same rkey and end). But a packet
        that was not intact (cut short, or a wrong ICRC: its receiver
        dropped it), or a MIDDLE shorter than its FIRST, gives way to the
        next one at its PSN."""
        out, open_, last, seen, reads = [], {}, {}, {}, {}
        for p in self.packets(src, dst):
            if not p.decoded or p.malformed:
                continue
            key = (p.src, p.dst, p.destqp)
            if not retransmits and p.low not in (0x11, 0x12):
                # (A response sent again may change FIRST to MIDDLE: the
                # PSN alone says it is the same packet.)
                if (key, p.psn) in seen:
                    place = seen[(key, p.psn)]
                    if place is not None:           # it replaces a damaged one
                        m, old = place
                        m.packets[next(i for i, q in enumerate(m.packets)
                                       if q is old)] = p
                        seen[(key, p.psn)] = None if p.intact else (m, p)
                    continue
                if p.low == 0x0c and p.reth:
                    va, rkey, n = p.reth
                    prev = reads.get(key)
                    if (prev and prev[1] == rkey and prev[0] < va and
                            prev[0] + prev[2] == va + n and
                            0 < (p.psn - prev[3]) % (1 << 24) < 1 << 23):
                        seen[(key, p.psn)] = None
                        continue
                    reads[key] = (va, rkey, n, p.psn)
            if p.low in FIRST:
                m = open_[key] = Message([p])
                last[key] = [*last.get(key, [])[-7:], m]
                out.append(m)
            elif p.low in MIDDLE or p.low in LAST:
                m = open_.get(key)
                if m is None or m.before(p.psn):
                    # A packet that came late: the message whose PSNs
                    # surround it (one of its QP's last few), if any.
                    m = next((q for q in reversed(last.get(key, []))
                              if q.spans(p.psn)), m)
                if m is None:
                    m = Message()
                    last.setdefault(key, []).append(m)
                    out.append(m)
                m.place(p)
                if m is open_.get(key) or m.packets[-1] is p:
                    if p.low in LAST:
                        open_.pop(key, None)
                    else:
                        open_[key] = m
            else:
                m = Message([p])
                out.append(m)
            # (A MIDDLE carries what its FIRST did, the path MTU: one that
            # carries less was not taken either.)
            whole = p.intact and not (p.low in MIDDLE and m.packets[0].low
                                      in FIRST and len(p.payload) !=
                                      len(m.packets[0].payload))
            seen[(key, p.psn)] = None if whole else (m, p)
        return out

    def tcp(self, src=None, dst=None):
        """{(src, sport, dst, dport): bytes}: each TCP direction's payload
        in sequence order, each byte once (retransmissions merged)."""
        streams = {}
        for d in self.decoded:
            if not isinstance(d, Tcp) or not d.payload:
                continue
            if (src and d.src != src) or (dst and d.dst != dst):
                continue
            streams.setdefault((d.src, d.sport, d.dst, d.dport), []).append(d)
        out = {}
        for key, segs in streams.items():
            base = min(s.seq for s in segs)
            buf = bytearray()
            for s in sorted(segs, key=lambda s: (s.seq - base) % 2**32):
                at = (s.seq - base) % 2**32
                if at + len(s.payload) > len(buf):
                    buf[at:] = b""
                    buf.extend(b"\0" * (at - len(buf)))
                    buf[at:at + len(s.payload)] = s.payload
            out[key] = bytes(buf)
        return out

    def summary(self, limit=40):
        """Lines for a transcript: what crossed, message by message."""
        msgs = self.messages(retransmits=True)
        lines = [f"# the wire (host A's capture): {len(self.records)} frames, "
                 f"{len(self.roce)} RoCEv2 packets, {len(msgs)} messages"]
        lines += ["#   " + m.describe() for m in msgs[:limit]]
        if len(msgs) > limit:
            lines.append(f"#   ... {len(msgs) - limit} more")
        for (s, sp, d, dp), data in sorted(self.tcp().items()):
            lines.append(f"#   TCP {s}:{sp} > {d}:{dp}: {len(data)} bytes")
        return "\n".join(lines)


def pattern_run(data, least=32):
    """(offset, length) of the longest run in `data` of the course's
    pattern - each byte one more than the last, 251 followed by 1 - if it
    is at least `least` long, else None. Every lesson's payload is such a
    run (grader/evidence/trusted/patterns.py); nothing else the lessons put
    on TCP has one longer than a few bytes."""
    best, start = None, 0
    for i in range(1, len(data) + 1):
        if i < len(data) and data[i] != 0 and data[i - 1] != 0 and \
                data[i] == data[i - 1] % 251 + 1:
            continue
        if i - start >= least and (best is None or i - start > best[1]):
            best = (start, i - start)
        start = i
    return best


QpInfo = namedtuple("QpInfo", "lid qpn psn gid addr rkey length")
_QP_INFO = struct.Struct("!HHII16sQII")     # grader/evidence/trusted/oob.py


def qp_infos(stream):
    """The struct qp_info at the start of a TCP direction (course.c's
    course_oob_exchange: the first 44 bytes each way), or None."""
    if len(stream) < _QP_INFO.size:
        return None
    lid, _, qpn, psn, gid, addr, rkey, length = _QP_INFO.unpack_from(stream)
    return QpInfo(lid, qpn, psn, gid, addr, rkey, length)


class Capture:
    """Host A's view of the pair's capture file (RDMA_CAPTURE)."""

    def __init__(self, path):
        self.path = Path(path)
        self.frames = 0             # complete records before the last mark

    @classmethod
    def from_env(cls, env=os.environ):
        path = env.get("RDMA_CAPTURE")
        return cls(path) if path and env.get("RDMA_PEER_JOBS") else None

    def _complete(self):
        blob = self.path.read_bytes()
        _, records, end, _ = read_pcap(blob)
        return blob, records, end

    def mark(self):
        """The end of the capture's last complete record, now."""
        _, records, end = self._complete()
        return (end, len(records))

    def since(self, mark, record=True):
        """A Segment of what crossed after `mark`: a pcap of its own."""
        blob, _, end = self._complete()
        seg = Segment(blob[:FILE_HEADER] + blob[mark[0]:end],
                      first_frame=mark[1] + 1)
        if record:
            from grader.core.harness import current_transcript
            current_transcript().add(seg.summary())
        return seg


# ---- tshark: an independent decoder ---------------------------------------------

TSHARK_FIELDS = [
    "frame.number", "ip.src", "ip.dst", "infiniband.bth.opcode",
    "infiniband.bth.se", "infiniband.bth.a", "infiniband.bth.destqp",
    "infiniband.bth.psn", "infiniband.bth.padcnt", "infiniband.reth.va",
    "infiniband.reth.r_key", "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome", "infiniband.aeth.msn",
    "infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt", "infiniband.immdt",
    "infiniband.deth.q_key", "infiniband.deth.srcqp", "infiniband.ieth",
    "udp.length", "_ws.malformed", "_ws.expert.message"]


# What tshark would try to read a RoCE payload as: the payload is data here.
PAYLOAD_PROTOCOLS = ["rpcordma", "smc", "smb_direct", "nvme-rdma", "lnet",
                     "iser", "infiniband.eoib", "infiniband_sdp", "fcoib",
                     "drbd"]


def tshark():
    return shutil.which("tshark")


def reshuffle(blob, rng):
    """A real capture with its identifiers made new: every destination QP
    number mapped to a random one (the same one each time it appears),
    every PSN moved by one random amount (mod 2^24: each QP's sequence
    stays a sequence), every rkey mapped to a random one, every virtual
    address moved by one random page-aligned amount, the atomic ACKs' old
    values by another; the ICRC is computed again. Frames that are not
    RoCE v2 over IPv4 stay as they were. (Lesson 16's captures, shown to
    roce_dump afresh each grading.)"""
    linktype, records, _, _ = read_pcap(blob)
    qpns, rkeys = {}, {}
    dpsn = rng.randrange(1, 1 << 24)
    dva = rng.randrange(1, 1 << 40) << 12
    dorig = rng.randrange(1, 1 << 48)

    def new(table, old, bits):
        while old not in table:
            v = rng.randrange(1, 1 << bits)
            if v not in table.values():
                table[old] = v
        return table[old]

    out = [blob[:FILE_HEADER]]
    for r in records:
        data = bytearray(r.data)
        p = decode_frame(bytes(data)) if linktype == LINKTYPE_ETHERNET else None
        if isinstance(p, Roce) and not p.malformed and ":" not in p.src \
                and r.caplen == r.origlen:
            ihl = (data[14] & 0x0f) * 4
            at = 14 + ihl + 8
            b = data[at:]
            struct.pack_into("!I", b, 4, (b[4] << 24) |
                             new(qpns, p.destqp, 24))
            struct.pack_into("!I", b, 8, (b[8] & 0x80) << 24 |
                             ((p.psn + dpsn) & 0xffffff))
            off = 12
            for h in OPCODES.get(p.opcode, (None, ()))[1]:
                if h in ("RETH", "AtomicETH"):
                    va, rkey = struct.unpack_from("!QI", b, off)
                    struct.pack_into("!QI", b, off, (va + dva) % (1 << 64),
                                     new(rkeys, rkey, 32))
                elif h == "AtomicAckETH":
                    orig = struct.unpack_from("!Q", b, off)[0]
                    struct.pack_into("!Q", b, off, (orig + dorig) % (1 << 64))
                off += HDR_SIZE[h]
            ip, udp = bytes(data[14:14 + ihl]), bytes(data[14 + ihl:at])
            if ihl == 20:
                struct.pack_into("<I", b, len(b) - 4,
                                 icrc(ip, udp, bytes(b[:-4])))
            data[at:] = b
        out.append(struct.pack("<IIII", int(r.ts), int((r.ts % 1) * 1e6),
                               len(data), r.origlen) + bytes(data))
    return b"".join(out)


def tshark_packets(path, timeout=120):
    """tshark's decoding of every RoCEv2 packet of a pcap file: one dict
    per packet, TSHARK_FIELDS -> text ('' when absent). What would read a
    payload as another protocol (RPC-over-RDMA's heuristic; taking its first
    bytes for an EtherType) is off: the payload is data."""
    exe = tshark()
    if not exe:
        raise FileNotFoundError("tshark is not installed "
                                "(vm-setup/install-deps.sh installs it)")
    cmd = [exe, "-n", "-r", str(path),
           "-o", "infiniband.identify_payload:FALSE",
           "-Y", "udp.dstport == 4791", "-T", "fields",
           "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for p in PAYLOAD_PROTOCOLS:
        cmd += ["--disable-protocol", p]
    for f in TSHARK_FIELDS:
        cmd += ["-e", f]
    with tempfile.TemporaryDirectory() as home:
        # tshark reads and may write its profile under HOME.
        res = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=timeout,
                             env={**os.environ, "HOME": home,
                                  "XDG_CONFIG_HOME": home})
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {res.returncode}\n"
                           f"{res.stderr.strip()}")
    rows = []
    for line in res.stdout.splitlines():
        vals = line.split("\t")
        vals += [""] * (len(TSHARK_FIELDS) - len(vals))
        row = dict(zip(TSHARK_FIELDS, vals))
        # Malformed as InfiniBand (its headers), not a payload's guess.
        if "Malformed Packet: IB]" not in row["_ws.malformed"]:
            row["_ws.malformed"] = ""
        rows.append(row)
    return rows


def tshark_int(text):
    """A tshark field's value as an int ('' -> None; hex or decimal)."""
    if text == "":
        return None
    text = text.split(",")[0]
    return int(text, 16) if text.lower().startswith("0x") else int(text)


# ---- for the lessons' wire tests (test_NN_*_wire.py) -----------------------------

WHERE = ".grade/wire.pcap"      # where make grade HOSTS=2 leaves the capture


def hosts(env=os.environ):
    """(A, B): host A's address (the program's) and host B's (the peers')."""
    return env.get("RDMA_IP", "192.0.2.1"), env.get("RDMA_PEER_IP", "192.0.2.2")


def capture():
    """This grading's capture; a test that needs it fails without one (the
    wire tests are collected only where it exists: grader/lessons/conftest.py)."""
    from grader.core.harness import GradeFailure
    cap = Capture.from_env()
    if cap is None or not cap.path.exists():
        raise GradeFailure("no capture of the link: the wire tests run on "
                           "host A of a linked pair (make grade HOSTS=2)")
    return cap


def frames(msgs):
    """'frames N-M of .grade/wire.pcap' for failure messages."""
    nums = [p.frame for m in msgs for p in m.packets]
    if not nums:
        return "no frames"
    lo, hi = min(nums), max(nums)
    return (f"frame {lo}" if lo == hi else f"frames {lo}-{hi}") + \
        f" of {WHERE} (tshark -r {WHERE} -Y infiniband)"


def sent_qp_info(seg, src, nth=0):
    """The `nth` struct qp_info `src` sent on TCP in this segment (its
    TCP connections in the order they started), as it crossed the wire."""
    from grader.core.harness import GradeFailure
    streams = [(k, v) for k, v in seg.tcp(src=src).items()
               if len(v) >= _QP_INFO.size]
    firsts = {}
    for d in seg.decoded:
        if isinstance(d, Tcp) and d.payload:
            firsts.setdefault((d.src, d.sport, d.dst, d.dport), d.frame)
    streams.sort(key=lambda kv: firsts.get(kv[0], 0))
    if len(streams) <= nth:
        raise GradeFailure(f"no qp_info from {src} crossed the wire on TCP "
                           f"({len(streams)} connection(s) carried one)")
    return qp_infos(streams[nth][1])


def expect_no_data_on_tcp(seg, what, least=32):
    """No TCP direction of the segment carries a run of the course's
    pattern: the data crossed as RDMA, the socket carried addresses."""
    from grader.core.harness import GradeFailure
    for (s, sp, d, dp), data in sorted(seg.tcp().items()):
        run = pattern_run(data, least)
        if run:
            raise GradeFailure(
                f"{what}: the TCP connection {s}:{sp} > {d}:{dp} carried "
                f"{run[1]} bytes of the course's pattern (from byte "
                f"{run[0]} of its {len(data)}): the data crossed the side "
                f"channel, which is for the qp_info and the syncs only\n"
                f"  see {WHERE}: tshark -r {WHERE} -Y tcp.len")


def expect_data(got, want, what, msgs):
    """The bytes a message carried on the wire against the documented ones."""
    from grader.core.harness import GradeFailure
    if got == want:
        return
    if len(got) != len(want):
        raise GradeFailure(f"{what}: {len(got)} bytes crossed the wire, "
                           f"expected {len(want)} ({frames(msgs)})")
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    raise GradeFailure(f"{what}: byte {i} on the wire is 0x{got[i]:02x}, "
                       f"expected 0x{want[i]:02x} ({frames(msgs)})")


def kinds(msgs):
    """The kinds of these messages, for expect(): ['SEND', 'SEND', ...]."""
    return [m.kind for m in msgs]


def requests(seg, src, dst):
    """src's messages to dst that are not acknowledgements."""
    return [m for m in seg.messages(src=src, dst=dst)
            if m.packets[0].low not in (0x11, 0x12)]


def qp_info_exchanges(seg, a, b):
    """Per TCP connection between a and b, in the order they first carried
    data: (the qp_info b sent, the qp_info a sent)."""
    first, streams = {}, seg.tcp()
    for d in seg.decoded:
        if isinstance(d, Tcp) and d.payload:
            first.setdefault((d.src, d.sport, d.dst, d.dport), d.frame)
    out = []
    for (s, sp, d, dp), data in sorted(streams.items(),
                                       key=lambda kv: first.get(kv[0], 0)):
        if s != a or d != b:
            continue
        back = streams.get((d, dp, s, sp), b"")
        if len(data) >= _QP_INFO.size and len(back) >= _QP_INFO.size:
            out.append((qp_infos(back), qp_infos(data)))
    return out
