"""Prints the abuse lab's results table and writes it to a file.

Input: the JSON lines the rounds wrote (one per check) and the run's
environment lines. Output: a Markdown table, one row per check, with the
verdict: ok (a defence held), FAIL (it did not), or -- (a figure).
Exit status 1 if any check failed or a round did not report.
"""

import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--env", required=True)
    ap.add_argument("--rounds", required=True, help="the rounds that were run, e.g. '1 2 3'")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = []
    try:
        with open(a.rows) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        pass
    ran = [int(r) for r in a.rounds.split()]
    for n in ran:
        if not any(r["round"] == n for r in rows):
            rows.append({"round": n, "title": "", "item": "round did not report (see the log)",
                         "value": "", "expect": "", "ok": False})
    rows.sort(key=lambda r: r["round"])  # stable: checks keep their order
    lines = [open(a.env).read().rstrip(), ""]
    lines.append("| round | check | result | verdict |")
    lines.append("|---|---|---|---|")
    last = None
    for r in rows:
        key = (r["round"], r["title"])
        rnd = f"{r['round']}. {r['title']}" if key != last else ""
        last = key
        verdict = {True: "ok", False: "**FAIL**", None: "--"}[r["ok"]]
        if r["expect"] and r["ok"] is not None:
            verdict += f" (expect {r['expect']})"
        cell = lambda s: str(s).replace("|", "\\|")
        lines.append(f"| {cell(rnd)} | {cell(r['item'].strip())} | {cell(r['value'])} | {cell(verdict)} |")
    failed = [r for r in rows if r["ok"] is False]
    checks = [r for r in rows if r["ok"] is not None]
    lines.append("")
    lines.append(f"checks: {len(checks) - len(failed)} of {len(checks)} held"
                 + (f"; FAILED: " + "; ".join(f"round {r['round']}: {r['item'].strip()}" for r in failed) if failed else ""))
    text = "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
