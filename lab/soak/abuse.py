#!/usr/bin/env python3
"""Abusive clients of a DNS server, all bounded in number, rate and time.

  trickle    --trickle TCP connections from --trickle-src, each sending a
             well-formed query one byte every --trickle-interval seconds
             (below the server's idle timeout, so that an idle timer alone
             never fires); after the last byte it waits up to 10 s for the
             answer and starts the next query on the same connection. A
             connection the server closes is re-opened after 1 s.
  silent     --silent TCP connections from --silent-src that send nothing.
             Each waits for the server to close it (at most --silent-max
             seconds, then closes it itself), and is re-opened after 1 s.
  malformed  --malformed-qps UDP datagrams a second from --malformed-src,
             in rotation: random bytes, headers cut short, a question cut
             short, opcodes 1-15, classes 0/3/4/254/255, QR=1 (a response),
             QDCOUNT 0 and 2, a compression loop in the question, EDNS
             version 1, two OPT records, AXFR/IXFR/MAILA/MAILB/OPT as
             type. Answers are read and counted by kind and rcode.

Writes one JSON line per --report-every seconds (counters so far) to --out,
and a final JSON summary (--summary): per kind, what the server did. Stops
after --duration seconds or on SIGTERM/SIGINT, closing every socket.
"""
import argparse
import asyncio
import json
import os
import random
import resource
import signal
import socket
import struct
import sys
import time

RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED", 16: "BADVERS"}


def rcode_of(m):
    """The full rcode: the header's 4 bits, and the OPT record's upper 8
    bits when there is one (BADVERS is 16: NOERROR in the header alone)."""
    if len(m) < 12:
        return "short"
    rc = m[3] & 0xF
    try:
        qd, an, ns, ar = struct.unpack(">HHHH", m[4:12])
        i = 12

        def skip(i):
            while m[i] != 0:
                if m[i] & 0xC0 == 0xC0:
                    return i + 2
                i += 1 + m[i]
            return i + 1
        for _ in range(qd):
            i = skip(i) + 4
        for _ in range(an + ns + ar):
            i = skip(i)
            rtype, _, ttl, rdlen = struct.unpack(">HHIH", m[i:i + 10])
            if rtype == 41:
                rc |= (ttl >> 24) << 4
            i += 10 + rdlen
    except (IndexError, struct.error):
        pass
    return RCODES.get(rc, str(rc))


def qname(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def query(name, qtype=1, qclass=1, opcode=0, qid=None, flags_extra=0, qdcount=1, arcount=0, tail=b""):
    qid = random.getrandbits(16) if qid is None else qid
    flags = (opcode << 11) | 0x0100 | flags_extra   # RD
    hdr = struct.pack(">HHHHHH", qid, flags, qdcount, 0, 0, arcount)
    return hdr + qname(name) + struct.pack(">HH", qtype, qclass) + tail


def opt(version=0, udp=1232):
    # root owner, TYPE OPT, CLASS = UDP size, TTL = ext-rcode|version|flags, RDLEN 0
    return b"\0" + struct.pack(">HHBBHH", 41, udp, 0, version, 0, 0)


STOPPING = False   # set on SIGTERM/SIGINT: every loop checks it, not only cancellation


def running(deadline):
    return not STOPPING and time.monotonic() < deadline


class Stats:
    def __init__(self):
        self.c = {}

    def inc(self, key, n=1):
        self.c[key] = self.c.get(key, 0) + n

    def maxv(self, key, v):
        if v > self.c.get(key, float("-inf")):
            self.c[key] = round(v, 3)


def malformed_kinds(names):
    """(kind, generator) pairs; each generator returns one datagram."""
    pick = lambda: random.choice(names)

    def compression_loop():
        hdr = struct.pack(">HHHHHH", random.getrandbits(16), 0x0100, 1, 0, 0, 0)
        return hdr + b"\xc0\x0c" + struct.pack(">HH", 1, 1)    # name points at itself

    return [
        ("random_bytes", lambda: os.urandom(random.randint(0, 512))),
        ("short_header", lambda: os.urandom(random.randint(1, 11))),
        ("cut_question", lambda: query(pick())[:random.randint(13, 20)]),
        ("bad_opcode", lambda: query(pick(), opcode=random.randint(1, 15))),
        ("class_0", lambda: query(pick(), qclass=0)),
        ("class_3_chaos", lambda: query(pick(), qclass=3)),
        ("class_4_hesiod", lambda: query(pick(), qclass=4)),
        ("class_254_none", lambda: query(pick(), qclass=254)),
        ("class_255_any", lambda: query(pick(), qclass=255)),
        ("qr_response", lambda: query(pick(), flags_extra=0x8000)),
        ("qdcount_0", lambda: struct.pack(">HHHHHH", random.getrandbits(16), 0x0100, 0, 0, 0, 0)),
        ("qdcount_2", lambda: query(pick(), qdcount=2)),
        ("compression_loop", compression_loop),
        ("edns_version_1", lambda: query(pick(), arcount=1, tail=opt(version=1))),
        ("two_opt", lambda: query(pick(), arcount=2, tail=opt() + opt())),
        ("axfr", lambda: query("soak.test", qtype=252)),
        ("ixfr", lambda: query("soak.test", qtype=251)),
        ("maila", lambda: query(pick(), qtype=254)),
        ("opt_qtype", lambda: query(pick(), qtype=41)),
    ]


async def malformed(args, stats, deadline, names):
    kinds = malformed_kinds(names)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((args.malformed_src, 0))
    sock.setblocking(False)
    sent_kind = {}   # id -> kind, for the answers that echo it
    tick = 0.02
    per_tick = args.malformed_qps * tick
    owed = 0.0
    i = 0
    t_next = time.monotonic()
    try:
        while running(deadline):
            owed += per_tick
            while owed >= 1:
                owed -= 1
                kind, gen = kinds[i % len(kinds)]
                i += 1
                pkt = gen()
                if len(pkt) >= 2:
                    sent_kind[pkt[:2]] = kind
                    if len(sent_kind) > 4096:
                        sent_kind.pop(next(iter(sent_kind)))
                try:
                    sock.sendto(pkt, (args.server, args.port))
                    stats.inc(f"udp.{kind}.sent")
                except OSError as e:
                    stats.inc(f"udp.send_error.{e.errno}")
            while True:
                try:
                    data = sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as e:   # ICMP errors (server gone) surface here
                    stats.inc(f"udp.recv_error.{e.errno}")
                    break
                kind = sent_kind.get(data[:2], "unknown") if len(data) >= 2 else "runt"
                rc = rcode_of(data)
                stats.inc(f"udp.{kind}.answer.{rc}")
            t_next += tick
            await asyncio.sleep(max(0.0, t_next - time.monotonic()))
    finally:
        sock.close()


async def open_conn(args, src):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.bind((src, 0))
    try:
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (args.server, args.port)), 5)
    except BaseException:
        sock.close()
        raise
    return sock


async def recv_or_close(sock, timeout):
    """Bytes, b"" on EOF, None on timeout; raises on reset."""
    try:
        return await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 4096), timeout)
    except asyncio.TimeoutError:
        return None


async def trickle_client(args, stats, deadline, names, k):
    loop = asyncio.get_running_loop()
    await asyncio.sleep(k * args.trickle_interval / max(1, args.trickle))   # spread the first bytes
    while running(deadline):
        try:
            sock = await open_conn(args, args.trickle_src)
        except (OSError, asyncio.TimeoutError) as e:
            stats.inc(f"trickle.connect_failed.{type(e).__name__}")
            await asyncio.sleep(1)
            continue
        stats.inc("trickle.connections")
        t_open = time.monotonic()
        closed_by = None
        try:
            while running(deadline) and closed_by is None:
                q = query(random.choice(names))
                msg = struct.pack(">H", len(q)) + q
                t_msg = time.monotonic()
                for j in range(len(msg)):
                    try:
                        await loop.sock_sendall(sock, msg[j:j + 1])
                        stats.inc("trickle.bytes_sent")
                    except OSError:
                        closed_by = "server_send_error"
                        break
                    # The server may close while we dawdle: notice it between bytes.
                    end = min(deadline, time.monotonic() + args.trickle_interval)
                    got = await recv_or_close(sock, max(0.0, end - time.monotonic()))
                    if got == b"":
                        closed_by = "server_eof"
                        stats.inc("trickle.closed_mid_message")
                        stats.maxv("trickle.max_bytes_before_close", j + 1)
                        break
                    if got:
                        stats.inc("trickle.unexpected_data")
                    if not running(deadline):
                        closed_by = "deadline"
                        break
                else:
                    stats.maxv("trickle.max_message_secs", time.monotonic() - t_msg)
                    stats.inc("trickle.messages_completed")
                    got = await recv_or_close(sock, min(10.0, max(0.0, deadline - time.monotonic())))
                    if got:
                        stats.inc("trickle.answers")
                    elif got == b"":
                        closed_by = "server_eof"
        except (ConnectionResetError, BrokenPipeError):
            closed_by = "server_reset"
        except OSError as e:
            closed_by = f"error_{e.errno}"
        finally:
            sock.close()
        life = time.monotonic() - t_open
        if closed_by in ("server_eof", "server_reset", "server_send_error"):
            stats.inc("trickle.closed_by_server")
            stats.maxv("trickle.max_life_closed_by_server", life)
        stats.maxv("trickle.max_life", life)
        await asyncio.sleep(1)


async def silent_client(args, stats, deadline, k):
    await asyncio.sleep(k * 0.05)
    while running(deadline):
        try:
            sock = await open_conn(args, args.silent_src)
        except (OSError, asyncio.TimeoutError) as e:
            stats.inc(f"silent.connect_failed.{type(e).__name__}")
            await asyncio.sleep(1)
            continue
        stats.inc("silent.connections")
        t_open = time.monotonic()
        try:
            wait = min(args.silent_max, max(0.0, deadline - time.monotonic()))
            got = await recv_or_close(sock, wait)
            life = time.monotonic() - t_open
            if got == b"":
                stats.inc("silent.closed_by_server")
                stats.maxv("silent.max_life_closed_by_server", life)
                stats.inc("silent.life_sum_closed_by_server", life)
            elif got is None and time.monotonic() < deadline:
                stats.inc("silent.outlived_silent_max")
            elif got:
                stats.inc("silent.unexpected_data")
        except (ConnectionResetError, BrokenPipeError):
            stats.inc("silent.reset_by_server")
        except OSError as e:
            stats.inc(f"silent.error_{e.errno}")
        finally:
            sock.close()
        stats.maxv("silent.max_life", time.monotonic() - t_open)
        await asyncio.sleep(1)


async def reporter(args, stats, deadline, start):
    with open(args.out, "w") as f:
        while True:
            f.write(json.dumps({"t": round(time.time(), 3), "elapsed": round(time.monotonic() - start, 1),
                                "c": stats.c}, separators=(",", ":")) + "\n")
            f.flush()
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(min(args.report_every, max(0.0, deadline - time.monotonic()) + 0.01))


async def amain(args):
    names = [f"pop-{i}.soak.test" for i in range(args.popular)] + [f"host-{i}.soak.test" for i in range(args.popular, args.names)]
    stats = Stats()
    start = time.monotonic()
    deadline = start + args.duration
    loop = asyncio.get_running_loop()
    tasks = [asyncio.ensure_future(malformed(args, stats, deadline, names))] if args.malformed_qps > 0 else []
    tasks += [asyncio.ensure_future(trickle_client(args, stats, deadline, names, k)) for k in range(args.trickle)]
    tasks += [asyncio.ensure_future(silent_client(args, stats, deadline, k)) for k in range(args.silent)]
    rep = asyncio.ensure_future(reporter(args, stats, deadline, start))
    stop = asyncio.Event()

    def on_signal():
        global STOPPING
        STOPPING = True
        stop.set()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    waiter = asyncio.ensure_future(stop.wait())
    # Every client's waits end at the deadline (a connect takes 5 s at most).
    done = asyncio.ensure_future(asyncio.wait(tasks, timeout=args.duration + 20)) if tasks else None
    await asyncio.wait([x for x in (done, waiter) if x], timeout=args.duration + 25,
                       return_when=asyncio.FIRST_COMPLETED)
    if done:
        done.cancel()
    for t in tasks + [rep, waiter]:
        t.cancel()
    # Bounded: a cancellation lost inside wait_for (Python < 3.12) must not
    # keep the summary from being written.
    await asyncio.wait(tasks + [rep, waiter], timeout=3)
    stats.c["elapsed"] = round(time.monotonic() - start, 1)
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(stats.c, f, indent=1, sort_keys=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True)
    p.add_argument("--port", type=int, default=53)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--trickle", type=int, default=32)
    p.add_argument("--trickle-interval", type=float, default=3.0)
    p.add_argument("--trickle-src", default="127.0.0.1")
    p.add_argument("--silent", type=int, default=32)
    p.add_argument("--silent-max", type=float, default=120.0)
    p.add_argument("--silent-src", default="127.0.0.1")
    p.add_argument("--malformed-qps", type=float, default=200)
    p.add_argument("--malformed-src", default="127.0.0.1")
    p.add_argument("--names", type=int, default=3000)
    p.add_argument("--popular", type=int, default=100)
    p.add_argument("--report-every", type=float, default=5.0)
    p.add_argument("--out", required=True)
    p.add_argument("--summary")
    args = p.parse_args()
    # Hard bounds, whatever the caller asks: this is a soak, not a DoS tool.
    if not (0 <= args.trickle <= 2000 and 0 <= args.silent <= 2000 and 0 <= args.malformed_qps <= 5000
            and 0 < args.duration <= 7200 and args.trickle_interval >= 0.1):
        p.error("out of bounds: trickle/silent <= 2000, malformed-qps <= 5000, duration <= 7200 s")
    need = args.trickle + args.silent + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(need, soft), hard), hard))
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
