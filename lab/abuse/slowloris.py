"""Round 2: TCP slowloris.

Attacker A (one source address) keeps TRICKLE connection slots, each sending
one byte of a query every 4 s; attacker B (a second address) keeps SILENT
slots that say nothing. A slot whose connection is closed reconnects after
RECONNECT seconds, so the attack lasts the whole run. Meanwhile client C (a
third address) makes one TCP query every 500 ms. `ss` counts the
connections established on nodens's port, per source address.
"""

import argparse
import os
import selectors
import socket
import struct
import subprocess
import sys
import multiprocessing
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnslib import Results, metric, ms, pct, query, scrape, tcp_ask

MESSAGE = (lambda q: struct.pack(">H", len(q)) + q)(query("www.lab.test", qid=7))


class Slot:
    __slots__ = ("sock", "kind", "opened", "next_byte", "sent", "reopen_at")

    def __init__(self, kind):
        self.kind, self.sock, self.opened, self.next_byte, self.sent, self.reopen_at = kind, None, 0, 0, 0, 0


def attack(server, sources, counts, duration, trickle_every, reconnect, stats, stop):
    sel = selectors.DefaultSelector()
    slots = [Slot(k) for k, n in zip(("A", "B"), counts) for _ in range(n)]
    src = dict(zip(("A", "B"), sources))
    lifetimes = {"A": [], "B": []}
    opened = {"A": 0, "B": 0}
    connect_failed = {"A": 0, "B": 0}
    t_end = time.monotonic() + duration

    def open_slot(s):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.bind((src[s.kind], 0))
        try:
            sock.connect(server)
        except BlockingIOError:
            pass
        except OSError:
            sock.close()
            connect_failed[s.kind] += 1
            s.reopen_at = time.monotonic() + reconnect
            return
        s.sock, s.opened, s.sent = sock, time.monotonic(), 0
        s.next_byte = s.opened if s.kind == "A" else float("inf")
        sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, s)

    def close_slot(s, now, closed_by_server):
        try:
            sel.unregister(s.sock)
        except (KeyError, ValueError):
            pass
        s.sock.close()
        if closed_by_server:
            lifetimes[s.kind].append(now - s.opened)
        s.sock = None
        s.reopen_at = now + reconnect

    for s in slots:
        open_slot(s)
    while not stop.is_set():
        now = time.monotonic()
        if now >= t_end:
            break
        for key, ev in sel.select(timeout=0.05):
            s = key.data
            if s.sock is None:
                continue
            if ev & selectors.EVENT_WRITE:
                err = s.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    connect_failed[s.kind] += 1
                    close_slot(s, time.monotonic(), False)
                    continue
                opened[s.kind] += 1
                s.opened = time.monotonic()
                sel.modify(s.sock, selectors.EVENT_READ, s)
            if ev & selectors.EVENT_READ:
                try:
                    data = s.sock.recv(4096)
                except (ConnectionResetError, OSError):
                    data = b""
                if not data:
                    close_slot(s, time.monotonic(), True)
        now = time.monotonic()
        for s in slots:
            if s.sock is None:
                if reconnect >= 0 and now >= s.reopen_at:
                    open_slot(s)
            elif s.kind == "A" and now >= s.next_byte:
                try:
                    s.sock.send(MESSAGE[s.sent % len(MESSAGE):s.sent % len(MESSAGE) + 1])
                    s.sent += 1
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    close_slot(s, now, True)
                    continue
                s.next_byte = now + trickle_every
    now = time.monotonic()
    still = {"A": 0, "B": 0}
    for s in slots:
        if s.sock is not None:
            still[s.kind] += 1
            lifetimes[s.kind + "_open"] = lifetimes.get(s.kind + "_open", []) + [now - s.opened]
            close_slot(s, now, False)
    stats.put(dict(lifetimes=lifetimes, opened=opened, connect_failed=connect_failed, still_open=still))


def ss_sample(port):
    """{peer address: [accepted, waiting]} of connections established on
    nodens's port. A socket still in the accept queue has no inode (ino:0):
    the kernel completed the handshake, nodens has not accepted it yet."""
    out = subprocess.run(["ss", "-Htne", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, timeout=10).stdout
    per = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) < 4:
            continue
        peer = f[3].rsplit(":", 1)[0]
        ino = next((x[4:] for x in f if x.startswith("ino:")), "0")
        c = per.setdefault(peer, [0, 0])
        c[0 if ino != "0" else 1] += 1
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=53)
    ap.add_argument("--metrics", default="http://127.0.0.1:9253/metrics")
    ap.add_argument("--attacker-a", default="127.0.0.11")
    ap.add_argument("--attacker-b", default="127.0.0.12")
    ap.add_argument("--client", default="127.0.0.20")
    ap.add_argument("--trickle", type=int, default=1024)
    ap.add_argument("--silent", type=int, default=200)
    ap.add_argument("--secs", type=float, default=30)
    ap.add_argument("--reconnect", type=float, default=1.0)
    ap.add_argument("--read-timeout", type=float, default=2.0)
    ap.add_argument("--per-client", type=int, default=64)
    ap.add_argument("--results", required=True)
    a = ap.parse_args()
    server = (a.server, a.port)
    res = Results(a.results, 2, "TCP slowloris")

    m0 = scrape(a.metrics)
    # The attacker is a process of its own: the legitimate client's latency
    # is not measured through the attacker's interpreter lock.
    stop = multiprocessing.Event()
    stats_q = multiprocessing.Queue()
    at = multiprocessing.Process(target=attack, args=(server, (a.attacker_a, a.attacker_b),
                                                (a.trickle, a.silent), a.secs + 2, 4.0,
                                                a.reconnect, stats_q, stop))
    at.start()
    time.sleep(1.0)  # the first wave connects

    # Sampler: ss and nodens's own gauge.
    samples = []
    gauge = []

    def sampler():
        while not stop.is_set():
            try:
                samples.append(ss_sample(a.port))
                gauge.append(metric(scrape(a.metrics), "nodens_tcp_client_connections"))
            except Exception:  # a sample missed is not a result
                pass
            time.sleep(0.25)
    st = threading.Thread(target=sampler, daemon=True)
    st.start()

    lat, fails = [], []
    t_end = time.monotonic() + a.secs
    n = 0
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        r, dt, err = tcp_ask(server, query("www.lab.test", qid=n & 0xFFFF), source=a.client, timeout=2.0)
        if r is not None and r.a() == ["192.0.2.1"]:
            lat.append(dt)
        else:
            fails.append(err or (r.rcode_name if r else "?"))
        n += 1
        time.sleep(max(0, 0.5 - (time.monotonic() - t0)))
    stop.set()
    stats = stats_q.get(timeout=30)
    at.join(timeout=10)
    st.join(timeout=5)
    m1 = scrape(a.metrics)

    lt = stats["lifetimes"]
    peak = lambda f: max((f(s) for s in samples), default=0)
    acc_total = peak(lambda s: sum(v[0] for v in s.values()))
    all_total = peak(lambda s: sum(sum(v) for v in s.values()))
    res.row("attack", f"A {a.attacker_a}: {a.trickle} slots trickling 1 byte/4 s; B {a.attacker_b}: {a.silent} silent slots; "
            f"reconnect {a.reconnect:.1f} s after a close; {a.secs:.0f} s")
    res.row("connections opened (handshake done)", f"A {stats['opened']['A']}, B {stats['opened']['B']}; "
            f"connect failures A {stats['connect_failed']['A']}, B {stats['connect_failed']['B']}")
    res.row("ss samples (every 250 ms)", len(samples))
    res.row("peak established on :53 (ss), all peers", f"{all_total}, of which accepted by nodens {acc_total}")
    for who, addr, cnt in (("A", a.attacker_a, a.trickle), ("B", a.attacker_b, a.silent)):
        acc = peak(lambda s: s.get(addr, [0, 0])[0])
        est = peak(lambda s: sum(s.get(addr, [0, 0])))
        res.row(f"peak from {who} ({cnt} tried): accepted by nodens / established incl. accept queue",
                f"{acc} / {est}", acc <= a.per_client + 4,
                f"accepted <= {a.per_client} per client, +4 for a sample that catches a connection "
                "accepted over the cap and being closed")
    g = max(gauge, default=0)
    res.row("peak nodens_tcp_client_connections", f"{g:.0f}", g <= 2 * a.per_client + 2,
            f"<= {2 * a.per_client} (two attackers at the cap) + 2")
    for k, who in (("A", "trickling"), ("B", "silent")):
        v = lt[k]
        quick = sum(1 for x in v if x < 0.5)
        rt = [x for x in v if x >= 0.5]
        longest = max(v, default=0)
        res.row(f"{who} connections closed by nodens", f"{len(v)}: {quick} within 0.5 s (cap), "
                f"{len(rt)} after {pct(rt, 50):.2f} s median / {max(rt, default=0):.2f} s max" if rt else
                f"{len(v)}: {quick} within 0.5 s (cap)")
        res.row(f"longest {who} connection", f"{longest:.2f} s", longest <= a.read_timeout + 1.5,
                f"<= read timeout {a.read_timeout:.0f} s + 1.5")
        still = stats["still_open"][k]
        oldest = max(lt.get(k + "_open", []), default=0)
        res.row(f"{who} connections open when the attack stopped", f"{still}, oldest {oldest:.2f} s",
                oldest <= a.read_timeout + 1.5, f"<= read timeout {a.read_timeout:.0f} s + 1.5")
    total = len(lat) + len(fails)
    res.row("legitimate TCP queries answered", f"{len(lat)}/{total}" + (f" (failures: {', '.join(sorted(set(fails)))})" if fails else ""),
            len(lat) == total and total > 0, "all")
    if lat:
        res.row("legitimate latency p50 / p99 / max", f"{ms(pct(lat, 50))} / {ms(pct(lat, 99))} / {ms(max(lat))}",
                max(lat) < 1.0, "max < 1 s")
    for reason in ("read_timeout", "per_client_limit", "idle"):
        d = metric(m1, "nodens_tcp_client_closed_total", reason=reason) - metric(m0, "nodens_tcp_client_closed_total", reason=reason)
        res.row(f"nodens_tcp_client_closed_total{{reason=\"{reason}\"}} delta", f"{d:.0f}")
    d = metric(m1, "nodens_tcp_client_rejected_total") - metric(m0, "nodens_tcp_client_rejected_total")
    res.row("nodens_tcp_client_rejected_total delta", f"{d:.0f}")
    sys.exit(0 if res.save() else 1)


if __name__ == "__main__":
    main()
