#!/usr/bin/env python3
"""The path between the node cache and the cluster DNS: a DNS relay (UDP and
TCP) that adds --delay-ms each way and logs every query it passes on.

A UDP query is passed on over UDP, a TCP query over a new TCP connection to
the server (the answer goes back on the client's connection, which may carry
more queries, answered as they come). The kernel here has no sch_netem, hence
a relay instead of a link delay.

Log lines (flushed one by one): "<CLOCK_MONOTONIC seconds> <udp|tcp> <qname> <qtype>",
qname lower-cased with its trailing dot, qtype a mnemonic or TYPE<n>.
"""
import argparse
import asyncio
import socket
import struct
import sys
import time

TYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 13: "HINFO", 15: "MX", 16: "TXT", 28: "AAAA",
         33: "SRV", 41: "OPT", 65: "HTTPS"}


def question(msg):
    """(qname, qtype) of a DNS message, or None."""
    try:
        if len(msg) < 12 or struct.unpack("!H", msg[4:6])[0] != 1:
            return None
        i, labels = 12, []
        while True:
            n = msg[i]
            if n == 0:
                i += 1
                break
            if n & 0xC0:
                return None
            labels.append(msg[i + 1:i + 1 + n].decode("ascii", "replace").lower())
            i += 1 + n
        qtype = struct.unpack("!H", msg[i:i + 2])[0]
        return ".".join(labels) + ".", TYPES.get(qtype, f"TYPE{qtype}")
    except (IndexError, struct.error):
        return None


class Relay:
    def __init__(self, args, logf):
        self.args = args
        self.delay = args.delay_ms / 1000.0
        self.logf = logf
        self.upstream = (args.upstream_host, args.upstream_port)

    def note(self, proto, msg):
        q = question(msg)
        name, qtype = q if q else ("?", "?")
        self.logf.write(f"{time.monotonic():.6f} {proto} {name} {qtype}\n")
        self.logf.flush()

    async def udp_exchange(self, msg):
        loop = asyncio.get_running_loop()
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        try:
            await loop.sock_connect(s, self.upstream)
            await loop.sock_sendall(s, msg)
            return await asyncio.wait_for(loop.sock_recv(s, 65535), self.args.timeout)
        finally:
            s.close()

    async def tcp_exchange(self, msg):
        r, w = await asyncio.wait_for(asyncio.open_connection(*self.upstream), self.args.timeout)
        try:
            w.write(struct.pack("!H", len(msg)) + msg)
            await w.drain()
            n = struct.unpack("!H", await asyncio.wait_for(r.readexactly(2), self.args.timeout))[0]
            return await asyncio.wait_for(r.readexactly(n), self.args.timeout)
        finally:
            w.close()

    async def relay(self, proto, msg):
        self.note(proto, msg)
        await asyncio.sleep(self.delay)
        try:
            answer = await (self.udp_exchange(msg) if proto == "udp" else self.tcp_exchange(msg))
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            return None
        await asyncio.sleep(self.delay)
        return answer

    async def serve_tcp(self, reader, writer):
        lock = asyncio.Lock()
        tasks = set()

        async def one(msg):
            answer = await self.relay("tcp", msg)
            if answer is not None:
                async with lock:
                    writer.write(struct.pack("!H", len(answer)) + answer)
                    await writer.drain()

        try:
            while True:
                n = struct.unpack("!H", await reader.readexactly(2))[0]
                msg = await reader.readexactly(n)
                t = asyncio.create_task(one(msg))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            writer.close()


class UdpServer(asyncio.DatagramProtocol):
    def __init__(self, relay):
        self.relay = relay
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        asyncio.get_running_loop().create_task(self.answer(data, addr))

    async def answer(self, data, addr):
        answer = await self.relay.relay("udp", data)
        if answer is not None:
            self.transport.sendto(answer, addr)


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True)
    p.add_argument("--port", type=int, default=53)
    p.add_argument("--upstream-host", default="127.0.0.1")
    p.add_argument("--upstream-port", type=int, required=True)
    p.add_argument("--delay-ms", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=3.0)
    p.add_argument("--log", required=True)
    args = p.parse_args()
    with open(args.log, "a", buffering=1) as logf:
        relay = Relay(args, logf)
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: UdpServer(relay), local_addr=(args.listen, args.port))
        server = await asyncio.start_server(relay.serve_tcp, args.listen, args.port, backlog=256)
        print(f"relay on {args.listen}:{args.port} -> {args.upstream_host}:{args.upstream_port}, "
              f"{args.delay_ms} ms each way", file=sys.stderr, flush=True)
        async with server:
            await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
