#!/usr/bin/env python3
"""The follow-api lab's helper (lab/kube/follow-api); standard library only.

  follow-api.py stamp OUTFILE -- COMMAND...
      Runs COMMAND (a `kubectl get -w --output-watch-events -o jsonpath=...`)
      and writes each line of its output to OUTFILE prefixed with the time it
      arrived (time.time() in ms) and a tab. Stops with the command, or on
      SIGTERM (then it stops the command).

  follow-api.py analyse OUT
      Reads what follow-api wrote in OUT (phases.txt, answers*.txt, the
      watch-*.txt files, metrics/) and writes OUT/results.json and
      OUT/results.md; prints the tables. Exit 1 when path A misses a target.

What is right is taken from the API as the node's watches saw it: each
Service's ClusterIP and its port named http, each EndpointSlice's ready
addresses and hostnames. For each change, the API change time is when the
watch first showed the state the scenario ends in (the new ClusterIP, the new
pod's address ready, the third pool address ready), and every answer of every
path from then to the next scenario is judged against that state.
"""

import json
import os
import signal
import subprocess
import sys
import time

PATHS = {
    "A": "nodens, follow_api + hold_past_ttl",
    "B": "nodens, without follow_api",
    "C": "node-local-dns's CoreDNS",
    "cluster": "the cluster DNS itself (reference)",
}
FIRST_CORRECT_TARGET_MS = 1000
STEADY_RATIO_TARGET = 0.1


def stamp(out, cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)

    def stop(*_):
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    with open(out, "w", buffering=1) as f:
        for line in proc.stdout:
            f.write(f"{int(time.time() * 1000)}\t{line}")
    sys.exit(proc.wait())


# ---- reading what the run wrote ------------------------------------------


def read_kv(path):
    kv = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                kv[k] = v
    return kv


def read_phases(path):
    phases = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                phases[parts[1]] = {"ms": int(parts[0])}
                for kv in parts[2:]:
                    if "=" in kv:
                        k, v = kv.split("=", 1)
                        phases[parts[1]][k] = v
    return phases


def read_answers(paths):
    """(ms, path, name, type, rcode, frozenset of data) sorted by time."""
    out = []
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 6 or not parts[0].isdigit():
                    continue
                ms, path, name, qtype, rcode, data = parts
                recs = frozenset() if data == "-" else frozenset(data.split(","))
                out.append((int(ms), path, name.rstrip("."), qtype, rcode, recs))
    out.sort(key=lambda a: a[0])
    return out


def read_watch(path):
    events = []
    with open(path) as f:
        for line in f:
            stamp_ms, _, rest = line.rstrip("\n").partition("\t")
            parts = rest.split("|", 3)
            if len(parts) < 4 or not stamp_ms.isdigit():
                continue
            ms, (etype, name, third, payload) = stamp_ms, parts
            try:
                data = json.loads(payload) if payload else []
            except json.JSONDecodeError:
                data = []
            events.append((int(ms), etype, name, third, data))
    return events


def metric_sum(path, name, label=None):
    total = 0.0
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            head, _, value = line.rstrip("\n").rpartition(" ")
            metric = head.split("{", 1)[0]
            if metric == name and (label is None or label in head):
                total += float(value)
    return total


# ---- what the API says the answers are ------------------------------------


class Api:
    """Replays the Service and EndpointSlice watches: the expected answer of
    each question after each event."""

    def __init__(self, services, slices, ns, domain):
        self.ns, self.domain = ns, domain
        self.timeline = []  # (ms, {question: (rcode, frozenset)})
        svc, sl = {}, {}
        merged = [(e[0], 0, e) for e in services] + [(e[0], 1, e) for e in slices]
        merged.sort(key=lambda x: (x[0], x[1]))
        for ms, kind, (_, etype, name, third, data) in merged:
            table = svc if kind == 0 else sl
            if etype == "DELETED":
                table.pop(name, None)
            elif etype in ("ADDED", "MODIFIED"):
                table[name] = (third, data or [])
            else:
                continue
            self.timeline.append((ms, self.expected(svc, sl)))

    def fqdn(self, svc):
        return f"{svc}.{self.ns}.svc.{self.domain}"

    def expected(self, svc, sl):
        exp = {}
        ready = {}  # service -> set of ready addresses
        hosts = {}  # (service, hostname) -> set
        for service, endpoints in sl.values():
            for ep in endpoints or []:
                cond = ep.get("conditions") or {}
                if cond.get("ready") is False:
                    continue
                addrs = ep.get("addresses") or []
                ready.setdefault(service, set()).update(addrs)
                if ep.get("hostname"):
                    hosts.setdefault((service, ep["hostname"]), set()).update(addrs)
        for name, (cluster_ip, ports) in svc.items():
            fq = self.fqdn(name)
            if cluster_ip and cluster_ip != "None":
                exp[(fq, "A")] = ("NOERROR", frozenset([cluster_ip]))
                srv = [f"{p['port']}:{fq}." for p in ports or []
                       if p.get("name") == "http" and p.get("protocol", "TCP") == "TCP"]
                exp[(f"_http._tcp.{fq}", "SRV")] = ("NOERROR", frozenset(srv))
            else:
                exp[(fq, "A")] = ("NOERROR", frozenset(ready.get(name, ())))
        for (service, host), addrs in hosts.items():
            if service in svc:
                exp[(f"{host}.{self.fqdn(service)}", "A")] = ("NOERROR", frozenset(addrs))
        return exp

    def at(self, ms, question):
        """The expected answer at ms (None: not known yet)."""
        value = None
        for t, exp in self.timeline:
            if t > ms:
                break
            value = exp.get(question, ("NXDOMAIN", frozenset()))
        return value

    def became(self, start, end, question, new):
        """When, within [start, end], the expected answer turned into new
        for good (the watch's first sight of the final state)."""
        when, prev = None, self.at(start, question)
        if prev == new:
            when = start
        for t, exp in self.timeline:
            if t <= start or t > end:
                continue
            value = exp.get(question, ("NXDOMAIN", frozenset()))
            if value == new and prev != new:
                when = t
            elif value != new:
                when = None
            prev = value
        return when


def show(value):
    if value is None:
        return "?"
    rcode, recs = value
    if rcode != "NOERROR":
        return rcode
    return ",".join(sorted(recs)) or "(empty)"


# ---- the analysis -----------------------------------------------------------


def analyse(out):
    run = read_kv(os.path.join(out, "run.txt"))
    ns, domain = run.get("namespace", "fresh"), run.get("cluster_domain", "cluster.local")
    cluster_dns = run.get("cluster_dns", "10.96.0.10")
    phases = read_phases(os.path.join(out, "phases.txt"))
    answers = read_answers([os.path.join(out, "answers.txt"), os.path.join(out, "answers-cluster.txt")])
    api = Api(read_watch(os.path.join(out, "watch-services.txt")),
              read_watch(os.path.join(out, "watch-endpointslices.txt")), ns, domain)
    fq = api.fqdn
    results = {"run": run, "phases": phases, "targets": []}
    targets = results["targets"]

    def target(name, ok, detail):
        targets.append({"target": name, "pass": bool(ok), "detail": detail})

    # -- the steady window --
    s0, s1 = phases["steady_start"]["ms"], phases["steady_end"]["ms"]
    upstream_label = f'to="{cluster_dns}:53"'
    steady = {"seconds": (s1 - s0) / 1000, "paths": {}}
    for p in ("A", "B", "C"):
        mstart = os.path.join(out, "metrics", f"{p.lower()}-steady-start.txt")
        mend = os.path.join(out, "metrics", f"{p.lower()}-steady-end.txt")
        fwd = [metric_sum(m, "coredns_proxy_request_duration_seconds_count", upstream_label) for m in (mstart, mend)]
        recv = [metric_sum(m, "coredns_dns_requests_total") for m in (mstart, mend)]
        def delta(name, label=None):
            v = [metric_sum(m, name, label) for m in (mstart, mend)]
            return None if None in v else int(v[1] - v[0])

        row = {
            "to_cluster_dns": None if None in fwd else int(fwd[1] - fwd[0]),
            "prefetches": delta("coredns_cache_prefetch_total"),
            "held_answers": delta("nodens_cache_held_answers_total") if p != "C" else None,
            "received": None if None in recv else int(recv[1] - recv[0]),
            "steady_answers": 0, "steady_wrong": 0, "steady_wrong_examples": [],
            "other_answers": 0, "other_wrong": 0, "steady_timeouts": 0, "other_timeouts": 0,
        }
        for ms, path, name, qtype, rcode, recs in answers:
            if path != p or ms < s0 or ms > s1:
                continue
            want = api.at(ms, (name, qtype))
            ok = want is not None and (rcode, recs) == want
            key = "steady" if name.startswith("steady-") else "other"
            row[f"{key}_answers"] += 1
            if not ok:
                row[f"{key}_wrong"] += 1
                row[f"{key}_timeouts"] += rcode == "TIMEOUT"
                if key == "steady" and len(row["steady_wrong_examples"]) < 5:
                    row["steady_wrong_examples"].append(f"{ms} {name} {rcode} {','.join(sorted(recs))} want {show(want)}")
        steady["paths"][p] = row
    cs = [metric_sum(os.path.join(out, "metrics", f"cluster-steady-{t}.txt"), "coredns_dns_requests_total")
          for t in ("start", "end")]
    steady["cluster_requests"] = None if None in cs else int(cs[1] - cs[0])
    a = steady["paths"]["A"]["to_cluster_dns"]
    c = steady["paths"]["C"]["to_cluster_dns"]
    steady["ratio_a_c"] = (a / c) if a is not None and c else None
    total = sum(steady["paths"][p]["to_cluster_dns"] or 0 for p in ("A", "B", "C"))
    steady["sum_paths"] = total
    if steady["cluster_requests"]:
        steady["sum_vs_cluster"] = (total - steady["cluster_requests"]) / steady["cluster_requests"]
    results["steady"] = steady
    target("steady: A's queries to the cluster DNS <= C's / 10",
           a is not None and c is not None and a <= c * STEADY_RATIO_TARGET,
           f"A {a}, C {c}, A/C {steady['ratio_a_c']:.3f}" if steady["ratio_a_c"] is not None else f"A {a}, C {c}")
    target("steady: every answer of A for a steady name is its ClusterIP",
           steady["paths"]["A"]["steady_answers"] > 0 and steady["paths"]["A"]["steady_wrong"] == 0,
           f"{steady['paths']['A']['steady_wrong']} wrong of {steady['paths']['A']['steady_answers']}")

    # -- the changes --
    scenarios = [
        ("a", "web recreated (new ClusterIP, port 80 -> 8080)",
         [(fq("web"), "A"), (f"_http._tcp.{fq('web')}", "SRV")], "change_a_start", "change_b_start"),
        ("b", "pod db-0 replaced (new pod IP)", [(f"db-0.{fq('db')}", "A")], "change_b_start", "change_c_start"),
        ("c", "Deployment pool scaled 2 -> 3", [(fq("pool"), "A")], "change_c_start", "end"),
    ]
    rows = []
    for sid, title, questions, start_phase, end_phase in scenarios:
        w0, w1 = phases[start_phase]["ms"], phases[end_phase]["ms"]
        for q in questions:
            old, new = api.at(w0, q), api.at(w1, q)
            changed = api.became(w0, w1, q, new)
            row = {"scenario": sid, "title": title, "name": q[0], "type": q[1],
                   "old": show(old), "new": show(new), "api_change_ms": changed,
                   "api_change_after_start_ms": None if changed is None else changed - w0,
                   "window_after_change_ms": None if changed is None else w1 - changed, "paths": {}}
            for p in PATHS:
                got = [x for x in answers if x[1] == p and x[2] == q[0] and x[3] == q[1]
                       and changed is not None and changed <= x[0] <= w1]
                first_ok, wrong, stale, timeouts, wrong_after, last_wrong = None, 0, 0, 0, 0, None
                for ms, _, _, _, rcode, recs in got:
                    ok = (rcode, recs) == new
                    if ok and first_ok is None:
                        first_ok = ms - changed
                    if not ok:
                        wrong += 1
                        last_wrong = ms - changed
                        if rcode == "TIMEOUT":
                            timeouts += 1
                        elif old is not None and (rcode, recs) == old:
                            stale += 1
                        if first_ok is not None:
                            wrong_after += 1
                last = got[-1] if got else None
                row["paths"][p] = {
                    "answers": len(got), "first_correct_ms": first_ok, "wrong": wrong,
                    "stale": stale, "timeouts": timeouts, "wrong_after_first_correct": wrong_after,
                    "last_wrong_ms": last_wrong,
                    "last": None if last is None else f"{last[4]} {','.join(sorted(last[5])) or '-'}",
                }
            rows.append(row)
            pa = row["paths"]["A"]
            # With kubeadm's Corefile the cluster DNS caches its own answers:
            # nothing asking it can be fresher, so A is judged against it.
            bound, since = FIRST_CORRECT_TARGET_MS, "the API change"
            ref = row["paths"].get("cluster", {}).get("first_correct_ms")
            if run.get("cluster_cache") == "kubeadm" and ref is not None:
                bound = max(bound, ref + FIRST_CORRECT_TARGET_MS)
                since = f"the API change, or of the cluster DNS's own first correct answer ({ref} ms)"
            target(f"({sid}) {q[0]} {q[1]}: A's first correct answer within {FIRST_CORRECT_TARGET_MS} ms of {since}",
                   pa["first_correct_ms"] is not None and pa["first_correct_ms"] <= bound,
                   f"{pa['first_correct_ms']} ms" if pa["first_correct_ms"] is not None else
                   f"never in {row['window_after_change_ms']} ms (last: {pa['last']})")
            target(f"({sid}) {q[0]} {q[1]}: no wrong answer from A after its first correct one",
                   pa["first_correct_ms"] is not None and pa["wrong_after_first_correct"] == 0,
                   f"{pa['wrong_after_first_correct']} wrong after the first correct")
    results["changes"] = rows
    checks = []
    for key in ("change_a_done", "change_b_done"):
        if key in phases:
            checks.append({key: phases[key]})
    results["checks"] = checks
    results["pass"] = all(t["pass"] for t in targets)

    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    md = markdown(results)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if results["pass"] else 1


def fmt(v, unit=""):
    return "-" if v is None else f"{v}{unit}"


def markdown(r):
    run, st = r["run"], r["steady"]
    lines = [
        f"# follow-api: cluster cache `{run.get('cluster_cache')}`, hold_past_ttl `{run.get('hold')}`, "
        f"prefetch_min_hits `{run.get('prefetch_min_hits', 'default')}`",
        "",
        f"{run.get('nodens_version', '')}; {run.get('coredns', '')}; Kubernetes {run.get('k8s', '')}, "
        f"kube-proxy {run.get('proxy_mode', '')}, {run.get('nodes', '1')} node(s)"
        + (" (db-0 and pool on the second)." if run.get("nodes") == "2" else "."),
        "",
        f"## Steady window ({st['seconds']:.0f} s, no API change)",
        "",
        "| path | queries to the cluster DNS | prefetches | held answers | queries received | steady answers | wrong (timeouts) | other answers | wrong (timeouts) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in ("A", "B", "C"):
        row = st["paths"][p]
        lines.append(f"| {p}: {PATHS[p]} | {fmt(row['to_cluster_dns'])} | {fmt(row['prefetches'])} | "
                     f"{fmt(row['held_answers'])} | {fmt(row['received'])} | "
                     f"{row['steady_answers']} | {row['steady_wrong']} ({row['steady_timeouts']}) | {row['other_answers']} | "
                     f"{row['other_wrong']} ({row['other_timeouts']}) |")
    ratio = "-" if st["ratio_a_c"] is None else f"{st['ratio_a_c']:.3f}"
    diff = st.get("sum_vs_cluster")
    lines += [
        "",
        f"A/C = {ratio} (target <= {STEADY_RATIO_TARGET}). A+B+C = {st['sum_paths']}; the cluster CoreDNS counted "
        f"{fmt(st['cluster_requests'])} requests"
        + ("" if diff is None else f" ({diff * 100:+.1f} %)") + ".",
        "",
        "## Changes",
        "",
        "Times in ms from the API change (the node's watch first showing the final state). "
        "wrong: answers after the API change that were not the new state (stale: the old answer; "
        "timeouts: no answer within the 100 ms tick); after 1st: wrong answers after the path's first correct one; "
        "last wrong: the last wrong answer's time.",
        "",
        "| change | question | API change (ms after start) | path | first correct | wrong (stale, timeouts) | after 1st | last wrong | last answer |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in r["changes"]:
        short = row["name"].split(".svc.")[0]
        for p, pr in row["paths"].items():
            lines.append(
                f"| ({row['scenario']}) | {short} {row['type']} | {fmt(row['api_change_after_start_ms'])} | {p} | "
                f"{fmt(pr['first_correct_ms'])} | {pr['wrong']} ({pr['stale']}, {pr['timeouts']}) | {pr['wrong_after_first_correct']} | "
                f"{fmt(pr['last_wrong_ms'])} | {pr['last'] or '-'} |")
    lines += ["", "Old and new answers:", ""]
    for row in r["changes"]:
        lines.append(f"- ({row['scenario']}) {row['name']} {row['type']}: {row['old']} -> {row['new']} "
                     f"(answers judged for {fmt(row['window_after_change_ms'])} ms after the change)")
    for c in r["checks"]:
        for k, v in c.items():
            lines.append(f"- {k}: " + " ".join(f"{a}={b}" for a, b in v.items() if a != "ms"))
    lines += ["", "## Targets (path A)", ""]
    for t in r["targets"]:
        lines.append(f"- {'PASS' if t['pass'] else 'FAIL'} {t['target']}: {t['detail']}")
    lines += ["", f"**{'PASS' if r['pass'] else 'FAIL'}**", ""]
    return "\n".join(lines)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "stamp" and sys.argv[3] == "--":
        stamp(sys.argv[2], sys.argv[4:])
    elif len(sys.argv) == 3 and sys.argv[1] == "analyse":
        sys.exit(analyse(sys.argv[2]))
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
