#!/usr/bin/env python3
"""The end-to-end benchmark's driver: started by bench/run (which builds nodens and
the reflector, makes the temp dir and cleans up after us too). See docs/performance.md.

Topology, all on loopback:

  dnsperf (core 0) --> server under test (core 1, one worker) --> NSD (core 0)
                       AUTH_IP:53, bench.test. zone
                       SERVER_IP:53

Per server, process 1: warm the hot set, then
  hit   RUNS x dnsperf unlimited on the hot set (HIT_SECS each)
  rate  RUNS x dnsperf -Q RATE on the hot set, -v per-query latencies (RATE_SECS)
  miss  RUNS x dnsperf unlimited on MISS_NAMES names never asked before, each once
        (MISS_SECS at most); every cache is large enough to keep them all
and process 2 (fresh): RSS at start, 100k distinct names once, RSS after.

Every measurement records the 1-minute load average before it, the CPU time
other processes used during it ("foreign") and the hypervisor's steal time; a run
with too much of either is repeated (at most RETRIES times, and not past
RETRY_UNTIL seconds into the whole run), and the least disturbed attempt is kept.
"""
import argparse
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
AUTH_IP = "127.77.0.53"
SERVER_IP = "127.77.1.53"
PORT = 53
SERVER_CORE = "1"
LOAD_CORE = "0"
ZONE = "bench.test"
ZONE_NAMES = 200_000          # h0 .. h199999
HOT = 1000                    # h0 .. h999
RSS_FIRST, RSS_COUNT = 100_000, 100_000   # h100000 .. h199999
MISS_FILE_NAMES = int(os.environ.get("MISS_NAMES", 60_000))  # per miss run, wildcard names, each once


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_float(name, default):
    return float(os.environ.get(name, default))


CFG = {
    "runs": env_int("RUNS", 3),
    "hit_secs": env_int("HIT_SECS", 10),
    "rate": env_int("RATE", 20000),
    "rate_secs": env_int("RATE_SECS", 10),
    "miss_names": MISS_FILE_NAMES,
    "miss_secs": env_int("MISS_SECS", 10),
    "clients": env_int("CLIENTS", 8),
    "inflight": env_int("INFLIGHT", 200),
    "miss_inflight": env_int("MISS_INFLIGHT", 200),
    "rss_inflight": env_int("RSS_INFLIGHT", 50),
    "timeout": env_int("QUERY_TIMEOUT", 2),
    "retries": env_int("RETRIES", 2),
    # A run is repeated when other processes used more than this share of one
    # core during it (their CPU seconds / run seconds).
    "foreign_max": env_float("FOREIGN_MAX", 0.10),
    # ... or when the hypervisor took more than this share of a core (steal
    # time, /proc/stat): it shows up as latency tails and lost throughput.
    "steal_max": env_float("STEAL_MAX", 0.05),
    # No repeats, and no waiting for quiet, once the whole run has taken this
    # long: a normal run takes ~8.5 minutes, a disturbed one stays under ~15.
    "retry_until": env_int("RETRY_UNTIL", 540),
    # Before a measurement, wait up to this long for the machine to be quiet.
    "quiet_wait": env_int("QUIET_WAIT", 20),
}

t0 = time.monotonic()


def log(msg):
    el = time.monotonic() - t0
    print(f"{time.strftime('%H:%M:%S')} [{el:5.0f}s] {msg}", file=sys.stderr, flush=True)


###############################################################################
# /proc readings
###############################################################################
def proc_cpu_ticks(pid):
    """utime+stime of every thread of the process (dead threads included), in ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return int(fields[11]) + int(fields[12])     # fields 14 and 15 of stat


def group_pids(pgid):
    """Every process whose process group is pgid (NSD forks its workers)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                out.append(int(d))
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return out


def system_ticks():
    """(busy, steal) ticks summed over all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return user + nice + system + irq + softirq, steal


def ksoftirqd_pids():
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().startswith("ksoftirqd/"):
                        out.append(int(d))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return out


def thread_names(pid):
    names = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                n = f.read().strip()
            names[n] = names.get(n, 0) + 1
    except (FileNotFoundError, ProcessLookupError):
        pass
    return names


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def thread_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return 0


def loadavg1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


###############################################################################
# Processes: every child in its own session (Ctrl-C reaches only us), its PID
# written to PIDFILE so bench/run can kill what we could not.
###############################################################################
class Procs:
    def __init__(self, pidfile):
        self.pidfile = pidfile
        self.live = {}

    def spawn(self, name, argv, logpath, core=None, env=None):
        if core is not None:
            argv = ["taskset", "-c", core] + argv      # taskset execs: same PID
        logf = open(logpath, "ab")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             start_new_session=True, env=env)
        logf.close()
        self.live[p.pid] = (name, p)
        with open(self.pidfile, "a") as f:
            f.write(f"{p.pid}\n")
        return p

    def stop(self, p, grace=5.0):
        if p.pid not in self.live:
            return
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(5)
        # Leftovers of the group (forked children) go too.
        for pid in group_pids(p.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        del self.live[p.pid]

    def stop_all(self):
        for pid in list(self.live):
            self.stop(self.live[pid][1], grace=3.0)


###############################################################################
# DNS probing (readiness)
###############################################################################
def dns_query(name, qtype=1):
    qid = random.randrange(65536)
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return qid, q + b"\x00" + struct.pack("!HH", qtype, 1)


def probe(ip, name, want_rcode=0, tries=100, wait=0.2):
    """Ask ip:53 for name until an answer with rcode want_rcode comes (bounded)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(wait)
    try:
        for _ in range(tries):
            qid, q = dns_query(name)
            try:
                s.sendto(q, (ip, PORT))
                while True:
                    data, _ = s.recvfrom(4096)
                    if len(data) >= 12:
                        rid, flags = struct.unpack("!HH", data[:4])
                        if rid == qid and flags & 0x8000:
                            if flags & 0xF == want_rcode:
                                return True
                            break
            except (socket.timeout, ConnectionRefusedError, OSError):
                pass
            time.sleep(wait)
        return False
    finally:
        s.close()


###############################################################################
# Data files
###############################################################################
def addr(n):
    return f"198.18.{n >> 8 & 0xFF}.{n & 0xFF}" if n < 65536 else f"198.19.{n >> 8 & 0xFF}.{n & 0xFF}"


def write_zone(path):
    with open(path, "w") as f:
        f.write(f"$ORIGIN {ZONE}.\n$TTL 3600\n")
        f.write(f"@ IN SOA ns.{ZONE}. hostmaster.{ZONE}. 1 3600 900 604800 3600\n")
        f.write(f"@ IN NS ns.{ZONE}.\nns IN A {AUTH_IP}\n")
        # Names for the miss test: any *.miss.bench.test. exists (wildcard).
        f.write("*.miss IN A 198.18.255.254\n")
        f.write("".join(f"h{n} IN A {addr(n)}\n" for n in range(ZONE_NAMES)))


def write_names(path, names):
    with open(path, "w") as f:
        f.write("".join(f"{n} A\n" for n in names))


class MissFiles:
    """Files of names never asked before: attempt k of a server process uses file k.
    Every server is a fresh process, so the same files serve all servers."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.made = set()

    def get(self, k):
        path = os.path.join(self.tmp, f"miss{k}.txt")
        if k not in self.made:
            write_names(path, (f"m{k}n{i}.miss.{ZONE}." for i in range(MISS_FILE_NAMES)))
            self.made.add(k)
        return path


###############################################################################
# Servers
###############################################################################
def server_specs(a, server_ip=SERVER_IP, port=PORT, upstream_ip=AUTH_IP):
    """name -> (argv, env, config files {name: text}, version), each server listening
    on server_ip:port and forwarding to upstream_ip:port (bench/alternate runs several
    at once, each on an address of its own)."""
    up = f"{upstream_ip}:{port}"
    metrics = f"{server_ip}:9253"
    return {
        "nodens": dict(
            argv=[a.nodens, "serve", "--config", "{dir}/nodens.toml"],
            # Memory is also measured with a capacity far below what the
            # 100,000 names need (~33 MiB): RSS must stop growing near it.
            bounded=('capacity = "256 MiB"', 8),
            files={"nodens.toml": f"""[server]
listen = ["{server_ip}:{port}"]
workers = 1
{a.nodens_server_config}
[cache]
prefetch_min_hits = 0
capacity = "256 MiB"

[metrics]
listen = "{metrics}"

[log]
level = "warn"

[[zone]]
name = "."
upstreams = ["{up}"]
""" + a.nodens_config}),
        "unbound": dict(
            argv=["unbound", "-d", "-c", "{dir}/unbound.conf"],
            files={"unbound.conf": f"""server:
    interface: {server_ip}
    port: {port}
    do-ip6: no
    num-threads: 1
    so-reuseport: yes
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "{{dir}}"
    pidfile: "{{dir}}/unbound.pid"
    logfile: ""
    use-syslog: no
    verbosity: 0
    module-config: "iterator"
    # test. is one of unbound's default locally served zones (RFC 6761): let it through.
    local-zone: "test." nodefault
    do-not-query-localhost: no
    access-control: 127.0.0.0/8 allow
    msg-cache-size: 256m
    rrset-cache-size: 512m
    num-queries-per-thread: 4096
    outgoing-range: 8192
    prefetch: no
    qname-minimisation: no
    minimal-responses: yes
    statistics-interval: 0
remote-control:
    control-enable: no
forward-zone:
    name: "."
    forward-addr: {upstream_ip}@{port}
"""}),
        "dnsdist": dict(
            argv=["dnsdist", "--supervised", "--disable-syslog", "-C", "{dir}/dnsdist.conf"],
            files={"dnsdist.conf": f"""setSecurityPollSuffix("")
-- one UDP frontend (one listener thread), one TCP worker thread
setLocal("{server_ip}:{port}")
setMaxTCPClientThreads(1)
-- health checks: none (administratively up), and a rare interval in any case
newServer({{address="{up}", checkInterval=3600}})
getServer(0):setUp()
pc = newPacketCache(500000, {{maxTTL=86400}})
getPool(""):setCache(pc)
"""}),
        "coredns": dict(
            argv=[a.coredns, "-conf", "{dir}/Corefile"],
            env={"GOMAXPROCS": "1"},
            # NodeLocal DNSCache's "." block (errors, cache, forward, prometheus,
            # health, bind), with a cache large and long enough that entries stay.
            files={"Corefile": f""".:{port} {{
    errors
    bind {server_ip}
    cache {{
        success 524288 3600
        denial 9984 5
    }}
    forward . {up}
    prometheus {metrics}
    health {server_ip}:8080
}}
"""}),
        "dnsmasq": dict(
            argv=["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
                  "--no-poll", f"--server={upstream_ip}#{port}", f"--listen-address={server_ip}", "--bind-interfaces",
                  f"--port={port}", "--cache-size=400000", "--dns-forward-max=1000", "--user=root",
                  "--pid-file={dir}/dnsmasq.pid", "--log-facility=-"],
            # dnsmasq allocates all --cache-size entries at start: what a slot
            # costs is RSS at start with them minus RSS at start without.
            prealloc=("--cache-size=400000", "--cache-size=0", 400000),
            files={}),
        "reflector": dict(
            argv=[a.reflector, server_ip, str(port)],
            files={}),
    }


def versions(a):
    def first(argv):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (r.stdout + r.stderr).strip().splitlines()[0].strip()
        except Exception as e:  # noqa: BLE001
            return f"? ({e})"
    return {
        "nodens": a.nodens_version,
        "unbound": first(["unbound", "-V"]),
        "dnsdist": first(["dnsdist", "--version"]),
        "coredns": first([a.coredns, "-version"]),
        "dnsmasq": first(["dnsmasq", "--version"]),
        "reflector": "bench/reflector.c (gcc -O2)",
        "nsd": first(["nsd", "-v"]),
        "dnsperf": next((l for l in subprocess.run(["dnsperf", "-h"], stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, text=True)
                         .stdout.splitlines() if l.startswith("Version")), "?"),
    }


###############################################################################
# dnsperf
###############################################################################
def parse_dnsperf(path):
    r = {"sent": 0, "completed": 0, "lost": 0, "qps": 0.0, "runtime": 0.0, "rcodes": {}, "avg_latency": None}
    with open(path, errors="replace") as f:
        for line in f:
            s = line.strip()
            if s.startswith("Queries sent:"):
                r["sent"] = int(s.split()[2])
            elif s.startswith("Queries completed:"):
                r["completed"] = int(s.split()[2])
            elif s.startswith("Queries lost:"):
                r["lost"] = int(s.split()[2])
            elif s.startswith("Queries per second:"):
                r["qps"] = float(s.split()[3])
            elif s.startswith("Run time (s):"):
                r["runtime"] = float(s.split()[3])
            elif s.startswith("Average Latency (s):"):
                r["avg_latency"] = float(s.split()[3])
            elif s.startswith("Response codes:"):
                toks = s.split(":", 1)[1].replace(",", " ").split()
                # "NOERROR 494046 (100.00%), SERVFAIL 3 (0.00%)"
                i = 0
                while i + 1 < len(toks):
                    if toks[i + 1].isdigit():
                        r["rcodes"][toks[i]] = int(toks[i + 1])
                        i += 3
                    else:
                        i += 1
    return r


def latencies(path):
    """Per-query latencies (s) from `dnsperf -v` lines: '> NOERROR name A 0.000154'."""
    lat = []
    timeouts = 0
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("> "):
                parts = line.split()
                if parts[1] == "T":
                    timeouts += 1
                elif len(parts) >= 5:
                    try:
                        lat.append(float(parts[-1]))
                    except ValueError:
                        pass
    return lat, timeouts


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[i]


class Bench:
    def __init__(self, a):
        self.a = a
        self.procs = Procs(a.pidfile)
        self.tmp = a.tmp
        self.out = a.out
        self.miss = MissFiles(a.tmp)
        self.auth = None
        self.auth_pids = []
        self.results = {"config": CFG, "servers": {}}
        # Packet work the kernel defers to ksoftirqd is caused by our traffic:
        # counted apart, neither the server's nor "foreign".
        self.softirqd = ksoftirqd_pids()

    # -- our processes' CPU, to tell foreign CPU use apart ----------------------
    def ours_ticks(self, server_pid, extra=0):
        t = proc_cpu_ticks(server_pid) if server_pid else 0
        t += sum(proc_cpu_ticks(p) for p in self.auth_pids)
        me = os.times()
        return t + extra + int((me.user + me.system) * HZ)

    def wait_quiet(self, server_pid):
        """Wait (bounded) until other processes use < foreign_max of a core."""
        if time.monotonic() - t0 > CFG["retry_until"]:
            return
        deadline = time.monotonic() + CFG["quiet_wait"]
        while True:
            b0, _ = system_ticks()
            o0 = self.ours_ticks(server_pid) + sum(proc_cpu_ticks(p) for p in self.softirqd)
            time.sleep(0.5)
            b1, _ = system_ticks()
            o1 = self.ours_ticks(server_pid) + sum(proc_cpu_ticks(p) for p in self.softirqd)
            foreign = max(0, (b1 - b0) - (o1 - o0)) / HZ / 0.5
            if foreign <= CFG["foreign_max"]:
                return
            if time.monotonic() > deadline:
                log(f"  machine still busy ({foreign:.2f} cores used by others); measuring anyway")
                return

    # -- one dnsperf run with accounting -----------------------------------------
    def dnsperf(self, server, args, tag, limit_secs):
        out_path = os.path.join(self.tmp, f"{tag}.dnsperf")
        argv = ["dnsperf", "-s", SERVER_IP, "-p", str(PORT), "-t", str(CFG["timeout"])] + args
        load = loadavg1()
        b0, st0 = system_ticks()
        c0 = proc_cpu_ticks(server.pid)
        k0 = sum(proc_cpu_ticks(p) for p in self.softirqd)
        o0 = self.ours_ticks(server.pid) + k0
        w0 = time.monotonic()
        p = self.procs.spawn("dnsperf", argv, out_path, core=LOAD_CORE)
        deadline = time.monotonic() + limit_secs + CFG["timeout"] + 15
        ru = None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                log(f"  dnsperf overran its limit; killed ({tag})")
                self.procs.stop(p, grace=1)
                raise RuntimeError(f"dnsperf hung ({tag})")
            time.sleep(0.02)
        del self.procs.live[p.pid]
        wall = time.monotonic() - w0
        c1 = proc_cpu_ticks(server.pid)
        b1, st1 = system_ticks()
        perf_ticks = int(round((ru.ru_utime + ru.ru_stime) * HZ))
        k1 = sum(proc_cpu_ticks(p) for p in self.softirqd)
        o1 = self.ours_ticks(server.pid, extra=perf_ticks) + k1
        if p.returncode != 0:
            with open(out_path, errors="replace") as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"dnsperf exited {p.returncode} ({tag}):\n{tail}")
        r = parse_dnsperf(out_path)
        r.update({
            "tag": tag,
            "load1_before": load,
            "wall": wall,
            "server_cpu_s": (c1 - c0) / HZ,
            "dnsperf_cpu_s": ru.ru_utime + ru.ru_stime,
            "foreign_cpu_s": max(0, (b1 - b0) - (o1 - o0)) / HZ,
            "steal_s": (st1 - st0) / HZ,
            "ksoftirqd_cpu_s": (k1 - k0) / HZ,
            "threads": thread_count(server.pid),
        })
        r["cpu_us_per_q"] = r["server_cpu_s"] * 1e6 / r["completed"] if r["completed"] else None
        r["server_cores"] = r["server_cpu_s"] / r["runtime"] if r["runtime"] else None
        r["foreign_share"] = r["foreign_cpu_s"] / max(wall, 0.1)
        r["steal_share"] = r["steal_s"] / max(wall, 0.1)
        r["_path"] = out_path
        return r

    def warm(self, srv, name):
        """Fills the cache: each hot name asked once."""
        hot = os.path.join(self.tmp, "hot.txt")
        w = self.dnsperf(srv, ["-d", hot, "-n", "1", "-c", "1", "-q", "20", "-l", "30"], f"{name}-warm", 30)
        os.unlink(w.pop("_path"))
        log(f"  warm: {w['completed']} answered, {w['lost']} lost, rcodes {w['rcodes']}")
        return w

    def load_args(self, kind, miss_file=0):
        """dnsperf's arguments for a load: hit (unlimited, hot set), rate (the
        fixed rate, hot set) or miss (names never asked, file miss_file)."""
        hot = os.path.join(self.tmp, "hot.txt")
        C, Q = str(CFG["clients"]), str(CFG["inflight"])
        return {
            "hit": ["-d", hot, "-c", C, "-q", Q, "-l", str(CFG["hit_secs"])],
            "rate": ["-d", hot, "-c", C, "-q", Q, "-Q", str(CFG["rate"]), "-l", str(CFG["rate_secs"])],
            "miss": ["-d", self.miss.get(miss_file), "-n", "1", "-c", C, "-q", str(CFG["miss_inflight"]),
                     "-l", str(CFG["miss_secs"])],
        }[kind]

    def measure(self, server, kind, k, make_args, limit_secs):
        """Run one measurement; repeat it (bounded) if others used the CPU meanwhile."""
        best = None
        for attempt in range(CFG["retries"] + 1):
            self.wait_quiet(server.pid)
            args = make_args(attempt)
            r = self.dnsperf(server, args, f"{server.bench_name}-{kind}{k}-a{attempt}", limit_secs)
            if kind == "rate":
                lat, timeouts = latencies(r["_path"])
                lat.sort()
                r.update({
                    "lat_n": len(lat), "lat_timeouts": timeouts,
                    "lat_avg": sum(lat) / len(lat) if lat else None,
                    "lat_p50": pct(lat, 50), "lat_p99": pct(lat, 99),
                    "lat_p999": pct(lat, 99.9), "lat_max": lat[-1] if lat else None,
                })
            os.unlink(r.pop("_path"))
            r["attempt"] = attempt
            msg = (f"  {kind} {k + 1}/{CFG['runs']}: {r['qps']:9.0f} q/s answered, "
                   f"{r['cpu_us_per_q'] or 0:6.2f} CPU us/q ({r['server_cores'] or 0:.2f} cores), "
                   f"lost {r['lost']}")
            if kind == "rate":
                msg += (f", latency avg {1e3 * (r['lat_avg'] or 0):.3f} ms p99 "
                        f"{1e3 * (r['lat_p99'] or 0):.3f} ms")
            msg += (f"; load {r['load1_before']:.2f}, others {r['foreign_share']:.2f} cores, "
                    f"steal {r['steal_share']:.2f}")
            bad = {c: n for c, n in r["rcodes"].items() if c != "NOERROR"}
            if bad:
                msg += f"; NOT NOERROR: {bad}"
            log(msg)
            r["contaminated"] = r["foreign_share"] > CFG["foreign_max"] or r["steal_share"] > CFG["steal_max"]
            if best is None or (r["foreign_share"] + r["steal_share"] < best["foreign_share"] + best["steal_share"]):
                best = r
            if not r["contaminated"]:
                break
            if attempt < CFG["retries"]:
                if time.monotonic() - t0 > CFG["retry_until"]:
                    log("  disturbed, but the run is past RETRY_UNTIL: not repeating it")
                    break
                log(f"  others used {r['foreign_share']:.2f} cores and the hypervisor "
                    f"{r['steal_share']:.2f} (steal) during the run; repeating it")
        best["attempts"] = attempt + 1
        return best

    # -- lifecycle -------------------------------------------------------------
    def start_auth(self):
        d = os.path.join(self.tmp, "nsd")
        os.makedirs(d)
        log(f"generating {ZONE}. ({ZONE_NAMES} A records + wildcard) for NSD on {AUTH_IP}:{PORT}")
        write_zone(os.path.join(d, f"{ZONE}.zone"))
        with open(os.path.join(d, "nsd.conf"), "w") as f:
            f.write(f"""server:
    ip-address: {AUTH_IP}
    port: {PORT}
    do-ip6: no
    server-count: 1
    username: ""
    chroot: ""
    zonesdir: "{d}"
    database: ""
    pidfile: "{d}/nsd.pid"
    xfrdfile: "{d}/xfrd.state"
    xfrdir: "{d}"
    zonelistfile: "{d}/zone.list"
    logfile: "{d}/nsd.log"
    verbosity: 0
    minimal-responses: yes
    round-robin: no
    # No response rate limiting: RRL counts every answer synthesised from one
    # wildcard as one name and would drop the miss test's queries from 200 q/s on.
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
remote-control:
    control-enable: no
zone:
    name: "{ZONE}"
    zonefile: "{ZONE}.zone"
""")
        self.auth = self.procs.spawn("nsd", ["nsd", "-d", "-c", f"{d}/nsd.conf"],
                                     os.path.join(self.out, "nsd.log"), core=LOAD_CORE)
        if not probe(AUTH_IP, f"h{ZONE_NAMES - 1}.{ZONE}", tries=150):
            raise RuntimeError(f"NSD did not serve {ZONE} within 60 s (see {self.out}/nsd.log)")
        time.sleep(0.5)
        self.auth_pids = group_pids(self.auth.pid)
        log(f"NSD up (pids {self.auth_pids})")

    def start_server(self, name, spec, inst):
        d = os.path.join(self.tmp, f"{name}{inst}")
        os.makedirs(d)
        for fn, text in spec["files"].items():
            with open(os.path.join(d, fn), "w") as f:
                f.write(text.replace("{dir}", d))
        argv = [x.replace("{dir}", d) for x in spec["argv"]]
        env = dict(os.environ)
        env.update(spec.get("env", {}))
        logpath = os.path.join(self.out, f"{name}.log")
        with open(logpath, "a") as f:
            f.write(f"==== {' '.join(argv)}\n")
        p = self.procs.spawn(name, argv, logpath, core=SERVER_CORE, env=env)
        p.bench_name = name
        # The reflector answers NOERROR to anything; the others resolve via NSD.
        if not probe(SERVER_IP, f"{ZONE}", tries=100):
            p.poll()
            raise RuntimeError(f"{name} did not answer within 40 s (exit {p.returncode}; see {logpath})")
        time.sleep(0.3)
        return p

    def run_server(self, name, spec):
        res = {"hit": [], "rate": [], "miss": [], "rss": None}
        log(f"== {name}")
        C = str(CFG["clients"])

        srv = self.start_server(name, spec, 1)
        try:
            res["threads_at_start"] = thread_count(srv.pid)
            res["thread_names"] = thread_names(srv.pid)
            log(f"  pid {srv.pid}, threads: {res['thread_names']}")
            res["warm"] = self.warm(srv, name)
            for k in range(CFG["runs"]):
                res["hit"].append(self.measure(
                    srv, "hit", k, lambda _a: self.load_args("hit"), CFG["hit_secs"]))
            for k in range(CFG["runs"]):
                res["rate"].append(self.measure(
                    srv, "rate", k, lambda _a: self.load_args("rate") + ["-v"], CFG["rate_secs"]))
            mk = [0]

            def miss_args(_a):
                mk[0] += 1
                return self.load_args("miss", mk[0] - 1)
            for k in range(CFG["runs"]):
                res["miss"].append(self.measure(srv, "miss", k, miss_args, CFG["miss_secs"]))
            res["threads_at_end"] = thread_count(srv.pid)
        finally:
            self.procs.stop(srv)

        # Memory: a fresh process, 100k distinct names once.
        srv = self.start_server(name, spec, 2)
        try:
            time.sleep(1.0)
            rss0 = vm_rss_kib(srv.pid)
            r = self.dnsperf(srv, ["-d", os.path.join(self.tmp, "rss.txt"), "-n", "1", "-c", C,
                                   "-q", str(CFG["rss_inflight"]), "-l", "60"], f"{name}-rss", 60)
            os.unlink(r.pop("_path"))
            time.sleep(1.0)
            rss1 = vm_rss_kib(srv.pid)
            res["rss"] = {
                "rss_start_kib": rss0, "rss_end_kib": rss1, "answered": r["completed"], "lost": r["lost"],
                "rcodes": r["rcodes"], "qps": r["qps"], "load1_before": r["load1_before"],
                "bytes_per_entry": (rss1 - rss0) * 1024 / r["completed"] if r["completed"] else None,
            }
            # Are the names still cached? Ask every 50th again with NSD stopped:
            # only cached names get NOERROR.
            for pid in self.auth_pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                c = self.dnsperf(srv, ["-d", os.path.join(self.tmp, "rss-sample.txt"), "-n", "1", "-c", "1",
                                       "-q", "20", "-l", "10"], f"{name}-rss-check", 10)
                os.unlink(c.pop("_path"))
            finally:
                for pid in self.auth_pids:
                    os.kill(pid, signal.SIGCONT)
            res["rss"]["sample"] = c["sent"]
            res["rss"]["sample_cached"] = c["rcodes"].get("NOERROR", 0)
            log(f"  rss: {rss0} KiB at start, {rss1} KiB after {r['completed']} names "
                f"({r['lost']} lost): {res['rss']['bytes_per_entry']:.0f} bytes/entry; "
                f"{c['rcodes'].get('NOERROR', 0)}/{c['sent']} of a sample still cached")
        finally:
            self.procs.stop(srv)
        if spec.get("bounded"):
            res["bounded"] = self.bounded(name, spec)
        if spec.get("prealloc"):
            full, empty, slots = spec["prealloc"]
            spec0 = dict(spec, argv=[empty if x == full else x for x in spec["argv"]])
            srv = self.start_server(name, spec0, 3)
            try:
                time.sleep(1.0)
                rss_empty = vm_rss_kib(srv.pid)
            finally:
                self.procs.stop(srv)
            res["rss"]["rss_start_without_cache_kib"] = rss_empty
            res["rss"]["prealloc_bytes_per_slot"] = (res["rss"]["rss_start_kib"] - rss_empty) * 1024 / slots
            log(f"  rss with {empty}: {rss_empty} KiB at start: "
                f"{res['rss']['prealloc_bytes_per_slot']:.0f} bytes per preallocated slot")
        return res

    def bounded(self, name, spec):
        """Is the configured capacity a bound on memory? A fresh process with a
        capacity far below what 100,000 names need: its RSS growth over them,
        against the capacity."""
        old, cap_mib = spec["bounded"]
        small = dict(spec, files={fn: t.replace(old, f'capacity = "{cap_mib} MiB"')
                                  for fn, t in spec["files"].items()})
        srv = self.start_server(name, small, 4)
        try:
            time.sleep(1.0)
            rss0 = vm_rss_kib(srv.pid)
            # 100,000 names, then 100,000 others: a bound shows as no growth
            # between the two.
            rss, answered = [], 0
            for part in ("rss.txt", "rss2.txt", "rss3.txt"):
                r = self.dnsperf(srv, ["-d", os.path.join(self.tmp, part), "-n", "1", "-c",
                                       str(CFG["clients"]), "-q", str(CFG["rss_inflight"]), "-l", "60"],
                                 f"{name}-bounded", 60)
                os.unlink(r.pop("_path"))
                answered += r["completed"]
                time.sleep(1.0)
                rss.append(vm_rss_kib(srv.pid))
        finally:
            self.procs.stop(srv)
        out = {"capacity_mib": cap_mib, "rss_start_kib": rss0, "rss_steps_kib": rss,
               "rss_end_kib": rss[-1], "answered": answered}
        log(f"  capacity {cap_mib} MiB: RSS {rss0} KiB at start, after each 100k names: {rss} KiB "
            f"(growth {(rss[-1] - rss0) / 1024:.1f} MiB)")
        return out

    def profile(self, name, spec, kind):
        """One server, one load (hit, rate or miss), recorded with perf: where
        its CPU time goes. Writes perf.data and a flat report to the output."""
        secs = CFG[f"{kind}_secs"]
        srv = self.start_server(name, spec, 1)
        try:
            self.warm(srv, name)
            data = os.path.join(self.out, f"{name}-{kind}.perf.data")
            # PERF_CALLGRAPH=1: with call stacks (DWARF unwinding, fewer samples).
            how = (["-F", "999", "--call-graph", "dwarf,16384"] if os.environ.get("PERF_CALLGRAPH")
                   else ["-F", "4999"])
            # The first run under perf, the others (RUNS - 1) without: their
            # CPU per query is the number to compare, perf's sampling costs some.
            for k in range(max(1, CFG["runs"])):
                rec = None
                if k == 0:
                    # perf on the load core: it must not take the server's core.
                    rec = self.procs.spawn("perf", ["perf", "record", *how, "-o", data, "-p", str(srv.pid),
                                                    "--", "sleep", str(secs + 1)],
                                           os.path.join(self.out, "perf-record.log"), core=LOAD_CORE)
                    time.sleep(0.5)
                r = self.dnsperf(srv, self.load_args(kind, k), f"{name}-{kind}{k}", secs)
                os.unlink(r.pop("_path"))
                if rec:
                    rec.wait(secs + 30)
                    del self.procs.live[rec.pid]
                log(f"  {kind} {k + 1}{' (perf)' if rec else ''}: {r['qps']:.0f} q/s, "
                    f"{r['cpu_us_per_q'] or 0:.2f} CPU us/q ({r['server_cores'] or 0:.2f} cores), "
                    f"lost {r['lost']}, others {r['foreign_share']:.2f} cores, steal {r['steal_share']:.2f}")
            report = os.path.join(self.out, f"{name}-{kind}.perf.txt")
            with open(report, "w") as f:
                subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol",
                                "--stdio", "--percent-limit", "0.3"],
                               stdout=f, stderr=subprocess.DEVNULL, check=False)
            log(f"  perf data {data}; flat profile {report}")
        finally:
            self.procs.stop(srv)

    def run(self, servers, profile=None):
        specs = server_specs(self.a)
        unknown = [s for s in servers if s not in specs]
        if unknown:
            raise SystemExit(f"unknown server(s): {unknown}; known: {list(specs)}")
        write_names(os.path.join(self.tmp, "hot.txt"), (f"h{n}.{ZONE}." for n in range(HOT)))
        write_names(os.path.join(self.tmp, "rss.txt"),
                    (f"h{n}.{ZONE}." for n in range(RSS_FIRST, RSS_FIRST + RSS_COUNT)))
        write_names(os.path.join(self.tmp, "rss2.txt"), (f"h{n}.{ZONE}." for n in range(RSS_FIRST)))
        write_names(os.path.join(self.tmp, "rss3.txt"), (f"b{n}.miss.{ZONE}." for n in range(RSS_COUNT)))
        write_names(os.path.join(self.tmp, "rss-sample.txt"),
                    (f"h{n}.{ZONE}." for n in range(RSS_FIRST, RSS_FIRST + RSS_COUNT, 50)))
        self.results["versions"] = versions(self.a)
        self.results["machine"] = machine()
        self.results["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.start_auth()
        if profile:
            for name in servers:
                log(f"== {name}: profile of {profile}")
                self.profile(name, specs[name], profile)
            return
        for name in servers:
            try:
                self.results["servers"][name] = self.run_server(name, specs[name])
            except RuntimeError as e:
                log(f"  {name} failed: {e}")
                self.results["servers"][name] = {"error": str(e)}
            self.save()
        self.results["duration_s"] = time.monotonic() - t0
        self.save()

    def save(self):
        with open(os.path.join(self.out, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1)


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // 1024
    return {"cpu": model, "cpus": os.cpu_count(), "mem_mib": mem, "kernel": os.uname().release,
            "os": next((l.split("=", 1)[1].strip().strip('"') for l in open("/etc/os-release")
                        if l.startswith("PRETTY_NAME=")), "?")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pidfile", required=True)
    ap.add_argument("--nodens", required=True)
    ap.add_argument("--nodens-version", default="?")
    ap.add_argument("--nodens-config", default="",
                    help="TOML appended to nodens.toml (after the root zone)")
    ap.add_argument("--nodens-server-config", default="",
                    help="TOML lines added to nodens's [server] table (e.g. workload_counters = true)")
    ap.add_argument("--coredns", required=True)
    ap.add_argument("--reflector", required=True)
    ap.add_argument("--servers", default="reflector nodens unbound dnsdist coredns dnsmasq")
    ap.add_argument("--profile", choices=["hit", "rate", "miss"])
    a = ap.parse_args()

    def on_term(sig, _frm):
        raise SystemExit(128 + sig)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    b = Bench(a)
    try:
        b.run(a.servers.split(), a.profile)
    finally:
        b.procs.stop_all()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
