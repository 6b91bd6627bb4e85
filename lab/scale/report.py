#!/usr/bin/env python3
"""The tables of docs/scale.md from lab/scale/run's results (JSON): each
group's cost with the cluster's own (group "none") taken away, per 1,000
watchers, and the ratios to the kube-proxy-like informers.

  lab/scale/report.py [RESULTS]     (default docs/lab/scale-results.json)
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GROUPS = [("informers", "kube-proxy-like informers"), ("nodens-before", "nodens before (d67672f)"),
          ("nodens-after", "nodens (its default: headless Services' slices)"),
          ("nodens-all", 'nodens, `follow_api_endpoints = "all"`')]
# Results written while every slice was the default (up to 6086ac4, no
# `follow_api_endpoints_default` in their config) name their groups by the
# option instead.
OLD_GROUPS = [("informers", "kube-proxy-like informers"), ("nodens-before", "nodens before (d67672f)"),
              ("nodens-after", "nodens, every slice (then the default)"),
              ("nodens-headless", 'nodens, `follow_api_endpoints = "headless"`')]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../docs/lab/scale-results.json")
    r = json.load(open(path))
    c = r["config"]
    w = c["watchers"]
    scale = 1000 / w
    none = r.get("none", {})
    groups = GROUPS if c.get("follow_api_endpoints_default") == "headless" else OLD_GROUPS

    def cost(group, phase, key):
        v = r[group][phase][key] - (none.get(phase, {}).get(key, 0) if key.endswith("_s") else 0)
        return max(v, 0.0)

    print(f"Cluster: {c['nodes']} nodes, {c['services']} Services (every tenth headless), "
          f"{c['services'] * c['pods']} pods; {w} watchers per group; etcd: {c.get('etcd', '?')}; "
          f"feature gates: {c.get('feature_gates') or 'none'}. Per 1,000 watchers (measured x {scale:g}); "
          "CPU less the same phase without watchers.\n")
    for phase, title in [("start", "Start: every watcher lists and watches"),
                         ("rollout", f"A rollout: every pod of {c['rollout']} Services replaced"),
                         ("restart", "The API server restarted under them")]:
        print(f"**{title}**\n")
        head = "| | API server CPU s | etcd CPU s | MB to the watchers | list requests | watches | API server peak RSS MiB |"
        if phase == "restart":
            head += " s to the last request |"
        print(head)
        print("|---" * (head.count("|") - 1) + "|")
        for g, label in groups:
            if g not in r:
                continue
            p = r[g][phase]
            row = (f"| {label} | {cost(g, phase, 'apiserver_cpu_s') * scale:.1f} | "
                   f"{cost(g, phase, 'etcd_cpu_s') * scale:.1f} | {p['bytes_to_watchers'] / 1e6 * scale:,.0f} | "
                   f"{p['lists'] * scale:,.0f} | "
                   f"{p['watches'] * scale:,.0f} | {p['apiserver_peak_rss_mib']:,.0f} |")
            if phase == "restart":
                row += f" {p.get('seconds_to_last_request')} |"
            print(row)
        print()
    print("**Ratios to the informers** (CPU less the cluster's own, bytes, peak memory)\n")
    print("| | start CPU | start bytes | rollout CPU | rollout bytes | restart CPU | restart bytes | restart peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for g, label in groups[1:]:
        if g not in r or "informers" not in r:
            continue
        cells = []
        for phase in ("start", "rollout", "restart"):
            for key in ("apiserver_cpu_s", "bytes_to_watchers"):
                a, b = cost(g, phase, key), cost("informers", phase, key)
                cells.append(f"{a / b:.2f}" if b else "-")
        a, b = r[g]["restart"]["apiserver_peak_rss_mib"], r["informers"]["restart"]["apiserver_peak_rss_mib"]
        cells.append(f"{a / b:.2f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    print("**The watchers themselves** (all phases)\n")
    print("| | RSS MiB per watcher | CPU s per watcher |")
    print("|---|---:|---:|")
    for g, label in groups:
        if g in r:
            print(f"| {label} | {r[g]['watcher_rss_mib'] / w:.1f} | {r[g]['watcher_cpu_s'] / w:.2f} |")


if __name__ == "__main__":
    main()
