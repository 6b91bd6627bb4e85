"""Round 4: nodens on 0.0.0.0:53 with the default allow list.

Run in the 'internet' namespace (--mode remote): queries with EDNS 4096 for
a ~1 KB TXT record from public-looking sources (198.51.100.0/24,
203.0.113.0/24) must get REFUSED no larger than the query; from a private
10.x source they are answered (the amplification an open resolver would
give). Then the wildcard check: a connected UDP socket to each of the
server's addresses, primary and secondary, must get its reply (the kernel
drops datagrams from any other source). Run on the server (--mode local):
the same query from 127.0.0.1.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnslib import Results, metric, ms, query, scrape, tcp_ask, udp_ask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("remote", "local"), required=True)
    ap.add_argument("--name", default="big.lab.test")
    ap.add_argument("--public-sources", default="198.51.100.99,203.0.113.99,2001:db8:100::99")
    ap.add_argument("--public-targets", default="198.51.100.7,203.0.113.7,2001:db8:100::7")
    ap.add_argument("--private-sources", default="10.99.0.99,fd00:99::99")
    ap.add_argument("--private-targets", default="10.99.0.7,fd00:99::7")
    ap.add_argument("--wildcard-targets", default="198.51.100.7,198.51.100.8,203.0.113.7,10.99.0.7,10.99.0.8,"
                    "2001:db8:100::7,2001:db8:100::8,fd00:99::7,fd00:99::8")
    ap.add_argument("--metrics", default="http://10.99.0.7:9253/metrics")
    ap.add_argument("--results", required=True)
    a = ap.parse_args()
    res = Results(a.results, 4, "Open resolver on 0.0.0.0")
    q = query(a.name, 16, 1, edns=4096)

    if a.mode == "local":
        r, dt, _ = udp_ask(("127.0.0.1", 53), q, source="127.0.0.1", timeout=3)
        ok = bool(r and r.rcode == 0 and r.an > 0)
        val = f"{r.rcode_name} AN={r.an}{' TC' if r.tc else ''}, {len(r.raw)} B for a {len(q)} B query: {len(r.raw) / len(q):.1f}x" if r else "no reply"
        res.row("from 127.0.0.1 (allowed), TXT ~1 KB, EDNS 4096", val, ok, "answered")
        sys.exit(0 if res.save() else 1)

    m0 = scrape(a.metrics)
    fam = lambda addr: 6 if ":" in addr else 4
    for src in a.public_sources.split(","):
        dsts = [d for d in a.public_targets.split(",") if fam(d) == fam(src)]
        for dst in dsts:
            r, dt, _ = udp_ask((dst, 53), q, source=src, timeout=3)
            if r:
                factor = len(r.raw) / len(q)
                val = f"{r.rcode_name} AN={r.an}, {len(r.raw)} B for a {len(q)} B query: {factor:.2f}x, {ms(dt)}"
                ok = r.rcode == 5 and r.an == 0 and factor <= 1.0
            else:
                val, ok = "no reply", True  # silence amplifies nothing either
            res.row(f"UDP {src} -> {dst}, TXT, EDNS 4096", val, ok, "REFUSED, <= 1x")
        r, dt, err = tcp_ask((dsts[0], 53), q, source=src, timeout=3)
        res.row(f"TCP {src} -> {dsts[0]}", f"{r.rcode_name} AN={r.an}" if r else f"no reply ({err})",
                r is None or (r.rcode == 5 and r.an == 0), "REFUSED")
    for src in a.private_sources.split(","):
        for dst in [d for d in a.private_targets.split(",") if fam(d) == fam(src)]:
            r, dt, _ = udp_ask((dst, 53), q, source=src, timeout=3)
            val = (f"{r.rcode_name} AN={r.an}{' TC' if r.tc else ''}, {len(r.raw)} B for a {len(q)} B query: "
                   f"{len(r.raw) / len(q):.1f}x") if r else "no reply"
            res.row(f"UDP {src} -> {dst} (allowed), TXT, EDNS 4096", val,
                    bool(r and r.rcode == 0 and r.an > 0), "answered (the factor an open resolver gives)")
    m1 = scrape(a.metrics)
    d = metric(m1, "nodens_rejected_queries_total", reason="source not allowed") - \
        metric(m0, "nodens_rejected_queries_total", reason="source not allowed")
    res.row("nodens_rejected_queries_total{reason=\"source not allowed\"} delta", f"{d:.0f}")

    small = query("www.lab.test", 1, 1, edns=1232)
    for dst in a.wildcard_targets.split(","):
        src = next(s for s in a.private_sources.split(",") if fam(s) == fam(dst))
        r, dt, _ = udp_ask((dst, 53), small, source=src, timeout=2, connect=True)
        r2, _, frm = udp_ask((dst, 53), small, source=src, timeout=2)
        seen = frm[0] if frm else "no reply"
        res.row(f"wildcard: connected socket {src} -> {dst}",
                f"{'reply received' if r else 'NO REPLY'}; unconnected socket saw the reply from {seen}",
                bool(r) and seen == dst, f"reply from {dst}")
    sys.exit(0 if res.save() else 1)


if __name__ == "__main__":
    main()
