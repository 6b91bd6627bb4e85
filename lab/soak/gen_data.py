#!/usr/bin/env python3
"""Generates the soak's data: the zone CoreDNS serves, and dnsperf query files.

Zone `soak.test` (CoreDNS's file plugin), --names names in all:

  pop-N.soak.test    N < --popular: the names most queries ask for, TTL
                     --pop-ttl (short, so they expire, get prefetched and,
                     during upstream faults, served stale many times a run)
  host-N.soak.test   the rest, TTL --host-ttl; A records in 198.51.100.0/24
                     (TEST-NET-2, never contacted)

Query mix of the load files, per query:

  70 %  a popular name (uniform over the pop-* names), A
  20 %  a random name of the zone (uniform over all names), A or AAAA
        (AAAA is NODATA: no AAAA records)
  10 %  a name that does not exist, never asked before in the run: half
        under soak.test (NXDOMAIN from the file plugin), half under
        nx.invalid (NXDOMAIN from CoreDNS's template for everything else);
        both carry an SOA, so nodens caches them (denial cache)

popular.txt asks each popular name once (they are in the cache before the
prefill). The prefill file holds fresh names that exist (3 of 4, under the
zone's wildcard *.fill.soak.test, TTL 3600 s) and fresh non-existent names
(1 of 4): the soak sends it before the load until the cache holds its
capacity (answers and denials both evict), so that memory is measured on a
full cache from the start and RSS can be held against the capacity.

Each file is long enough for its rate and time bound (dnsperf stops on -l,
never at end of file, so no name is replayed). Deterministic for --seed.
"""
import argparse
import os
import random
import re

# A popular name, and the pattern that recognises one (lab/soak/report.py
# counts them among the queries sent and those that reached CoreDNS).
POPULAR_NAME_RE = re.compile(r"pop-\d+\.soak\.test", re.IGNORECASE)


def popular_name(i):
    return f"pop-{i}.soak.test"


def write_zone(path, names, popular, pop_ttl, host_ttl, neg_ttl):
    with open(path, "w") as f:
        f.write("$ORIGIN soak.test.\n$TTL 60\n")
        f.write(f"@ 3600 IN SOA ns.soak.test. hostmaster.soak.test. 1 7200 1800 86400 {neg_ttl}\n")
        f.write("@ 3600 IN NS ns.soak.test.\n")
        f.write("ns 3600 IN A 198.51.100.1\n")
        f.write("*.fill 3600 IN A 198.51.100.201\n")
        for i in range(names):
            ip = f"198.51.100.{i % 250 + 2}"
            if i < popular:
                f.write(f"pop-{i} {pop_ttl} IN A {ip}\n")
            else:
                f.write(f"host-{i} {host_ttl} IN A {ip}\n")


def zone_name(i, popular):
    return popular_name(i) if i < popular else f"host-{i}.soak.test"


class NxNames:
    """Fresh non-existent names, never repeated within one run."""

    def __init__(self, tag):
        self.tag, self.n = tag, 0

    def next(self):
        self.n += 1
        if self.n % 2:
            return f"nx-{self.tag}-{self.n}.soak.test"
        return f"nx-{self.tag}-{self.n}.nx.invalid"


def write_load(path, count, rng, names, popular, nx):
    with open(path, "w") as f:
        for _ in range(count):
            x = rng.random()
            if x < 0.70:
                f.write(f"{popular_name(rng.randrange(popular))} A\n")
            elif x < 0.90:
                f.write(f"{zone_name(rng.randrange(names), popular)} {'A' if rng.random() < 0.75 else 'AAAA'}\n")
            else:
                f.write(f"{nx.next()} A\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--names", type=int, default=3000)
    p.add_argument("--popular", type=int, default=100)
    p.add_argument("--pop-ttl", type=int, default=20)
    p.add_argument("--host-ttl", type=int, default=60)
    p.add_argument("--neg-ttl", type=int, default=30)
    p.add_argument("--udp-qps", type=int, required=True)
    p.add_argument("--tcp-qps", type=int, required=True)
    p.add_argument("--seconds", type=int, required=True)
    p.add_argument("--prefill", type=int, default=0, help="names in the prefill file")
    p.add_argument("--seed", type=int, default=20261122)
    args = p.parse_args()
    if not 0 < args.popular <= args.names:
        p.error("--popular must be in 1..--names")

    os.makedirs(args.out, exist_ok=True)
    write_zone(os.path.join(args.out, "soak.test.zone"), args.names, args.popular,
               args.pop_ttl, args.host_ttl, args.neg_ttl)
    rng = random.Random(args.seed)
    # 5 % spare plus a little: dnsperf stops on its time limit, not at end of file.
    extra = lambda qps: int(qps * args.seconds * 1.05) + 1000
    write_load(os.path.join(args.out, "udp.txt"), extra(args.udp_qps), rng, args.names, args.popular, NxNames("u"))
    write_load(os.path.join(args.out, "tcp.txt"), extra(args.tcp_qps), rng, args.names, args.popular, NxNames("t"))
    with open(os.path.join(args.out, "popular.txt"), "w") as f:
        for i in range(args.popular):
            f.write(f"{popular_name(i)} A\n")
    if args.prefill:
        nx = NxNames("p")
        with open(os.path.join(args.out, "prefill.txt"), "w") as f:
            for i in range(args.prefill):
                f.write(f"{nx.next()} A\n" if i % 4 == 3 else f"f-{i}.fill.soak.test A\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
