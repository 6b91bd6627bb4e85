#!/usr/bin/env python3
"""Generates the lab's data: the cluster.local zone kube-dns serves, and the
dnsperf query files, one per rate step.

The query mix is what pods with the Kubernetes resolv.conf send:

    search default.svc.cluster.local svc.cluster.local cluster.local
    options ndots:5

Every lookup of a name with fewer than 5 dots walks the search list first,
and the stub resolver (glibc, musl) asks A and AAAA for each candidate:

  external name  (host-123.example.com):  8 queries
      host-123.example.com.default.svc.cluster.local  A, AAAA  -> NXDOMAIN
      host-123.example.com.svc.cluster.local          A, AAAA  -> NXDOMAIN
      host-123.example.com.cluster.local              A, AAAA  -> NXDOMAIN
      host-123.example.com                            A, AAAA  -> answer
  service in the pod's namespace (svc-7):  2 queries
      svc-7.default.svc.cluster.local                 A (answer), AAAA (NODATA)
  service in another namespace (svc-7.payments):  4 queries
      svc-7.payments.default.svc.cluster.local        A, AAAA  -> NXDOMAIN
      svc-7.payments.svc.cluster.local                A (answer), AAAA (NODATA)

Names are drawn from fixed populations with Zipf popularity, so the node
cache absorbs the popular ones and misses the long tail; each rate step gets
its own slice of one long random stream (no step replays another's names in
the same order). Deterministic for a given --seed.
"""
import argparse
import bisect
import itertools
import os
import random

NAMESPACES = ["default", "kube-system", "monitoring", "payments", "orders", "search", "auth", "web"]
EXT_DOMAINS = ["example.com", "example.net", "example.org"]
SEARCH = ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"]


def write_zone(path, services_per_ns, kubedns_ip):
    with open(path, "w") as f:
        f.write("$ORIGIN cluster.local.\n$TTL 30\n")
        # kube-dns's SOA for cluster.local (TTL and negative TTL 30 s, as
        # SkyDNS/kube-dns answer); both node caches cap negative answers at 5 s.
        f.write("@ 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 28800 7200 604800 30\n")
        f.write("@ 30 IN NS ns.dns.cluster.local.\n")
        f.write(f"ns.dns 30 IN A {kubedns_ip}\n")
        for n, ns in enumerate(NAMESPACES):
            for i in range(services_per_ns):
                # ClusterIPs from the benchmarking range; never contacted.
                f.write(f"svc-{i}.{ns}.svc 30 IN A 198.19.{n}.{i % 250 + 1}\n")


class Zipf:
    def __init__(self, n, s, rng):
        w = [1.0 / (r ** s) for r in range(1, n + 1)]
        self.cum = list(itertools.accumulate(w))
        self.total = self.cum[-1]
        self.rng = rng

    def draw(self):
        return bisect.bisect_left(self.cum, self.rng.random() * self.total)


def lookups(args, rng):
    """An endless stream of lists of (qname, qtype), one list per lookup."""
    ext = Zipf(args.external_names, args.zipf, rng)
    svc_local = Zipf(args.services_per_ns, args.zipf, rng)
    svc_any = Zipf(args.services_per_ns * len(NAMESPACES), args.zipf, rng)
    # Shuffle ranks so popularity does not follow the numbering.
    ext_perm = list(range(args.external_names))
    rng.shuffle(ext_perm)
    w_ext, w_local, w_cross = args.mix
    total = w_ext + w_local + w_cross
    while True:
        x = rng.random() * total
        if x < w_ext:
            i = ext_perm[ext.draw()]
            name = f"host-{i}.{EXT_DOMAINS[i % len(EXT_DOMAINS)]}"
            cands = [f"{name}.{s}" for s in SEARCH] + [name]
        elif x < w_ext + w_local:
            cands = [f"svc-{svc_local.draw()}.default.svc.cluster.local"]
        else:
            j = svc_any.draw()
            ns = NAMESPACES[j % len(NAMESPACES)]
            short = f"svc-{j // len(NAMESPACES)}.{ns}"
            cands = [f"{short}.{SEARCH[0]}", f"{short}.svc.cluster.local"]
        yield [(c, t) for c in cands for t in ("A", "AAAA")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--kubedns-ip", required=True)
    p.add_argument("--steps", required=True, help="space-separated query rates")
    p.add_argument("--step-secs", type=int, required=True)
    p.add_argument("--services-per-ns", type=int, default=50)
    p.add_argument("--external-names", type=int, default=20000)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--mix", type=lambda s: [float(x) for x in s.split(",")], default=[0.6, 0.3, 0.1],
                   help="lookup weights: external, same-namespace service, other-namespace service")
    p.add_argument("--seed", type=int, default=20231011)
    args = p.parse_args()

    os.makedirs(args.out, exist_ok=True)
    write_zone(os.path.join(args.out, "cluster.local.zone"), args.services_per_ns, args.kubedns_ip)

    rng = random.Random(args.seed)
    stream = lookups(args, rng)
    pending = []
    for k, rate in enumerate(int(r) for r in args.steps.split()):
        # 10% spare: dnsperf stops on its -l time limit, never on end of file.
        need = int(rate * args.step_secs * 1.1) + 100
        with open(os.path.join(args.out, f"queries-{k}.txt"), "w") as f:
            n = 0
            while n < need:
                if not pending:
                    pending = next(stream)
                q, t = pending.pop(0)
                f.write(f"{q} {t}\n")
                n += 1


if __name__ == "__main__":
    main()
