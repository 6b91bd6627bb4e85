#!/usr/bin/env python3
"""Samples, every --interval seconds until SIGTERM or --max-secs, one JSON
line of:

  kd       TCP sockets on kube-dns's port 53 (dnsmasq's side), by state, read
           from /proc/<dnsmasq>/net/tcp, which shows dnsmasq's network
           namespace; ESTABLISHED includes connections the kernel completed
           but dnsmasq has not accept()ed yet
  acceptq  that accept queue's length (rx_queue of the LISTEN socket; dnsmasq
           listens with a backlog of 32 and stops accepting while its 20 TCP
           children are busy)
  node     TCP sockets of the node cache's network namespace to kube-dns:53,
           by state (SYN_SENT = dialling)
  children dnsmasq's forked TCP children (one per connection it serves)
  cpu      busy fraction of all CPUs since the previous sample
  foreign_cpu  CPU (cores) used since the previous sample by processes
           outside the lab's namespaces, kernel threads aside
  cache_cpu  CPU seconds used by the node cache process so far
  metrics  (every --metrics-every samples) the node cache's counters and
           gauges whose names start with one of --metric-prefix

Reads /proc only (no fork per sample), so it costs little CPU.
"""
import argparse
import json
import os
import signal
import socket
import struct
import sys
import time
import urllib.request

STATES = {
    "01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
    "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
    "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
}


def addr(hexaddr):
    ip, port = hexaddr.split(":")
    return socket.inet_ntoa(struct.pack("<I", int(ip, 16))), int(port, 16)


def tcp_table(pid):
    """The TCP sockets of pid's network namespace, each once.

    /proc/net/tcp is not a snapshot: the kernel walks its hash tables while
    connections come and go, and a socket can be printed twice in one read
    (seen in this lab: the same port two and three times). One large read
    and de-duplication by address pair (the last line wins) keep counts
    honest."""
    try:
        fd = os.open(f"/proc/{pid}/net/tcp", os.O_RDONLY)
    except OSError:
        return []
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    socks = {}
    for line in b"".join(chunks).decode().splitlines()[1:]:
        parts = line.split()
        local, remote = addr(parts[1]), addr(parts[2])
        socks[(local, remote)] = (local, remote, STATES.get(parts[3], parts[3]), int(parts[4].split(":")[1], 16))
    return socks.values()


class Procs:
    """One pass over /proc per sample: dnsmasq's children, and the CPU used
    since the previous sample by processes outside the lab (another build or
    test on the same machine), which skews a lab's numbers."""

    def __init__(self, lab_netns, lab_marker):
        self.lab_ns = set()
        for name in lab_netns:
            try:
                self.lab_ns.add(f"net:[{os.stat('/run/netns/' + name).st_ino}]")
            except OSError:
                pass
        self.marker = lab_marker.encode()
        self.prev = {}
        self.tck = os.sysconf("SC_CLK_TCK")

    def scan(self, dnsmasq_pid):
        children, foreign, cur = 0, 0.0, {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            rest = s[s.rfind(")") + 2:].split()
            ppid = int(rest[1])
            if ppid == dnsmasq_pid:
                children += 1
            if ppid == 2 or d == "2":
                continue  # kernel threads: softirq work for the lab's own packets lands here
            cpu = (int(rest[11]) + int(rest[12])) / self.tck
            cur[d] = cpu
            lab = self.prev.get(d + "lab")
            if lab is None:
                try:
                    lab = os.readlink(f"/proc/{d}/ns/net") in self.lab_ns
                    if not lab:
                        with open(f"/proc/{d}/cmdline", "rb") as f:
                            lab = self.marker in f.read()
                except OSError:
                    lab = True
            cur[d + "lab"] = lab
            if not lab and d in self.prev:
                foreign += cpu - self.prev[d]
        self.prev = cur
        return children, foreign


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v), idle


def proc_cpu(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def scrape(url, prefixes):
    out = {}
    try:
        with urllib.request.urlopen(url, timeout=0.5) as r:
            text = r.read().decode()
    except Exception as e:  # noqa: BLE001 - a missed scrape is recorded, not fatal
        return {"error": str(e)[:100]}
    for line in text.splitlines():
        if not line or line[0] == "#" or "_bucket{" in line:
            continue
        if line.startswith(prefixes):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dnsmasq-pid", type=int, required=True)
    p.add_argument("--cache-pid", type=int, required=True)
    p.add_argument("--kubedns-ip", required=True)
    p.add_argument("--metrics-url", default="")
    p.add_argument("--metric-prefix", action="append", default=[])
    p.add_argument("--metrics-every", type=int, default=5)
    p.add_argument("--lab-netns", action="append", default=[])
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--max-secs", type=float, default=900)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    prefixes = tuple(args.metric_prefix) or ("coredns_", "nodens_")
    procs = Procs(args.lab_netns, os.path.dirname(os.path.abspath(__file__)))
    procs.scan(args.dnsmasq_pid)
    start = time.time()
    prev_cpu = cpu_times()
    n = 0
    with open(args.out, "w") as out:
        while not stop and time.time() - start < args.max_secs:
            t = time.time()
            kd, acceptq, kd_ports = {}, 0, []
            for (lip, lport), (rip, rport), st, rxq in tcp_table(args.dnsmasq_pid):
                if lport != 53 or lip not in (args.kubedns_ip, "0.0.0.0"):
                    continue
                if st == "LISTEN":
                    acceptq = max(acceptq, rxq)
                else:
                    kd[st] = kd.get(st, 0) + 1
                    if st != "TIME_WAIT":
                        kd_ports.append((rport, st))
            node, node_ports = {}, []
            for (_, lport), (rip, rport), st, _ in tcp_table(args.cache_pid):
                if rip == args.kubedns_ip and rport == 53:
                    node[st] = node.get(st, 0) + 1
                    if st != "TIME_WAIT":
                        node_ports.append((lport, st))
            cur = cpu_times()
            dt, di = cur[0] - prev_cpu[0], cur[1] - prev_cpu[1]
            prev_cpu = cur
            children, foreign = procs.scan(args.dnsmasq_pid)
            rec = {
                "t": round(t, 3), "kd": kd, "acceptq": acceptq, "node": node,
                "children": children,
                "cpu": round(1 - di / dt, 3) if dt else None,
                # CPU-seconds per second (2.0 = both cores of this machine)
                "foreign_cpu": round(foreign / (dt / os.cpu_count() / procs.tck), 3) if dt else None,
                "cache_cpu": proc_cpu(args.cache_pid),
            }
            # Which connections, when there are few: to follow one across samples.
            if len(kd_ports) <= 40:
                rec["kd_ports"] = sorted(kd_ports)
            if len(node_ports) <= 40:
                rec["node_ports"] = sorted(node_ports)
            if args.metrics_url and n % args.metrics_every == 0:
                rec["metrics"] = scrape(args.metrics_url, prefixes)
            out.write(json.dumps(rec, separators=(",", ":")) + "\n")
            n += 1
            time.sleep(max(0.0, args.interval - (time.time() - t)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
