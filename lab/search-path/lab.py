#!/usr/bin/env python3
"""The search-path lab's driver. It runs inside the pod's network namespace
(started with `ip netns exec nsp-pod`, so /etc/resolv.conf is the pod's), starts
and restarts the node cache under test in the node namespace, runs the real
client resolvers and reads what they sent (the packet log at the pod's veth)
and what reached the cluster DNS (the relay's log).

Caches (CONFIGS):
  a  CoreDNS as NodeLocal DNSCache (the upstream node-local-dns Corefile)
  b  nodens, [cluster] defaults, search_domains = the cloud domains, GKE cloud suffixes
  c  nodens, local_nxdomain, nxdomain_cut, namespace_check and speculate off
  d  nodens as b with namespace_check = false
  e  nodens as b with autopath = true: [kubernetes] kubeconfig = KUBECONFIG_FILE
     (the lab's kube-apiserver, started by `run`), node_name = NODE_NAME. After
     every start the driver waits until the pod watch has listed
     (nodens_kubernetes_watch_synced{resource="pods"} 1), and it counts
     nodens_autopath_answers_total per lookup.
POOL_CONNECTIONS=N gives every nodens run a TCP pool of N connections to the
relay instead of the default 4 (cluster.local is forwarded over TCP, one query
per connection at a time).

For every repetition, name, client and cache, in that nesting (the caches
interleaved, so that load on the machine hits them alike):
  cold  the cache restarted, then the lookup
  warm  the same lookup again, right after
  new   the cache restarted, one unrelated lookup (PRIME, another TLD) by the
        same client, then the lookup: a name new to a cache that has been
        serving (it knows the zones' SOAs), the steady state of a node

Writes OUT/results.json.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.environ["OUT"]
NODENS = os.environ["NODENS"]
COREDNS = os.environ["COREDNS"]
BIN = os.environ["CLIENT_BIN"]
NS_NODE = os.environ.get("NS_NODE", "nsp-node")
CACHE_IP = os.environ.get("CACHE_IP", "10.78.0.1")
RELAY_IP = os.environ.get("RELAY_IP", "10.78.1.2")
RELAY_LOG = os.environ["RELAY_LOG"]
SNIFF_LOG = os.environ["SNIFF_LOG"]
REPS = int(os.environ.get("REPS", "5"))
SETTLE = float(os.environ.get("SETTLE", "0.3"))
MAX_SECS = float(os.environ.get("MAX_SECS", "2400"))
CONFIGS = os.environ.get("CONFIGS", "a b c d").split()
CLIENTS = os.environ.get("CLIENTS", "glibc musl go").split()
POD_NS = os.environ.get("POD_NAMESPACE", "team-a")
CLOUD = os.environ.get("CLOUD_DOMAINS", "us-central1-a.c.proj.internal c.proj.internal google.internal").split()
PRIME = os.environ.get("PRIME", "prime.example.org")
POOL_CONNECTIONS = int(os.environ.get("POOL_CONNECTIONS") or 0)
KUBECONFIG_FILE = os.environ.get("KUBECONFIG_FILE", "")
NODE_NAME = os.environ.get("NODE_NAME", "lab-node")
METRICS = f"http://{CACHE_IP}:9253/metrics"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy from the environment
SYNC_TIMEOUT = 30.0

EXTERNAL = ["api.example.com", "www.example.com", "nothere.example.com", "metadata.google.internal",
            "api.example.com."]
IN_CLUSTER = ["web", "web.team-a", "web.team-a.svc", "kubernetes.default", "kubernetes.default.svc.cluster.local",
              "db-0.db", "db-0.db.team-a"]
NAMES = os.environ.get("NAMES", " ".join(EXTERNAL + IN_CLUSTER)).split()

CONFIG_DESC = {
    "a": "CoreDNS as NodeLocal DNSCache",
    "b": "nodens (search features on)",
    "c": "nodens (search features off)",
    "d": "nodens, namespace_check off",
    "e": "nodens with autopath",
    "f": "nodens with namespaces_from_api",
    "g": "nodens as f, with no_aaaa_for_ipv4_pods",
}
CACHE = None  # the running cache's Popen
SYNC_MS = []  # e: from listening to the pod watch synced, per start
AUTOPATH_SEEN = 0.0  # e: nodens_autopath_answers_total at the last reading
T_START = time.monotonic()


def log(msg):
    print(f"{time.strftime('%H:%M:%S')} lab: {msg}", file=sys.stderr, flush=True)


###############################################################################
# The caches
###############################################################################
def corefile():
    # lab/kube/node-local-dns.yaml's Corefile: every block forwards to the
    # cluster DNS (here through the relay), cluster.local over TCP.
    blocks = []
    for zone, cache in (("cluster.local", "cache {\n        success 9984 30\n        denial 9984 5\n    }"),
                        ("in-addr.arpa", "cache 30"), ("ip6.arpa", "cache 30"), (".", "cache 30")):
        fwd = f"forward . {RELAY_IP}" + (" {\n        force_tcp\n    }" if zone != "." else "")
        health = f"\n    health {CACHE_IP}:8080" if zone == "cluster.local" else ""
        blocks.append(f"{zone}:53 {{\n    errors\n    {cache}\n    reload\n    loop\n    bind {CACHE_IP}\n"
                      f"    {fwd}\n    prometheus {CACHE_IP}:9253{health}\n}}\n")
    return "".join(blocks)


def nodens_config(cfg):
    cluster = ["[cluster]", "search_domains = [" + ", ".join(f'"{d}"' for d in CLOUD) + "]"]
    if cfg == "c":
        cluster += ["local_nxdomain = false", "nxdomain_cut = false", "namespace_check = false", "speculate = false"]
    if cfg == "d":
        cluster += ["namespace_check = false"]
    if cfg == "e":
        cluster += ["autopath = true"]
    if cfg in ("f", "g"):
        cluster += ["namespaces_from_api = true"]
    cluster += ['[[cluster.cloud_suffix]]', 'suffix = "c.*.internal"', "max_labels = 2",
                '[[cluster.cloud_suffix]]', 'suffix = "google.internal"', "max_labels = 1"]
    text = [f'[server]\nlisten = ["{CACHE_IP}:53"]\n', f'[metrics]\nlisten = "{CACHE_IP}:9253"\n',
            "\n".join(cluster) + "\n"]
    if cfg in ("e", "f", "g"):
        if not KUBECONFIG_FILE:
            raise SystemExit(f"config {cfg} needs KUBECONFIG_FILE (the lab's API server; `run` starts it)")
        text.append(f'[kubernetes]\nkubeconfig = "{KUBECONFIG_FILE}"\nnode_name = "{NODE_NAME}"\n')
    # The Corefile's zones, TTL caps and transports; one upstream, one pool.
    for zone, transport, neg in (("cluster.local", "force_tcp", "5s"), ("in-addr.arpa", "force_tcp", "30s"),
                                 ("ip6.arpa", "force_tcp", "30s"), (".", "prefer_udp", "30s")):
        text.append(f'[[zone]]\nname = "{zone}"\nupstreams = ["{RELAY_IP}"]\ntransport = "{transport}"\n'
                    f'max_ttl = "30s"\nnegative_max_ttl = "{neg}"\n'
                    + ("no_aaaa_for_ipv4_pods = true\n" if cfg == "g" else ""))
        if POOL_CONNECTIONS:
            text.append(f"[zone.pool]\nmax_connections = {POOL_CONNECTIONS}\n")
    return "\n".join(text)


def write_configs():
    paths = {}
    for cfg in CONFIGS:
        if cfg == "a":
            p = os.path.join(OUT, "Corefile.node-local")
            open(p, "w").write(corefile())
        else:
            p = os.path.join(OUT, f"nodens-{cfg}.toml")
            open(p, "w").write(nodens_config(cfg))
            r = subprocess.run([NODENS, "check-config", p], capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"check-config {p}: {r.stdout}{r.stderr}")
        paths[cfg] = p
    return paths


def stop_cache():
    global CACHE
    if CACHE is not None:
        try:
            CACHE.kill()
        except ProcessLookupError:
            pass
        CACHE.wait(timeout=10)
        CACHE = None


def port_open():
    s = socket.socket()
    s.settimeout(0.2)
    try:
        s.connect((CACHE_IP, 53))
        return True
    except OSError:
        return False
    finally:
        s.close()


def metric(name, labels=None):
    """The value of one series on nodens's metrics page (the sum over series
    matching `labels`), or None when it is not there or the page is not."""
    try:
        page = OPENER.open(METRICS, timeout=2).read().decode()
    except (OSError, http.client.HTTPException):
        return None
    total, found = 0.0, False
    for line in page.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in (labels or {}).items()):
            total += float(m.group(3))
            found = True
    return total if found else None


def wait_synced(cfg):
    """e: until the watch of this node's pods has listed (and holds the pod);
    f: until the watch of the namespaces has listed (and holds team-a); g: both."""
    global AUTOPATH_SEEN
    t0 = time.monotonic()
    pods = {"resource": "pods", "watch": NODE_NAME}
    namespaces = {"resource": "namespaces", "watch": "all"}
    watches = {"e": [pods], "f": [namespaces], "g": [pods, namespaces]}[cfg]
    while time.monotonic() - t0 < SYNC_TIMEOUT:
        if all(metric("nodens_kubernetes_watch_synced", labels) == 1.0
               and (metric("nodens_kubernetes_watch_objects", labels) or 0) >= 1 for labels in watches):
            SYNC_MS.append(round((time.monotonic() - t0) * 1000, 1))
            AUTOPATH_SEEN = metric("nodens_autopath_answers_total") or 0.0
            return
        if CACHE.poll() is not None:
            raise SystemExit(f"cache {cfg} exited with {CACHE.returncode}; see {OUT}/cache-{cfg}.log")
        time.sleep(0.01)
    raise SystemExit(f"nodens's watch not synced after {SYNC_TIMEOUT:.0f} s; see {OUT}/cache-{cfg}.log, "
                     f"{OUT}/kube-apiserver.log")


def autopath_answers():
    """e: nodens_autopath_answers_total since the last reading."""
    global AUTOPATH_SEEN
    now = metric("nodens_autopath_answers_total")
    if now is None:
        return None
    delta, AUTOPATH_SEEN = now - AUTOPATH_SEEN, now
    return delta


def start_cache(cfg, path):
    global CACHE
    stop_cache()
    for _ in range(100):  # the old process's port is free once it is gone
        if not port_open():
            break
        time.sleep(0.02)
    if cfg == "a":
        cmd = [COREDNS, "-conf", path]
    else:
        cmd = [NODENS, "serve", "--config", path]
    logf = open(os.path.join(OUT, f"cache-{cfg}.log"), "a")
    CACHE = subprocess.Popen(["ip", "netns", "exec", NS_NODE] + cmd, stdout=logf, stderr=subprocess.STDOUT)
    for _ in range(250):
        if port_open():
            # CoreDNS binds its four blocks on one listener; nodens its UDP socket
            # before the TCP one. A short pause covers the rest.
            time.sleep(0.05)
            if cfg in ("e", "f", "g"):
                wait_synced(cfg)
            return
        if CACHE.poll() is not None:
            raise SystemExit(f"cache {cfg} exited with {CACHE.returncode}; see {OUT}/cache-{cfg}.log")
        time.sleep(0.02)
    raise SystemExit(f"cache {cfg} does not listen on {CACHE_IP}:53")


###############################################################################
# Clients and logs
###############################################################################
def client_cmd(client, name):
    if client == "glibc":
        return ["getent", "ahosts", name], {}
    if client == "musl":
        return [os.path.join(BIN, "musl-lookup"), name], {}
    if client == "go":
        return [os.path.join(BIN, "golookup"), name], {"GODEBUG": "netdns=go"}
    raise ValueError(client)


def normalize(client, proc):
    out = proc.stdout.strip()
    if client == "glibc":
        if proc.returncode == 2:
            return "NOTFOUND"
        if proc.returncode != 0:
            return f"ERR rc={proc.returncode}"
        return " ".join(sorted({line.split()[0] for line in out.splitlines() if line.strip()}))
    return out


class Tail:
    """Lines appended to a log file since the last read, parsed."""

    def __init__(self, path):
        self.path, self.pos, self.rows = path, 0, []

    def read(self):
        with open(self.path) as f:
            f.seek(self.pos)
            data = f.read()
        end = data.rfind("\n") + 1
        self.pos += len(data[:end].encode())
        for line in data[:end].splitlines():
            parts = line.split()
            if parts:
                self.rows.append([float(parts[0])] + parts[1:])
        return self.rows

    def window(self, t0, t1):
        return [r for r in self.read() if t0 <= r[0] <= t1]

    def forget_before(self, t):
        self.rows = [r for r in self.rows if r[0] >= t]


def lookup(client, name, sniff, relay, phase, cfg):
    cmd, env = client_cmd(client, name)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env={**os.environ, **env})
    t1 = time.monotonic()
    time.sleep(SETTLE)
    t2 = time.monotonic()
    pkts = sniff.window(t0, t1 + 0.01)
    ups = [r for r in relay.window(t0, t2) if r[3] != "HINFO"]  # CoreDNS's loop probe
    queries = [r for r in pkts if r[1] == "q"]
    answers = [r for r in pkts if r[1] == "r"]
    names = []
    for r in queries:
        if r[4] not in names:
            names.append(r[4])
    wire = (max(r[0] for r in answers) - min(r[0] for r in queries)) * 1000 if queries and answers else None
    sniff.forget_before(t2 - 1)
    relay.forget_before(t2 - 1)
    extra = {"autopath_answers": autopath_answers()} if cfg == "e" else {}
    if cfg == "g":
        extra["aaaa_upstream"] = sum(1 for r in ups if r[3] == "AAAA")
    return {**extra,
        "phase": phase,
        "answer": normalize(client, proc),
        "rc": proc.returncode,
        "wall_ms": round((t1 - t0) * 1000, 3),
        "wire_ms": round(wire, 3) if wire is not None else None,
        "client_queries": len(queries),
        "client_answers": len(answers),
        "client_tcp": sum(1 for r in queries if r[2] == "tcp"),
        "rounds": len(names),
        "client_names": [[r[4], r[5]] for r in queries],
        "answer_rcodes": [[r[4], r[5], int(r[6])] for r in answers],
        "upstream": len(ups),
        "upstream_queries": [[r[2], r[3], r[1]] for r in ups],
    }


def measure_rtt():
    """One upstream round trip: UDP queries from the node namespace to the relay."""
    code = r"""
import socket, struct, time, statistics, random
q = lambda i: struct.pack('!HHHHHH', i, 0x0100, 1, 0, 0, 0) + b'\x03api\x07example\x03com\x00' + struct.pack('!HH', 1, 1)
rtts = []
for i in range(20):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.connect(('%s', 53))
    t = time.monotonic(); s.send(q(random.randrange(65536))); s.recv(4096); rtts.append((time.monotonic() - t) * 1000); s.close()
    time.sleep(0.02)
print(statistics.median(rtts), min(rtts), max(rtts))
""" % RELAY_IP
    out = subprocess.run(["ip", "netns", "exec", NS_NODE, sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    return {"median_ms": round(float(out[0]), 3), "min_ms": round(float(out[1]), 3), "max_ms": round(float(out[2]), 3)}


def launch_overhead(client):
    """Wall time of the client answering `localhost` from /etc/hosts: no DNS at all."""
    times = []
    for _ in range(5):
        cmd, env = client_cmd(client, "localhost")
        t0 = time.monotonic()
        subprocess.run(cmd, capture_output=True, timeout=10, env={**os.environ, **env})
        times.append((time.monotonic() - t0) * 1000)
    return round(sorted(times)[2], 3)


def main():
    paths = write_configs()
    sniff, relay = Tail(SNIFF_LOG), Tail(RELAY_LOG)
    rtt = measure_rtt()
    log(f"one upstream round trip (node -> relay -> cluster DNS): median {rtt['median_ms']:.1f} ms")
    overhead = {c: launch_overhead(c) for c in CLIENTS}
    log(f"client start-up (localhost from /etc/hosts): {overhead}")
    samples = []
    done = True
    total = REPS * len(NAMES) * len(CLIENTS) * len(CONFIGS)
    n = 0
    for rep in range(REPS):
        for name in NAMES:
            for client in CLIENTS:
                for cfg in CONFIGS:
                    if time.monotonic() - T_START > MAX_SECS:
                        log(f"MAX_SECS={MAX_SECS:.0f} reached after {n} of {total} samples: stopping")
                        done = False
                        break
                    n += 1
                    base = {"config": cfg, "client": client, "name": name, "rep": rep,
                            "kind": "external" if name in EXTERNAL else "cluster"}
                    start_cache(cfg, paths[cfg])
                    samples.append({**base, **lookup(client, name, sniff, relay, "cold", cfg)})
                    samples.append({**base, **lookup(client, name, sniff, relay, "warm", cfg)})
                    start_cache(cfg, paths[cfg])
                    lookup(client, PRIME, sniff, relay, "prime", cfg)
                    samples.append({**base, **lookup(client, name, sniff, relay, "new", cfg)})
                    if n % 24 == 0:
                        log(f"{n}/{total} samples ({time.monotonic() - T_START:.0f} s)")
                else:
                    continue
                break
            else:
                continue
            break
        else:
            continue
        break
    stop_cache()
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "complete": done,
        "reps": REPS,
        "configs": {c: CONFIG_DESC[c] for c in CONFIGS},
        "clients": CLIENTS,
        "names": NAMES,
        "external": [n for n in NAMES if n in EXTERNAL],
        "in_cluster": [n for n in NAMES if n not in EXTERNAL],
        "pod_namespace": POD_NS,
        "cloud_domains": CLOUD,
        "prime": PRIME,
        "pool_connections": POOL_CONNECTIONS or 4,
        "rtt": rtt,
        "relay_delay_ms_each_way": float(os.environ.get("DELAY_MS", "10")),
        "client_startup_ms": overhead,
        "node_name": NODE_NAME if "e" in CONFIGS else None,
        "watch_sync_ms": ({"median": sorted(SYNC_MS)[len(SYNC_MS) // 2], "max": max(SYNC_MS), "n": len(SYNC_MS)}
                          if SYNC_MS else None),
        "resolv_conf": open("/etc/resolv.conf").read(),
        "samples": samples,
    }
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    log(f"wrote {OUT}/results.json ({len(samples)} lookups)")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        main()
    finally:
        stop_cache()
