#!/usr/bin/env python3
"""Reads `dnsperf -v` output (run under `stdbuf -oL`) on stdin and writes

  PER-SECOND CSV: unix second, answered, NOERROR, NXDOMAIN, SERVFAIL,
                  other rcodes, lost (dnsperf's -t timeout), and the p50,
                  p99 and max latency (ms) of the answers of that second,
                  by the second the line arrived (the answer, or the timeout);
  SUMMARY:        every other line (dnsperf's final statistics).

Aggregating per second keeps the soak's raw data small (a 600 s run at
3000 q/s is 1.8 million queries).
"""
import sys
import time

FIELDS = ["t", "answered", "noerror", "nxdomain", "servfail", "other", "lost", "p50_ms", "p99_ms", "max_ms"]


def pct(v, p):
    if not v:
        return ""
    v.sort()
    return f"{v[min(len(v) - 1, int(p / 100.0 * len(v)))] * 1000:.3f}"


def flush(out, sec, c, lats):
    out.write(",".join([str(sec)] + [str(c[k]) for k in FIELDS[1:7]]
                       + [pct(lats, 50), pct(lats, 99), f"{max(lats) * 1000:.3f}" if lats else ""]) + "\n")
    out.flush()


def main():
    csv_path, summary_path = sys.argv[1], sys.argv[2]
    empty = lambda: dict.fromkeys(FIELDS[1:7], 0)
    with open(csv_path, "w") as out, open(summary_path, "w") as summ:
        out.write(",".join(FIELDS) + "\n")
        sec, c, lats = None, empty(), []
        for raw in sys.stdin:
            now = int(time.time())
            if sec is None:
                sec = now
            if now != sec:
                flush(out, sec, c, lats)
                sec, c, lats = now, empty(), []
            if not raw.startswith("> "):
                summ.write(raw)
                continue
            parts = raw.split()
            if len(parts) < 2:
                continue
            rc = parts[1]
            if rc == "T":
                c["lost"] += 1
                continue
            c["answered"] += 1
            key = {"NOERROR": "noerror", "NXDOMAIN": "nxdomain", "SERVFAIL": "servfail"}.get(rc, "other")
            c[key] += 1
            try:
                lats.append(float(parts[-1]))
            except ValueError:
                pass
        if sec is not None and (any(c.values()) or lats):
            flush(out, sec, c, lats)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:   # Ctrl-C reaches the whole process group
        sys.exit(130)
