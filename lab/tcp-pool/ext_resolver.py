#!/usr/bin/env python3
"""Stands in for the Internet resolver kube-dns's dnsmasq forwards non-cluster
names to (8.8.8.8 and 8.8.4.4 on GKE). Runs inside the kube-dns namespace on
loopback, over UDP and TCP (dnsmasq forwards a query that came in over TCP
over TCP, from the forked child that serves that connection).

Answers every A/AAAA name under example.com, example.net and example.org
(TTL 300; other types get NODATA) and NXDOMAIN for anything else, each after
a delay: --delay-ms for most answers, --slow-ms for --slow-pct percent of
them (a public resolver's cache miss). The delay is what the lab's kernel
cannot add with netem, and what holds a dnsmasq child busy in the field.
"""
import argparse
import asyncio
import random
import struct
import zlib

DOMAINS = (b"example.com", b"example.net", b"example.org")


def parse_question(msg):
    """(qname in lower-case dotted form, qtype, end offset of the question) or None."""
    if len(msg) < 12 or struct.unpack_from("!H", msg, 4)[0] != 1:
        return None
    off, labels = 12, []
    while True:
        if off >= len(msg):
            return None
        n = msg[off]
        off += 1
        if n == 0:
            break
        if n & 0xC0 or off + n > len(msg):
            return None
        labels.append(msg[off:off + n].lower())
        off += n
    if off + 4 > len(msg):
        return None
    qtype = struct.unpack_from("!H", msg, off)[0]
    return b".".join(labels), qtype, off + 4


def answer(msg):
    q = parse_question(msg)
    if q is None:
        return None
    qname, qtype, qend = q
    (qid, flags) = struct.unpack_from("!HH", msg, 0)
    rd = flags & 0x0100
    known = any(qname == d or qname.endswith(b"." + d) for d in DOMAINS)
    rrs = b""
    ancount = nscount = 0
    rcode = 0
    if known:
        h = zlib.crc32(qname)
        if qtype == 1:  # A
            rrs = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 300, 4) + bytes([198, 19, 200 + (h >> 24) % 50, h % 254 + 1])
            ancount = 1
        elif qtype == 28:  # AAAA
            rrs = b"\xc0\x0c" + struct.pack("!HHIH", 28, 1, 300, 16) + bytes.fromhex("20010db8000000000000") + struct.pack("!IH", h, 1)
            ancount = 1
    else:
        rcode = 3
    if ancount == 0:
        # SOA of the root for negative answers: ". 60 SOA a.root-servers.net. ..."
        mname = b"\x01a\x0croot-servers\x03net\x00"
        rname = b"\x05nstld\x0cverisign-grs\x03com\x00"
        rdata = mname + rname + struct.pack("!IIIII", 1, 1800, 900, 604800, 60)
        rrs = b"\x00" + struct.pack("!HHIH", 6, 1, 60, len(rdata)) + rdata
        nscount = 1
    hdr = struct.pack("!HHHHHH", qid, 0x8000 | rd | 0x0080 | rcode, 1, ancount, nscount, 0)
    return hdr + msg[12:qend] + rrs


class Delay:
    def __init__(self, args):
        self.fast = args.delay_ms / 1000.0
        self.slow = args.slow_ms / 1000.0
        self.pct = args.slow_pct
        self.rng = random.Random(1)

    def __call__(self):
        return self.slow if self.rng.random() * 100 < self.pct else self.fast


class Udp(asyncio.DatagramProtocol):
    def __init__(self, delay):
        self.delay = delay

    def connection_made(self, transport):
        self.t = transport

    def datagram_received(self, data, addr):
        a = answer(data)
        if a is not None:
            asyncio.get_running_loop().call_later(self.delay(), self.t.sendto, a, addr)


async def tcp_client(reader, writer, delay):
    try:
        while True:
            n = struct.unpack("!H", await reader.readexactly(2))[0]
            msg = await reader.readexactly(n)
            a = answer(msg)
            if a is None:
                break
            await asyncio.sleep(delay())
            writer.write(struct.pack("!H", len(a)) + a)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--listen", default="127.0.0.1")
    p.add_argument("--port", type=int, default=10054)
    p.add_argument("--delay-ms", type=float, default=2.0)
    p.add_argument("--slow-ms", type=float, default=40.0)
    p.add_argument("--slow-pct", type=float, default=10.0)
    args = p.parse_args()
    delay = Delay(args)
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(lambda: Udp(delay), local_addr=(args.listen, args.port))
    server = await asyncio.start_server(lambda r, w: tcp_client(r, w, delay), args.listen, args.port, backlog=1024)
    print(f"ext_resolver: {args.listen}:{args.port} udp+tcp, delay {args.delay_ms} ms, "
          f"{args.slow_pct}% at {args.slow_ms} ms", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
