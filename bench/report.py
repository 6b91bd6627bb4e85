#!/usr/bin/env python3
"""Turns bench/out/<time>/results.json into the table, the nodens/peer ratios, a
PNG, and the generated section of docs/performance.md (between the markers
`<!-- bench:results:begin -->` and `<!-- bench:results:end -->`).

  python3 bench/report.py --results bench/out/<time>/results.json --out bench/out/<time> [--docs docs]

--results may be given more than once (e.g. a second run of one disturbed server,
SERVERS=dnsmasq bench/run): a server's results come from the last file that has it.
"""
import argparse
import json
import os
import re
import statistics
import sys

ORDER = ["reflector", "nodens", "unbound", "dnsdist", "coredns", "dnsmasq"]
LABEL = {"reflector": "reflector (kernel)", "coredns": "CoreDNS (node-cache)"}
BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"

# (key, header, unit, better, how to get the runs' values, format)
METRICS = [
    ("hit_qps", "hit q/s", "q/s", "higher", lambda s: [r["qps"] for r in s["hit"]], "{:,.0f}"),
    ("hit_cpu", "CPU µs/hit", "µs", "lower", lambda s: [r["cpu_us_per_q"] for r in s["hit"]], "{:.2f}"),
    ("rate_cpu", "CPU µs/q @RATE", "µs", "lower", lambda s: [r["cpu_us_per_q"] for r in s["rate"]], "{:.2f}"),
    ("rate_avg", "avg ms @RATE", "ms", "lower", lambda s: [1e3 * r["lat_avg"] for r in s["rate"] if r.get("lat_avg") is not None], "{:.3f}"),
    ("rate_p99", "p99 ms @RATE", "ms", "lower", lambda s: [1e3 * r["lat_p99"] for r in s["rate"] if r.get("lat_p99") is not None], "{:.3f}"),
    ("rate_lost", "lost @RATE", "", "lower", lambda s: [r["lost"] for r in s["rate"]], "{:.0f}"),
    ("miss_qps", "miss q/s", "q/s", "higher", lambda s: [r["qps"] for r in s["miss"]], "{:,.0f}"),
    ("miss_cpu", "CPU µs/miss", "µs", "lower", lambda s: [r["cpu_us_per_q"] for r in s["miss"]], "{:.2f}"),
    ("miss_lost", "miss lost %", "%", "lower",
     lambda s: [100.0 * r["lost"] / r["sent"] if r["sent"] else 0 for r in s["miss"]], "{:.2f}"),
    ("rss_start", "RSS at start MiB", "MiB", "lower",
     lambda s: [s["rss"]["rss_start_kib"] / 1024] if s.get("rss") else [], "{:.1f}"),
    ("rss_end", "RSS after 100k MiB", "MiB", "lower",
     lambda s: [s["rss"]["rss_end_kib"] / 1024] if s.get("rss") else [], "{:.1f}"),
    ("bytes_entry", "bytes/entry", "B", "lower",
     lambda s: [s["rss"]["bytes_per_entry"]] if s.get("rss") and s["rss"].get("bytes_per_entry") is not None else [], "{:,.0f}"),
]


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, f):
    return "–" if v is None else f.format(v)


def summarize(res):
    rows = {}
    for name, s in res["servers"].items():
        if "error" in s:
            rows[name] = {"error": s["error"]}
            continue
        row = {}
        for key, _h, _u, _b, get, _f in METRICS:
            try:
                vals = get(s)
            except (KeyError, TypeError):
                vals = []
            vals = [v for v in vals if v is not None]
            row[key] = med(vals)
            row[key + "_runs"] = vals
        row["contaminated"] = sum(1 for k in ("hit", "rate", "miss") for r in s[k] if r.get("contaminated"))
        row["load"] = [r["load1_before"] for k in ("hit", "rate", "miss") for r in s[k]]
        row["foreign"] = max([r["foreign_share"] for k in ("hit", "rate", "miss") for r in s[k]] or [0])
        row["steal"] = max([r.get("steal_share", 0) for k in ("hit", "rate", "miss") for r in s[k]] or [0])
        row["repeats"] = sum(r.get("attempts", 1) - 1 for k in ("hit", "rate", "miss") for r in s[k])
        row["threads"] = s.get("threads_at_end")
        rss = s.get("rss") or {}
        row["rss_start_kib"] = rss.get("rss_start_kib")
        row["rss_end_kib"] = rss.get("rss_end_kib")
        row["slot_bytes"] = rss.get("prealloc_bytes_per_slot")
        row["sample"] = (rss.get("sample_cached"), rss.get("sample"))
        row["nonnoerror"] = sum(n for k in ("hit", "rate", "miss") for r in s[k]
                                for c, n in r["rcodes"].items() if c != "NOERROR")
        rows[name] = row
    return rows


def names_in_order(rows):
    return [n for n in ORDER if n in rows] + [n for n in rows if n not in ORDER]


HIT_KEYS = ["hit_qps", "hit_cpu", "rate_cpu", "rate_avg", "rate_p99", "rate_lost"]
MISS_KEYS = ["miss_qps", "miss_cpu", "miss_lost", "rss_start", "rss_end", "bytes_entry"]


def one_table(rows, keys, rate_lbl):
    ms = [m for k in keys for m in METRICS if m[0] == k]
    hdr = [h.replace("@RATE", f"@{rate_lbl}") for _k, h, *_ in ms]
    lines = ["| server | " + " | ".join(hdr) + " |", "|---|" + "---:|" * len(ms)]
    for n in names_in_order(rows):
        r = rows[n]
        if "error" in r:
            lines.append(f"| {LABEL.get(n, n)} | failed: {r['error'][:80]} |" + " |" * (len(ms) - 1))
            continue
        cells = []
        for k, _h, _u, _b, _g, f in ms:
            if k == "bytes_entry" and n == "reflector":
                cells.append("–")
            elif k == "bytes_entry" and r.get("slot_bytes") is not None:
                cells.append(f"{fmt(r[k], f)} (preallocated: {r['slot_bytes']:,.0f}/slot)")
            else:
                cells.append(fmt(r[k], f))
        mark = " ⚠" if r["contaminated"] else ""
        lines.append(f"| {LABEL.get(n, n)}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables(res, rows):
    rate = res["config"]["rate"]
    rate_lbl = f"{rate // 1000}k" if rate % 1000 == 0 else str(rate)
    table = one_table(rows, HIT_KEYS, rate_lbl) + "\n\n" + one_table(rows, MISS_KEYS, rate_lbl)

    ratio_lines = []
    if "nodens" in rows and "error" not in rows["nodens"]:
        nd = rows["nodens"]
        ratio_keys = [m for m in METRICS if m[0] not in ("rate_lost", "miss_lost", "rss_start", "rss_end")]
        ratio_lines = ["| nodens / peer | " + " | ".join(
            f"{h.replace('@RATE', '@' + rate_lbl)} ({b} is better)" for _k, h, _u, b, _g, _f in ratio_keys) + " |",
            "|---|" + "---:|" * len(ratio_keys)]
        for n in names_in_order(rows):
            if n == "nodens" or "error" in rows[n]:
                continue
            cells = []
            for k, *_ in ratio_keys:
                a, b = nd.get(k), rows[n].get(k)
                if k == "bytes_entry" and rows[n].get("slot_bytes") is not None:
                    b = rows[n]["slot_bytes"]      # dnsmasq: what a slot costs, preallocated
                if n == "reflector" and k == "bytes_entry":
                    cells.append("–")
                elif a is None or b in (None, 0):
                    cells.append("–")
                else:
                    cells.append(f"{a / b:.2f}")
            ratio_lines.append(f"| {LABEL.get(n, n)} | " + " | ".join(cells) + " |")
    return table, "\n".join(ratio_lines)


def details(res, rows):
    out = []
    for n in names_in_order(rows):
        r = rows[n]
        if "error" in r:
            continue
        s = res["servers"][n]
        runs = lambda k, f: " / ".join(fmt(v, f) for v in r[k + "_runs"])  # noqa: E731
        loads = " ".join(f"{x:.2f}" for x in r["load"])
        samp = r["sample"]
        cores = lambda k: " / ".join(f"{x['server_cores']:.2f}" for x in s[k] if x.get("server_cores") is not None)  # noqa: E731
        softirqd = max([x.get("ksoftirqd_cpu_s", 0) / max(x["wall"], 0.1) for k in ("hit", "rate", "miss") for x in s[k]] or [0])
        tn = ", ".join(f"{k}×{v}" if v > 1 else k for k, v in (s.get("thread_names") or {}).items())
        out.append(
            f"- **{LABEL.get(n, n)}**: hit q/s {runs('hit_qps', '{:,.0f}')}; CPU µs/hit {runs('hit_cpu', '{:.2f}')}; "
            f"CPU µs/q at rate {runs('rate_cpu', '{:.2f}')}; p99 ms {runs('rate_p99', '{:.3f}')}; "
            f"miss q/s {runs('miss_qps', '{:,.0f}')}; CPU µs/miss {runs('miss_cpu', '{:.2f}')}; "
            f"cores used: hit {cores('hit')}, rate {cores('rate')}, miss {cores('miss')}; "
            f"RSS {fmt(r['rss_start_kib'], '{:,}')} → {fmt(r['rss_end_kib'], '{:,}')} KiB"
            + (f", {samp[0]}/{samp[1]} of a sample still cached" if samp[1] else "")
            + f"; threads: {tn or r['threads']}; load averages before each run: {loads}; "
            f"others' CPU at most {r['foreign']:.2f} cores, steal at most {r['steal']:.2f}, "
            f"ksoftirqd at most {softirqd:.2f} cores"
            + (f"; {r['repeats']} run(s) repeated" if r["repeats"] else "")
            + (f"; {r['contaminated']} run(s) kept though disturbed" if r["contaminated"] else "")
            + (f"; {r['nonnoerror']} answers not NOERROR" if r["nonnoerror"] else ""))
    return "\n".join(out)


def section(res, rows, png_rel):
    c = res["config"]
    m = res["machine"]
    v = res["versions"]
    table, ratios = tables(res, rows)
    vers = "\n".join(f"- {k}: {v[k]}" for k in v)
    dur = res.get("duration_s")
    parts = [
        f"Run of {res.get('started', '?')}"
        + (f", {dur / 60:.1f} minutes" if dur else "") + ". "
        f"Machine: {m['cpus']} × {m['cpu']}, {m['mem_mib'] / 1024:.1f} GiB, {m['os']}, kernel {m['kernel']}. "
        f"Each value is the median of {c['runs']} runs (memory: one run). "
        f"hit: {c['hit_secs']} s unlimited (`-c {c['clients']} -q {c['inflight']}`); "
        f"@rate: `-Q {c['rate']}` for {c['rate_secs']} s; miss: {c.get('miss_names', 0):,} names never asked "
        f"before, each once, unlimited (`-q {c['miss_inflight']}`); bytes/entry: VmRSS growth over "
        f"100,000 distinct names. A run during which other processes used more than {c['foreign_max']:.2f} "
        f"of a core, or the hypervisor stole more than {c.get('steal_max', 0):.2f}, was repeated (up to "
        f"{c['retries']} times, the least disturbed kept); ⚠ marks a server with a run still disturbed.",
        "",
        table,
        "",
    ]
    if ratios:
        parts += ["Ratios nodens / peer (below 1 is better for nodens where lower is better, "
                  "above 1 where higher is better):", "", ratios, ""]
    if png_rel:
        parts += [f"![CPU per query, throughput, latency and memory per server]({png_rel})", ""]
    for n in names_in_order(rows):
        b = res["servers"][n].get("bounded")
        if b:
            growth = (b["rss_end_kib"] - b["rss_start_kib"]) / 1024
            steps = ", ".join(f"{k / 1024:.1f}" for k in b["rss_steps_kib"])
            parts += [f"**Capacity bounds memory.** {LABEL.get(n, n)} again, a fresh process with "
                      f"`capacity = \"{b['capacity_mib']} MiB\"`, far below what the names need, asked "
                      f"{len(b['rss_steps_kib'])} × 100,000 distinct names: RSS {b['rss_start_kib'] / 1024:.1f} MiB "
                      f"at start, then {steps} MiB after each 100,000 ({b['answered']:,} answered): a growth of "
                      f"{growth:.1f} MiB for {b['capacity_mib']} MiB of capacity, flat once the cache is full.", ""]
    parts += ["Versions:", "", vers, "", "Every run:", "", details(res, rows)]
    return "\n".join(parts)


def plot(res, rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: matplotlib not available; no PNG", file=sys.stderr)
        return False
    rate = res["config"]["rate"]
    names = [n for n in names_in_order(rows) if "error" not in rows[n]]
    panels = [
        ("hit_cpu", "CPU µs per cache hit, dnsperf unlimited\n(lower is better)"),
        ("hit_qps", "cache-hit q/s answered, dnsperf unlimited\n(dnsperf's own core is the limit near the top)"),
        ("rate_cpu", f"CPU µs per query at {rate:,} q/s\n(lower is better)"),
        ("rate_p99", f"latency at {rate:,} q/s, ms\n(bar: p99, dot: average)"),
        ("miss_qps", "cache-miss q/s answered\n(each name asked once; higher is better)"),
        ("miss_cpu", "CPU µs per cache miss\n(lower is better)"),
        ("bytes_entry", "memory per cached name, bytes\n(RSS growth / 100k names; dnsmasq: per slot)"),
    ]
    fig, axes = plt.subplots(2, 4, figsize=(17, 7.5))
    axes = axes.flatten()
    colors = {n: ("#d95f02" if n == "nodens" else "#9e9e9e" if n == "reflector" else "#4575b4") for n in names}
    for ax, (key, title) in zip(axes, panels):
        ns = [n for n in names if rows[n].get(key) is not None and not (key == "bytes_entry" and n == "reflector")]
        vals = [rows[n]["slot_bytes"] if key == "bytes_entry" and rows[n].get("slot_bytes") is not None
                else rows[n][key] for n in ns]
        ys = list(range(len(ns)))[::-1]
        lo = [max(0, v - min(rows[n][key + "_runs"])) for n, v in zip(ns, vals)]
        hi = [max(0, max(rows[n][key + "_runs"]) - v) for n, v in zip(ns, vals)]
        ax.barh(ys, vals, color=[colors[n] for n in ns], xerr=[lo, hi] if len(rows[ns[0]][key + "_runs"]) > 1 else None,
                error_kw={"ecolor": "black", "capsize": 2, "lw": 0.8} if ns else None)
        if key == "rate_p99":
            ax.plot([rows[n]["rate_avg"] for n in ns], ys, "o", color="black", ms=4)
        ax.set_yticks(ys)
        ax.set_yticklabels([LABEL.get(n, n) for n in ns], fontsize=9)
        ax.set_title(title, fontsize=10)
        vmax = max([v + h for v, h in zip(vals, hi)] or [1])
        ax.set_xlim(0, vmax * 1.3)
        for y, v, h in zip(ys, vals, hi):
            txt = f"{v:,.0f}" if v >= 100 else f"{v:.2f}"
            ax.text(v + h + vmax * 0.02, y, txt, va="center", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    ax = axes[7]
    ax.axis("off")
    m, v = res["machine"], res["versions"]
    short = {k: re.sub(r"^(nodens |unbound |dnsdist |CoreDNS-|Dnsmasq version |Version |NSD version )", "",
                       v.get(k, "?")).split(" Copyright")[0].split(" (Lua")[0] for k in v}
    ax.text(0, 1, "\n".join([
        "Setup",
        f"{m['cpus']} × {m['cpu']}",
        f"kernel {m['kernel']}",
        "server: core 1, one worker",
        "dnsperf, NSD: core 0",
        "loopback only",
        f"bars: median of {res['config']['runs']} runs",
        "whiskers: min–max",
        "",
        f"nodens   {short.get('nodens', '?')}",
        f"unbound  {short.get('unbound', '?')}",
        f"dnsdist  {short.get('dnsdist', '?')}",
        f"CoreDNS  {short.get('coredns', '?')}",
        f"dnsmasq  {short.get('dnsmasq', '?')}",
        f"NSD      {short.get('nsd', '?')}",
        f"dnsperf  {short.get('dnsperf', '?')}",
    ]), va="top", fontsize=8.5, family="monospace", transform=ax.transAxes)
    fig.suptitle("nodens vs peers: one core, one worker, cache in front of an authoritative server", fontsize=12)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=100)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True, action="append")
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", default=None)
    a = ap.parse_args()
    res = None
    for path in a.results:
        with open(path) as f:
            r = json.load(f)
        if res is None:
            res = r
            res["sources"] = {n: path for n in r["servers"]}
            continue
        if r["config"] != res["config"]:
            print(f"report: warning: {path} was run with other settings", file=sys.stderr)
        for n, v in r["servers"].items():
            res["servers"][n] = v
            res["sources"][n] = path
            res["versions"][n] = r["versions"].get(n, "?")
        res["started"] = f"{res.get('started', '?')} (+ {r.get('started', '?')})"
        res["duration_s"] = None
    rows = summarize(res)
    table, ratios = tables(res, rows)
    print("\n" + table + "\n")
    if ratios:
        print(ratios + "\n")

    png = os.path.join(a.out, "performance.png")
    have_png = plot(res, rows, png)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(section(res, rows, "performance.png" if have_png else None) + "\n")

    if a.docs:
        doc = os.path.join(a.docs, "performance.md")
        if have_png:
            os.makedirs(os.path.join(a.docs, "img"), exist_ok=True)
            with open(png, "rb") as src, open(os.path.join(a.docs, "img", "performance.png"), "wb") as dst:
                dst.write(src.read())
        text = open(doc).read() if os.path.exists(doc) else f"# Performance\n\n{BEGIN}\n{END}\n"
        if BEGIN not in text or END not in text:
            text += f"\n{BEGIN}\n{END}\n"
        new = section(res, rows, "img/performance.png" if have_png else None)
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _m: f"{BEGIN}\n{new}\n{END}", text,
                      flags=re.S)
        with open(doc, "w") as f:
            f.write(text)
        print(f"report: updated {doc}" + (" and docs/img/performance.png" if have_png else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
