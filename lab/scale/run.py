#!/usr/bin/env python3
"""The scale lab (lab/scale/README.md): what nodens's API watches cost the
control plane, beside watchers that read what kube-proxy reads.

A real kube-apiserver, etcd and kube-controller-manager (its EndpointSlice
controller) in network namespace nsscale; a cluster written by scalesim
(Nodes, Services, pods with the status a kubelet would write); then, one
group at a time, W watchers in namespace nsscalew, reaching the API server
over a veth pair (so every byte they receive is counted on it):

  none             no watcher: the cluster's own cost of the same phases
  informers        kube-proxy-like: client-go informers over Services and
                   EndpointSlices with kube-proxy's selectors and protobuf,
                   one client (connection) each
  nodens-before    nodens processes with [cluster] follow_api, built from
                   the commit before the watches resumed
  nodens-after     the same config, this build (its default: only headless
                   Services' EndpointSlices)
  nodens-all       this build, follow_api_endpoints = "all" (every slice)

Each group: the watchers start and list (until all are current), a rollout
of K Services' pods, then the API server is restarted (SIGTERM, start) and
the recovery measured (until every watcher is current again). Printed and
written to RESULTS (JSON) per phase: API server and etcd CPU seconds,
bytes the watchers received, LIST and WATCH requests (the API server's
audit log), the API server's peak memory, the time to current.

  lab/scale/run [--watchers W] [--nodes N] [--services S] [--pods P]
                [--rollout K] [--groups g1,g2] [--out FILE]
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
API_NS, W_NS = "nsscale", "nsscalew"
API_IP, W_IP = "10.77.0.1", "10.77.0.2"
TOKENS = {"admin": "scale-admin", "informer": "scale-informer", "nodens": "scale-nodens"}


def log(*a):
    print("lab/scale:", *a, file=sys.stderr, flush=True)


def sh(*cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, text=True, capture_output=True, **kw)


def in_ns(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


# ---- the cluster ---------------------------------------------------------

def netns_up():
    for ns in (API_NS, W_NS):
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "add", ns)
        sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
    sh("ip", "link", "add", "vscale0", "netns", API_NS, "type", "veth", "peer", "name", "vscale1", "netns", W_NS)
    sh(*in_ns(API_NS, "ip", "addr", "add", f"{API_IP}/24", "dev", "vscale0"))
    sh(*in_ns(W_NS, "ip", "addr", "add", f"{W_IP}/24", "dev", "vscale1"))
    sh(*in_ns(API_NS, "ip", "link", "set", "vscale0", "up"))
    sh(*in_ns(W_NS, "ip", "link", "set", "vscale1", "up"))


def netns_down():
    for ns in (API_NS, W_NS):
        sh("ip", "netns", "del", ns, check=False)


def pki(d):
    def ossl(*args):
        sh("openssl", *args, cwd=d)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ossl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=scale-ca", "-keyout", "ca.key", "-out", "ca.crt")
    ossl("req", *ec, "-subj", "/CN=kube-apiserver", "-keyout", "server.key", "-out", "server.csr")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write(f"subjectAltName=IP:127.0.0.1,IP:{API_IP}\n")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-extfile", "server.ext", "-out", "server.crt")
    ossl("genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key")
    ossl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    with open(os.path.join(d, "tokens.csv"), "w") as f:
        for user, token in TOKENS.items():
            f.write(f'{token},{user},{user},"system:masters"\n')
    with open(os.path.join(d, "audit.yaml"), "w") as f:
        f.write("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n"
                "- level: Metadata\n  users: [informer, nodens]\n  verbs: [list, watch]\n- level: None\n")


def kubeconfig(d, user, server):
    path = os.path.join(d, f"kubeconfig-{user}-{server.replace(':', '_')}")
    with open(path, "w") as f:
        f.write(f"""apiVersion: v1
kind: Config
clusters: [{{name: s, cluster: {{certificate-authority: {d}/ca.crt, server: "https://{server}"}}}}]
users: [{{name: {user}, user: {{token: {TOKENS[user]}}}}}]
contexts: [{{name: s, context: {{cluster: s, user: {user}}}}}]
current-context: s
""")
    return path


class Cluster:
    def __init__(self, d, k8s, etcd, gates):
        self.d, self.k8s, self.etcd_bin, self.gates = d, k8s, etcd, gates
        self.procs = {}
        self.admin = kubeconfig(d, "admin", "127.0.0.1:6443")
        self.audit = os.path.join(d, "audit.log")

    def spawn(self, name, cmd):
        out = open(os.path.join(self.d, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen(in_ns(API_NS, *cmd), stdout=out, stderr=subprocess.STDOUT)

    def start_etcd(self):
        data = tempfile.mkdtemp(prefix="nodens-scale-etcd-", dir="/dev/shm")
        self.etcd_data = data
        self.spawn("etcd", [self.etcd_bin, "--name=scale", f"--data-dir={data}",
                            "--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
                            "--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                            "--initial-cluster=scale=http://127.0.0.1:2380", "--listen-metrics-urls=", "--log-level=warn",
                            "--quota-backend-bytes=8589934592"])

    def start_apiserver(self):
        d = self.d
        self.spawn("kube-apiserver", [
            f"{self.k8s}/kube-apiserver", "--etcd-servers=http://127.0.0.1:2379", "--bind-address=0.0.0.0",
            "--secure-port=6443", f"--advertise-address={API_IP}", f"--cert-dir={d}/certs",
            f"--tls-cert-file={d}/server.crt", f"--tls-private-key-file={d}/server.key",
            f"--token-auth-file={d}/tokens.csv", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d}/sa.pub", f"--service-account-signing-key-file={d}/sa.key",
            "--service-cluster-ip-range=10.96.0.0/16", "--disable-admission-plugins=ServiceAccount",
            "--endpoint-reconciler-type=none", "--profiling=false",
            f"--audit-policy-file={d}/audit.yaml", f"--audit-log-path={self.audit}", "--audit-log-maxsize=0",
            *([f"--feature-gates={self.gates}"] if self.gates else [])])
        deadline = time.time() + 180
        while time.time() < deadline:
            r = sh(*in_ns(API_NS, f"{self.k8s}/kubectl", f"--kubeconfig={self.admin}", "get", "--raw", "/readyz"), check=False)
            if r.stdout.strip() == "ok":
                return
            time.sleep(0.5)
        raise SystemExit("kube-apiserver not ready in 180 s")

    def start_controllers(self):
        self.spawn("kube-controller-manager", [
            f"{self.k8s}/kube-controller-manager", f"--kubeconfig={self.admin}", "--leader-elect=false",
            "--controllers=endpointslice-controller", "--concurrent-service-endpoint-syncs=20",
            "--kube-api-qps=400", "--kube-api-burst=800", "--secure-port=0"])

    def pid(self, name):
        return self.procs[name].pid

    def restart_apiserver(self):
        """SIGTERM (it drains), then a new one: when the old one was gone
        and when the new one was ready."""
        p = self.procs["kube-apiserver"]
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(90)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        gone = time.time()
        self.start_apiserver()
        return gone, time.time()

    def stop(self):
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            p = self.procs.get(name)
            if p and p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(getattr(self, "etcd_data", "/nonexistent"), ignore_errors=True)


# ---- what is measured ----------------------------------------------------

def ns_pid_cpu(pid):
    """CPU seconds of a process that may be a child of `ip netns exec` (the
    same pid: it execs)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rx_bytes():
    r = sh(*in_ns(W_NS, "cat", "/sys/class/net/vscale1/statistics/rx_bytes"))
    return int(r.stdout)


class Peak(threading.Thread):
    """The API server's peak RSS, sampled every 200 ms."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster, self.peak, self.running = cluster, 0.0, True

    def run(self):
        while self.running:
            self.peak = max(self.peak, rss_mib(self.cluster.pid("kube-apiserver")))
            time.sleep(0.2)

    def take(self):
        p, self.peak = self.peak, 0.0
        return p


def audit_requests(cluster, user, since_line):
    """The lists and watches `user` made from audit line `since_line` on:
    [(verb, uri, code)] once each, and the new line count."""
    seen, out = set(), []
    try:
        with open(cluster.audit) as f:
            lines = f.readlines()
    except OSError:
        return [], since_line
    for line in lines[since_line:]:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("user", {}).get("username") != user or e["auditID"] in seen:
            continue
        seen.add(e["auditID"])
        out.append((e["verb"], e.get("requestURI", ""), e.get("responseStatus", {}).get("code", 0),
                    e.get("stageTimestamp", "")))
    return out, len(lines)


def unix_time(stamp):
    """An audit stageTimestamp (RFC 3339, microseconds, Z) as Unix time."""
    import datetime
    return datetime.datetime.strptime(stamp[:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def audit_lines(cluster):
    try:
        with open(cluster.audit) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


class Meter:
    """Deltas of everything measured over a span."""

    def __init__(self, cluster, peak, user):
        self.c, self.peak, self.user = cluster, peak, user
        self.t = time.time()
        self.api = ns_pid_cpu(cluster.pid("kube-apiserver"))
        self.etcd = ns_pid_cpu(cluster.pid("etcd"))
        self.rx = rx_bytes()
        self.line = audit_lines(cluster)
        peak.take()

    def done(self, api_cpu_offset=0.0):
        reqs, _ = audit_requests(self.c, self.user, self.line)
        ok = [r for r in reqs if r[2] == 200]
        lists = [r for r in ok if r[0] == "list" or "sendInitialEvents=true" in r[1]]
        watches = [r for r in ok if r[0] == "watch" and "sendInitialEvents=true" not in r[1]]
        return {
            "seconds": round(time.time() - self.t, 1),
            "apiserver_cpu_s": round(ns_pid_cpu(self.c.pid("kube-apiserver")) - self.api + api_cpu_offset, 2),
            "etcd_cpu_s": round(ns_pid_cpu(self.c.pid("etcd")) - self.etcd, 2),
            "bytes_to_watchers": rx_bytes() - self.rx,
            "lists": len(lists),
            # Lists begun (a page after the first goes on with a token).
            "whole_lists": sum(1 for r in lists if "continue=" not in r[1]),
            "watches": len(watches),
            "refused": len(reqs) - len(ok),
            "apiserver_peak_rss_mib": round(self.peak.take(), 1),
        }


# ---- the watchers --------------------------------------------------------

NODENS_CONFIG = """[server]
listen = ["127.0.0.1:{dns}"]
workers = 1
[cache]
capacity = "1 MiB"
[metrics]
listen = "127.0.0.1:{metrics}"
[log]
level = "warn"
[[zone]]
name = "cluster.local"
upstreams = ["{api}:53"]
[cluster]
follow_api = true
{extra}
[kubernetes]
kubeconfig = "{kubeconfig}"
{kubernetes}
"""


class NodensGroup:
    def __init__(self, d, binary, count, extra, kubeconfig_path, kubernetes=""):
        self.procs, self.ports = [], []
        self.logs = open(os.path.join(d, "nodens-group.log"), "ab")
        for i in range(count):
            dns, metrics = 20000 + i, 40000 + i
            path = os.path.join(d, f"nodens-{i}.toml")
            with open(path, "w") as f:
                f.write(NODENS_CONFIG.format(dns=dns, metrics=metrics, api=API_IP, extra=extra,
                                             kubeconfig=kubeconfig_path, kubernetes=kubernetes))
            self.procs.append(subprocess.Popen(in_ns(W_NS, binary, "serve", "--config", path),
                                               stdout=self.logs, stderr=subprocess.STDOUT))
            self.ports.append(metrics)

    def current(self):
        """How many are current (both follow_api watches synced), asked
        from inside the watchers' namespace."""
        r = sh(*in_ns(W_NS, sys.executable, os.path.abspath(__file__), "poll", *map(str, self.ports)), check=False)
        m = re.search(r"current (\d+)", r.stdout)
        return int(m.group(1)) if m else 0

    def rss_mib(self):
        return [rss_mib(p.pid) for p in self.procs]

    def cpu_s(self):
        return sum(ns_pid_cpu(p.pid) for p in self.procs)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def poll(ports):
    def one(port):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return False
        synced = re.findall(r'^nodens_kubernetes_watch_synced\{[^}]*watch="follow_api"[^}]*\} (\S+)', text, re.M)
        return len(synced) == 2 and all(float(v) == 1.0 for v in synced)
    with ThreadPoolExecutor(32) as ex:
        n = sum(ex.map(one, ports))
    print(f"current {n}")


class NoGroup:
    def current(self):
        return 0

    def rss_mib(self):
        return [0.0]

    def cpu_s(self):
        return 0.0

    def stop(self):
        pass


class InformerGroup:
    def __init__(self, d, sim, count, kubeconfig_path):
        self.last = 0
        self.proc = subprocess.Popen(in_ns(W_NS, "env", f"KUBECONFIG={kubeconfig_path}", sim, "informers",
                                           "-count", str(count)), stdout=subprocess.PIPE,
                                     stderr=open(os.path.join(d, "informers.log"), "ab"), text=True)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.proc.stdout:
            m = re.match(r"synced (\d+)", line)
            if m:
                self.last = int(m.group(1))

    def current(self):
        return self.last

    def rss_mib(self):
        return [rss_mib(self.proc.pid)]

    def cpu_s(self):
        return ns_pid_cpu(self.proc.pid)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def settle(cluster, user, since_line, quiet, timeout):
    """Waits until `user` has made no list or watch request for `quiet`
    seconds; the time of its last one (None if it made none)."""
    deadline = time.time() + timeout
    last_count, last_change = -1, time.time()
    while time.time() < deadline:
        reqs, _ = audit_requests(cluster, user, since_line)
        if len(reqs) != last_count:
            last_count, last_change = len(reqs), time.time()
        elif time.time() - last_change >= quiet:
            break
        time.sleep(0.5)
    reqs, _ = audit_requests(cluster, user, since_line)
    return max((unix_time(r[3]) for r in reqs if r[3]), default=None)


def run_group(args, cluster, peak, name, d, results):
    w = args.watchers
    log(f"{name}: {w} watchers")
    if name == "none":
        # The cluster's own cost of the same phases, without a watcher:
        # what every group's figures are compared after subtracting.
        user = "nobody"
        meter = Meter(cluster, peak, user)
        group = NoGroup()
    elif name == "informers":
        kc = kubeconfig(d, "informer", f"{API_IP}:6443")
        user = "informer"
        meter = Meter(cluster, peak, user)
        group = InformerGroup(d, args.sim, w, kc)
    else:
        kc = kubeconfig(d, "nodens", f"{API_IP}:6443")
        user = "nodens"
        binary = args.before if name == "nodens-before" else args.nodens
        extra = 'follow_api_endpoints = "all"' if name == "nodens-all" else ""
        meter = Meter(cluster, peak, user)
        # Streaming lists where the API server serves them (this build's
        # option; the build before never asks for them).
        streaming = "streaming_lists = true" if "WatchList=true" in args.feature_gates and name != "nodens-before" else ""
        group = NodensGroup(d, binary, w, extra, kc, streaming)
    out = {"watchers": w}
    try:
        # 1. Start and list.
        deadline = time.time() + args.timeout
        while name != "none" and group.current() < w and time.time() < deadline:
            time.sleep(1)
        out["start"] = meter.done()
        out["start"]["current"] = group.current()
        log(f"{name}: start {out['start']}")
        time.sleep(5)
        # 2. Steady watching through a rollout.
        meter = Meter(cluster, peak, user)
        args.generation += 1
        sh(*in_ns(API_NS, "env", f"KUBECONFIG={cluster.admin}", args.sim, "churn", "-nodes", str(args.nodes),
                  "-services", str(args.rollout), "-pods", str(args.pods), "-generation", str(args.generation)))
        time.sleep(10)
        out["rollout"] = meter.done()
        log(f"{name}: rollout {out['rollout']}")
        # 3. The API server restarted under them (SIGTERM: it drains its
        # watches, then a new one starts with an empty watch cache).
        meter = Meter(cluster, peak, user)
        line = audit_lines(cluster)
        # The old process's CPU in the span, then the new one's from zero.
        offset = ns_pid_cpu(cluster.pid("kube-apiserver")) - meter.api
        gone, ready = cluster.restart_apiserver()
        meter.api = 0.0
        # Every watcher current again: for the server, when the group's
        # last list or watch of the recovery was made (nothing for 20 s
        # after it); for nodens also by its own synced gauges.
        last = settle(cluster, user, line, 20, args.timeout)
        while name != "none" and group.current() < w and time.time() - ready < args.timeout:
            time.sleep(0.5)
        out["restart"] = meter.done(api_cpu_offset=offset)
        out["restart"]["drain_s"] = round(gone - meter.t, 1)
        # From the old API server's exit: the new one's start (the same for
        # every group, in "ready_s") and the watchers' recovery.
        out["restart"]["ready_s"] = round(ready - gone, 1)
        out["restart"]["seconds_to_last_request"] = round(last - gone, 1) if last else None
        out["restart"]["current"] = group.current()
        log(f"{name}: restart {out['restart']}")
        rss = group.rss_mib()
        out["watcher_rss_mib"] = round(sum(rss), 1)
        out["watcher_cpu_s"] = round(group.cpu_s(), 2)
    finally:
        group.stop()
    results[name] = out
    time.sleep(5)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "poll":
        poll([int(p) for p in sys.argv[2:]])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--watchers", type=int, default=100)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=10)
    ap.add_argument("--rollout", type=int, default=50)
    ap.add_argument("--groups", default="none,informers,nodens-before,nodens-after,nodens-all")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--k8s", required=True)
    ap.add_argument("--etcd", default=shutil.which("etcd"))
    ap.add_argument("--feature-gates", default="",
                    help="the API server's, e.g. WatchList=true (with --etcd an etcd 3.5)")
    ap.add_argument("--sim", required=True)
    ap.add_argument("--nodens", required=True)
    ap.add_argument("--before", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.generation = 0
    d = tempfile.mkdtemp(prefix="nodens-scale-")
    log(f"work directory {d}")
    netns_up()
    pki(d)
    cluster = Cluster(d, args.k8s, args.etcd, args.feature_gates)
    results = {"config": {k: getattr(args, k) for k in ("watchers", "nodes", "services", "pods", "rollout",
                                                        "feature_gates")}}
    results["config"]["etcd"] = sh(args.etcd, "--version").stdout.split("\n")[0]
    # What nodens-after reads (report.py labels its rows by it).
    results["config"]["follow_api_endpoints_default"] = "headless"
    try:
        cluster.start_etcd()
        time.sleep(1)
        cluster.start_apiserver()
        cluster.start_controllers()
        peak = Peak(cluster)
        peak.start()
        t = time.time()
        r = sh(*in_ns(API_NS, "env", f"KUBECONFIG={cluster.admin}", args.sim, "populate", "-nodes", str(args.nodes),
                      "-services", str(args.services), "-pods", str(args.pods)))
        log(r.stdout.strip())
        # Until the controller wrote every Service's slice.
        want = args.services
        while time.time() - t < 600:
            r = sh(*in_ns(API_NS, f"{args.k8s}/kubectl", f"--kubeconfig={cluster.admin}", "get", "endpointslices",
                          "-n", "scale", "--no-headers", "-o", "name"), check=False)
            if len(r.stdout.split()) >= want:
                break
            time.sleep(2)
        time.sleep(10)
        results["cluster"] = {"populate_s": round(time.time() - t, 1),
                              "apiserver_rss_mib": round(rss_mib(cluster.pid("kube-apiserver")), 1),
                              "etcd_rss_mib": round(rss_mib(cluster.pid("etcd")), 1)}
        # The cluster's own cost, no watcher: the baseline of each span.
        meter = Meter(cluster, peak, "nobody")
        time.sleep(30)
        results["idle_30s"] = meter.done()
        log(f"idle {results['idle_30s']}")
        for name in args.groups.split(","):
            run_group(args, cluster, peak, name, d, results)
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        cluster.stop()
        netns_down()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    log(f"results in {args.out}")


if __name__ == "__main__":
    main()
