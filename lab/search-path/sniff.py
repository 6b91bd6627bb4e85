#!/usr/bin/env python3
"""What the pod's resolver sends and receives: every DNS message over UDP or
TCP port 53 on one interface (the pod's veth), from a packet socket.

Log lines (flushed one by one):
"<CLOCK_MONOTONIC seconds> <q|r> <udp|tcp> <id> <qname> <qtype> <rcode>",
q for a query from the pod, r for an answer to it. TCP segments are logged
only when a segment holds one whole message (the answers here are small).
"""
import argparse
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
from relay import question  # noqa: E402

ETH_P_ALL = 0x0003


def dns_of(frame):
    """(proto, dns message, is_query) of an Ethernet frame, or None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[14] & 0x0F) * 4
    proto = frame[23]
    l4 = 14 + ihl
    if proto == 17:
        sport, dport = struct.unpack("!HH", frame[l4:l4 + 4])
        msg = frame[l4 + 8:]
        kind = "udp"
    elif proto == 6:
        sport, dport = struct.unpack("!HH", frame[l4:l4 + 4])
        off = (frame[l4 + 12] >> 4) * 4
        total = struct.unpack("!H", frame[16:18])[0]
        payload = frame[l4 + off:14 + total]
        if len(payload) < 14:
            return None
        n = struct.unpack("!H", payload[:2])[0]
        if n != len(payload) - 2:
            return None
        msg = payload[2:]
        kind = "tcp"
    else:
        return None
    if 53 not in (sport, dport) or len(msg) < 12:
        return None
    return kind, msg, dport == 53


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iface", required=True)
    p.add_argument("--log", required=True)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((args.iface, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    with open(args.log, "a", buffering=1) as logf:
        print(f"sniffing DNS on {args.iface}", file=sys.stderr, flush=True)
        while True:
            frame = s.recv(65535)
            now = time.monotonic()
            d = dns_of(frame)
            if not d:
                continue
            kind, msg, is_query = d
            q = question(msg)
            name, qtype = q if q else ("?", "?")
            ident = struct.unpack("!H", msg[:2])[0]
            rcode = msg[3] & 0x0F
            logf.write(f"{now:.6f} {'q' if is_query else 'r'} {kind} {ident} {name} {qtype} {rcode}\n")


if __name__ == "__main__":
    main()
