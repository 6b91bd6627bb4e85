#!/usr/bin/env python3
"""The search-path lab's report: tables, the targets as PASS/FAIL lines, and a
PNG, from lab.py's results.json.

    lab/search-path/report.py OUT/results.json [--md OUT/results.md] [--png docs/lab/search-path.png]

Every figure is a median over the repetitions of one (cache, client, name,
phase). "time" is the client program's wall time (fork to exit, run from a
process inside the pod's namespace: the client's start-up is included, see
client_startup_ms), "upstream" the queries that reached the relay in front of
the cluster DNS from the lookup's start until SETTLE after its end (late
speculative queries included).

With autopath (e), the client's own queries differ from the other caches' (a
verified pod's first expansion is answered with the walk's end behind a CNAME):
the client-query columns then show each cache's, and e has targets of its own.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

PHASES = ("cold", "new", "warm")
# "Not slower" for in-cluster names: the median may exceed (a)'s by this much
# (measurement noise of a 2-core machine shared with other work).
SLOWER_MARGIN_MS = 1.0
SLOWER_MARGIN_REL = 0.10


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_ms(x):
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def fmt_n(x):
    if x is None:
        return "-"
    return f"{x:g}"


def client_q(r, name, client=None, phase="cold"):
    """Client queries (rounds), medians: one figure when every cache saw the
    same, else per group of caches ("a, b: 14 (7); e: 2 (1)")."""
    groups = {}
    for cfg in r.configs:
        if client is None:
            q, rounds = r.pooled(cfg, name, phase, "client_queries"), r.pooled(cfg, name, phase, "rounds")
        else:
            q, rounds = r.stat(cfg, client, name, phase, "client_queries"), r.stat(cfg, client, name, phase, "rounds")
        groups.setdefault(f"{fmt_n(q)} ({fmt_n(rounds)})", []).append(cfg)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{', '.join(cfgs)}: {v}" for v, cfgs in groups.items())


class Results:
    def __init__(self, data):
        self.data = data
        self.configs = list(data["configs"])
        self.clients = data["clients"]
        self.names = data["names"]
        self.external = data["external"]
        self.in_cluster = data["in_cluster"]
        self.rtt = data["rtt"]["median_ms"]
        self.by = defaultdict(list)
        for s in data["samples"]:
            self.by[(s["config"], s["client"], s["name"], s["phase"])].append(s)

    def stat(self, cfg, client, name, phase, field):
        return med([s.get(field) for s in self.by.get((cfg, client, name, phase), [])])

    def pooled(self, cfg, name, phase, field):
        """Median over every client's samples."""
        return med([s.get(field) for c in self.clients for s in self.by.get((cfg, c, name, phase), [])])

    def answers(self, client, name):
        """{config: set of answers seen in any phase or repetition}."""
        out = {}
        for cfg in self.configs:
            seen = {s["answer"] for ph in PHASES for s in self.by.get((cfg, client, name, ph), [])}
            out[cfg] = seen
        return out


def table_full(r):
    """One row per name and client."""
    head = ["name", "client", "answer", "client queries (rounds)"]
    for cfg in r.configs:
        head += [f"{cfg} cold up / ms", f"{cfg} new up / ms", f"{cfg} warm up / ms"]
    rows = []
    for name in r.names:
        for client in r.clients:
            ans = sorted(set().union(*r.answers(client, name).values()))
            # The client's queries are the same whatever the cache (it never sees
            # the difference), but with autopath (e): cold, per cache when they differ.
            row = [f"`{name}`", client, " / ".join(a if a else "(empty)" for a in ans), client_q(r, name, client)]
            for cfg in r.configs:
                for ph in PHASES:
                    up = r.stat(cfg, client, name, ph, "upstream")
                    ms = r.stat(cfg, client, name, ph, "wall_ms")
                    row.append(f"{fmt_n(up)} / {fmt_ms(ms)}")
            rows.append(row)
    return head, rows


def table_short(r):
    """One row per name, pooled over the clients: upstream queries and time."""
    head = ["name", "client q (rounds)"]
    for ph in ("cold", "new"):
        head += [f"{ph}: upstream " + " / ".join(r.configs), f"{ph}: ms " + " / ".join(r.configs)]
    head += ["warm: ms " + " / ".join(r.configs)]
    rows = []
    for name in r.names:
        row = [f"`{name}`", client_q(r, name)]
        for ph in ("cold", "new"):
            row.append(" / ".join(fmt_n(r.pooled(c, name, ph, "upstream")) for c in r.configs))
            row.append(" / ".join(fmt_ms(r.pooled(c, name, ph, "wall_ms")) for c in r.configs))
        row.append(" / ".join(fmt_ms(r.pooled(c, name, "warm", "wall_ms")) for c in r.configs))
        rows.append(row)
    return head, rows


def table_answers(r):
    """What each client printed, per name, and whether every cache gave the same."""
    head = ["name"] + r.clients + ["same through " + ", ".join(r.configs)]
    rows = []
    for name in r.names:
        row, same = [f"`{name}`"], True
        for client in r.clients:
            ans = r.answers(client, name)
            seen = set().union(*ans.values())
            same = same and len(seen) == 1
            row.append(" / ".join(sorted(a if a else "(empty)" for a in seen)))
        row.append("yes" if same else "**no**")
        rows.append(row)
    return head, rows


def table_autopath(r):
    """Per name and client: the client's queries and time, (e) against the others."""
    if "e" not in r.configs:
        return None, None
    cfgs = " / ".join(r.configs)
    head = ["name", "client", f"client queries cold / new / warm: {cfgs}"]
    head += [f"{ph} ms: {cfgs}" for ph in PHASES] + ["autopath answers cold / new / warm (e)"]
    rows = []
    for name in r.names:
        for client in r.clients:
            row = [f"`{name}`", client,
                   " / ".join("-".join(fmt_n(r.stat(c, client, name, ph, "client_queries")) for ph in PHASES)
                              for c in r.configs)]
            for ph in PHASES:
                row.append(" / ".join(fmt_ms(r.stat(c, client, name, ph, "wall_ms")) for c in r.configs))
            row.append(" / ".join(fmt_n(r.stat("e", client, name, ph, "autopath_answers")) for ph in PHASES))
            rows.append(row)
    return head, rows


def md_table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def text_table(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return [line(head), line(["-" * w for w in widths])] + [line(row) for row in rows]


def targets(r):
    """[(ok, text)]: the brief's targets, against nodens (b), then autopath's (e)."""
    out = []
    if "b" not in r.configs:
        return ([(None, "no nodens (b) run: targets not evaluated")] + targets_speculation(r)
                + targets_autopath(r))
    lim = 1.5 * r.rtt
    for cfg in [c for c in ("b", "f") if c in r.configs]:
        for ph, label in (("cold", "cold (cache restarted)"), ("new", "new name (cache running, SOAs known)")):
            worst_up, worst_ms, worst_wire, misses_up, misses_ms = 0, 0, 0, [], []
            for name in r.external:
                for client in r.clients:
                    up = r.stat(cfg, client, name, ph, "upstream")
                    ms = r.stat(cfg, client, name, ph, "wall_ms")
                    if up is None:
                        continue
                    worst_up = max(worst_up, up)
                    worst_ms = max(worst_ms, ms)
                    worst_wire = max(worst_wire, r.stat(cfg, client, name, ph, "wire_ms") or 0)
                    if up > 3:
                        misses_up.append(f"{name} {client} {up:g}")
                    if ms > lim:
                        misses_ms.append(f"{name} {client} {ms:.0f} ms")
            out.append((not misses_up, f"({cfg}) {label} external lookup: at most 3 upstream queries with nodens: "
                        f"worst {worst_up:g}" + (f"; over: {', '.join(misses_up)}" if misses_up else "")))
            out.append((not misses_ms, f"({cfg}) {label} external lookup: client time at most 1.5 x one upstream "
                        f"round trip (1.5 x {r.rtt:.1f} = {lim:.1f} ms): worst {worst_ms:.1f} ms (on the wire, first "
                        f"query to last answer at the pod's veth: worst {worst_wire:.1f} ms)"
                        + (f"; over: {', '.join(misses_ms)}" if misses_ms else "")))
    out += targets_speculation(r)
    worst, over = 0, []
    for name in r.external:
        for client in r.clients:
            up = r.stat("b", client, name, "warm", "upstream")
            if up is None:
                continue
            worst = max(worst, up)
            if up > 0:
                over.append(f"{name} {client} {up:g}")
    out.append((not over, f"warm external lookup: no upstream query with nodens: worst {worst:g}"
                + (f"; over: {', '.join(over)}" if over else "")))
    if "a" in r.configs:
        slower, worst_txt, worst_d = [], "", -1e9
        for name in r.in_cluster:
            for client in r.clients:
                for ph in PHASES:
                    a = r.stat("a", client, name, ph, "wall_ms")
                    b = r.stat("b", client, name, ph, "wall_ms")
                    if a is None or b is None:
                        continue
                    if b - a > worst_d:
                        worst_d, worst_txt = b - a, f"{name} {client} {ph}: {b:.1f} ms against {a:.1f} ms"
                    if b > a * (1 + SLOWER_MARGIN_REL) + SLOWER_MARGIN_MS:
                        wa = r.stat("a", client, name, ph, "wire_ms")
                        wb = r.stat("b", client, name, ph, "wire_ms")
                        slower.append(f"{name} {client} {ph} {b:.1f} vs {a:.1f} ms (on the wire {wb:.1f} vs {wa:.1f})")
        out.append((not slower, "no in-cluster lookup slower with nodens than with (a) "
                    f"(median, margin {SLOWER_MARGIN_REL:.0%} + {SLOWER_MARGIN_MS:g} ms): worst {worst_txt}"
                    + (f"; slower: {', '.join(slower)}" if slower else "")))
    # g answers an IPv4-only pod's AAAA with NODATA by design: compared on its own.
    same = [c for c in r.configs if c != "g"]
    # With autopath the pod's messages differ by design (a CNAME where the
    # others answer NXDOMAIN): e's are compared by what the client printed only.
    same_wire = [c for c in same if c != "e"]
    diffs = []
    for name in r.names:
        for client in r.clients:
            ans = r.answers(client, name)
            sets = {c: ans[c] for c in same if ans[c]}
            if len({frozenset(s) for s in sets.values()}) > 1 or any(len(s) > 1 for s in sets.values()):
                diffs.append(f"{name} {client}: " + "; ".join(f"{c}={sorted(s)}" for c, s in sets.items()))
    rdiffs = []
    for name in r.names:
        for client in r.clients:
            seen = {}
            for c in same_wire:
                for ph in PHASES:
                    for s in r.by.get((c, client, name, ph), []):
                        seen.setdefault(c, set()).add(tuple(sorted({tuple(x) for x in s["answer_rcodes"]})))
            if len({frozenset(v) for v in seen.values()}) > 1 or any(len(v) > 1 for v in seen.values()):
                rdiffs.append(f"{name} {client}")
    out.append((not rdiffs, f"every DNS answer the pod received has the same name, type and rcode across "
                f"{', '.join(same_wire)}" + (": differences: " + ", ".join(rdiffs) if rdiffs else "")))
    out.append((not diffs, f"every answer identical across {', '.join(same)} (each client, each name, every "
                f"phase and repetition)" + (": differences: " + " | ".join(diffs) if diffs else "")))
    return out + targets_ipv4_pods(r) + targets_autopath(r)


def targets_ipv4_pods(r):
    """[(ok, text)]: g (no_aaaa_for_ipv4_pods) against f, the same without it."""
    if "g" not in r.configs or "f" not in r.configs:
        return []
    out, wrong, up_f, up_g, aaaa_g = [], [], 0.0, 0.0, 0.0
    for name in r.names:
        for client in r.clients:
            for ph in ("cold", "new"):
                up_f += r.stat("f", client, name, ph, "upstream") or 0
                up_g += r.stat("g", client, name, ph, "upstream") or 0
                aaaa_g += r.stat("g", client, name, ph, "aaaa_upstream") or 0
            ans = r.answers(client, name)
            v4 = {" ".join(a for a in s.split() if ":" not in a) for s in ans.get("f", set())}
            if ans.get("g") and ans["g"] != v4:
                wrong.append(f"{name} {client}: g={sorted(ans['g'])} f={sorted(ans['f'])}")
    out.append((not wrong, "(g) every lookup of the IPv4-only pod gives the IPv4 addresses of (f) and no IPv6 one"
                + (": " + " | ".join(wrong) if wrong else "")))
    out.append((aaaa_g == 0, f"(g) no AAAA query upstream for the IPv4-only pod: {aaaa_g:g} (medians summed)"))
    out.append((up_g <= up_f, f"(g) upstream queries, cold and new, summed over names and clients: {up_g:g} "
                f"against {up_f:g} without it ({(1 - up_g / up_f) if up_f else 0:.0%} saved)"))
    return out


def is_cluster_side(qname):
    """Whether an upstream query's name goes to the cluster DNS's zones."""
    n = qname.lower().rstrip(".") + "."
    return any(n.endswith(z) for z in (".cluster.local.", ".in-addr.arpa.", ".ip6.arpa."))


def targets_speculation(r):
    """[(ok, text)]: no in-cluster name sent to another zone's upstreams by any nodens
    config, and in-cluster lookups cost no more upstream queries than through (a)."""
    out = []
    nodens = [c for c in ("b", "d", "e", "f") if c in r.configs]
    for cfg in nodens:
        leaks = set()
        for name in r.in_cluster:
            prefix = name.lower().rstrip(".") + "."
            for client in r.clients:
                for ph in PHASES:
                    for s in r.by.get((cfg, client, name, ph), []):
                        for q in s.get("upstream_queries", []):
                            qn = str(q[0]).lower().rstrip(".") + "."
                            if qn.startswith(prefix) and not is_cluster_side(qn):
                                leaks.add(f"{qn} {q[1]}")
        out.append((not leaks, f"({cfg}) no in-cluster name reached an upstream outside the cluster zones"
                    + (f": {', '.join(sorted(leaks))}" if leaks else "")))
    if "a" not in r.configs:
        return out
    for cfg in [c for c in nodens if c in ("b", "f")]:
        over = []
        for name in r.in_cluster:
            for client in r.clients:
                for ph in ("cold", "new"):
                    a = r.stat("a", client, name, ph, "upstream")
                    n = r.stat(cfg, client, name, ph, "upstream")
                    if a is not None and n is not None and n > a:
                        over.append(f"{name} {client} {ph} {n:g} vs {a:g}")
        out.append((not over, f"({cfg}) no in-cluster lookup sends more upstream queries than through (a)"
                    + (f": {', '.join(over)}" if over else "")))
    return out


def targets_autopath(r):
    """[(ok, text)]: autopath (e). An external name that exists costs the
    client one round trip (its first expansion's A and AAAA, 2 queries),
    cold, new and warm, for every client, and about one upstream round trip
    of time when the cache has to ask."""
    if "e" not in r.configs:
        return []
    out = []
    found = [n for n in r.external if not n.endswith(".")
             and "NOTFOUND" not in set().union(*(r.answers(c, n).get("e", set()) for c in r.clients))]
    missing = [n for n in r.external if not n.endswith(".") and n not in found]
    lim = 1.5 * r.rtt
    for ph in PHASES:
        worst_q, worst_ms, over_q, over_ms, ap = 0, 0.0, [], [], []
        for name in found:
            for client in r.clients:
                ss = r.by.get(("e", client, name, ph), [])
                if not ss:
                    continue
                q = max(s["client_queries"] for s in ss)
                worst_q = max(worst_q, q)
                if q != 2 or max(s["rounds"] for s in ss) != 1:
                    over_q.append(f"{name} {client} {q} queries")
                ap.append(min((s.get("autopath_answers") or 0) for s in ss))
                ms = r.stat("e", client, name, ph, "wall_ms")
                worst_ms = max(worst_ms, ms)
                if ph != "warm" and ms > lim:
                    over_ms.append(f"{name} {client} {ms:.0f} ms")
        if not ap:
            continue
        out.append((not over_q, f"autopath (e), {ph}: an external name that exists ({', '.join(found)}) costs "
                    f"the client one round trip, its first expansion's A and AAAA, in every lookup: worst "
                    f"{worst_q} client queries; autopath answers per lookup: at least {min(ap):g}"
                    + (f"; over: {', '.join(over_q)}" if over_q else "")))
        if ph != "warm":
            out.append((not over_ms, f"autopath (e), {ph}: client time at most 1.5 x one upstream round trip "
                        f"({lim:.1f} ms): worst {worst_ms:.1f} ms" + (f"; over: {', '.join(over_ms)}" if over_ms else "")))
    for name in missing:
        qs = [r.stat("e", c, name, "cold", "client_queries") for c in r.clients]
        out.append((None, f"autopath (e): {name} does not exist: no name of the walk answers, so autopath gives the "
                    f"answer without it and the client walks on (cold client queries: "
                    + ", ".join(f"{c} {fmt_n(q)}" for c, q in zip(r.clients, qs)) + ")"))
    if "a" in r.configs:
        slower, worst_txt, worst_d = [], "", -1e9
        for name in r.in_cluster:
            for client in r.clients:
                for ph in PHASES:
                    a = r.stat("a", client, name, ph, "wall_ms")
                    e = r.stat("e", client, name, ph, "wall_ms")
                    if a is None or e is None:
                        continue
                    if e - a > worst_d:
                        worst_d, worst_txt = e - a, f"{name} {client} {ph}: {e:.1f} ms against {a:.1f} ms"
                    if e > a * (1 + SLOWER_MARGIN_REL) + SLOWER_MARGIN_MS:
                        slower.append(f"{name} {client} {ph} {e:.1f} vs {a:.1f} ms")
        out.append((not slower, "no in-cluster lookup slower with autopath (e) than with (a) "
                    f"(median, margin {SLOWER_MARGIN_REL:.0%} + {SLOWER_MARGIN_MS:g} ms): worst {worst_txt}"
                    + (f"; slower: {', '.join(slower)}" if slower else "")))
    return out


def namespace_check(r):
    """b against d: what asking for the namespace node first buys."""
    if not {"b", "d"} <= set(r.configs):
        return []
    lines = []
    for ph in ("cold", "new"):
        for kind, names in (("external", r.external), ("in-cluster", r.in_cluster)):
            ub = sum(r.pooled("b", n, ph, "upstream") or 0 for n in names)
            ud = sum(r.pooled("d", n, ph, "upstream") or 0 for n in names)
            tb = sum(r.pooled("b", n, ph, "wall_ms") or 0 for n in names)
            td = sum(r.pooled("d", n, ph, "wall_ms") or 0 for n in names)
            lines.append(f"{ph}, {kind} names ({len(names)}): upstream queries {ub:g} with namespace_check, "
                         f"{ud:g} without; summed median time {tb:.0f} ms with, {td:.0f} ms without")
    return lines


def plot(r, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"a": "#d62728", "b": "#2ca02c", "c": "#7f7f7f", "d": "#1f77b4", "e": "#9467bd", "f": "#17becf", "g": "#bcbd22"}
    fig, axes = plt.subplots(2, 2, figsize=(16, 9.5), sharex=True)
    x = list(range(len(r.names)))
    width = 0.8 / len(r.configs)
    for col, ph in enumerate(("cold", "new")):
        for row, (field, ylabel) in enumerate((("upstream", "upstream queries per lookup"),
                                               ("wall_ms", "client time, ms (median)"))):
            ax = axes[row][col]
            for i, cfg in enumerate(r.configs):
                ys = [r.pooled(cfg, n, ph, field) or 0 for n in r.names]
                ax.bar([xi + (i - (len(r.configs) - 1) / 2) * width for xi in x], ys, width,
                       label=f"({cfg}) {r.data['configs'][cfg]}", color=colors.get(cfg))
            # The targets are about external names: drawn over those only.
            ext_end = len(r.external) - 0.5
            if field == "upstream":
                ax.hlines(3, -0.5, ext_end, color="black", lw=0.8, ls="--")
                ax.text(ext_end - 0.05, 3.3, "target: 3", ha="right", fontsize=8)
            else:
                ax.hlines(1.5 * r.rtt, -0.5, ext_end, color="black", lw=0.8, ls="--")
                ax.text(ext_end - 0.05, 1.5 * r.rtt + 3, f"target: 1.5 x RTT = {1.5 * r.rtt:.0f} ms",
                        ha="right", fontsize=8)
            title = {"cold": "cold: cache restarted", "new": "new name: cache running, primed with another name"}[ph]
            ax.set_title(title if row == 0 else "")
            ax.set_ylabel(ylabel)
            ax.grid(axis="y", alpha=0.3)
            ax.axvline(len(r.external) - 0.5, color="black", lw=0.5)
            if row == 1:
                ax.set_xticks(x)
                ax.set_xticklabels(r.names, rotation=35, ha="right", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(r.configs), fontsize=9)
    fig.suptitle("The ndots:5 search list: one lookup by glibc, musl and Go (pooled medians), "
                 f"relay round trip {r.rtt:.0f} ms; external names left of the line, in-cluster right", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=90)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results")
    p.add_argument("--md")
    p.add_argument("--png")
    p.add_argument("--summary", help="write the medians and the targets as JSON here")
    args = p.parse_args()
    data = json.load(open(args.results))
    r = Results(data)

    md = [f"# search-path lab results, {data['date']}", ""]
    md += [f"One upstream round trip (node to relay to cluster DNS, UDP): median {r.rtt:.1f} ms "
           f"(min {data['rtt']['min_ms']:.1f}, max {data['rtt']['max_ms']:.1f}). "
           f"Repetitions: {data['reps']}{'' if data['complete'] else ' (incomplete run: MAX_SECS reached)'}. "
           "Client start-up without DNS (`localhost` from /etc/hosts): "
           + ", ".join(f"{c} {v:.1f} ms" for c, v in data["client_startup_ms"].items()) + ".", ""]
    md += ["Caches: " + "; ".join(f"({c}) {d}" for c, d in data["configs"].items())
           + f". nodens's TCP pool to the relay: {data.get('pool_connections', 4)} connections.", ""]
    if data.get("watch_sync_ms"):
        w = data["watch_sync_ms"]
        md += [f"Autopath (e): pod `{data.get('pod_namespace')}/client` on node `{data.get('node_name')}` in a real "
               f"kube-apiserver; after each of the {w['n']} starts of (e) the pod watch was synced "
               f"{w['median']:.0f} ms (median; max {w['max']:.0f}) after nodens listened, before the lookup.", ""]
    md += ["Pod resolv.conf:", "", "```", data["resolv_conf"].strip(), "```", ""]
    head, rows = table_short(r)
    md += ["## Per name, pooled over the three clients", "",
           "Medians. Client queries and rounds are what the pod sent (the same through every cache but "
           "autopath's, e); "
           "upstream counts the queries that reached the cluster DNS; ms is the client's wall time.", ""]
    md += md_table(head, rows) + [""]
    head_f, rows_f = table_full(r)
    md += ["## Per name and client", "", "Cells: upstream queries / client time in ms (medians).", ""]
    md += md_table(head_f, rows_f) + [""]
    head_a, rows_a = table_answers(r)
    md += ["## Answers", "", "What each client printed (sorted addresses, or NOTFOUND), over every cache, phase "
           "and repetition.", ""]
    md += md_table(head_a, rows_a) + [""]
    head_e, rows_e = table_autopath(r)
    if head_e:
        md += ["## Autopath (e): per name and client", "",
               "Medians: the client's queries (cold-new-warm, per cache), its time per phase and cache, and "
               "how many replies nodens gave by autopath in the lookup.", ""]
        md += md_table(head_e, rows_e) + [""]
    tg = targets(r)
    md += ["## Targets (nodens, b; autopath, e)", ""]
    md += [f"- **{'PASS' if ok else 'FAIL' if ok is False else 'N/A'}** {t}" for ok, t in tg] + [""]
    ns = namespace_check(r)
    if ns:
        md += ["## namespace_check: (b) against (d)", ""] + [f"- {x}" for x in ns] + [""]

    print("\n".join(text_table(head, rows)))
    print()
    for ok, t in tg:
        print(f"{'PASS' if ok else 'FAIL' if ok is False else 'N/A '}  {t}")
    for x in ns:
        print(f"namespace_check: {x}")
    if args.png:
        try:
            plot(r, args.png)
            print(f"plot: {args.png}")
        except ImportError:
            print("(no PNG: matplotlib is not installed)")
            md += ["(no PNG: matplotlib is not installed)", ""]
    if args.summary:
        fields = ("client_queries", "rounds", "upstream", "wall_ms", "wire_ms", "autopath_answers")
        cells = []
        for (cfg, client, name, ph), ss in sorted(r.by.items()):
            if ph not in PHASES:
                continue
            cell = {"config": cfg, "client": client, "name": name, "phase": ph, "n": len(ss),
                    "answers": sorted({s["answer"] for s in ss})}
            cell.update({f: r.stat(cfg, client, name, ph, f) for f in fields})
            # What reached the cluster DNS in the first repetition: the names, in order.
            cell["upstream_queries_rep0"] = [f"{q[0]} {q[1]} {q[2]}" for q in ss[0]["upstream_queries"]]
            cells.append(cell)
        summary = {k: data[k] for k in data if k != "samples"}
        summary["medians"] = cells
        summary["targets"] = [{"pass": ok, "text": t} for ok, t in tg]
        summary["namespace_check"] = ns
        with open(args.summary, "w") as f:
            json.dump(summary, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
