"""Round 3: odd query classes, with real NSD as the upstream.

For each class: nodens's rcode and latency, whether the query reached NSD
(NSD's own query counter, `nsd-control stats_noreset`, and an nft counter
of datagrams to NSD's address), then NSD's direct answer to the same query
(its QDCOUNT shows why forwarding these is a trap). nodens's health and
error metrics for NSD must not move.
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnslib import Results, metric, ms, query, scrape, udp_ask

CLASSES = [(1, "IN"), (0, "0"), (3, "CH"), (4, "HS"), (254, "NONE"), (255, "ANY"), (65535, "65535")]


def nsd_queries(conf):
    out = subprocess.run(["nsd-control", "-c", conf, "stats_noreset"], capture_output=True,
                         text=True, timeout=10).stdout
    for line in out.splitlines():
        if line.startswith("num.queries="):
            return int(line.split("=")[1])
    return -1


def nft_packets():
    out = subprocess.run(["nft", "list", "counter", "inet", "abuse_lab", "to_nsd"],
                         capture_output=True, text=True, timeout=10).stdout
    for tok in out.replace("\n", " ").split("packets ")[1:]:
        return int(tok.split()[0])
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=53)
    ap.add_argument("--metrics", default="http://127.0.0.1:9253/metrics")
    ap.add_argument("--nsd", default="127.0.53.1")
    ap.add_argument("--nsd-conf", required=True)
    ap.add_argument("--name", default="www.lab.test")
    ap.add_argument("--results", required=True)
    a = ap.parse_args()
    server, nsd = (a.server, a.port), (a.nsd, 53)
    to = f"{a.nsd}:53"
    res = Results(a.results, 3, "Odd classes, NSD upstream")

    m0 = scrape(a.metrics)
    err0 = metric(m0, "nodens_upstream_errors_total", to=to)
    healthy = []
    for cls, label in CLASSES:
        q0, p0 = nsd_queries(a.nsd_conf), nft_packets()
        # A fresh name per class so that no answer comes from the cache.
        name = f"c{cls}-{os.urandom(3).hex()}.{a.name}" if cls in (1, 3) else a.name
        # Odd classes five times each: the original failure (each waited out
        # upstream_timeout, two marked NSD down) needs more than one.
        tries = 1 if cls in (1, 3) else 5
        dts, r = [], None
        for _ in range(tries):
            r, dt, _ = udp_ask(server, query(name, 1, cls, edns=1232), timeout=5)
            dts.append(dt if r else 5.0)
        dt = max(dts)
        time.sleep(0.2)
        q1, p1 = nsd_queries(a.nsd_conf), nft_packets()
        reached = q1 - q0
        direct, ddt, _ = udp_ask(nsd, query(a.name, 1, cls, edns=1232), timeout=2)
        healthy.append(metric(scrape(a.metrics), "nodens_upstream_healthy", to=to))
        got = f"{r.rcode_name}{' +OPT' if r.opt else ' no OPT'} QD={r.qd} AN={r.an}" if r else "no reply"
        nsd_txt = (f"{direct.rcode_name} QDCOUNT={direct.qd} AN={direct.an}" if direct else "no reply")
        value = f"nodens {got} in {ms(dt)}{' (max of 5)' if tries > 1 else ''}; reached NSD {reached} (nft +{p1 - p0}); NSD direct: {nsd_txt}"
        if cls == 1:
            ok = bool(r and r.rcode in (0, 3) and dt < 0.5 and reached == 1)
            expect = "forwarded, answered"
        elif cls == 3:
            # CH is served: forwarded; NSD refuses it (with a question) and
            # nodens relays that REFUSED at once.
            ok = bool(r and r.qd == 1 and dt < 0.5 and reached == 1)
            expect = "CH is served: forwarded, NSD's answer relayed < 500 ms"
        else:
            ok = bool(r and r.rcode == 5 and r.opt and dt < 0.1 and reached == 0)
            expect = "REFUSED locally with OPT, < 100 ms, NSD not asked"
        res.row(f"class {label} ({cls})", value, ok, expect)
    m1 = scrape(a.metrics)
    err1 = metric(m1, "nodens_upstream_errors_total", to=to)
    res.row(f"nodens_upstream_healthy{{to=\"{to}\"}} after each query",
            " ".join(f"{h:.0f}" for h in healthy), all(h == 1 for h in healthy), "1 throughout")
    res.row(f"nodens_upstream_errors_total{{to=\"{to}\"}} delta", f"{err1 - err0:.0f}", err1 == err0, "0")
    d = metric(m1, "nodens_rejected_queries_total", reason="class not served") - \
        metric(m0, "nodens_rejected_queries_total", reason="class not served")
    res.row("nodens_rejected_queries_total{reason=\"class not served\"} delta", f"{d:.0f}")
    sys.exit(0 if res.save() else 1)


if __name__ == "__main__":
    main()
