#!/usr/bin/env python3
"""The node lab: nodens and NodeLocal DNSCache (node-cache) in the same place on a
simulated node, under the same load, through the same faults.

Namespaces (made here, removed on exit): a "pod" (veth to the node), the "node"
(the cache under test holds 169.254.20.10 and the Service IP 10.96.0.10 on its
interface; a kube-proxy-like DNAT sends 10.96.0.10 and the upstream Service IP
10.96.0.11 to two "cluster DNS" namespaces, each a CoreDNS, half and half). The
pod asks 10.96.0.10. All traffic stays inside these namespaces.

The load (dnsperf in the pod, RATE q/s): 90 % names from a popular set of 1,000
(`p<k>.pop.lab.test`, a wildcard, TTL 300), 10 % names never asked before
(`<n>.miss.lab.test`, NXDOMAIN). Each cache must be in the path: after the first
phase the cluster DNS must have seen each popular name about once, not 90 % of
the load, or the run stops.

Per cache:
  steady    SECS s of load: answered, lost, conntrack entries for the pods' DNS
  race      RACE lookups from the pod, each a new socket sending A and AAAA from
            two threads at the same instant (what glibc and musl do in parallel):
            conntrack clash_resolve, insert_failed, drop, entries; first with no
            cache in the path (kube-proxy DNAT only), then through the cache
  upgrades  UPGRADES upgrades 10 s apart under load: nodens hands over to a new
            process; node-cache is stopped and started again (what a rolling
            update does to it). Lost queries; popular-name queries the cluster DNS
            received in the 10 s after each (a warm start makes them ~0)
  kill      kill -9 under load: the server only (nodens: its supervisor
            withdraws), the whole container (nodens: supervisor and server,
            `nodens node guard` withdraws); node-cache: its process. Seconds
            until the pod is answered again (asking every 50 ms, for at most
            15 s; nothing is restarted) and lost queries
  restarts  (nodens) RESTARTS starts, stopped in turn by SIGTERM, SIGKILL of the
            server and SIGKILL of the whole container, half on each backend:
            rule and address counts after each start, and what is left after
            `nodens node teardown`

Writes results.json and series.json into OUT, and the plot (node.png) into DOCS.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PID = os.getpid()
NS = {k: f"nl-{k}-{PID}" for k in ("pod", "node", "dns1", "dns2")}
RATE = int(os.environ.get("RATE", "5000"))
SECS = int(os.environ.get("SECS", "10"))
UPGRADES = int(os.environ.get("UPGRADES", "10"))
UPGRADE_EVERY = int(os.environ.get("UPGRADE_EVERY", "10"))
RACE = int(os.environ.get("RACE", "5000"))
RACER = ""
RESTARTS = int(os.environ.get("RESTARTS", "100"))
NODENS = os.environ["NODENS"]
NODE_CACHE = os.environ.get("NODE_CACHE", "")
COREDNS = os.environ["COREDNS"]
OUT = os.environ["OUT"]
DOCS = os.environ.get("DOCS", "")
TMP = tempfile.mkdtemp(prefix="nodens-lab-node-")
PROCS = []
POPULAR = 1000
SERVICE = "10.96.0.10"


def log(msg):
    print(f"{time.strftime('%H:%M:%S')} lab: {msg}", file=sys.stderr, flush=True)


def sh(*args, ns=None, check=True):
    cmd = (["ip", "netns", "exec", NS[ns]] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def spawn(name, *args, ns):
    f = open(os.path.join(OUT, f"{name}.log"), "a")
    p = subprocess.Popen(["ip", "netns", "exec", NS[ns]] + list(args), stdout=f, stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p


def cleanup():
    for p in PROCS:
        if p.poll() is None:
            p.kill()
    for n in NS.values():
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
    shutil.rmtree(TMP, ignore_errors=True)


# ---- the simulated cluster ------------------------------------------------------

def topology():
    for n in NS.values():
        sh("ip", "netns", "add", n)
    for k in NS:
        sh("ip", "link", "set", "lo", "up", ns=k)
    links = [("pod", "10.244.0.2", "node", "10.244.0.1"), ("dns1", "10.77.1.2", "node", "10.77.1.1"),
             ("dns2", "10.77.2.2", "node", "10.77.2.1")]
    for i, (a, aip, b, bip) in enumerate(links):
        ea, eb = f"nl{i}a{PID % 10000}", f"nl{i}b{PID % 10000}"
        sh("ip", "link", "add", ea, "netns", NS[a], "type", "veth", "peer", "name", eb, "netns", NS[b])
        sh("ip", "addr", "add", f"{aip}/24", "dev", ea, ns=a)
        sh("ip", "link", "set", ea, "up", ns=a)
        sh("ip", "addr", "add", f"{bip}/24", "dev", eb, ns=b)
        sh("ip", "link", "set", eb, "up", ns=b)
        sh("ip", "route", "add", "default", "via", bip, ns=a)
    sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns="node")
    # A route for the Service range, as a node has one (its default route):
    # locally generated packets are routed before the DNAT picks a backend.
    sh("ip", "route", "add", "10.96.0.0/16", "via", "10.77.1.2", ns="node")
    # kube-proxy: both Service IPs to the two cluster DNS pods, half each.
    for svc in (SERVICE, "10.96.0.11"):
        for chain in ("PREROUTING", "OUTPUT"):
            for proto in ("udp", "tcp"):
                base = ["iptables", "-w", "5", "-t", "nat", "-A", chain, "-d", svc, "-p", proto, "--dport", "53"]
                sh(*base, "-m", "statistic", "--mode", "random", "--probability", "0.5",
                   "-j", "DNAT", "--to-destination", "10.77.1.2:53", ns="node")
                sh(*base, "-j", "DNAT", "--to-destination", "10.77.2.2:53", ns="node")
    zone = ("$ORIGIN lab.test.\n@ 300 IN SOA ns hostmaster 1 3600 600 86400 30\n@ 300 IN NS ns\n"
            "ns 300 IN A 10.77.1.2\nwww 300 IN A 192.0.2.1\n*.pop 300 IN A 192.0.2.2\n")
    with open(os.path.join(TMP, "db.lab"), "w") as f:
        f.write(zone)
    for k, ip in (("dns1", "10.77.1.2"), ("dns2", "10.77.2.2")):
        cf = os.path.join(TMP, f"Corefile.{k}")
        with open(cf, "w") as f:
            f.write(f"lab.test:53 {{\n bind {ip}\n file {TMP}/db.lab\n log\n}}\n")
        spawn(k, COREDNS, "-conf", cf, ns=k)
    for ip in ("10.77.1.2", "10.77.2.2"):
        if first_answer(ip, 15) < 0:
            raise RuntimeError(f"cluster DNS {ip} does not answer")


PROBE = """
import os, socket, struct, random, sys, time
server, seconds, pids, sig = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 0))
def q():
    qid = random.randint(0, 65535)
    pkt = struct.pack('>HHHHHH', qid, 0x0100, 1, 0, 0, 0) + b'\\x03www\\x03lab\\x04test\\x00' + struct.pack('>HH', 1, 1)
    s.settimeout(0.2)
    try:
        s.sendto(pkt, (server, 53))
        while True:
            d, _ = s.recvfrom(1500)
            if struct.unpack('>H', d[:2])[0] == qid: return True
    except OSError: return False
t0 = time.time()
for pid in filter(None, pids.split(',')): os.kill(int(pid), sig)
while time.time() - t0 < seconds:
    if q(): print(round(time.time() - t0, 3)); break
    time.sleep(0.05)
else: print(-1)
"""


def first_answer(server, seconds, kill=(), sig=signal.SIGKILL):
    """From the pod: sends `sig` to each pid in `kill`, then asks every 50 ms.
    Returns the seconds until the first answer, or -1."""
    out = subprocess.run(["ip", "netns", "exec", NS["pod"], sys.executable, "-c", PROBE, server, str(seconds),
                          ",".join(map(str, kill)), str(int(sig))],
                         capture_output=True, text=True, timeout=seconds + 10)
    return float(out.stdout.strip() or -1)


class ClusterLog:
    """Counts the queries the two cluster DNS servers logged, read as they grow,
    sampled every 0.25 s into a series (time, all, popular names)."""

    def __init__(self):
        self.files = {k: open(os.path.join(OUT, f"{k}.log")) for k in ("dns1", "dns2")}
        self.total = self.popular = 0
        self.series = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        threading.Thread(target=self.run, daemon=True).start()

    def read(self):
        with self.lock:
            for f in self.files.values():
                for line in f.readlines():
                    if ".lab.test." in line and '"' in line:
                        self.total += 1
                        self.popular += ".pop.lab.test." in line
            return self.total, self.popular

    def run(self):
        while not self.stop.is_set():
            t, p = self.read()
            self.series.append((time.time(), t, p))
            time.sleep(0.25)

    def counts_at(self, when):
        """(all, popular) at the last sample at or before `when`."""
        best = (0, 0)
        for t, a, p in self.series:
            if t > when:
                break
            best = (a, p)
        return best


def query_file(name, seconds, rate):
    """The queries of one load: popular names, and names no load asked before."""
    path = os.path.join(TMP, f"queries-{name}")
    rnd = random.Random(name)
    with open(path, "w") as f:
        for i in range(rate * seconds):
            if i % 10:
                f.write(f"p{rnd.randrange(POPULAR)}.pop.lab.test A\n")
            else:
                f.write(f"m{i}-{name}-{PID}-{rnd.getrandbits(32):x}.miss.lab.test A\n")
    return path


class Load:
    """dnsperf from the pod, `seconds` long at RATE q/s, each query once."""

    def __init__(self, name, seconds):
        self.name, self.seconds = name, seconds
        self.log = os.path.join(OUT, f"dnsperf-{name}.log")
        self.started = time.time()
        f = open(self.log, "w")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", NS["pod"], "dnsperf", "-s", SERVICE, "-d", query_file(name, seconds, RATE),
             "-Q", str(RATE), "-l", str(seconds), "-c", "4", "-q", "20000", "-t", "2", "-S", "1", "-O", "suppress=timeout"],
            stdout=f, stderr=subprocess.STDOUT)
        PROCS.append(self.proc)

    def result(self):
        self.proc.wait(timeout=self.seconds + 60)
        text = open(self.log).read()
        stats = text.split("Statistics:")[-1]
        sent = int(stats.split("Queries sent:")[1].split()[0])
        lost = int(stats.split("Queries lost:")[1].split()[0])
        per_second = [(float(t), float(q)) for t, q in re.findall(r"^(\d{9,}\.\d+): ([\d.]+)$", text, re.M)]
        return {"sent": sent, "lost": lost, "answered_per_second": per_second}


def conntrack_stats():
    """The node's conntrack counters, summed over CPUs."""
    lines = sh("cat", "/proc/net/stat/nf_conntrack", ns="node").split("\n")
    names = lines[0].split()
    sums = dict.fromkeys(names, 0)
    for line in lines[1:]:
        for n, v in zip(names, line.split()):
            sums[n] += int(v, 16)
    return sums


def build_racer():
    racer = os.path.join(TMP, "racer")
    subprocess.run(["cc", "-O2", "-pthread", "-o", racer, os.path.join(os.path.dirname(__file__), "racer.c")],
                   check=True)
    return racer


def service_flows():
    """The node's conntrack entries for DNS to the Service IP, by source port."""
    table = sh("cat", "/proc/net/nf_conntrack", ns="node")
    return {l.split("sport=")[1].split()[0] for l in table.split("\n")
            if f"dst={SERVICE} " in l and "dport=53 " in l and "sport=" in l}


def race(label):
    before, flows = conntrack_stats(), service_flows()
    out = subprocess.run(["ip", "netns", "exec", NS["pod"], RACER, str(RACE), SERVICE],
                         capture_output=True, text=True, timeout=RACE + 60)
    after = conntrack_stats()
    r = {"lookups": RACE, "unanswered_within_1s": int(out.stdout.strip() or -1)}
    for k in ("clashres", "insert_failed", "drop", "early_drop"):
        r[k] = after[k] - before[k]
    r["new_service_entries"] = len(service_flows() - flows)
    log(f"race {label}: {r}")
    return r


# ---- the caches -------------------------------------------------------------

def nodens_config(backend="auto"):
    """The config file for `backend`, written once: a process may be reading it."""
    path = os.path.join(TMP, f"nodens-{backend}.toml")
    if os.path.exists(path):
        return path
    with open(path + ".new", "w") as f:
        f.write(f"""[server]
listen = ["169.254.20.10:53", "{SERVICE}:53"]
handover_socket = "{TMP}/handover.sock"
[metrics]
listen = "127.0.0.1:9253"
[node]
setup = true
backend = "{backend}"
state_dir = "{TMP}/state"
[[zone]]
name = "."
upstream_service = "kube-dns-upstream"
""")
    os.rename(path + ".new", path)
    return path


class Cache:
    """What the scenarios do to either cache: `start`, `upgrade`, `kills` and
    `close` are each cache's own."""
    name = ""
    stop_grace = 20
    proc = None

    def after_kill(self):
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=self.stop_grace)


class NodensCache(Cache):
    name = "nodens"

    def __init__(self):
        self.proc = None
        self.guard = spawn("nodens-guard", NODENS, "node", "guard", "--config", nodens_config(), ns="node")

    def start(self, backend="auto"):
        self.proc = spawn("nodens", NODENS, "serve", "--config", nodens_config(backend), ns="node")
        return self.proc

    def server_pid(self):
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        # The supervisor runs under `ip netns exec`, which execs it: same pid.
        return int(out[0]) if out else None

    def took_over(self):
        return open(os.path.join(OUT, "nodens.log")).read().count("handover: took over")

    def upgrade(self):
        before = self.took_over()
        old = self.proc
        self.start()
        deadline = time.time() + 10
        while time.time() < deadline and self.took_over() == before:
            time.sleep(0.05)
        if self.took_over() == before:
            raise RuntimeError("the new nodens did not take over")
        old.send_signal(signal.SIGTERM)
        old.wait(timeout=20)

    def kills(self):
        return [("server", lambda: [self.server_pid()]),
                ("container", lambda: [self.proc.pid, self.server_pid()])]

    def close(self):
        self.stop()
        self.guard.send_signal(signal.SIGTERM)
        self.guard.wait(timeout=10)
        sh(NODENS, "node", "teardown", ns="node")


class NodeCache(Cache):
    """The real node-cache. No dummy link type in this kernel, so its addresses
    are put on an ifb link by hand (-setupinterface=false); its iptables rules
    are its own (-setupiptables). It writes them only once CoreDNS's pidfile
    exists (-pidfile), or else after -syncinterval (60 s in the upstream
    manifest): until then queries to the Service IP bypass it."""
    name = "node-cache"
    stop_grace = 30

    def __init__(self):
        self.proc = None
        self.corefile = os.path.join(TMP, "Corefile.base")
        block = """{zone}:53 {{
    errors
    cache {{
        success 9984 30
        denial 9984 5
    }}
    reload
    loop
    bind 169.254.20.10 {service}
    forward . __PILLAR__CLUSTER__DNS__ {{
        force_tcp
    }}
    prometheus :9253
{health}}}
"""
        with open(self.corefile, "w") as f:
            f.write(block.format(zone="lab.test", service=SERVICE, health="    health 169.254.20.10:8080\n"))
            f.write(block.format(zone=".", service=SERVICE, health="").replace("    prometheus :9253\n", ""))

    def start(self):
        if "nodelocaldns" not in sh("ip", "-o", "link", ns="node"):
            sh("ip", "link", "add", "nodelocaldns", "type", "ifb", ns="node")
            sh("ip", "link", "set", "nodelocaldns", "up", ns="node")
            for ip in ("169.254.20.10/32", f"{SERVICE}/32"):
                sh("ip", "addr", "add", ip, "dev", "nodelocaldns", ns="node")
        pidfile = os.path.join(TMP, "node-cache.pid")
        if os.path.exists(pidfile):
            os.unlink(pidfile)
        self.proc = spawn("node-cache", NODE_CACHE, "-localip", f"169.254.20.10,{SERVICE}",
                          "-basecorefile", self.corefile, "-conf", os.path.join(TMP, "Corefile"),
                          "-setupinterface=false", "-setupiptables=true", "-health-port", "8080",
                          "-upstreamsvc", "kube-dns-upstream", "-pidfile", pidfile, ns="node")
        # Its rules come once CoreDNS runs: wait for them, or the pod's queries
        # would bypass it.
        deadline = time.time() + 20
        while time.time() < deadline and rule_count("node-cache") < 8:
            time.sleep(0.1)
        return self.proc

    def upgrade(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.start()

    def kills(self):
        return [("process", lambda: [self.proc.pid])]

    def close(self):
        self.stop()
        # Rules a killed node-cache left behind, and the link made by hand.
        for table in ("raw", "filter"):
            for line in sh("iptables-save", "-t", table, ns="node").split("\n"):
                if line.startswith("-A ") and "NodeLocal DNS Cache" in line:
                    sh("iptables", "-w", "5", "-t", table, *shlex_split("-D " + line[3:]), ns="node", check=False)
        sh("ip", "link", "del", "nodelocaldns", ns="node", check=False)


def shlex_split(s):
    import shlex
    return shlex.split(s)


def rule_count(who):
    """Rules in the node: node-cache's (its comments) or nodens's (every backend)."""
    if who == "node-cache":
        text = sh("iptables-save", ns="node", check=False)
        return sum(1 for l in text.split("\n") if l.startswith("-A") and "NodeLocal DNS Cache" in l)
    n = 0
    nft = sh("nft", "list", "ruleset", ns="node", check=False)
    n += sum(1 for l in nft.split("\n") if 'comment "nodens:' in l)
    for save in ("iptables-legacy-save", "iptables-nft-save"):
        if shutil.which(save):
            text = sh(save, ns="node", check=False)
            n += sum(1 for l in text.split("\n") if l.startswith("-A NODENS-") and "nodens:" in l)
    return n


def jumps():
    """nodens's jumps from built-in chains (exactly one each when in place)."""
    n = 0
    for save in ("iptables-legacy-save", "iptables-nft-save"):
        if shutil.which(save):
            n += sum(1 for l in sh(save, ns="node", check=False).split("\n")
                     if re.match(r"-A (PREROUTING|INPUT|OUTPUT) ", l) and "-j NODENS-" in l)
    return n


def addresses():
    """IPv4 addresses on the interface."""
    text = sh("ip", "-o", "addr", "show", "dev", "nodelocaldns", ns="node", check=False)
    return sum(1 for l in text.split("\n") if " inet " in l)


# ---- scenarios -----------------------------------------------------------------

def window_counts(cluster, start, seconds):
    a0, p0 = cluster.counts_at(start)
    a1, p1 = cluster.counts_at(start + seconds)
    return a1 - a0, p1 - p0


def run_cache(cache, cluster):
    r = {}
    log(f"{cache.name}: start")
    cache.start()
    if first_answer(SERVICE, 20) < 0:
        raise RuntimeError(f"{cache.name} does not answer")
    # steady
    flows = service_flows()
    t0 = time.time()
    load = Load(f"{cache.name}-steady", SECS)
    res = load.result()
    time.sleep(0.5)
    total, popular = window_counts(cluster, t0, time.time() - t0)
    r["steady"] = {"sent": res["sent"], "lost": res["lost"], "cluster_dns_queries": total,
                   "cluster_dns_popular_queries": popular,
                   "new_service_conntrack_entries": len(service_flows() - flows)}
    log(f"{cache.name}: steady {r['steady']}")
    scrape = subprocess.run(["ip", "netns", "exec", NS["node"], sys.executable, "-c",
                             "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9253/metrics').read().decode())"],
                            capture_output=True, text=True, timeout=20)
    open(os.path.join(OUT, f"metrics-{cache.name}-steady.txt"), "w").write(scrape.stdout)
    if popular > 2 * POPULAR:
        raise RuntimeError(f"{cache.name} is not in the path: the cluster DNS saw {popular} popular-name queries")
    # The same again, warm: the steady-state rate of queries at the cluster DNS.
    t0 = time.time()
    res = Load(f"{cache.name}-warm", SECS).result()
    time.sleep(0.5)
    total, popular = window_counts(cluster, t0 + 0.5, SECS)
    r["warm"] = {"sent": res["sent"], "lost": res["lost"], "cluster_dns_queries_per_10s": total * 10 // SECS,
                 "cluster_dns_popular_queries_per_10s": popular * 10 // SECS}
    log(f"{cache.name}: warm {r['warm']}")
    r["race"] = race(f"through {cache.name}")
    # upgrades under load
    length = UPGRADES * UPGRADE_EVERY + 5
    load = Load(f"{cache.name}-upgrades", length)
    time.sleep(2)
    marks = []
    for _ in range(UPGRADES):
        marks.append(time.time())
        cache.upgrade()
        time.sleep(max(0.0, marks[-1] + UPGRADE_EVERY - time.time()))
    res = load.result()
    time.sleep(0.5)
    after = [window_counts(cluster, m, UPGRADE_EVERY) for m in marks]
    r["upgrades"] = {"count": UPGRADES, "sent": res["sent"], "lost": res["lost"],
                     "cluster_dns_queries_10s_after": [a for a, _ in after],
                     "cluster_dns_popular_queries_10s_after": [p for _, p in after],
                     "marks": [m - load.started for m in marks], "started": load.started,
                     "answered_per_second": res["answered_per_second"]}
    log(f"{cache.name}: upgrades lost {res['lost']} of {res['sent']}, popular after: {[p for _, p in after]}")
    # kill -9
    r["kill"] = {}
    for what, pids in cache.kills():
        if cache.proc.poll() is not None:
            cache.start()
        if first_answer(SERVICE, 20) < 0:
            raise RuntimeError(f"{cache.name} does not answer before the kill")
        load = Load(f"{cache.name}-kill-{what}", 8)
        time.sleep(2)
        killed_at = time.time() - load.started
        gap = first_answer(SERVICE, 15, kill=pids())
        res = load.result()
        cache.after_kill()
        left = rule_count(cache.name)
        r["kill"][what] = {"seconds_to_answer": gap, "sent": res["sent"], "lost": res["lost"],
                           "rules_left": left, "addresses_left": addresses(), "killed_at": killed_at,
                           "started": load.started, "answered_per_second": res["answered_per_second"]}
        log(f"{cache.name}: kill -9 ({what}) -> answered after {gap} s, lost {res['lost']}, rules left {left}")
    cache.close()
    return r


def in_place_count():
    return open(os.path.join(OUT, "nodens.log")).read().count("node: interface and rules in place")


def restarts(cache):
    """Start, check, stop in one of three ways; RESTARTS times."""
    seen = []
    ways = ["SIGTERM", "SIGKILL server", "SIGKILL container"]
    for i in range(RESTARTS):
        backend = "nftables" if i < RESTARTS // 2 else "iptables"
        set_up = in_place_count()
        cache.start(backend)
        deadline = time.time() + 10
        while time.time() < deadline:
            # The new server has set the node up (not just found it as a
            # killed one left it), and everything is there.
            if in_place_count() > set_up and subprocess.run(["ip", "netns", "exec", NS["node"], NODENS, "node", "status", "--config",
                               nodens_config(backend)], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"restart {i}: node setup not in place")
        seen.append({"backend": backend, "rules": rule_count("nodens"), "jumps": jumps(),
                     "addresses": addresses()})
        way = ways[i % 3]
        if way == "SIGTERM":
            cache.stop()
        else:
            pids = [cache.server_pid()] if way == "SIGKILL server" else [cache.proc.pid, cache.server_pid()]
            for p in pids:
                os.kill(p, signal.SIGKILL)
            # Started again at once, as the kubelet does: the new server's
            # setup must not race the supervisor's or the guard's withdraw.
            cache.proc.wait(timeout=10)
    sh(NODENS, "node", "teardown", ns="node")
    left = {"rules": rule_count("nodens"), "jumps": jumps(),
            "link": "nodelocaldns" in sh("ip", "-o", "link", ns="node")}
    per_backend = {}
    for s in seen:
        per_backend.setdefault(s["backend"], set()).add((s["rules"], s["jumps"], s["addresses"]))
    r = {"count": RESTARTS, "stops": ways,
         "distinct_after_start": {b: [{"rules": a, "jumps": j, "addresses": d} for a, j, d in sorted(v)]
                                  for b, v in per_backend.items()},
         "left_after_teardown": left}
    log(f"restarts: {r}")
    return r


def plot(results, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(3, 1, figsize=(10, 11))
    colors = {"nodens": "tab:blue", "node-cache": "tab:orange"}
    for name, r in results["caches"].items():
        u = r["upgrades"]
        # dnsperf's first status line is its start, at 0 q/s.
        served = u["answered_per_second"][1:]
        axes[0].plot([t - u["started"] for t, _ in served], [q for _, q in served], color=colors[name],
                     label=name)
        pts = [(t - u["started"], p) for t, _, p in results["series"]]
        rate = [(b[0], (b[1] - a[1]) / max(b[0] - a[0], 1e-3)) for a, b in zip(pts, pts[1:])
                if 0 <= b[0] <= u["marks"][-1] + UPGRADE_EVERY + 5 and b[0] - a[0] > 0]
        # The series is in absolute time; shift it to this phase.
        axes[1].plot([x for x, _ in rate], [y for _, y in rate], color=colors[name], label=name)
        for m in u["marks"]:
            for ax in axes[:2]:
                ax.axvline(m, color=colors[name], alpha=0.25, linestyle="--")
        for what, k in r["kill"].items():
            served = k["answered_per_second"][1:]
            xs = [t - k["started"] - k["killed_at"] for t, _ in served]
            axes[2].plot(xs, [q for _, q in served], marker="o",
                         color=colors[name], linestyle="-" if what != "container" else ":",
                         label=f"{name}: kill -9 of the {what}")
    axes[0].set_title(f"{UPGRADES} upgrades under {RATE} q/s: answers the pod received per second")
    axes[0].set_ylabel("answers/s")
    axes[0].set_ylim(bottom=0)
    axes[1].set_title("popular-name queries the cluster DNS received per second (after an upgrade: bypass, cold cache)")
    axes[1].set_ylabel("queries/s")
    axes[2].set_title("kill -9 at t=0 (nothing restarted): answers the pod received per second")
    axes[2].set_ylabel("answers/s")
    axes[2].set_xlabel("seconds")
    for ax in axes:
        ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=80)


def report(results):
    """The result tables, in Markdown, as docs/lab/node.md shows them."""
    caches = results["caches"]
    names = list(caches)
    per10 = RATE  # never-asked names per 10 s: 10 % of RATE q/s

    def row(label, f):
        return f"| {label} | " + " | ".join(f(caches[n]) for n in names) + " |"

    def kill(c, what):
        k = c["kill"].get(what)
        if not k:
            return "-"
        gap = (f"answered again after {k['seconds_to_answer']} s" if k["seconds_to_answer"] >= 0
               else "no answer for 15 s (not restarted)")
        return f"{gap}; {k['lost']:,} of {k['sent']:,} lost; rules left {k['rules_left']}"

    def upgrades_popular(c):
        p = c["upgrades"]["cluster_dns_popular_queries_10s_after"]
        spread = f"{min(p):,}" if min(p) == max(p) else f"{min(p):,}-{max(p):,}"
        return f"{spread} ({100 * max(p) / per10:.0f} % of the steady miss rate at most)"

    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
             row("steady 10 s: lost of sent", lambda c: f"{c['steady']['lost']} of {c['steady']['sent']:,}"),
             row("popular-name queries at the cluster DNS, first 10 s", lambda c: f"{c['steady']['cluster_dns_popular_queries']:,}"),
             row("conntrack entries for the pod's DNS", lambda c: str(c["steady"]["new_service_conntrack_entries"])),
             row(f"{UPGRADES} upgrades 10 s apart: lost of sent",
                 lambda c: f"{c['upgrades']['lost']} of {c['upgrades']['sent']:,}"),
             row("popular-name queries at the cluster DNS in the 10 s after each upgrade", upgrades_popular),
             row("kill -9 of the server process", lambda c: kill(c, "server") if "server" in c["kill"] else kill(c, "process")),
             row("kill -9 of the whole container", lambda c: kill(c, "container") if "container" in c["kill"] else "as above")]
    race = ["| | no cache (DNAT only) | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    rows = [("lookups", "lookups"), ("clash_resolve", "clashres"), ("insert_failed", "insert_failed"),
            ("drop", "drop"), ("new conntrack entries", "new_service_entries"),
            ("lookups missing an answer after 1 s", "unanswered_within_1s")]
    for label, key in rows:
        race.append(f"| {label} | {results['race_without_cache'][key]:,} | "
                    + " | ".join(f"{caches[n]['race'][key]:,}" for n in names) + " |")
    text = "\n".join(lines) + "\n\n" + "\n".join(race) + "\n"
    if "restarts" in results:
        r = results["restarts"]
        text += "\nrestarts: " + json.dumps(r["distinct_after_start"]) + "; after teardown: " + json.dumps(
            r["left_after_teardown"]) + "\n"
    return text


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".log"):
            os.unlink(os.path.join(OUT, f))
    results = {"rate": RATE, "caches": {}}
    try:
        global RACER
        RACER = build_racer()
        topology()
        os.environ["KUBE_DNS_UPSTREAM_SERVICE_HOST"] = "10.96.0.11"
        os.environ["KUBE_DNS_UPSTREAM_SERVICE_PORT"] = "53"
        cluster = ClusterLog()
        results["race_without_cache"] = race("without a cache")
        caches = [NodensCache()] + ([NodeCache()] if NODE_CACHE else [])
        for cache in caches:
            results["caches"][cache.name] = run_cache(cache, cluster)
        results["restarts"] = restarts(NodensCache())
        cluster.stop.set()
        results["series"] = cluster.series
    finally:
        cleanup()
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    if DOCS:
        plot(results, os.path.join(DOCS, "node.png"))
    with open(os.path.join(OUT, "results.md"), "w") as f:
        f.write(report(results))
    summary = {k: v for k, v in results.items() if k != "series"}
    for c in summary.get("caches", {}).values():
        c["upgrades"].pop("answered_per_second", None)
        for k in c["kill"].values():
            k.pop("answered_per_second", None)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 2:  # lab.py OUT/results.json: the tables (and with DOCS, the plot) again
        saved = json.load(open(sys.argv[1]))
        print(report(saved))
        if DOCS:
            plot(saved, os.path.join(DOCS, "node.png"))
    else:
        main()
