"""Lesson 05: a SEND/RECV ping-pong between two processes.

The server (no HOST) and the client (HOST) are run as two processes on the
one rxe device; the server is started with --port 0 and the client is given
the port from its readiness line.

What the rxe hw_counters say (measured in the course's micro-VM, Debian 6.1
kernel, rxe0 on a dummy netdev, active MTU 1024; one device, so both sides
add up):

    ibv_rc_pingpong -n 10 -s 1500     rdma_sends +20  rdma_recvs +20
                                      sent_pkts +60   rcvd_pkts +60
    ib_send_bw -n 10 -s 65536         rdma_sends +10  rdma_recvs +10
                                      sent_pkts +650  rcvd_pkts +650
    ib_write_bw -n 10 -s 65536        sent_pkts +650  rcvd_pkts +650 (only)
    ib_read_bw -n 10 -s 65536         sent_pkts +650  rcvd_pkts +650 (only)
    pingpong -n 100 -s 1500           rdma_sends +200 rdma_recvs +200
                                      sent_pkts +600  rcvd_pkts +600

rdma_sends counts SEND work requests completed at the requester
(rxe_comp.c: SEND, SEND_WITH_IMM, SEND_WITH_INV); rdma_recvs counts receive
completions at the responder (rxe_resp.c: a SEND, or a WRITE WITH IMMEDIATE,
that consumed a posted receive). RDMA WRITE and READ move only sent_pkts and
rcvd_pkts. Each 1500-byte message is 2 packets plus an ACK. A ping that finds
no receive posted moves rcvd_rnr_err / send_rnr_err (one per RNR NAK) and
then retry_rnr_exceeded_err.

So N round trips must move rdma_sends and rdma_recvs by 2N (each side SENDs N
messages and receives N), and sent_pkts by at least 2N * ceil(SIZE / 4096)
whatever the MTU.
"""

import math
import re
import time

import pytest

from grader import (GradeFailure, expect, expect_line, expect_match, points,
                    proven_by)
from grader.session import pairs
from grader.session.pairs import T_SERVER, clean_failure, host, pair

PROG = "pingpong"
ITERS = 50
SIZE = 1500          # two packets at MTU 1024: messages span packets
T = "10"             # --timeout of normal runs (the VM can be slow)



ARGS = ["-n", ITERS, "-s", SIZE, "-t", T]       # main_run's client
# ... and its server: -t T_SERVER (pairs.py says why).
SERVER_ARGS = ["-n", ITERS, "-s", SIZE, "-t", T_SERVER]


@pytest.fixture(scope="module")
def main_run(build, rdma):
    """The ping-pong the first tests look at, run once: a pairs.Pair."""
    return pair(build, rdma, PROG, SERVER_ARGS, ARGS)


# ---- the ping-pong -----------------------------------------------------------

@points(5, "ping-pong: N round trips, both sides exit 0")
def test_pingpong(build, rdma, main_run):
    pairs.both_ok(build, rdma, PROG, main_run, SERVER_ARGS, ARGS)
    for who, res in (("server", main_run.server), ("client", main_run.client)):
        expect_line(res.stdout, "connected", f"{who} stdout")


@points(3, "the server checked every ping")
@proven_by("test_peer_corrupt_ping")
def test_server_verifies(main_run):
    expect_line(main_run.server.stdout, f"verified {ITERS} messages of {SIZE} bytes",
                "server stdout")


@points(3, "the client checked every pong")
@proven_by("test_peer_corrupt_pong")
def test_client_verifies(main_run):
    expect_line(main_run.client.stdout, f"verified {ITERS} messages of {SIZE} bytes",
                "client stdout")


@points(2, "the client prints the average round-trip time")
def test_rtt(main_run):
    cli = main_run.client
    m = expect_match(cli.stdout,
                     r"^average rtt: ([0-9.]+) us \((\d+) round trips of "
                     r"(\d+) bytes\)$", "client stdout")
    expect((int(m.group(2)), int(m.group(3))), (ITERS, SIZE),
           "round trips and bytes in the 'average rtt' line")
    rtt = float(m.group(1))
    if not 0 < rtt < cli.duration * 1e6:
        raise GradeFailure(f"average rtt {rtt} us is impossible: the whole "
                           f"client ran {cli.duration:.2f} s")


@points(4, "rxe counters: 2N SENDs and 2N RECVs went through the device")
@proven_by("test_peer_server_checks_pings", "test_peer_client_checks_pongs")
def test_counters(main_run):
    delta = main_run.delta
    names = ["SENDs sent", "receives consumed", "packets sent",
             "packets received"]
    for name in ("SENDs sent", "receives consumed"):
        got = delta.of(name)
        if not 2 * ITERS <= got <= 2 * ITERS + 4:
            raise GradeFailure(
                f"{delta.label(name)} moved by {got} during {ITERS} round "
                f"trips; expected {2 * ITERS} (each side SENDs and receives "
                f"{ITERS} messages)\n  all deltas: {delta.show(names)}")
    least = 2 * ITERS * math.ceil(SIZE / 4096)
    if delta.of("packets sent") < least:
        raise GradeFailure(f"only {delta.of('packets sent')} packets sent "
                           f"for {2 * ITERS} messages of {SIZE} bytes "
                           f"(expected at least {least})\n"
                           f"  all deltas: {delta.show(names)}")


# ---- faults --------------------------------------------------------------------

@points(2, "peer killed mid-run: the client reports it and exits 1")
def test_peer_killed(build, rdma):
    # The server's -t bounds its wait for the client to start (it is
    # killed anyway): T_SERVER, as pair()'s servers. With -t 10 the
    # solution's server gave up before its client, started after the
    # server's 'listening', had opened its device and connected (two make
    # tests on a slower host: the client took more than 10 s to get there,
    # then found the port closed, 'Connection refused'). The client's -t 10
    # is how long it may wait for a pong that will not come, and also
    # bounds its connect and exchange (with -t 2, a second make test beside
    # this one: 'cannot connect ...: Connection timed out' to a server that
    # was listening). From the kill it has 30 s to exit by itself; the
    # solution sees the server's socket close and exits at once.
    args = ["-n", "1000000", "-s", "64"]
    with build.start(PROG, "--port", "0", *args, "-t", T_SERVER) as server:
        with build.start(PROG, "--port", server.port, *args, "-t", T, host(rdma),
                         ready=r"^connected$") as client:
            time.sleep(0.5)          # well inside the data path
            server.kill()
            res = client.wait(timeout=30)
    res.fails(what="client after its server was killed (30 s from the "
              "kill to exit by itself)")
    expect_match(res.stderr, r"round trip \d+: ", "client stderr (which round "
                 "trip failed, and how)")


@points(2, "peer's QP gone: the SEND fails with the completion status as text")
def test_qp_gone(build, rdma):
    pairs.qp_gone(build, rdma, PROG, ["-n", "5", "-s", "64", "-t", "10"],
                 "client connected to a QP that does not exist", length=64)


@points(1, "no server: 'cannot connect', exit 1")
def test_no_server(build, rdma):
    pairs.no_server(build, rdma, PROG)


@points(1, "unknown host: 'cannot resolve', exit 1")
def test_bad_host(build, rdma):
    pairs.bad_host(build, PROG)


@points(1, "no client: the server gives up after --timeout, exit 1")
def test_no_client(build, rdma):
    res = build.run(PROG, "--port", "0", "-t", "1", timeout=40)
    clean_failure(res, build.command(PROG, "--port", "0", "-t", "1"), 25)
    expect_match(res.stdout, r"^listening on port \d+$", "stdout")
    expect_match(res.stderr, r"no client connected within 1 s", "stderr")


@points(1, "bad GID index: named, exit 1")
def test_bad_gid(build, rdma):
    pairs.bad_gid(build, PROG)


# ---- rc.c as the later lessons use it ------------------------------------------

RC_CHECK_RE = re.compile(
    r"^(?P<name>[AB]) qpn 0x(?P<qpn>[0-9a-f]+) state (?P<state>\S+) "
    r"access 0x(?P<access>[0-9a-f]+) max_rd_atomic (?P<max_rd_atomic>\d+) "
    r"max_dest_rd_atomic (?P<max_dest_rd_atomic>\d+) "
    r"rnr_retry (?P<rnr_retry>\d+) timeout (?P<timeout>\d+) "
    r"retry_cnt (?P<retry_cnt>\d+) min_rnr_timer (?P<min_rnr_timer>\d+) "
    r"path_mtu (?P<path_mtu>\d+) dest_qpn 0x(?P<dest_qpn>[0-9a-f]+) "
    r"sq_psn 0x(?P<sq_psn>[0-9a-f]+) rq_psn 0x(?P<rq_psn>[0-9a-f]+)$", re.M)

# What lessons/05-send-recv/rc_check.c asks of rc.c for A and B (its
# rc_params), and lesson 05's values (course.h) for everything else.
# IBV_ACCESS_REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC = 0xe; IBV_MTU_1024 = 3.
RC_WANT = {
    "A": {"access": 0xe, "max_rd_atomic": 4, "max_dest_rd_atomic": 4,
          "rnr_retry": 2},
    "B": {"access": 0, "max_rd_atomic": 1, "max_dest_rd_atomic": 1,
          "rnr_retry": 3},
}
RC_COMMON = {"timeout": 17, "retry_cnt": 6, "min_rnr_timer": 12,
             "path_mtu": 3}


@points(3, "rc.c gives a later lesson the QP its rc_params ask for (ibv_query_qp)")
def test_rc_params(build, rdma):
    res = build.run("rc_check").ok(build.command("rc_check"))
    got = {m.group("name"): m for m in RC_CHECK_RE.finditer(res.stdout)}
    expect(sorted(got), ["A", "B"], f"'A ...'/'B ...' lines of "
           f"'{build.command('rc_check')}' (lessons/05-send-recv/rc_check.c "
           f"reads each QP back with ibv_query_qp())")
    for name, other in (("A", "B"), ("B", "A")):
        m, o = got[name], got[other]
        expect(m.group("state"), "RTS", f"QP {name}'s state after "
               f"rc_connect_pair()")
        want = {**RC_WANT[name], **RC_COMMON}
        have = {k: int(m.group(k), 16 if k == "access" else 10)
                for k in want}
        expect(have, want, f"QP {name} as the device reports it, vs its "
               f"rc_params (rc_check.c) and lesson 05's values (course.h); "
               f"rc_open() and rtr_rts() must use rc->params where TODOs "
               f"1, 3 and 4 say so")
        expect(int(m.group("dest_qpn"), 16), int(o.group("qpn"), 16),
               f"QP {name}'s dest_qp_num vs QP {other}'s number")
        expect(int(m.group("rq_psn"), 16), int(o.group("sq_psn"), 16),
               f"QP {name}'s rq_psn vs QP {other}'s sq_psn")
