#!/usr/bin/env python3
"""Turns a soak output directory into a summary, a verdict and a PNG.

Times are seconds since the load started (t0). The base window is the
--window seconds right after the warm-up, the end window the last --window
seconds of the load; both are free of faults by construction (faults.py),
and both are compared by their medians, so one odd sample does not decide.

Gates (the exit status is 1 if any fails):
  nodens alive       every sample until the end of the quiet period
  probes             every UDP and TCP probe answered (NOERROR with an A
                     record), during faults too: the probed names are
                     popular, so they are in the cache, fresh or stale
  fds                median in the end window minus median in the base
                     window <= --fd-growth
  RSS                median in the end window over median in the base
                     window - 1 <= --rss-growth-pct
  RSS bound          every sample's RSS (prefill, load, faults, quiet
                     period) <= the cache capacity + --rss-over-capacity-mib:
                     the capacity is a bound a memory limit can be sized from

Reported, not gated: dnsperf lost/SERVFAIL (in and out of faults), probe
latency, reloads, the abusive clients' view, fds after the quiet period,
nodens's exit status on SIGTERM, its log's warnings.
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import sys

from gen_data import POPULAR_NAME_RE


def fnum(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def size_bytes(text):
    """'16 MiB' -> 16777216 (the config's size syntax); None if unreadable."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMG]i?B|B)?\s*", text or "")
    if not m:
        return None
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    return int(float(m.group(1)) * units.get(m.group(2), 1))


def read_csv(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def read_events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split(",", 2)
                if len(parts) >= 2 and fnum(parts[0]) is not None:
                    out.append((float(parts[0]), parts[1], parts[2] if len(parts) > 2 else ""))
    except OSError:
        pass
    return sorted(out)


def dnsperf_summary(path):
    s = {}
    try:
        text = open(path).read()
    except OSError:
        return s
    for key in ("sent", "completed", "lost", "interrupted"):
        m = re.search(rf"Queries {key}:\s+(\d+)", text)
        if m:
            s[key] = int(m.group(1))
    m = re.search(r"Queries per second:\s+([\d.]+)", text)
    if m:
        s["qps"] = float(m.group(1))
    m = re.search(r"Average Latency \(s\):\s+([\d.]+).*?max ([\d.]+)", text)
    if m:
        s["avg_lat_ms"] = float(m.group(1)) * 1000
        s["max_lat_ms"] = float(m.group(2)) * 1000
    return s


# A line of a dnsperf data file, and a line of CoreDNS's `log` plugin.
POPULAR_QUERY = re.compile(rf"^{POPULAR_NAME_RE.pattern} A$")
POPULAR_UPSTREAM = re.compile(rf'"A IN {POPULAR_NAME_RE.pattern}\. ', re.IGNORECASE)


def popular_queries_sent(path, sent):
    """How many of the first `sent` queries of a dnsperf data file ask a
    popular name: dnsperf reads its file in order and never replays it."""
    n = 0
    try:
        with open(path) as f:
            for i, line in enumerate(f):
                if i >= sent:
                    break
                n += bool(POPULAR_QUERY.match(line.strip()))
    except OSError:
        return None
    return n


def popular_upstream_queries(path):
    """Queries for popular names that reached CoreDNS (its `log` plugin, one
    line each, appended across its restarts): misses, prefetches and the
    refreshes behind stale answers alike."""
    try:
        with open(path, errors="replace") as f:
            return sum(bool(POPULAR_UPSTREAM.search(line)) for line in f)
    except OSError:
        return None


def popular_hit_ratio(out, dnsperf):
    """The popular set's hit ratio under the load's churn, from below: every
    popular query CoreDNS saw is counted as a client's miss, though
    prefetches and refreshes behind stale answers are not (and the probes'
    and the abusive clients' popular queries are left out of the sent)."""
    sent = 0
    for name in ("udp", "tcp"):
        n = dnsperf[name]["summary"].get("sent") or 0
        if n == 0:
            continue   # that load did not run (TCP_QPS=0, say)
        k = popular_queries_sent(os.path.join(out, "data", f"{name}.txt"), n)
        if k is None:
            return None
        sent += k
    upstream = popular_upstream_queries(os.path.join(out, "coredns.log"))
    if upstream is None or sent == 0:
        return None
    return {"sent": sent, "upstream": upstream, "ratio": 1 - upstream / sent}


def pct(vals, p):
    v = sorted(vals)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, max(0, math.ceil(p / 100.0 * len(v)) - 1))]


def med(vals):
    return statistics.median(vals) if vals else float("nan")


def fault_spans(events, t0):
    """[(start, end, kind, detail)] in seconds since t0, plus HUP times."""
    spans, hups, open_ = [], [], {}
    for t, name, detail in events:
        x = t - t0
        if name in ("restart_start", "freeze_start"):
            open_[name.split("_")[0]] = (x, detail)
        elif name in ("restart_end", "freeze_end"):
            k = name.split("_")[0]
            if k in open_:
                s, d = open_.pop(k)
                spans.append((s, x, k, d))
        elif name == "hup":
            hups.append((x, detail))
    for k, (s, d) in open_.items():
        spans.append((s, float("inf"), k, d + " (never ended)"))
    return sorted(spans), hups


def in_span(x, spans, after=0.0):
    for s, e, k, _ in spans:
        if s <= x <= e + after:
            return k
    return None


def analyze(args):
    out = args.out
    events = read_events(os.path.join(out, "events.csv"))
    ev = {}
    for t, name, _ in events:
        ev.setdefault(name, t)
    t0 = ev.get("load_start")
    if t0 is None:
        raise SystemExit("report: no load_start event (the load never started)")
    t_end = ev.get("load_end", t0 + args.seconds)
    t_quiet = ev.get("quiet_end", t_end)
    spans, hups = fault_spans(events, t0)
    samples = []
    for r in read_csv(os.path.join(out, "samples.csv")):
        x = fnum(r["t"])
        if x is None:
            continue
        row = {k: fnum(v) for k, v in r.items()}
        row["x"] = x - t0
        samples.append(row)
    probes = []
    for r in read_csv(os.path.join(out, "probes.csv")):
        x = fnum(r["t"])
        if x is None:
            continue
        probes.append({"x": x - t0, "proto": r["proto"], "name": r["name"], "answered": r["answered"] == "1",
                       "rcode": r["rcode"], "lat": fnum(r["latency_ms"]), "ttl": fnum(r["ttl"]),
                       "stale": r["stale"] == "1"})
    probes.sort(key=lambda p: p["x"])
    dur = t_end - t0
    base = (args.warmup, args.warmup + args.window)
    endw = (dur - args.window, dur)

    def col(name, lo, hi):
        return [s[name] for s in samples if lo <= s["x"] <= hi and s.get(name) is not None and s.get("alive") == 1]

    res = {"t0": t0, "duration": dur, "spans": spans, "hups": hups, "samples": samples, "probes": probes,
           "events": events, "base": base, "endw": endw}
    alive = [s for s in samples if s["x"] <= t_quiet - t0]
    res["alive_all"] = bool(alive) and all(s.get("alive") == 1 for s in alive)
    res["first_dead"] = next((s["x"] for s in alive if s.get("alive") != 1), None)
    res["rss_peak_kb"] = max([s["rss_kb"] for s in samples if s.get("rss_kb")] or [float("nan")])
    res["hwm_kb"] = max([s["hwm_kb"] for s in samples if s.get("hwm_kb")] or [float("nan")])
    # RSS over the capacity at every sample while nodens was up, and over
    # what the cache actually held (the rest of the process).
    cap = size_bytes(args.cache_capacity)
    res["capacity_kb"] = cap / 1024 if cap else float("nan")
    up = [s for s in samples if s.get("alive") == 1 and s.get("rss_kb")]
    res["rss_over_capacity_kb"] = max((s["rss_kb"] - res["capacity_kb"] for s in up), default=float("nan"))
    beside = [s["rss_kb"] - s["cache_bytes"] / 1024 for s in up if s.get("cache_bytes") is not None]
    res["rss_beside_cache_kb"] = max(beside, default=float("nan"))
    res["rss_base_kb"] = med(col("rss_kb", *base))
    res["rss_end_kb"] = med(col("rss_kb", *endw))
    res["rss_growth_pct"] = (res["rss_end_kb"] / res["rss_base_kb"] - 1) * 100 if res["rss_base_kb"] else float("nan")
    # RSS a little after each downtime (from its end + 10 s, for up to 20 s,
    # short of the next one): flat from one to the next means memory taken
    # once, by the first outage's burst of misses; a rise at each means
    # memory kept per outage.
    res["rss_after_faults"] = []
    downs = [sp for sp in spans if sp[2] in ("restart", "freeze")]
    for i, (s0, e0, k, _) in enumerate(downs):
        hi = min(e0 + 30, downs[i + 1][0] if i + 1 < len(downs) else dur)
        v = col("rss_kb", e0 + 10, hi)
        if v:
            res["rss_after_faults"].append((k, e0, med(v)))
    after = col("fds", args.warmup, dur)
    res["fd_min"], res["fd_max"] = (min(after), max(after)) if after else (float("nan"), float("nan"))
    res["fd_base"] = med(col("fds", *base))
    res["fd_end"] = med(col("fds", *endw))
    res["fd_growth"] = res["fd_end"] - res["fd_base"]
    res["fd_idle_before"] = med(col("fds", -1e9, ev.get("prefill_start", t0) - t0))
    res["fd_idle_after"] = med(col("fds", (t_quiet - t0) - 3, t_quiet - t0))
    res["threads"] = sorted(set(int(s["threads"]) for s in samples if s.get("threads")))
    res["cache_bytes_end"] = (col("cache_bytes", *endw) or [None])[-1]
    res["cache_bytes_max"] = max(col("cache_bytes", -1e9, 1e9) or [float("nan")])
    res["cpu_s"] = (col("cpu_s", -1e9, dur) or [None])[-1]
    # Probes, by what was happening when each started.
    for p in probes:
        k = in_span(p["x"], spans)
        p["ctx"] = k or ("recovery" if in_span(p["x"], spans, after=10.0) else "normal")
    res["probe_ctx"] = {}
    for proto in ("udp", "tcp"):
        for ctx in ("normal", "restart", "freeze", "recovery"):
            ps = [p for p in probes if p["proto"] == proto and p["ctx"] == ctx and 0 <= p["x"] <= dur]
            if not ps:
                continue
            lats = [p["lat"] for p in ps if p["answered"] and p["lat"] is not None]
            res["probe_ctx"][(proto, ctx)] = {
                "total": len(ps), "answered": sum(p["answered"] for p in ps),
                "stale": sum(p["stale"] for p in ps),
                "p50": pct(lats, 50), "p99": pct(lats, 99), "max": max(lats) if lats else float("nan")}
    # The gate counts the probes of the load (0..end); those before it (the
    # prefill) and after it (the quiet period) are reported apart.
    during = [p for p in probes if 0 <= p["x"] <= dur]
    res["probes_total"] = len(during)
    res["probes_answered"] = sum(p["answered"] for p in during)
    res["unanswered"] = [p for p in during if not p["answered"]]
    outside = [p for p in probes if not 0 <= p["x"] <= dur]
    res["probes_outside"] = (sum(p["answered"] for p in outside), len(outside))
    res["unanswered_outside"] = [p for p in outside if not p["answered"]]
    # CPU, in CPUs' worth, per sample: nodens, CoreDNS (a restart resets its
    # counter: that sample is left out), the machine's other work.
    prev = None
    for s in samples:
        if prev is not None and s["x"] > prev["x"]:
            dt = s["x"] - prev["x"]
            if s.get("cpu_s") is not None and prev.get("cpu_s") is not None:
                s["nodens_cores"] = (s["cpu_s"] - prev["cpu_s"]) / dt
            if s.get("upstream_cpu_s") is not None and prev.get("upstream_cpu_s") is not None \
                    and s["upstream_cpu_s"] >= prev["upstream_cpu_s"]:
                s["upstream_cores"] = (s["upstream_cpu_s"] - prev["upstream_cpu_s"]) / dt
        prev = s
    fc = [s["foreign_cpu"] for s in samples if 0 <= s["x"] <= dur and s.get("foreign_cpu") is not None]
    res["foreign_mean"] = sum(fc) / len(fc) if fc else None
    res["foreign_max"] = max(fc) if fc else None
    nc = [s["nodens_cores"] for s in samples if 0 <= s["x"] <= dur and s.get("nodens_cores") is not None]
    res["nodens_cores_mean"] = sum(nc) / len(nc) if nc else None
    # dnsperf.
    res["dnsperf"] = {}
    for name in ("udp", "tcp"):
        summ = dnsperf_summary(os.path.join(out, f"dnsperf-{name}.summary"))
        per = []
        for r in read_csv(os.path.join(out, f"dnsperf-{name}.csv")):
            r = {k: fnum(v) for k, v in r.items()}
            r["x"] = r["t"] - t0 + 0.5
            per.append(r)
        inf = [r for r in per if in_span(r["x"], spans, after=10.0)]
        outf = [r for r in per if not in_span(r["x"], spans, after=10.0)]
        res["dnsperf"][name] = {
            "summary": summ, "per": per,
            "servfail": sum(r["servfail"] or 0 for r in per), "lost": sum(r["lost"] or 0 for r in per),
            "servfail_faults": sum(r["servfail"] or 0 for r in inf), "lost_faults": sum(r["lost"] or 0 for r in inf),
            "servfail_normal": sum(r["servfail"] or 0 for r in outf), "lost_normal": sum(r["lost"] or 0 for r in outf),
            "p99_normal": med([r["p99_ms"] for r in outf if r.get("p99_ms") is not None]),
        }
    res["prefill"] = dnsperf_summary(os.path.join(out, "dnsperf-prefill.summary"))
    res["popular"] = popular_hit_ratio(out, res["dnsperf"])
    try:
        res["abuse"] = json.load(open(os.path.join(out, "abuse-summary.json")))
    except (OSError, ValueError):
        res["abuse"] = {}
    ok_hups = [s["reloads_ok"] for s in samples if s.get("reloads_ok") is not None]
    bad_hups = [s["reloads_failed"] for s in samples if s.get("reloads_failed") is not None]
    res["reloads_ok"] = int(max(ok_hups)) if ok_hups else 0   # a counter appears at its first increment
    res["reloads_failed"] = max(bad_hups) if bad_hups else 0
    try:
        res["nodens_exit"] = open(os.path.join(out, "nodens-exit.txt")).read().strip()
    except OSError:
        res["nodens_exit"] = "?"
    res["log"] = log_summary(os.path.join(out, "nodens.log"))
    res["counters"] = final_counters(os.path.join(out, "metrics.txt"))
    nop = [s["udp_no_ports"] for s in samples if s.get("udp_no_ports") is not None]
    res["udp_no_ports"] = int(max(nop) - min(nop)) if nop else None
    rb = [s["udp_rcvbuf_errors"] for s in samples if s.get("udp_rcvbuf_errors") is not None]
    res["udp_rcvbuf_errors"] = int(max(rb) - min(rb)) if rb else None
    return res


COUNTERS = ("nodens_upstream_errors_total", "nodens_rejected_queries_total", "nodens_tcp_client_closed_total",
            "nodens_tcp_client_rejected_total", "nodens_upstream_health_checks_total", "nodens_config_reloads_total",
            "coredns_cache_served_stale_total", "coredns_cache_prefetch_total", "coredns_cache_evictions_total",
            "nodens_upstream_queue_rejected_total", "nodens_coalesced_queries_total",
            "nodens_upstream_health_transitions_total")


def final_counters(path):
    """The non-zero counters of interest in the last /metrics snapshot."""
    last = []
    try:
        for line in open(path):
            if line.startswith("# t="):
                last = []
            else:
                last.append(line.strip())
    except OSError:
        return []
    out = []
    for line in last:
        name, _, val = line.rpartition(" ")
        if name.startswith(COUNTERS) and fnum(val):
            out.append((re.sub(r',?(server|view|zones|to)="[^"]*"', "", name).replace("{,", "{").replace("{}", ""), fnum(val)))
    return out


def log_summary(path):
    counts = {}
    try:
        for line in open(path, errors="replace"):
            m = re.search(r"\b(WARN|ERROR)\b\s+(?:\S+:\s+)?(.*)", line)
            if m or "panicked" in line:
                key = ("PANIC " + line.strip()[:160]) if "panicked" in line else f"{m.group(1)} {re.sub(r'[0-9]+', 'N', m.group(2))[:110]}"
                counts[key] = counts.get(key, 0) + 1
    except OSError:
        pass
    return sorted(counts.items(), key=lambda kv: -kv[1])


def fmt_ms(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.0f} ms" if x >= 10 else f"{x:.1f} ms"


def mib(kb):
    return "–" if kb is None or (isinstance(kb, float) and math.isnan(kb)) else f"{kb / 1024:.1f} MiB"


def verdict(res, args):
    checks = []
    checks.append(("nodens alive to the end", "every sample alive",
                   "yes" if res["alive_all"] else f"NO: gone at t={res['first_dead']:.0f}s" if res["first_dead"] is not None else "NO (no samples)",
                   res["alive_all"]))
    checks.append(("probes answered during the load (UDP + TCP)", "all",
                   f"{res['probes_answered']}/{res['probes_total']}",
                   res["probes_total"] > 0 and res["probes_answered"] == res["probes_total"]))
    checks.append(("fd growth after warm-up (end median - base median)", f"<= {args.fd_growth}",
                   f"{res['fd_growth']:+.0f} ({res['fd_base']:.0f} -> {res['fd_end']:.0f})",
                   not math.isnan(res["fd_growth"]) and res["fd_growth"] <= args.fd_growth))
    # The leak check: under load the fds follow the misses in flight (a
    # socket per upstream query), which follow upstream latency and CPU;
    # once the load is over and idle connections have timed out, nothing
    # may be left that was not there before it.
    idle_growth = res["fd_idle_after"] - res["fd_idle_before"]
    checks.append(("fds idle after the load (quiet period) - idle before it", f"<= {args.fd_idle_growth:g}",
                   f"{idle_growth:+.0f} ({res['fd_idle_before']:.0f} -> {res['fd_idle_after']:.0f})",
                   not math.isnan(idle_growth) and idle_growth <= args.fd_idle_growth))
    checks.append(("RSS growth after warm-up (end median / base median)", f"<= {args.rss_growth_pct:g} %",
                   f"{res['rss_growth_pct']:+.1f} % ({mib(res['rss_base_kb'])} -> {mib(res['rss_end_kb'])})",
                   not math.isnan(res["rss_growth_pct"]) and res["rss_growth_pct"] <= args.rss_growth_pct))
    over = res["rss_over_capacity_kb"]
    checks.append(("RSS at every sample - cache capacity", f"<= {args.rss_over_capacity_mib:g} MiB",
                   f"{mib(over)} at most (peak {mib(res['rss_peak_kb'])}, capacity {args.cache_capacity})",
                   not math.isnan(over) and over <= args.rss_over_capacity_mib * 1024))
    pop = res["popular"]
    checks.append(("popular names answered without asking upstream (at least)", f">= {args.popular_hit_pct:g} %",
                   f"{pop['ratio'] * 100:.2f} % ({pop['upstream']} upstream of {pop['sent']})" if pop else "not measured",
                   pop is not None and pop["ratio"] * 100 >= args.popular_hit_pct))
    return checks


def text_report(res, args, checks, env):
    L = []
    w = lambda s="": L.append(s)
    w("# nodens soak: summary")
    w()
    w("Generated by `lab/soak/run` (what it does and how to read this: docs/lab/soak.md).")
    w()
    w("```")
    w(env.strip())
    w("```")
    w()
    b, e = res["base"], res["endw"]
    w(f"Load {res['duration']:.0f} s; warm-up {args.warmup:g} s; base window {b[0]:g}-{b[1]:g} s; "
      f"end window {e[0]:.0f}-{e[1]:.0f} s (seconds since the load started).")
    w()
    w("## Verdict")
    w()
    w("| check | threshold | measured | result |")
    w("|---|---|---|---|")
    for name, thr, meas, ok in checks:
        w(f"| {name} | {thr} | {meas} | {'pass' if ok else '**FAIL**'} |")
    w()
    w("## Figures")
    w()
    w(f"- RSS: peak {mib(res['rss_peak_kb'])} (VmHWM {mib(res['hwm_kb'])}); after warm-up {mib(res['rss_base_kb'])}, "
      f"at the end {mib(res['rss_end_kb'])} ({res['rss_growth_pct']:+.1f} %).")
    if res["rss_after_faults"]:
        w("- RSS 10-30 s after each upstream outage: " + ", ".join(
            f"{mib(v)} (after the {k} ending at {e:.0f} s)" for k, e, v in res["rss_after_faults"]) + ".")
    w(f"- RSS beside what the cache held (RSS - nodens_cache_bytes), at most: {mib(res['rss_beside_cache_kb'])}; "
      f"RSS over the capacity, at most: {mib(res['rss_over_capacity_kb'])}.")
    w(f"- Cache: {mib((res['cache_bytes_end'] or 0) / 1024)} at the end (peak {mib(res['cache_bytes_max'] / 1024)}) "
      f"of {args.cache_capacity}.")
    if res["popular"]:
        pop = res["popular"]
        w(f"- Popular names under the churn (random names and fresh denials evicting all along): of "
          f"{pop['sent']} popular queries the load sent, {pop['upstream']} reached CoreDNS, counting "
          f"prefetches and refreshes as misses: a hit ratio of at least {pop['ratio'] * 100:.2f} %.")
    w(f"- Open fds after warm-up: min {res['fd_min']:.0f}, max {res['fd_max']:.0f}; median {res['fd_base']:.0f} "
      f"after warm-up, {res['fd_end']:.0f} at the end. Idle, before the load: {res['fd_idle_before']:.0f}; "
      f"after the load and a quiet period: {res['fd_idle_after']:.0f}.")
    w(f"- Threads: {', '.join(map(str, res['threads'])) or '–'}. CPU used by nodens: {res['cpu_s'] or 0:.0f} s.")
    if res["nodens_cores_mean"] is not None:
        w(f"- CPU during the load: nodens {res['nodens_cores_mean']:.2f} CPUs on average; processes outside the "
          f"soak (the machine's other work) {res['foreign_mean']:.2f} CPUs on average, {res['foreign_max']:.2f} at most "
          f"(of {os.cpu_count()}).")
    w(f"- Probes answered during the load: {res['probes_answered']}/{res['probes_total']}; before and after it "
      f"(prefill, quiet period; not gated): {res['probes_outside'][0]}/{res['probes_outside'][1]}.")
    w()
    w("| probe | while | answered | stale (EDE 3) | p50 | p99 | max |")
    w("|---|---|---:|---:|---:|---:|---:|")
    for (proto, ctx), v in res["probe_ctx"].items():
        w(f"| {proto} | {ctx} | {v['answered']}/{v['total']} | {v['stale']} | {fmt_ms(v['p50'])} | {fmt_ms(v['p99'])} | {fmt_ms(v['max'])} |")
    w()
    w("(Probes during the load. \"recovery\": the 10 s after a fault ended.)")
    if res["unanswered"]:
        w()
        w("Unanswered probes:")
        w()
        for p in res["unanswered"][:40]:
            w(f"- t={p['x']:.1f}s {p['proto']} {p['name']}: {p['rcode'] or 'no answer'} after {fmt_ms(p['lat'])} ({p['ctx']})")
        if len(res["unanswered"]) > 40:
            w(f"- ... {len(res['unanswered']) - 40} more")
    if res["unanswered_outside"]:
        w()
        w("Unanswered probes outside the load (not gated):")
        w()
        for p in res["unanswered_outside"][:10]:
            w(f"- t={p['x']:.1f}s {p['proto']} {p['name']}: {p['rcode'] or 'no answer'} after {fmt_ms(p['lat'])}")
    w()
    w("| dnsperf | sent | completed | lost | SERVFAIL | lost / SERVFAIL during faults (+10 s) | lost / SERVFAIL otherwise | median per-second p99 otherwise |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, d in res["dnsperf"].items():
        s = d["summary"]
        w(f"| {name} | {s.get('sent', '–')} | {s.get('completed', '–')} | {s.get('lost', d['lost'])} | {d['servfail']} | "
          f"{d['lost_faults']} / {d['servfail_faults']} | {d['lost_normal']} / {d['servfail_normal']} | {fmt_ms(d['p99_normal'])} |")
    if res["prefill"]:
        p = res["prefill"]
        w()
        w(f"Prefill (fresh names, 3 of 4 existing, until the cache is full): {p.get('sent', '–')} sent, {p.get('lost', '–')} lost.")
    w()
    w("## Faults")
    w()
    for s, e_, k, d in res["spans"]:
        w(f"- {k} {s:.0f}-{e_:.0f} s: {d}")
    for x, d in res["hups"]:
        w(f"- SIGHUP at {x:.0f} s: {d}")
    w(f"- reloads counted by nodens: {res['reloads_ok'] if res['reloads_ok'] is not None else '–'} succeeded, "
      f"{int(res['reloads_failed'] or 0)} failed (SIGHUPs sent: {len(res['hups'])})")
    w(f"- nodens on SIGTERM at the end: {res['nodens_exit']}")
    w(f"- datagrams to a closed UDP port in the namespace (each one answered by an ICMP port unreachable): "
      f"{res['udp_no_ports'] if res['udp_no_ports'] is not None else '–'}; dropped at a full socket buffer: "
      f"{res['udp_rcvbuf_errors'] if res['udp_rcvbuf_errors'] is not None else '–'}")
    w()
    w("nodens's counters at the end (non-zero):")
    w()
    for name, v in res["counters"]:
        w(f"- `{name}` {v:.0f}")
    w()
    w("## Abusive clients")
    w()
    a = res["abuse"]
    if a:
        g = lambda k: a.get(k, 0)
        w(f"- trickle: {g('trickle.connections')} connections, {g('trickle.closed_by_server')} closed by nodens "
          f"({g('trickle.closed_mid_message')} in the middle of a query), {g('trickle.messages_completed')} queries "
          f"completed (longest took {g('trickle.max_message_secs'):.0f} s to send), {g('trickle.answers')} answered; "
          f"longest connection {g('trickle.max_life'):.0f} s.")
        sc = g("silent.closed_by_server")
        w(f"- silent: {g('silent.connections')} connections, {sc} closed by nodens "
          f"(mean after {g('silent.life_sum_closed_by_server') / sc if sc else float('nan'):.1f} s, longest "
          f"{g('silent.max_life_closed_by_server'):.1f} s), {g('silent.reset_by_server')} reset, "
          f"{g('silent.outlived_silent_max')} still open after {args.silent_max:g} s.")
        failed = {k: v for k, v in a.items() if "connect_failed" in k}
        if failed:
            w(f"- connects that failed: {failed}")
        kinds = sorted({k.split(".")[1] for k in a if k.startswith("udp.") and k.endswith(".sent")})
        w(f"- malformed UDP: {sum(a.get(f'udp.{k}.sent', 0) for k in kinds)} datagrams; answers per kind:")
        w()
        w("| kind | sent | answers by rcode |")
        w("|---|---:|---|")
        for k in kinds:
            ans = {kk.rsplit(".", 1)[1]: v for kk, v in a.items() if kk.startswith(f"udp.{k}.answer.")}
            w(f"| {k} | {a.get(f'udp.{k}.sent', 0)} | {', '.join(f'{rc} {n}' for rc, n in sorted(ans.items())) or 'none (dropped)'} |")
        other = {k: v for k, v in a.items() if k.startswith("udp.") and ("error" in k or "unknown" in k or "runt" in k)}
        if other:
            w()
            w(f"Other UDP outcomes: {other}")
    else:
        w("No summary from abuse.py.")
    w()
    w("## nodens log: warnings and errors (numbers as N)")
    w()
    if res["log"]:
        for k, n in res["log"][:15]:
            w(f"- {n} x `{k}`")
    else:
        w("None.")
    return "\n".join(L)


def plot(res, args, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S, P = res["samples"], res["probes"]
    fig, axes = plt.subplots(5, 1, figsize=(13, 16), sharex=True, gridspec_kw={"height_ratios": [2.2, 2, 2.4, 2, 1.3]})
    colors = {"restart": "#ff7f0e", "freeze": "#1f77b4"}

    def decorate(ax, labels=False):
        ax.axvspan(min([s["x"] for s in S] or [0]), 0, color="#e8e8e8", zorder=0)
        ax.axvspan(0, args.warmup, color="#f2f2f2", zorder=0)
        for lo, hi in (res["base"], res["endw"]):
            ax.axvspan(lo, hi, color="#e5f5e0", zorder=0)
        for s, e, k, _ in res["spans"]:
            ax.axvspan(s, min(e, res["duration"]), color=colors.get(k, "#999999"), alpha=0.18, zorder=0)
            if labels:
                ax.text(s, 1.0, "restart" if k == "restart" else "freeze", color=colors.get(k), fontsize=8,
                        transform=ax.get_xaxis_transform(), va="bottom")
        for x, _ in res["hups"]:
            ax.axvline(x, color="#9467bd", ls="--", lw=1)
            if labels:
                ax.text(x, 1.0, "HUP", color="#9467bd", fontsize=8, transform=ax.get_xaxis_transform(), va="bottom", ha="center")
        ax.grid(True, alpha=0.3)

    xs = [s["x"] for s in S]
    ax = axes[0]
    ax.plot(xs, [(s.get("rss_kb") or float("nan")) / 1024 for s in S], color="#d62728", lw=1.6, label="RSS (VmRSS)")
    ax.plot(xs, [(s.get("hwm_kb") or float("nan")) / 1024 for s in S], color="#d62728", lw=0.8, ls=":", label="peak RSS (VmHWM)")
    cb = [(s["x"], s["cache_bytes"] / 2**20) for s in S if s.get("cache_bytes") is not None]
    ax.plot([x for x, _ in cb], [y for _, y in cb], color="#2ca02c", lw=1.2, label="cache bytes (nodens_cache_bytes)")
    for lo, hi, key in ((*res["base"], "rss_base_kb"), (*res["endw"], "rss_end_kb")):
        ax.hlines(res[key] / 1024, lo, hi, color="black", lw=2)
    if not math.isnan(res["capacity_kb"]):
        bound = (res["capacity_kb"] + args.rss_over_capacity_mib * 1024) / 1024
        ax.axhline(res["capacity_kb"] / 1024, color="#2ca02c", ls=":", lw=1)
        ax.axhline(bound, color="#d62728", ls="--", lw=1)
        ax.text(res["duration"], bound, f"capacity + {args.rss_over_capacity_mib:g} MiB", ha="right", va="bottom", fontsize=8)
    ax.axhline(res["rss_base_kb"] * (1 + args.rss_growth_pct / 100) / 1024, color="black", ls=":", lw=1)
    ax.text(res["duration"], res["rss_base_kb"] * (1 + args.rss_growth_pct / 100) / 1024,
            f"base + {args.rss_growth_pct:g} %", ha="right", va="bottom", fontsize=8)
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=8)
    decorate(ax, labels=True)
    ax.set_title(f"nodens soak: {res['duration']:.0f} s of mixed load with upstream faults "
                 f"(grey: before the load, warm-up; green: base and end windows)", fontsize=11, pad=16)

    ax = axes[1]
    ax.plot(xs, [s.get("fds") for s in S], color="#8c564b", lw=1.4, label="open fds")
    tc = [(s["x"], s["tcp_clients"]) for s in S if s.get("tcp_clients") is not None]
    ax.plot([x for x, _ in tc], [y for _, y in tc], color="#17becf", lw=1.2, label="client TCP connections (metric)")
    inf = [(s["x"], s["inflight"]) for s in S if s.get("inflight") is not None]
    ax.plot([x for x, _ in inf], [y for _, y in inf], color="#7f7f7f", lw=1, label="queries in flight upstream (metric)")
    ax.plot(xs, [s.get("threads") for s in S], color="#bcbd22", lw=1.2, label="threads")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylabel("count")
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    decorate(ax)

    ax = axes[2]
    for proto, color, mk in (("udp", "#1f77b4", "o"), ("tcp", "#2ca02c", "s")):
        ok = [p for p in P if p["proto"] == proto and p["answered"] and p["lat"] is not None]
        ax.scatter([p["x"] for p in ok], [max(p["lat"], 0.5) for p in ok], s=6, color=color, marker=mk,
                   label=f"{proto} probe, answered")
        st = [p for p in ok if p["stale"]]
        if st:
            ax.scatter([p["x"] for p in st], [max(p["lat"], 0.5) for p in st], s=22, facecolors="none",
                       edgecolors="#ff7f0e", label=f"{proto}: stale answer (EDE 3)")
        bad = [p for p in P if p["proto"] == proto and not p["answered"]]
        if bad:
            ax.scatter([p["x"] for p in bad], [args.probe_timeout * 1000 * 1.5] * len(bad), s=40, color="#d62728",
                       marker="x", label=f"{proto} probe NOT answered")
    ax.axhline(args.probe_timeout * 1000, color="black", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_ylim(0.4, args.probe_timeout * 1000 * 3)
    ax.set_ylabel("probe latency (ms)")
    ax.legend(loc="upper left", fontsize=8, ncol=3)
    decorate(ax)

    ax = axes[3]
    d = res["dnsperf"]["udp"]["per"]
    ax.plot([r["x"] for r in d], [r["answered"] for r in d], color="#1f77b4", lw=1, label="UDP answered / s")
    t = res["dnsperf"]["tcp"]["per"]
    ax.plot([r["x"] for r in t], [r["answered"] for r in t], color="#2ca02c", lw=1, label="TCP answered / s")
    ax.set_ylabel("dnsperf answers / s")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    for per, color, name in ((d, "#d62728", "UDP"), (t, "#9467bd", "TCP")):
        ax2.bar([r["x"] for r in per], [(r["servfail"] or 0) + (r["lost"] or 0) for r in per], width=1.0,
                color=color, alpha=0.5, label=f"{name} SERVFAIL + lost / s")
    ax2.set_ylabel("failed / s")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=8, ncol=2)
    decorate(ax)

    ax = axes[4]
    for key, color, label in (("nodens_cores", "#d62728", "nodens"), ("upstream_cores", "#ff7f0e", "CoreDNS"),
                              ("foreign_cpu", "#7f7f7f", "outside the soak (the machine's other work)")):
        pts = [(s["x"], s[key]) for s in S if s.get(key) is not None]
        ax.plot([x for x, _ in pts], [y for _, y in pts], color=color, lw=1.2, label=label)
    ax.set_ylabel("CPUs")
    ax.set_ylim(0, (os.cpu_count() or 2) + 0.2)
    ax.legend(loc="upper left", fontsize=8, ncol=3)
    decorate(ax)
    ax.set_xlabel("seconds since the load started (orange: CoreDNS killed, blue: CoreDNS frozen, dashed: SIGHUP)")
    fig.tight_layout()
    fig.savefig(png, dpi=80)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--warmup", type=float, required=True)
    p.add_argument("--window", type=float, required=True)
    p.add_argument("--rss-growth-pct", type=float, default=10)
    p.add_argument("--rss-over-capacity-mib", type=float, default=24)
    p.add_argument("--fd-growth", type=float, default=16)
    p.add_argument("--popular-hit-pct", type=float, default=99)
    p.add_argument("--fd-idle-growth", type=float, default=4)
    p.add_argument("--probe-timeout", type=float, default=5)
    p.add_argument("--silent-max", type=float, default=120)
    p.add_argument("--cache-capacity", default="?")
    p.add_argument("--png")
    p.add_argument("--md")
    args = p.parse_args()
    res = analyze(args)
    checks = verdict(res, args)
    env = ""
    try:
        env = open(os.path.join(args.out, "env.txt")).read()
    except OSError:
        pass
    text = text_report(res, args, checks, env)
    png = args.png or os.path.join(args.out, "soak.png")
    try:
        plot(res, args, png)
        text += f"\n\n![RSS, fds, probes and load over the soak]({os.path.basename(png)})\n"
    except ImportError:
        text += "\n\n(no PNG: matplotlib is not installed)\n"
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text + "\n")
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    summary = {k: v for k, v in res.items() if k not in ("samples", "probes", "events", "dnsperf", "probe_ctx", "unanswered")}
    summary["checks"] = [{"check": c[0], "threshold": c[1], "measured": c[2], "pass": c[3]} for c in checks]
    summary["dnsperf"] = {k: {kk: vv for kk, vv in v.items() if kk != "per"} for k, v in res["dnsperf"].items()}
    summary["probe_ctx"] = {f"{k[0]}/{k[1]}": v for k, v in res["probe_ctx"].items()}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    print(text)
    print()
    print("checks (threshold / measured):")
    for name, thr, meas, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {thr} / {meas}")
    if not all(ok for name, _, _, ok in checks if name.startswith("fds idle")):
        print_fd_snapshots(args.out)
    return 0 if all(c[3] for c in checks) else 1


def print_fd_snapshots(out):
    """The fds nodens held idle before the load and after it (lab/soak/run's
    fd_snapshot), for a failed idle-fd gate: which kind of fd stayed."""
    for name in ("fds-idle-before.txt", "fds-idle-after.txt"):
        try:
            with open(os.path.join(out, name)) as f:
                print()
                print(f.read().rstrip())
        except OSError:
            print(f"\n({name}: not written)")


if __name__ == "__main__":
    sys.exit(main())
