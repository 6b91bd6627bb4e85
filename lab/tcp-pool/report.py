#!/usr/bin/env python3
"""Turns a lab output directory into a Markdown results file and a PNG.

Per run and rate step: queries sent, lost (dnsperf timeouts) and SERVFAIL;
latency p50/p99/max of the answered queries, and p99 counting each lost query
as the client timeout; new TCP connections to kube-dns (SYNs at its port 53);
peak TCP sockets at dnsmasq's port 53 (ESTABLISHED, which includes the accept
queue; all states); peak accept queue; peak dnsmasq TCP children, sampled
every 200 ms and as dnsmasq itself counts them (SIGUSR1 before and after each
step: "highest since last SIGUSR1"); the node cache's hit ratio; CPU busy.
"""
import argparse
import json
import math
import os
import re
import sys

DNSMASQ_LIMIT = 20
NODENS_BOUND = 4


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, math.ceil(p / 100.0 * len(sorted_vals)) - 1))
    return sorted_vals[i]


def read_steps(d):
    steps = []
    with open(os.path.join(d, "steps.tsv")) as f:
        next(f)
        for line in f:
            k, rate, t0, t1, syn, udp = line.split()
            steps.append({"k": int(k), "rate": int(rate), "t0": float(t0), "t1": float(t1), "syn": int(syn), "udp": int(udp)})
    return steps


def read_queries(path):
    out = []
    with open(path) as f:
        for line in f:
            t, rc, lat = line.split()
            out.append((float(t), rc, None if lat == "-" else float(lat)))
    return out


def dnsperf_summary(path):
    s = {}
    try:
        text = open(path).read()
    except OSError:
        return s
    for key in ("sent", "completed", "lost"):
        m = re.search(rf"Queries {key}:\s+(\d+)", text)
        if m:
            s[key] = int(m.group(1))
    return s


def read_samples(d):
    out = []
    try:
        with open(os.path.join(d, "samples.jsonl")) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def usr1_highest(d):
    """dnsmasq's 'highest since last SIGUSR1' values, in order."""
    vals = []
    try:
        for line in open(os.path.join(d, "dnsmasq.log"), errors="replace"):
            m = re.search(r"child processes for TCP requests: in use (\d+), highest since last SIGUSR1 (\d+), max allowed (\d+)", line)
            if m:
                vals.append((int(m.group(2)), int(m.group(3))))
    except OSError:
        pass
    return vals


def conn_series(d):
    """From conncap.py's packets: ([(time, connections open at dnsmasq)] at
    every change, connections seen, connections that ended without a FIN or
    RST on the wire). A connection opens at dnsmasq's SYN-ACK and closes at
    the first FIN or RST either way; one that dies silently (its client port
    then reused for a new SYN, or still open at the end) stays counted until
    then, so the count is an upper bound, exact when every connection ended
    with a FIN or RST."""
    series, open_ = [], set()
    seen = silent = 0
    try:
        stats = open(os.path.join(d, "conns.txt.stats")).read().split()
        if int(stats[3]) > 0:
            return None   # the capture dropped packets: no exact count
        f = open(os.path.join(d, "conns.txt"))
    except (OSError, IndexError, ValueError):
        return None
    with f:
        for line in f:
            parts = line.split()
            if len(parts) != 6:
                continue
            t, fl, src, sport, dst, dport = float(parts[0]), parts[1], parts[2], int(parts[3]), parts[4], int(parts[5])
            server_side = sport == 53
            key = (dst, dport) if server_side else (src, sport)
            if fl == "S" and not server_side and key in open_:
                # A new connection from a port we still count as open: the
                # old one is long gone without a FIN or RST.
                open_.discard(key)
                silent += 1
                series.append((t, len(open_)))
            elif "S" in fl and "A" in fl and server_side:
                if key not in open_:
                    open_.add(key)
                    seen += 1
                    series.append((t, len(open_)))
            elif "F" in fl or "R" in fl:
                if key in open_:
                    open_.discard(key)
                    series.append((t, len(open_)))
    return {"series": series, "seen": seen, "silent": silent + len(open_)}


def series_max(conns, t0, t1):
    if conns is None:
        return None
    series = conns["series"]
    before = [n for t, n in series if t < t0]
    vals = ([before[-1]] if before else [0]) + [n for t, n in series if t0 <= t <= t1]
    return max(vals)


def metric_sum(m, name):
    tot, found = 0.0, False
    for k, v in m.items():
        if k == name or k.startswith(name + "{"):
            tot += v
            found = True
    return tot if found else None


def kd_total(s):
    return sum(s["kd"].values())


def kd_live(s):
    return sum(v for k, v in s["kd"].items() if k != "TIME_WAIT")


def analyze_run(d, timeout):
    steps = read_steps(d)
    samples = read_samples(d)
    highest = usr1_highest(d)
    msamples = [s for s in samples if "metrics" in s and "error" not in s["metrics"]]
    conns = conn_series(d)
    rows = []
    allq = []
    for st in steps:
        q = read_queries(os.path.join(d, f"queries-{st['k']}.txt"))
        allq.extend(q)
        summ = dnsperf_summary(os.path.join(d, f"dnsperf-{st['k']}.txt"))
        lats = sorted(l for _, rc, l in q if l is not None)
        lost = sum(1 for _, rc, _ in q if rc == "T")
        servfail = sum(1 for _, rc, _ in q if rc == "SERVFAIL")
        withlost = sorted(lats + [float(timeout)] * lost)
        win = [s for s in samples if st["t0"] <= s["t"] <= st["t1"]]
        # Hit ratio from the cache's counters, last scrape before the step to last in it.
        before = [s for s in msamples if s["t"] <= st["t0"] + 0.5]
        inside = [s for s in msamples if s["t"] <= st["t1"]]
        hit = None
        if before and inside:
            a, b = before[-1]["metrics"], inside[-1]["metrics"]
            h0, h1 = metric_sum(a, "coredns_cache_hits_total"), metric_sum(b, "coredns_cache_hits_total")
            m0, m1 = metric_sum(a, "coredns_cache_misses_total"), metric_sum(b, "coredns_cache_misses_total")
            h0, m0 = h0 or 0.0, m0 or 0.0   # a counter appears with its first increment
            if None not in (h1, m1) and (h1 - h0) + (m1 - m0) > 0:
                hit = (h1 - h0) / ((h1 - h0) + (m1 - m0))
        cpu = [s["cpu"] for s in win if s.get("cpu") is not None]
        foreign = [s["foreign_cpu"] for s in win if s.get("foreign_cpu") is not None]
        k = st["k"]
        rows.append({
            "rate": st["rate"],
            "sent": summ.get("sent", len(q)),
            "answered": len(lats),
            "lost": summ.get("lost", lost),
            "servfail": servfail,
            "p50": pct(lats, 50), "p99": pct(lats, 99), "max": lats[-1] if lats else float("nan"),
            "p99_all": pct(withlost, 99),
            "syn": st["syn"], "udp": st["udp"],
            "peak_open": series_max(conns, st["t0"], st["t1"]),
            "open_exact": conns is not None and conns["silent"] == 0,
            "peak_estab": max((s["kd"].get("ESTABLISHED", 0) for s in win), default=0),
            "peak_all": max((kd_total(s) for s in win), default=0),
            "peak_acceptq": max((s["acceptq"] for s in win), default=0),
            "peak_children": max((s["children"] for s in win), default=0),
            "peak_node": max((sum(v for kk, v in s["node"].items() if kk != "TIME_WAIT") for s in win), default=0),
            "peak_synsent": max((s["node"].get("SYN_SENT", 0) for s in win), default=0),
            "dnsmasq_highest": highest[2 * k + 1][0] if len(highest) > 2 * k + 1 else None,
            "dnsmasq_max": highest[0][1] if highest else None,
            "hit": hit,
            "cpu": sum(cpu) / len(cpu) if cpu else None,
            "foreign": sum(foreign) / len(foreign) if foreign else None,
        })
    return {"steps": steps, "samples": samples, "queries": allq, "rows": rows, "conns": conns}


def fmt_s(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x >= 1:
        return f"{x:.2f} s"
    if x >= 0.01:
        return f"{x * 1000:.0f} ms"
    return f"{x * 1000:.2f} ms"


def table(rows):
    h = ("| rate q/s | sent | lost | SERVFAIL | p50 | p99 | max | p99, lost = 5 s | SYNs to :53 | "
         "peak conns open at dnsmasq (packets, upper bound) | peak ESTAB at :53 (sampled) | peak sockets at :53 | peak accept queue | peak dnsmasq children (sampled / dnsmasq) | "
         "peak node-side sockets (SYN_SENT) | cache hit | CPU busy | CPU outside the lab |")
    lines = [h, "|" + "|".join(["---:"] * (h.count("|") - 1)) + "|"]
    for r in rows:
        lines.append("| " + " | ".join([
            str(r["rate"]), str(r["sent"]), str(r["lost"]), str(r["servfail"]),
            fmt_s(r["p50"]), fmt_s(r["p99"]), fmt_s(r["max"]), fmt_s(r["p99_all"]),
            str(r["syn"]), ("–" if r["peak_open"] is None else str(r["peak_open"]) if r["open_exact"] else f"≤ {r['peak_open']}"),
            str(r["peak_estab"]), str(r["peak_all"]), str(r["peak_acceptq"]),
            f"{r['peak_children']} / {r['dnsmasq_highest'] if r['dnsmasq_highest'] is not None else '–'}",
            f"{r['peak_node']} ({r['peak_synsent']})",
            f"{r['hit'] * 100:.0f}%" if r["hit"] is not None else "–",
            f"{r['cpu'] * 100:.0f}%" if r["cpu"] is not None else "–",
            f"{r['foreign']:.2f} cores" if r["foreign"] is not None else "–",
        ]) + " |")
    return "\n".join(lines)


def targets(res):
    if "coredns" not in res or "nodens" not in res:
        return "Targets: not evaluated (needs both runs)."
    cd = res["coredns"]["rows"]
    nd = {r["rate"]: r for r in res["nodens"]["rows"]}
    bad = [r for r in cd if r["lost"] > 0 or r["p99_all"] > 1.0]
    out = []
    if not bad:
        out.append("CoreDNS showed no timeouts and no p99 above 1 s at any step: the failure did not reproduce, "
                   "so the targets have nothing to be measured against.")
        return "\n".join(out)
    r = bad[-1]
    n = nd.get(r["rate"])
    out.append(f"Highest rate where CoreDNS shows timeouts or p99 > 1 s: **{r['rate']} q/s** "
               f"(CoreDNS: {r['lost']} lost, {r['servfail']} SERVFAIL, p99 {fmt_s(r['p99_all'])} counting lost as 5 s, "
               f"{r['peak_estab']} ESTABLISHED at dnsmasq).")
    if n is None:
        out.append("nodens has no step at that rate.")
        return "\n".join(out)
    ok1 = n["lost"] == 0
    ok2 = n["p99_all"] <= r["p99_all"] / 10
    peak_open = [x["peak_open"] for x in res["nodens"]["rows"] if x["peak_open"] is not None]
    peak = max(peak_open) if peak_open else max(x["peak_estab"] for x in res["nodens"]["rows"])
    exact = res["nodens"]["conns"] is not None and res["nodens"]["conns"]["silent"] == 0
    ok3 = peak <= NODENS_BOUND and exact
    out.append(f"- nodens zero timeouts: {'met' if ok1 else 'NOT met'} ({n['lost']} lost, {n['servfail']} SERVFAIL)")
    out.append(f"- nodens p99 at most 1/10 of CoreDNS's: {'met' if ok2 else 'NOT met'} "
               f"({fmt_s(n['p99_all'])} vs {fmt_s(r['p99_all'])})")
    out.append(f"- nodens never more than {NODENS_BOUND} connections at dnsmasq: {'met' if ok3 else 'NOT met'} "
               f"(peak connections open at dnsmasq over all steps, from packets: {peak}"
               f"{'' if exact else ' (NOT exact: see the capture line above)'}; "
               f"peak ESTABLISHED sampled from /proc: {max(x['peak_estab'] for x in res['nodens']['rows'])}; "
               f"peak node-side sockets: {max(x['peak_node'] for x in res['nodens']['rows'])})")
    return "\n".join(out)


def plot(res, runs, png, timeout):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in runs if r in res]
    fig, axes = plt.subplots(4, len(runs), figsize=(8 * len(runs), 15), squeeze=False, sharex="col",
                             gridspec_kw={"height_ratios": [3, 1.3, 3, 2.2]})
    ymax_conn = 1
    for r in runs:
        ymax_conn = max([ymax_conn] + [max(kd_live(s), s["children"], s["kd"].get("ESTABLISHED", 0)) for s in res[r]["samples"]]
                        + ([n for _, n in res[r]["conns"]["series"]] if res[r]["conns"] and res[r]["conns"]["silent"] == 0 else []))
    ymax_fail = 1
    for r in runs:
        per = {}
        for t, rc, lat in res[r]["queries"]:
            if lat is None or rc == "SERVFAIL":
                b = int(t - res[r]["steps"][0]["t0"])
                per[b] = per.get(b, 0) + 1
        ymax_fail = max([ymax_fail] + list(per.values()))
    ymax_node = max([1] + [max(s["node"].values(), default=0) for r in runs for s in res[r]["samples"]])
    titles = {"coredns": "CoreDNS 1.13 as NodeLocal DNSCache (force_tcp, expire 1s)",
              "nodens": "nodens (pool: 4 connections, 1 in flight each, queue 1024/1 s)"}
    for c, r in enumerate(runs):
        data = res[r]
        t0 = data["steps"][0]["t0"]
        tend = data["steps"][-1]["t1"] + 4 - t0
        # Latency per second.
        buckets = {}
        lostb, sfb, okb = {}, {}, {}
        for t, rc, lat in data["queries"]:
            b = int(t - t0)
            if lat is None:
                lostb[b] = lostb.get(b, 0) + 1
            else:
                buckets.setdefault(b, []).append(lat)
                okb[b] = okb.get(b, 0) + 1
                if rc == "SERVFAIL":
                    sfb[b] = sfb.get(b, 0) + 1
        xs = sorted(buckets)
        vals = {p: [] for p in ("p50", "p99", "max")}
        for b in xs:
            v = sorted(buckets[b])
            vals["p50"].append(pct(v, 50))
            vals["p99"].append(pct(v, 99))
            vals["max"].append(v[-1])
        ax = axes[0][c]
        ax.plot(xs, [v * 1000 for v in vals["max"]], color="#bbbbbb", lw=1, label="max")
        ax.plot(xs, [v * 1000 for v in vals["p99"]], color="#d62728", lw=1.6, label="p99")
        ax.plot(xs, [v * 1000 for v in vals["p50"]], color="#1f77b4", lw=1.6, label="p50")
        ax.axhline(timeout * 1000, color="black", ls=":", lw=1)
        ax.text(tend, timeout * 1000 * 0.6, f"client timeout {timeout:g} s", fontsize=8, ha="right")
        ax.set_yscale("log")
        ax.set_ylim(0.05, 20000)
        ax.set_ylabel("latency of answered queries (ms), per second")
        ax.set_title(titles.get(r, r), fontsize=11)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="center left", fontsize=8)
        for st in data["steps"]:
            ax.axvspan(st["t0"] - t0, st["t1"] - t0, color="#f2f2f2", zorder=0)
            ax.text((st["t0"] + st["t1"]) / 2 - t0, 8000, f"{st['rate']} q/s", ha="center", fontsize=8)
        # Lost and SERVFAIL per second.
        ax = axes[1][c]
        xb = list(range(0, int(tend) + 1))
        ax.bar(xb, [lostb.get(b, 0) for b in xb], width=1.0, color="#d62728", label="lost (no answer in 5 s)")
        ax.bar(xb, [sfb.get(b, 0) for b in xb], width=1.0, color="#ff7f0e", bottom=[lostb.get(b, 0) for b in xb],
               label="SERVFAIL")
        ax.set_ylabel("failed queries / s")
        ax.set_ylim(0, ymax_fail * 1.1 + 1)
        ax.legend(loc="upper left", fontsize=8)
        ax.text(0.99, 0.9, f"total: {sum(lostb.values())} lost, {sum(sfb.values())} SERVFAIL",
                transform=ax.transAxes, ha="right", va="top", fontsize=9)
        ax.grid(True, alpha=0.3)
        # Connections.
        ax = axes[2][c]
        ts = [s["t"] - t0 for s in data["samples"]]
        ax.plot(ts, [kd_live(s) for s in data["samples"]], color="#9467bd", lw=1,
                label="TCP sockets at dnsmasq :53, any state but TIME_WAIT")
        ax.plot(ts, [s["kd"].get("ESTABLISHED", 0) for s in data["samples"]], color="#2ca02c", lw=1.6,
                label="ESTABLISHED at dnsmasq :53 (incl. not yet accepted)")
        if data["conns"] and data["conns"]["silent"] == 0:
            ax.step([t - t0 for t, _ in data["conns"]["series"]], [n for _, n in data["conns"]["series"]], where="post",
                    color="black", lw=0.8, alpha=0.7, label="connections open at dnsmasq (from SYN/FIN/RST packets)")
        ax.plot(ts, [s["acceptq"] for s in data["samples"]], color="#8c564b", lw=1, ls="--", label="dnsmasq accept queue")
        ax.plot(ts, [s["children"] for s in data["samples"]], color="#ff7f0e", lw=1.6, label="dnsmasq TCP children")
        ax.axhline(DNSMASQ_LIMIT, color="#ff7f0e", ls=":", lw=1)
        ax.text(1, DNSMASQ_LIMIT + 0.5, "dnsmasq limit: 20 children", fontsize=8, color="#ff7f0e")
        if r == "nodens":
            ax.axhline(NODENS_BOUND, color="#2ca02c", ls=":", lw=1)
            ax.text(tend, NODENS_BOUND + 0.5, "nodens bound: 4", fontsize=8, color="#2ca02c", ha="right")
        ax.set_ylim(0, ymax_conn * 1.1 + 2)
        ax.set_ylabel("at kube-dns (every 200 ms)")
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(True, alpha=0.3)
        for st in data["steps"]:
            ax.axvspan(st["t0"] - t0, st["t1"] - t0, color="#f2f2f2", zorder=0)
        # The node cache's side of the same connections.
        ax = axes[3][c]
        for state, color in (("ESTABLISHED", "#2ca02c"), ("SYN_SENT", "#d62728"), ("FIN_WAIT1", "#7f7f7f")):
            ax.plot(ts, [s["node"].get(state, 0) for s in data["samples"]], color=color, lw=1.4, label=state)
        ax.set_yscale("symlog", linthresh=10)
        ax.set_ylim(0, ymax_node * 1.5 + 10)
        ax.set_ylabel("node cache's sockets\nto kube-dns:53")
        ax.set_xlabel("seconds since the first step (grey: load steps)")
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(True, alpha=0.3)
        for st in data["steps"]:
            ax.axvspan(st["t0"] - t0, st["t1"] - t0, color="#f2f2f2", zorder=0)
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--runs", required=True)
    p.add_argument("--png")
    p.add_argument("--md")
    p.add_argument("--timeout", type=float, default=5.0)
    args = p.parse_args()
    runs = args.runs.split()
    res = {}
    for r in runs:
        d = os.path.join(args.out, r)
        if os.path.exists(os.path.join(d, "steps.tsv")):
            res[r] = analyze_run(d, args.timeout)
    env = ""
    try:
        env = open(os.path.join(args.out, "env.txt")).read()
    except OSError:
        pass
    md = ["# TCP pool lab: results", "",
          "Generated by `lab/tcp-pool/run` (see [tcp-pool.md](tcp-pool.md) for what the lab is and how to read this).", "",
          "```", env.strip(), "```", ""]
    for r in runs:
        if r not in res:
            md += [f"## {r}", "", "Not run.", ""]
            continue
        md += [f"## {r}", "", table(res[r]["rows"]), ""]
        mx = res[r]["rows"][0]["dnsmasq_max"] if res[r]["rows"] else None
        if mx is not None:
            md += [f"dnsmasq reports `max allowed {mx}` TCP children.", ""]
        udp = sum(st["udp"] for st in res[r]["steps"])
        md += [f"UDP datagrams that reached kube-dns's port 53 during the load: {udp}"
               + (" (every query went over TCP)." if udp == 0 else "."), ""]
        c = res[r]["conns"]
        if c is not None:
            md += [f"Packet capture at kube-dns: {c['seen']} connections SYN-ACKed by dnsmasq's kernel, "
                   f"{c['seen'] - c['silent']} of them ended by a FIN or RST on the wire"
                   + (" (so the packet count of open connections is exact)." if c["silent"] == 0 else
                      f"; {c['silent']} died silently (the node cache gave up on them without a FIN reaching "
                      "kube-dns), so the packet count of open connections is only an upper bound for this run."), ""]
    md += ["## Targets", "", targets(res), ""]
    if args.png:
        try:
            plot(res, runs, args.png, args.timeout)
            md += [f"![latency and connections]({os.path.basename(args.png)})", ""]
        except ImportError:
            md += ["(no PNG: matplotlib is not installed)", ""]
    text = "\n".join(md)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    print(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({r: res[r]["rows"] for r in res}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
