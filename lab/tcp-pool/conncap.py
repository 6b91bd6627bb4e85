#!/usr/bin/env python3
"""Records every TCP SYN, FIN and RST to or from port 53 on one interface
(kube-dns's veth), with the time it was seen, until SIGTERM or --max-secs.

From these the report counts the connections open at dnsmasq at every
instant, exactly: a connection opens when dnsmasq's kernel answers its SYN
(SYN-ACK) and ends at the first FIN or RST in either direction. Sampling
/proc/net/tcp cannot do that: a read is not a snapshot, and one that
straddles a close and the connection replacing it shows both.

A packet socket with a classic BPF filter (IPv4, TCP, unfragmented, any of
FIN/SYN/RST set), so the kernel hands over only those few packets.
Output lines: "<unix time> <flags> <src ip> <src port> <dst ip> <dst port>",
flags a subset of "SAFR"; OUT.stats: packets seen and dropped by the kernel
(a capture that dropped packets gives no exact count).
"""
import argparse
import ctypes
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26

# (code, jt, jf, k)
BPF = [
    (0x28, 0, 0, 12),       # ldh [12]             ethertype
    (0x15, 0, 8, 0x0800),   # jeq IPv4 ? next : drop
    (0x30, 0, 0, 23),       # ldb [23]             IP protocol
    (0x15, 0, 6, 6),        # jeq TCP ? next : drop
    (0x28, 0, 0, 20),       # ldh [20]             flags + fragment offset
    (0x45, 4, 0, 0x1FFF),   # jset fragment ? drop : next
    (0xB1, 0, 0, 14),       # ldxb 4*([14]&0xf)    IP header length
    (0x50, 0, 0, 27),       # ldb [x+27]           TCP flags (14 + 13)
    (0x45, 0, 1, 0x07),     # jset FIN|SYN|RST ? accept : drop
    (0x06, 0, 0, 128),      # ret 128
    (0x06, 0, 0, 0),        # ret 0
]


def attach(sock):
    prog = b"".join(struct.pack("HBBI", *ins) for ins in BPF)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HL", len(BPF), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    return buf  # keep alive


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iface", required=True)
    p.add_argument("--port", type=int, default=53)
    p.add_argument("--out", required=True)
    p.add_argument("--max-secs", type=float, default=900)
    args = p.parse_args()

    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    keep = attach(s)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    s.bind((args.iface, 0))
    s.settimeout(0.2)
    start = time.time()
    with open(args.out, "w") as out:
        while not stop and time.time() - start < args.max_secs:
            try:
                pkt = s.recv(256)
            except socket.timeout:
                continue
            except InterruptedError:
                continue
            now = time.time()
            if len(pkt) < 34:
                continue
            ihl = (pkt[14] & 0x0F) * 4
            t = 14 + ihl
            if len(pkt) < t + 14:
                continue
            sport, dport = struct.unpack_from("!HH", pkt, t)
            if args.port not in (sport, dport):
                continue
            fl = pkt[t + 13]
            flags = ("S" if fl & 2 else "") + ("A" if fl & 16 else "") + ("F" if fl & 1 else "") + ("R" if fl & 4 else "")
            src = socket.inet_ntoa(pkt[26:30])
            dst = socket.inet_ntoa(pkt[30:34])
            out.write(f"{now:.6f} {flags} {src} {sport} {dst} {dport}\n")
    # Packets the kernel dropped because we were not reading fast enough (a
    # busy machine): if any, the connection count is not exact.
    SOL_PACKET, PACKET_STATISTICS = 263, 6
    packets, drops = struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    with open(args.out + ".stats", "w") as f:
        f.write(f"packets {packets} drops {drops}\n")
    del keep
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
