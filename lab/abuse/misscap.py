"""Round 6: misses piling up on a silent upstream.

`misscap.py silent`: a UDP socket that reads queries and never answers.
`misscap.py load`: dnsperf sends random names of the silent zone at a fixed
rate for a fixed time, while a sampler records nodens's descriptors
(/proc/PID/fd) and RSS every 100 ms and a probe asks a pre-warmed name of a
second, answering zone every 100 ms: hits must be answered throughout.
"""

import argparse
import os
import random
import signal
import socket
import string
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnslib import Results, fd_count, metric, ms, pct, query, rss_kib, scrape, udp_ask


def silent(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((a.addr, a.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    n = 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        s.recv(4096)
        n += 1


def load(a):
    res = Results(a.results, 6, "Misses on a silent upstream")
    server = (a.server, 53)
    warm = udp_ask(server, query(a.warm, edns=1232), timeout=3)[0]
    if not warm or not warm.a():
        res.row("pre-warm", "no answer for the warm name", False, "answered")
        sys.exit(0 if res.save() else 1)
    with open(a.datafile, "w") as f:
        rng = random.Random(6)
        for _ in range(a.rate * a.secs + 1000):
            label = "".join(rng.choice(string.ascii_lowercase) for _ in range(12))
            f.write(f"{label}.{a.zone} A\n")
    fds0, rss0 = fd_count(a.pid), rss_kib(a.pid)
    m0 = scrape(a.metrics)
    stop = threading.Event()
    samples = []  # (t, fds, rss kib, inflight gauge)

    def sampler():
        while not stop.is_set():
            try:
                g = metric(scrape(a.metrics, timeout=1), "nodens_inflight_queries")
            except Exception:
                g = float("nan")
            samples.append((time.monotonic(), fd_count(a.pid), rss_kib(a.pid), g))
            time.sleep(0.1)
    probes = []  # (t, latency or None)

    def prober():
        while not stop.is_set():
            t0 = time.monotonic()
            r, dt, _ = udp_ask(server, query(a.warm, edns=1232), source="127.0.0.40", timeout=1.0)
            probes.append((t0, dt if (r and r.a() == warm.a()) else None))
            time.sleep(max(0, 0.1 - (time.monotonic() - t0)))
    ts = [threading.Thread(target=f, daemon=True) for f in (sampler, prober)]
    for t in ts:
        t.start()
    time.sleep(1)
    t_load = time.monotonic()
    cmd = ["timeout", "-s", "INT", str(a.secs + 30), "dnsperf", "-s", a.server, "-p", "53",
           "-d", a.datafile, "-Q", str(a.rate), "-l", str(a.secs), "-c", "16",
           "-q", str(a.rate * 3), "-t", "3", "-a", "127.0.0.41"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    t_done = time.monotonic()
    time.sleep(a.after)
    stop.set()
    for t in ts:
        t.join(timeout=5)
    m1 = scrape(a.metrics)
    sent = next((l.split()[2] for l in out.splitlines() if "Queries sent:" in l), "?")
    done = next((l.split(":", 1)[1].strip() for l in out.splitlines() if "Queries completed:" in l), "?")
    lost = next((l.split(":", 1)[1].strip() for l in out.splitlines() if "Queries lost:" in l), "?")
    during = [s for s in samples if s[0] >= t_load]
    peak_fds = max((s[1] for s in during), default=0)
    peak_rss = max((s[2] for s in during), default=0)
    peak_inflight = max((s[3] for s in during if s[3] == s[3]), default=0)
    rej = metric(m1, "nodens_rejected_queries_total", reason="too many misses in flight") - \
        metric(m0, "nodens_rejected_queries_total", reason="too many misses in flight")
    res.row("load", f"dnsperf -Q {a.rate} -l {a.secs}: sent {sent}, completed {done}, lost {lost}")
    res.row("descriptors before / peak", f"{fds0} / {peak_fds}", peak_fds <= fds0 + a.cap + 200,
            f"<= {fds0} + max_misses_in_flight {a.cap} + 200")
    res.row("RSS before / peak", f"{rss0 / 1024:.1f} / {peak_rss / 1024:.1f} MiB", peak_rss < a.rss_limit_mib * 1024,
            f"< {a.rss_limit_mib} MiB")
    res.row("peak nodens_inflight_queries", f"{peak_inflight:.0f}", peak_inflight <= a.cap, f"<= {a.cap}")
    res.row("nodens_rejected_queries_total{reason=\"too many misses in flight\"} delta", f"{rej:.0f}", rej > 0, "> 0")
    up = subprocess.run(["nft", "list", "counter", "inet", "abuse_lab", "to_silent"],
                        capture_output=True, text=True).stdout
    pk = up.split("packets ")[1].split()[0] if "packets " in up else "?"
    res.row("queries that reached the silent upstream", pk)
    in_load = [p for p in probes if t_load <= p[0] <= t_done]
    ok = [p[1] for p in in_load if p[1] is not None]
    res.row("hits (pre-warmed name) answered during the load", f"{len(ok)}/{len(in_load)}",
            len(in_load) > 0 and len(ok) == len(in_load), "all")
    if ok:
        res.row("hit latency p50 / p99 / max", f"{ms(pct(ok, 50))} / {ms(pct(ok, 99))} / {ms(max(ok))}",
                max(ok) < 0.25, "max < 250 ms")
    after = [s for s in samples if s[0] > t_done + a.after - 1]
    if after:
        res.row(f"descriptors {a.after:.0f} s after the load", f"{after[-1][1]}")
    sys.exit(0 if res.save() else 1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("silent")
    s.add_argument("--addr", default="127.0.0.200")
    s.add_argument("--port", type=int, default=53)
    s = sub.add_parser("load")
    s.add_argument("--server", default="127.0.0.1")
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--metrics", default="http://127.0.0.1:9253/metrics")
    s.add_argument("--zone", default="silent.test")
    s.add_argument("--warm", default="www.lab.test")
    s.add_argument("--rate", type=int, default=12000)
    s.add_argument("--secs", type=int, default=10)
    s.add_argument("--after", type=float, default=5)
    s.add_argument("--cap", type=int, default=2048)
    s.add_argument("--rss-limit-mib", type=int, default=64)
    s.add_argument("--datafile", required=True)
    s.add_argument("--results", required=True)
    a = ap.parse_args()
    silent(a) if a.cmd == "silent" else load(a)


if __name__ == "__main__":
    main()
