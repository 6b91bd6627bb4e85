#!/usr/bin/env python3
"""Reads `dnsperf -v` output (run under `stdbuf -oL`) on stdin and writes

  QUERIES: "<unix time> <rcode> <latency s>" per answered query and
           "<unix time> T -" per query dnsperf gave up on (its -t timeout),
           the time being when the line arrived (the answer, or the timeout);
  SUMMARY: every other line (dnsperf's status lines and final statistics).

dnsperf 2.10 has no latency histogram option (-O offers none); per-query
lines are how the lab gets percentiles and latency over time.
"""
import sys
import time


def main():
    qpath, spath = sys.argv[1], sys.argv[2]
    with open(qpath, "w") as q, open(spath, "w") as s:
        for raw in sys.stdin:
            now = time.time()
            if raw.startswith("> "):
                parts = raw.split()
                if parts[1] == "T":
                    q.write(f"{now:.4f} T -\n")
                elif len(parts) >= 5:
                    q.write(f"{now:.4f} {parts[1]} {parts[-1]}\n")
            else:
                s.write(raw)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:   # Ctrl-C reaches the whole process group
        sys.exit(130)
