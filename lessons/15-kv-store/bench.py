#!/usr/bin/python3
"""bench.py BUILD_DIR - lesson 15's measurements, in one run on one device
(make bench-kv runs it in vm-setup/with-rxe on the reference solution):

  1. one-sided GET against GET by request (--rpc-get), and a 90/10 mix,
     kv_client --bench against kv_server: p50, p99, kops/s;
  2. torn READs: one client PUTs 8 keys as fast as it can while another
     GETs them: how many of the reader's READs came back torn;
  3. the graded ratios (lessons/15-kv-store/README.md, "Grading"):
     kv_client beside the reference client on one reference server (GETs
     per second, same window), and the reference client's median GET on
     kv_server against on the reference server.

Each is measured BENCH_ROUNDS times (default 3), interleaved, and the best
round counts (a loaded host preempts the guest: every round is printed).
BENCH_GETS (default 5000) GETs per run.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

COURSE = Path(__file__).resolve().parent.parent.parent
KV = COURSE / "grader/evidence/trusted/kv.py"
PY = "/usr/bin/python3"
IP = os.environ.get("RDMA_IP", "localhost")
SUMMARY = re.compile(r"^kv: (\d+) ops in ([\d.]+) s = ([\d.]+) kops/s, GET "
                     r"p50 ([\d.]+) p99 ([\d.]+) us$", re.M)
DONE = re.compile(r"^done: (\d+) GETs in (\d+) READs \((\d+) torn\)", re.M)
port = 18900


def next_port():
    global port
    port += 1
    return port


def start(cmd, ready=None):
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if ready:
        for line in p.stdout:
            if re.search(ready, line):
                break
        else:
            sys.exit(f"bench.py: {cmd[0]} ended before '{ready}'")
    return p


def finish(p, what):
    out = p.communicate(timeout=300)[0]
    if p.returncode:
        sys.exit(f"bench.py: {what} failed (exit {p.returncode}):\n{out}")
    return out


def peer_result(out):
    for line in out.splitlines():
        if line.startswith("peer-result "):
            v = json.loads(line.split(" ", 1)[1])
            if not v["ok"]:
                sys.exit(f"bench.py: a reference peer says: {v['error']}")
            return v
    sys.exit(f"bench.py: no peer-result in:\n{out}")


def own_pair(build, n, *client_args):
    """kv_server -c 1 and one kv_client --bench: its summary numbers."""
    p = next_port()
    srv = start([build / "kv_server", "-p", p, "-c", 1, "-t", 30],
                ready="listening")
    out = finish(start([build / "kv_client", "-p", p, "--bench", "-n", n,
                        "-t", 30, *client_args, IP]), "kv_client")
    finish(srv, "kv_server")
    m = SUMMARY.search(out)
    return float(m.group(4)), float(m.group(5)), float(m.group(3))


def torn(build, n):
    p = next_port()
    srv = start([build / "kv_server", "-p", p, "-c", 2, "-t", 30],
                ready="listening")
    common = ["-p", p, "--bench", "-n", n, "--keys", 8, "-t", 30]
    writer = start([build / "kv_client", *common, "--get-pct", 0, IP])
    out = finish(start([build / "kv_client", *common, "--get-pct", 100,
                        IP]), "reader")
    finish(writer, "writer")
    finish(srv, "kv_server")
    m = DONE.search(out)
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def client_ratio(build, n):
    """The graded client ratio: kv_client and the reference client at
    once on one reference server (its clock gives kv_client's window)."""
    ref = subprocess.Popen([PY, str(KV), "server", "--clients", "2",
                            "--buckets", "64", "--timeout", "30",
                            "--bench-stop",
                            *[f"--preload=key{i}={'v' * 32}"
                              for i in range(32)]],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    line = ref.stdout.readline()
    p = int(re.search(r"listening on port (\d+)", line).group(1))
    rc = start([PY, KV, "client", "--host", IP, "--port", p, "--until-stop",
                "--bench-keys", 32, "--timeout", 30])
    cli = start([build / "kv_client", "-p", p, "--bench", "-n", n, "--keys",
                 32, "--get-pct", 100, "-t", 30, IP])
    out = finish(cli, "kv_client")
    rv = peer_result(finish(rc, "the reference client"))["bench"]
    sv = peer_result(finish(ref, "the reference server"))
    mine = next(c for c in sv["clients"] if c["qpn"] == int(
        re.search(r"^local: .* qpn 0x([0-9a-f]+) ", out, re.M).group(1), 16))
    rate = n / (mine["t_end"] - mine["t_go"])
    return rate, rv["rate"], float(SUMMARY.search(out).group(4)), rv["p50_us"]


def server_p50(build, n, own):
    if own:
        p = next_port()
        srv = start([build / "kv_server", "-p", p, "-c", 1, "-t", 30],
                    ready="listening")
    else:
        srv = subprocess.Popen([PY, str(KV), "server", "--buckets", "64",
                                "--timeout", "30"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        p = int(re.search(r"(\d+)", srv.stdout.readline()).group(1))
    v = peer_result(finish(start([PY, KV, "client", "--host", IP, "--port", p,
                                  "--bench", n, "--bench-keys", 32,
                                  "--timeout", 30]), "the reference client"))
    finish(srv, "the server")
    return v["bench"]["p50_us"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench.py BUILD_DIR")
    build = Path(sys.argv[1])
    n = int(os.environ.get("BENCH_GETS", "5000"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    print(f"bench-kv: {build}, {n} GETs per run, {rounds} rounds, "
          f"{os.cpu_count()} CPU(s), device {os.environ.get('RDMA_DEVICE')}",
          flush=True)
    rows = {"one-sided GET": [], "GET by request (--rpc-get)": [],
            "90% GET, 10% PUT": []}
    cr, sr, tr = [], [], []
    for r in range(1, rounds + 1):
        t = time.monotonic()
        rows["one-sided GET"].append(own_pair(build, n, "--get-pct", 100))
        rows["GET by request (--rpc-get)"].append(
            own_pair(build, n, "--get-pct", 100, "--rpc-get"))
        rows["90% GET, 10% PUT"].append(own_pair(build, n, "--get-pct", 90))
        tr.append(torn(build, n))
        cr.append(client_ratio(build, n))
        sr.append((server_p50(build, n // 4, True),
                   server_p50(build, n // 4, False)))
        print(f"round {r} ({time.monotonic() - t:.0f} s):", flush=True)
        for name, vals in rows.items():
            p50, p99, kops = vals[-1]
            print(f"  {name:28} p50 {p50:8.2f} us  p99 {p99:9.2f} us  "
                  f"{kops:7.3f} kops/s")
        g, reads, bad = tr[-1]
        print(f"  torn READs under a writer    {g} GETs, {reads} READs, "
              f"{bad} torn")
        rate, rrate, p50, rp50 = cr[-1]
        print(f"  beside the reference client  {rate:.0f} vs {rrate:.0f} "
              f"GETs/s (p50 {p50:.1f} vs {rp50:.1f} us)")
        mine, ref = sr[-1]
        print(f"  reference client's p50       {mine:.1f} us on kv_server, "
              f"{ref:.1f} us on the reference server")
    print("best rounds:")
    for name, vals in rows.items():
        p50 = min(v[0] for v in vals)
        kops = max(v[2] for v in vals)
        print(f"  {name:28} p50 {p50:8.2f} us  {kops:7.3f} kops/s")
    g, reads, bad = max(tr, key=lambda x: x[2])
    print(f"  torn READs under a writer: up to {bad} of {reads} READs "
          f"({100 * bad / max(reads, 1):.2f} %) for {g} GETs")
    ratio = max(c[0] for c in cr) / max(c[1] for c in cr)
    print(f"  client ratio (kv_client / reference client, same window): "
          f"{ratio:.2f} (target >= 0.5; the point is lost below 0.1)")
    ratio = min(s[1] for s in sr) / min(s[0] for s in sr)
    print(f"  server ratio (reference client's p50 on the reference server "
          f"/ on kv_server): {ratio:.2f} (target >= 0.5; lost below 0.1)")


if __name__ == "__main__":
    main()
