"""Round 1: a malformed flood over UDP (bounded count and rate) and TCP.

Each kind of bad input goes out from a socket of its own, so replies are
counted per kind without parsing what was sent. Afterwards nodens must be
alive and answer a good query over UDP and TCP.
"""

import argparse
import os
import random
import select
import selectors
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnslib import (Reply, Results, metric, query, rss_kib, scrape, series, tcp_ask,
                    udp_ask, ms)

rng = random.Random(0xAB05E)
NAMES = ["www.lab.test", "a.b.c.lab.test", "kubernetes.default.svc.cluster.local",
         "example.org", "x" * 60 + ".lab.test"]


def good(name=None):
    return bytearray(query(name or rng.choice(NAMES), rng.choice([1, 28, 16, 15, 33]),
                           edns=rng.choice([None, 512, 1232, 4096]),
                           qid=rng.randrange(65536)))


def k_random():
    return os.urandom(rng.choice([0, 1, 5, 11, 12, 13, 20, 40, 100, 300, 512, 1400]))


def k_mutated():
    m = good()
    for _ in range(rng.randint(1, 4)):
        if not m:
            break
        op = rng.random()
        i = rng.randrange(len(m))
        if op < 0.5:
            m[i] = rng.randrange(256)
        elif op < 0.7:
            m.insert(i, rng.randrange(256))
        elif op < 0.85:
            del m[i]
        else:
            m = m[:i]
    if len(m) > 2:
        m[2] &= 0x7F  # keep QR clear: mutations should reach the parser
    return bytes(m)


def k_opcode():
    m = good()
    m[2] = (m[2] & 0x87) | (rng.randint(1, 15) << 3)
    return bytes(m)


def k_counts():
    m = good()
    counts = [rng.choice([0, 2, 3, 255, 65535, rng.randrange(65536)]) for _ in range(4)]
    if rng.random() < 0.5:
        counts[0] = 1
    m[4:12] = struct.pack(">HHHH", *counts)
    return bytes(m)


def k_names():
    hdr = struct.pack(">HHHHHH", rng.randrange(65536), 0x0100, 1, 0, 0, 0)
    choice = rng.randrange(7)
    if choice == 0:  # name cut in the middle of a label
        qn = b"\x03www\x03lab\x04te"
    elif choice == 1:  # label longer than what follows
        qn = b"\x3fabc"
    elif choice == 2:  # compression pointer in the question
        qn = b"\x03www\xc0\x0c\x00\x01\x00\x01"
    elif choice == 3:  # pointer to itself
        qn = b"\xc0\x0c\x00\x01\x00\x01"
    elif choice == 4:  # over 255 octets
        qn = (b"\x3f" + b"a" * 63) * 5 + b"\x00\x00\x01\x00\x01"
    elif choice == 5:  # reserved label types 01 and 10
        qn = bytes([rng.choice([0x41, 0x80, 0x7F])]) + b"abc\x00\x00\x01\x00\x01"
    else:  # name but no type/class
        qn = b"\x03www\x03lab\x04test\x00\x00"
    return hdr + qn


def k_responses():
    m = good()
    m[2] |= 0x80  # QR: must never be answered (loops)
    return bytes(m)


KINDS = [("random bytes", k_random), ("mutated queries", k_mutated),
         ("bad opcodes", k_opcode), ("odd counts", k_counts),
         ("truncated/bad names", k_names), ("responses (QR=1)", k_responses)]


def udp_flood(server, total, rate, seconds_cap):
    socks, sent, replies = [], [], []
    for _ in KINDS:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.30", 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setblocking(False)
        socks.append(s)
        sent.append(0)
        replies.append({})
    fd_kind = {s.fileno(): i for i, s in enumerate(socks)}

    def drain():
        r, _, _ = select.select(socks, [], [], 0)
        for s in r:
            k = fd_kind[s.fileno()]
            while True:
                try:
                    data = s.recv(65535)
                except BlockingIOError:
                    break
                except ConnectionRefusedError:
                    continue
                rc = Reply(data).rcode_name if len(data) >= 12 else "short"
                replies[k][rc] = replies[k].get(rc, 0) + 1

    t0 = time.monotonic()
    n = 0
    batch = 200
    while n < total and time.monotonic() - t0 < seconds_cap:
        for _ in range(batch):
            k = n % len(KINDS)
            pkt = KINDS[k][1]()
            try:
                socks[k].sendto(pkt, server)
                sent[k] += 1
            except (BlockingIOError, ConnectionRefusedError):
                pass
            n += 1
        drain()
        ahead = n / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
    elapsed = time.monotonic() - t0
    end = time.monotonic() + 5
    while time.monotonic() < end:
        drain()
        time.sleep(0.05)
    for s in socks:
        s.close()
    return sent, replies, elapsed


def tcp_flood(server, conns, per_conn, idle=1.5):
    """Malformed messages, well framed and pipelined, on `conns` connections
    at once; each is read until every message has a reply, nodens closes it,
    or nothing came for `idle` s (some inputs are dropped without a reply).
    Then a few bad framings, which nodens must close within its read timeout."""
    sel = selectors.DefaultSelector()
    state = {}
    sent = got = 0
    rcodes = {}
    for c in range(conns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Four source addresses: under tcp_max_connections_per_client (64).
        s.bind((f"127.0.0.{31 + c % 4}", 0))
        s.settimeout(3)
        try:
            s.connect(server)
        except OSError:
            s.close()
            continue
        msgs = []
        for i in range(per_conn):
            m = KINDS[(c + i) % (len(KINDS) - 1)][1]()  # no QR=1 over TCP
            if m:
                msgs.append(struct.pack(">H", len(m)) + m)
        try:
            s.sendall(b"".join(msgs))
        except OSError:
            pass
        s.setblocking(False)
        sent += len(msgs)
        state[s] = {"sent": len(msgs), "got": 0, "buf": b"", "last": time.monotonic()}
        sel.register(s, selectors.EVENT_READ)
    ends = {"all replies": 0, "closed by nodens": 0, "idle (no more replies)": 0}
    deadline = time.monotonic() + 60
    while state and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            st = state[s]
            try:
                chunk = s.recv(65535)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                ends["closed by nodens"] += 1
                sel.unregister(s); s.close(); del state[s]
                continue
            st["last"] = time.monotonic()
            buf = st["buf"] + chunk
            while len(buf) >= 2 and len(buf) >= 2 + struct.unpack(">H", buf[:2])[0]:
                ln = struct.unpack(">H", buf[:2])[0]
                rc = Reply(buf[2:2 + ln]).rcode_name if ln >= 12 else "short"
                rcodes[rc] = rcodes.get(rc, 0) + 1
                st["got"] += 1
                got += 1
                buf = buf[2 + ln:]
            st["buf"] = buf
            if st["got"] >= st["sent"]:
                ends["all replies"] += 1
                sel.unregister(s); s.close(); del state[s]
        now = time.monotonic()
        for s in [s for s, st in state.items() if now - st["last"] > idle]:
            ends["idle (no more replies)"] += 1
            sel.unregister(s); s.close(); del state[s]
    for s in list(state):
        s.close()
    # Bad framings, at once: a zero length (a whole, empty message: dropped,
    # then the connection is idle), a length longer than what is sent (never
    # whole: the read timeout).
    framings = [None] * 3

    def frame_probe(i, framing):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(14)
        t0 = time.monotonic()
        try:
            s.connect(server)
            s.sendall(framing)
            data = s.recv(10)
            framings[i] = ("closed" if not data else "replied", time.monotonic() - t0)
        except OSError as e:
            framings[i] = (type(e).__name__, time.monotonic() - t0)
        finally:
            s.close()
    ts = [threading.Thread(target=frame_probe, args=(i, f)) for i, f in
          enumerate((b"\x00\x00", b"\x00\x05abc", b"\xff\xff" + b"\x00" * 100))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sent, got, rcodes, ends, framings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=53)
    ap.add_argument("--metrics", default="http://127.0.0.1:9253/metrics")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--packets", type=int, default=200000)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--tcp-conns", type=int, default=100)
    ap.add_argument("--tcp-per-conn", type=int, default=30)
    ap.add_argument("--results", required=True)
    a = ap.parse_args()
    server = (a.server, a.port)
    res = Results(a.results, 1, "Malformed flood")

    r, _, _ = udp_ask(server, query("www.lab.test"))
    rss0 = rss_kib(a.pid)
    m0 = scrape(a.metrics)
    cap = a.packets / a.rate * 3 + 30
    sent, replies, elapsed = udp_flood(server, a.packets, a.rate, cap)
    tsent, tgot, trcodes, tends, tframings = tcp_flood(server, a.tcp_conns, a.tcp_per_conn)
    time.sleep(1)
    alive = os.path.exists(f"/proc/{a.pid}")
    rss1 = rss_kib(a.pid) if alive else 0
    m1 = scrape(a.metrics) if alive else {}

    total_sent = sum(sent)
    total_replies = sum(sum(x.values()) for x in replies)
    res.row("UDP packets sent", f"{total_sent} in {elapsed:.1f} s ({total_sent / elapsed:.0f}/s)")
    for (name, _), s, rp in zip(KINDS, sent, replies):
        codes = ", ".join(f"{k} {v}" for k, v in sorted(rp.items(), key=lambda kv: -kv[1])) or "none"
        res.row(f"  {name}: sent {s}", f"replies {sum(rp.values())} ({codes}); no reply {s - sum(rp.values())}")
    qr = replies[-1]
    res.row("replies to responses (QR=1)", sum(qr.values()), sum(qr.values()) == 0, "0: never answer a response")
    all_codes = {}
    for rp in replies:
        for k, v in rp.items():
            all_codes[k] = all_codes.get(k, 0) + v
    res.row("UDP replies by rcode", ", ".join(f"{k} {v}" for k, v in sorted(all_codes.items(), key=lambda kv: -kv[1])))
    res.row("UDP dropped (no reply)", f"{total_sent - total_replies} of {total_sent}")
    res.row("TCP malformed messages", f"sent {tsent} on {a.tcp_conns} connections, replies {tgot} ("
            + ", ".join(f"{k} {v}" for k, v in sorted(trcodes.items(), key=lambda kv: -kv[1]))
            + "); connections ended: " + ", ".join(f"{k} {v}" for k, v in tends.items()))
    (z_how, z_t), (s_how, s_t), (l_how, l_t) = tframings
    res.row("TCP frame of length 0 (a whole, empty message), then silence", f"{z_how} after {z_t:.1f} s",
            z_how == "closed" and z_t <= 12, "closed by the 10 s idle timeout")
    res.row("TCP frames never completed (length 5 with 3 sent; 65535 with 100 sent)",
            f"{s_how} after {s_t:.1f} s; {l_how} after {l_t:.1f} s",
            s_how == l_how == "closed" and max(s_t, l_t) <= 3.5, "closed by the 2 s read timeout")
    if m1:
        rej0, rej1 = series(m0, "nodens_rejected_queries_total"), series(m1, "nodens_rejected_queries_total")
        deltas = []
        for k, v in sorted(rej1.items(), key=lambda kv: -(kv[1] - rej0.get(kv[0], 0))):
            d = v - rej0.get(k, 0)
            if d:
                deltas.append(f"{dict(k).get('reason')} {d:.0f}")
        res.row("nodens_rejected_queries_total (delta)", "; ".join(deltas) or "none")
        res.row("upstream answers (coredns_dns_responses_total delta)",
                f"{metric(m1, 'coredns_dns_responses_total') - metric(m0, 'coredns_dns_responses_total'):.0f}")

    res.row("nodens alive after the flood", "yes" if alive else "NO (exited)", alive, "yes")
    if alive:
        ok_udp = ok_tcp = False
        for _ in range(3):
            r, dt, _ = udp_ask(server, query("www.lab.test"), timeout=2)
            ok_udp = bool(r and r.a() == ["192.0.2.1"])
            if ok_udp:
                break
        res.row("good query after the flood (UDP)", f"{r.rcode_name if r else 'no reply'} {r.a() if r else ''} in {ms(dt)}",
                ok_udp, "NOERROR 192.0.2.1")
        r, dt, err = tcp_ask(server, query("www.lab.test"), timeout=3)
        ok_tcp = bool(r and r.a() == ["192.0.2.1"])
        res.row("good query after the flood (TCP)", f"{r.rcode_name if r else err} {r.a() if r else ''} in {ms(dt)}",
                ok_tcp, "NOERROR 192.0.2.1")
        res.row("RSS before / after", f"{rss0 / 1024:.1f} MiB / {rss1 / 1024:.1f} MiB")
    # Error replies keep the client's OPT (RFC 6891 section 7).
    base = query("www.lab.test", edns=1232)
    notify = bytearray(base)
    notify[2] = (notify[2] & 0x87) | (4 << 3)
    noq = bytearray(base[:12]) + base[-11:]
    noq[4:6] = b"\x00\x00"
    for what, pkt, want in (("NOTIFY with OPT", bytes(notify), 4), ("QDCOUNT 0 with OPT", bytes(noq), 1)):
        r, dt, _ = udp_ask(server, pkt, timeout=2) if alive else (None, 0, None)
        ok = bool(r and r.rcode == want and r.opt)
        res.row(f"{what}", f"{r.rcode_name + (' with OPT' if r.opt else ' WITHOUT OPT') if r else 'no reply'}",
                ok, f"{'NOTIMP' if want == 4 else 'FORMERR'} with OPT")
    sys.exit(0 if res.save() else 1)


if __name__ == "__main__":
    main()
