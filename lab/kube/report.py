#!/usr/bin/env python3
"""The table and plot of lab/kube/chart-test's load measurements.

    python3 lab/kube/report.py OUT/results.json [--plot docs/img/kube-chart.png]

Prints a Markdown table (queries sent, lost, SERVFAIL, longest time without an
answer) for nodens and node-cache, upgrade and kill -9; with --plot, draws the
answers per second of each run (matplotlib; skipped with a note when missing).
"""
import argparse
import json
import sys

RUNS = [
    ("nodens/upgrade", "nodens: helm upgrade (surge + handover)"),
    ("node-cache/upgrade", "node-cache: rolling update (maxUnavailable 10%)"),
    ("nodens/kill", "nodens: kill -9 of the container's process"),
    ("node-cache/kill", "node-cache: kill -9 of the container's process"),
]


def table(results):
    rows = ["| run | queries | lost | SERVFAIL | longest time without an answer |", "|---|---|---|---|---|"]
    for key, title in RUNS:
        if key not in results:
            continue
        s = results[key]["summary"]
        rows.append(
            f"| {title} | {s['sent']:,} | {s['lost']:,} | {s['servfail']:,} | {s['longest_gap_ms']:,} ms |"
        )
    return "\n".join(rows)


def plot(results, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: matplotlib missing, no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, what, label in ((axes[0], "upgrade", "upgrade under load"), (axes[1], "kill", "kill -9 under load")):
        for name, style in (("nodens", "-"), ("node-cache", "--")):
            run = results.get(f"{name}/{what}")
            if not run:
                continue
            # The last line covers only the wait for late answers: no queries.
            points = [p for p in run["per_second"] if p["sent"] > 0]
            ax.plot([p["t"] for p in points], [p["answered"] for p in points], style, label=name)
        ax.set_title(label)
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_ylabel("answers per second")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"report: {path}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--plot")
    args = parser.parse_args()
    results = json.load(open(args.results))
    print(table(results))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
