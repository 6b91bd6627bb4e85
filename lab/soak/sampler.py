#!/usr/bin/env python3
"""Samples nodens every --interval seconds until SIGTERM or --max-secs.

samples.csv, one row per sample:
  t            unix time
  alive        1 while the process exists and is not a zombie
  rss_kb       VmRSS, hwm_kb VmHWM (peak RSS), from /proc/PID/status
  fds          entries in /proc/PID/fd (see count_fds)
  threads      Threads, from /proc/PID/status
  cpu_s        user + system CPU seconds so far
  then, scraped from /metrics every --metrics-every samples (empty otherwise):
  cache_bytes, cache_success, cache_denial (entries), evictions,
  tcp_clients, tcp_rejected, inflight, served_stale, prefetch,
  reloads_ok, reloads_failed, rejected (malformed queries), upstream_errors,
  upstream_healthy
  cpu_busy     per CPU, busy share since the previous sample ("0.93/0.41"):
               the machine's other work shows here
  udp_rcvbuf_errors, udp_no_ports   the namespace's UDP RcvbufErrors and
               NoPorts counters (/proc/net/snmp): datagrams dropped at a
               full socket buffer, sent to a port nobody listens on
  upstream_cpu_s, upstream_state    CPU seconds and state (R, S, T, ...)
               of the processes named --upstream-comm (CoreDNS)
  top_cpu      the processes that used more than 10 % of a CPU since the
               previous sample, "name/pid/CPU share/CPU it last ran on", busiest first
  foreign_cpu  CPUs' worth used since the previous sample by processes outside
               this network namespace (kernel threads aside): the machine's
               other work, which the soak shares the CPUs with
  sampler_cpu_s  this sampler's own CPU seconds so far

probes.csv, one row per probe: every --probe-every seconds one query over
UDP and one over TCP for a popular name (rotating over --probe-names), each
in its own thread so a slow answer never delays the samples, with a
--probe-timeout second timeout and no retry. --probe-tool socket (the
default) asks from this process (EDNS0, so a stale answer's EDE shows);
--probe-tool dig runs `dig +time=T +tries=1` instead. Why not dig by
default: on the 2-CPU VM this lab was written on (kernel 6.18), reaping
each dig cost the kernel up to a third of a CPU-second (d_walk under
release_task, seen with perf) in bursts, on the CPU CoreDNS shares with
the load; CoreDNS then got no CPU for seconds and nodens's misses timed
out. With the in-process probe those bursts and timeouts were gone.
  t            when the probe started
  proto        udp or tcp
  name
  answered     1 if the answer was NOERROR with an A record
  rcode        dig's status, or "timeout" / "error"
  latency_ms   from sending the query to reading the answer (dig: its
               "Query time", or its wall time when it printed none)
  ttl          TTL of the A record (above the zone's TTL: a stale answer)
  stale        1 if the answer carried EDE 3 (Stale Answer)

--snapshots: every --snapshot-every seconds and at the end, the whole
/metrics text (histogram buckets left out) after a "# t=<unix time>" line.

Reads /proc directly (no fork per sample); the probes fork dig.
"""
import argparse
import csv
import os
import random
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

SAMPLE_FIELDS = ["t", "alive", "rss_kb", "hwm_kb", "fds", "threads", "cpu_s",
                 "cache_bytes", "cache_success", "cache_denial", "evictions",
                 "tcp_clients", "tcp_rejected", "inflight", "served_stale", "prefetch",
                 "reloads_ok", "reloads_failed", "rejected", "upstream_errors", "upstream_healthy",
                 "cpu_busy", "udp_rcvbuf_errors", "udp_no_ports", "upstream_cpu_s", "upstream_state", "top_cpu", "foreign_cpu", "sampler_cpu_s"]
PROBE_FIELDS = ["t", "proto", "name", "answered", "rcode", "latency_ms", "ttl", "stale"]


def count_fds(pid):
    """Open fds of pid. Since Linux 6.2 stat() of /proc/PID/fd gives their
    number as the size, without listing the directory (which builds a
    dentry per fd: a thousand a second while nodens holds a socket per miss
    during an upstream outage); older kernels give 0, and it is listed."""
    n = os.stat(f"/proc/{pid}/fd").st_size
    return n if n > 0 else len(os.listdir(f"/proc/{pid}/fd"))


def proc_status(pid):
    out = {"alive": 0}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k == "State":
                    out["alive"] = 0 if v.split()[0] in ("Z", "X") else 1
                elif k == "VmRSS":
                    out["rss_kb"] = int(v.split()[0])
                elif k == "VmHWM":
                    out["hwm_kb"] = int(v.split()[0])
                elif k == "Threads":
                    out["threads"] = int(v)
        if out["alive"]:
            out["fds"] = count_fds(pid)
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            out["cpu_s"] = round((int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError):
        out["alive"] = 0
    return out


def cpu_times():
    out = []
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                v = [int(x) for x in line.split()[1:]]
                out.append((sum(v), v[3] + v[4]))
    return out


def udp_counters():
    try:
        with open("/proc/net/snmp") as f:
            rows = [l.split() for l in f if l.startswith("Udp:")]
        d = dict(zip(rows[0][1:], rows[1][1:]))
        return {"udp_rcvbuf_errors": d.get("RcvbufErrors", ""), "udp_no_ports": d.get("NoPorts", "")}
    except (OSError, IndexError):
        return {}


class Procs:
    """One pass over /proc per sample: the upstream's CPU and state, who
    used the CPUs since the previous pass, and how much of it went to
    processes outside this network namespace (the machine's other work;
    kernel threads aside)."""

    def __init__(self, comm):
        self.comm = comm
        self.prev = {}
        self.ours = {}
        self.prev_t = time.monotonic()
        self.tck = os.sysconf("SC_CLK_TCK")
        self.netns = os.readlink("/proc/self/ns/net")

    def scan(self):
        cur, ours, cpu, states, top, foreign = {}, {}, 0.0, [], [], 0.0
        now = time.monotonic()
        dt = max(1e-3, now - self.prev_t)
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            name = s[s.find("(") + 1:s.rfind(")")]
            rest = s[s.rfind(")") + 2:].split()
            if d == "2" or rest[1] == "2":
                continue   # kernel threads: softirq work for the soak's own packets lands there too
            t = (int(rest[11]) + int(rest[12])) / self.tck
            cur[d] = t
            mine = self.ours.get(d)
            if mine is None:
                try:
                    mine = os.readlink(f"/proc/{d}/ns/net") == self.netns
                except OSError:
                    mine = True
            ours[d] = mine
            if name == self.comm:
                states.append(rest[0])
                cpu += t
            if d in self.prev:
                used = (t - self.prev[d]) / dt
                if not mine:
                    foreign += used
                if used > 0.10:
                    top.append((used, f"{name}/{d}/{used:.2f}/{rest[36]}"))
        self.prev, self.ours, self.prev_t = cur, ours, now
        top.sort(reverse=True)
        return {"upstream_cpu_s": f"{cpu:.2f}" if states else "", "upstream_state": "".join(states),
                "top_cpu": " ".join(x for _, x in top[:6]), "foreign_cpu": f"{foreign:.2f}"}


def metric_sum(text, name, label=None):
    tot, found = 0.0, False
    for line in text:
        if line.startswith(name) and (len(line) > len(name) and line[len(name)] in " {"):
            if label and label not in line:
                continue
            try:
                tot += float(line.rsplit(" ", 1)[1])
                found = True
            except ValueError:
                pass
    return tot if found else ""


def scrape(url, snapshot=None):
    try:
        with urllib.request.urlopen(url, timeout=0.8) as r:
            raw = r.read().decode()
    except Exception:  # noqa: BLE001 - a missed scrape is an empty cell
        return {}
    if snapshot:
        snapshot.write(f"# t={time.time():.3f}\n")
        snapshot.write("".join(l + "\n" for l in raw.splitlines()
                               if l and l[0] != "#" and "_bucket{" not in l))
        snapshot.flush()
    lines = [l for l in raw.splitlines() if l and l[0] != "#"]
    fmt = lambda v: "" if v == "" else int(v)
    return {
        "cache_bytes": fmt(metric_sum(lines, "nodens_cache_bytes")),
        "cache_success": fmt(metric_sum(lines, "coredns_cache_entries", 'type="success"')),
        "cache_denial": fmt(metric_sum(lines, "coredns_cache_entries", 'type="denial"')),
        "evictions": fmt(metric_sum(lines, "coredns_cache_evictions_total")),
        "tcp_clients": fmt(metric_sum(lines, "nodens_tcp_client_connections")),
        "tcp_rejected": fmt(metric_sum(lines, "nodens_tcp_client_rejected_total")),
        "inflight": fmt(metric_sum(lines, "nodens_inflight_queries")),
        "served_stale": fmt(metric_sum(lines, "coredns_cache_served_stale_total")),
        "prefetch": fmt(metric_sum(lines, "coredns_cache_prefetch_total")),
        "reloads_ok": fmt(metric_sum(lines, "nodens_config_reloads_total", 'result="success"')),
        "reloads_failed": fmt(metric_sum(lines, "nodens_config_reloads_total", 'result="failure"')),
        "rejected": fmt(metric_sum(lines, "nodens_rejected_queries_total")),
        "upstream_errors": fmt(metric_sum(lines, "nodens_upstream_errors_total")),
        "upstream_healthy": fmt(metric_sum(lines, "nodens_upstream_healthy")),
    }


RE_STATUS = re.compile(r"status: ([A-Z]+)")
RE_TIME = re.compile(r"Query time: (\d+) msec")
RE_A = re.compile(r"^(\S+)\s+(\d+)\s+IN\s+A\s+(\S+)", re.M)


def wire_query(name, qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    # A, IN; an OPT record (EDNS0, 1232 bytes) so that a stale answer's EDE shows
    return q + b"\0" + struct.pack(">HH", 1, 1) + b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)


def skip_name(m, i):
    while True:
        n = m[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += 1 + n


def parse_answer(m, qid):
    """(rcode name, TTL of the first A record or None, EDE 3 seen)."""
    if len(m) < 12 or struct.unpack(">H", m[:2])[0] != qid:
        raise ValueError("not our answer")
    rcode = m[3] & 0xF
    qd, an, ns, ar = struct.unpack(">HHHH", m[4:12])
    i = 12
    for _ in range(qd):
        i = skip_name(m, i) + 4
    ttl, stale = None, False
    for k in range(an + ns + ar):
        i = skip_name(m, i)
        rtype, _, rttl, rdlen = struct.unpack(">HHIH", m[i:i + 10])
        i += 10
        if k < an and rtype == 1 and ttl is None:
            ttl = rttl
        if rtype == 41:   # OPT: options, EDE is code 15 with a 2-byte info code
            j = i
            while j + 4 <= i + rdlen:
                code, olen = struct.unpack(">HH", m[j:j + 4])
                if code == 15 and olen >= 2 and struct.unpack(">H", m[j + 4:j + 6])[0] == 3:
                    stale = True
                j += 4 + olen
        i += rdlen
    names = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
    return names.get(rcode, str(rcode)), ttl, stale


def probe_socket(args, proto, name, row, t0):
    """The probe without a process: for when dig is not wanted (see --probe-tool)."""
    qid = random.getrandbits(16)
    q = wire_query(name, qid)
    fam = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
    s = socket.socket(socket.AF_INET, fam)
    s.settimeout(args.probe_timeout)
    try:
        s.bind((args.probe_src, 0))
        s.connect((args.server, args.port))
        if proto == "udp":
            s.send(q)
            while True:
                m = s.recv(65535)
                if len(m) >= 2 and m[:2] == q[:2]:
                    break
        else:
            s.sendall(struct.pack(">H", len(q)) + q)
            buf = b""
            while len(buf) < 2 or len(buf) < 2 + struct.unpack(">H", buf[:2])[0]:
                chunk = s.recv(65535)
                if not chunk:
                    raise ConnectionError("closed")
                buf += chunk
            m = buf[2:2 + struct.unpack(">H", buf[:2])[0]]
        rc, ttl, stale = parse_answer(m, qid)
        row.update(rcode=rc, answered=int(rc == "NOERROR" and ttl is not None), ttl="" if ttl is None else ttl,
                   stale=int(stale), latency_ms=f"{(time.time() - t0) * 1000:.1f}")
    except socket.timeout:
        row.update(rcode="timeout", latency_ms=f"{(time.time() - t0) * 1000:.0f}")
    except (OSError, ValueError, struct.error, IndexError) as e:
        row.update(rcode=f"error:{type(e).__name__}", latency_ms=f"{(time.time() - t0) * 1000:.0f}")
    finally:
        s.close()


def probe(args, proto, name, out, lock):
    t0 = time.time()
    if args.probe_tool == "socket":
        row = {"t": f"{t0:.3f}", "proto": proto, "name": name, "answered": 0, "rcode": "", "latency_ms": "",
               "ttl": "", "stale": 0}
        probe_socket(args, proto, name, row, t0)
        with lock:
            out.writerow(row)
        return
    argv = ["dig", f"@{args.server}", "-p", str(args.port), "-b", args.probe_src,
            f"+time={args.probe_timeout}", "+tries=1", "+nocookie", name, "A"]
    if proto == "tcp":
        argv.insert(1, "+tcp")
    row = {"t": f"{t0:.3f}", "proto": proto, "name": name, "answered": 0, "rcode": "", "latency_ms": "",
           "ttl": "", "stale": 0}
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=args.probe_timeout + 3)
        wall = (time.time() - t0) * 1000
        m = RE_STATUS.search(r.stdout)
        if m:
            row["rcode"] = m.group(1)
            a = RE_A.search(r.stdout)
            row["answered"] = int(m.group(1) == "NOERROR" and a is not None)
            if a:
                row["ttl"] = a.group(2)
            row["stale"] = int("EDE: 3" in r.stdout)
            mt = RE_TIME.search(r.stdout)
            row["latency_ms"] = mt.group(1) if mt else f"{wall:.0f}"
        else:
            row["rcode"] = "timeout" if "timed out" in r.stdout or "no servers could be reached" in r.stdout else "error"
            row["latency_ms"] = f"{wall:.0f}"
    except subprocess.TimeoutExpired:
        row["rcode"] = "timeout"
        row["latency_ms"] = f"{(time.time() - t0) * 1000:.0f}"
    except OSError as e:
        row["rcode"] = f"error:{e.errno}"
    with lock:
        out.writerow(row)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--server", required=True)
    p.add_argument("--port", type=int, default=53)
    p.add_argument("--metrics-url", default="")
    p.add_argument("--metrics-every", type=int, default=1)
    p.add_argument("--snapshot-every", type=float, default=30.0,
                   help="seconds between full /metrics snapshots written to --snapshots")
    p.add_argument("--snapshots", default="")
    p.add_argument("--upstream-comm", default="coredns")
    p.add_argument("--scan-procs", type=int, default=1)
    p.add_argument("--probe-tool", choices=("dig", "socket"), default="socket")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--probe-every", type=float, default=1.0)
    p.add_argument("--probe-timeout", type=int, default=5)
    p.add_argument("--probe-src", default="127.0.0.1")
    p.add_argument("--probe-names", default="pop-0.soak.test")
    p.add_argument("--max-secs", type=float, default=3600)
    p.add_argument("--samples", required=True)
    p.add_argument("--probes", required=True)
    args = p.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    names = args.probe_names.split(",")
    lock = threading.Lock()
    start = time.time()
    threads = []
    snap = open(args.snapshots, "w") if args.snapshots else None
    next_snap = start
    with open(args.samples, "w", newline="") as sf, open(args.probes, "w", newline="", buffering=1) as pf:
        sw = csv.DictWriter(sf, SAMPLE_FIELDS, restval="")
        sw.writeheader()
        pw = csv.DictWriter(pf, PROBE_FIELDS, restval="")
        pw.writeheader()
        n = 0
        next_probe = start
        prev_cpu = cpu_times()
        procs = Procs(args.upstream_comm)
        while not stop.is_set() and time.time() - start < args.max_secs:
            t = time.time()
            if t >= next_probe:
                name = names[int((t - start) / args.probe_every) % len(names)]
                for proto in ("udp", "tcp"):
                    th = threading.Thread(target=probe, args=(args, proto, name, pw, lock), daemon=True)
                    th.start()
                    threads.append(th)
                next_probe += args.probe_every
                threads = [th for th in threads if th.is_alive()]
            row = {"t": f"{t:.3f}"}
            row.update(proc_status(args.pid))
            row.update(udp_counters())
            if args.scan_procs:
                row.update(procs.scan())
            ru = resource.getrusage(resource.RUSAGE_SELF)
            row["sampler_cpu_s"] = f"{ru.ru_utime + ru.ru_stime:.2f}"
            cur = cpu_times()
            row["cpu_busy"] = "/".join(f"{1 - (c[1] - p[1]) / (c[0] - p[0]):.2f}" if c[0] > p[0] else ""
                                       for c, p in zip(cur, prev_cpu))
            prev_cpu = cur
            if args.metrics_url and n % args.metrics_every == 0:
                take = snap is not None and t >= next_snap
                if take:
                    next_snap += args.snapshot_every
                row.update(scrape(args.metrics_url, snap if take else None))
            sw.writerow(row)
            sf.flush()
            n += 1
            stop.wait(max(0.0, args.interval - (time.time() - t)))
        # Probes already started finish (bounded by their timeout): none is cut short.
        for th in threads:
            th.join(args.probe_timeout + 4)
        if snap is not None and args.metrics_url:
            scrape(args.metrics_url, snap)   # the last one, at the end
            snap.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
