#!/usr/bin/env python3
"""List or delete netfilter accounting objects (what `nfacct` does), over netlink.

kube-proxy 1.33 creates the object ct_state_invalid_dropped_pkts for its KUBE-FORWARD
rule and leaves it behind; lab/kube/down deletes it when up did not find it there.

    nfacct.py list            # one name a line
    nfacct.py del NAME...     # exit 1 if one could not be deleted (e.g. still in use)
"""
import os
import socket
import struct
import sys

NETLINK_NETFILTER = 12
NFNL_SUBSYS_ACCT = 7
MSG_GET, MSG_DEL = 1, 3
NFACCT_NAME = 1
F_REQUEST, F_ACK, F_DUMP = 0x1, 0x4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3


def request(msg, flags, attrs=b""):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    s.settimeout(5)
    try:
        body = struct.pack("BBH", socket.AF_UNSPEC, 0, 0) + attrs
        s.send(struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_ACCT << 8) | msg, flags, 1, 0) + body)
        out = []
        for _ in range(1000):
            data = s.recv(65536)
            off = 0
            while off + 16 <= len(data):
                ln, typ, _fl, _seq, _pid = struct.unpack_from("=IHHII", data, off)
                if typ == NLMSG_DONE:
                    return out, 0
                if typ == NLMSG_ERROR:
                    return out, -struct.unpack_from("=i", data, off + 16)[0]
                out.append(data[off + 16 + 4: off + ln])
                off += (ln + 3) & ~3
    finally:
        s.close()
    return out, 0


def attr(typ, payload):
    ln = 4 + len(payload)
    return struct.pack("=HH", ln, typ) + payload + b"\0" * (((ln + 3) & ~3) - ln)


def names():
    msgs, err = request(MSG_GET, F_REQUEST | F_DUMP)
    if err:
        raise OSError(err, os.strerror(err))
    result = []
    for m in msgs:
        off = 0
        while off + 4 <= len(m):
            ln, typ = struct.unpack_from("=HH", m, off)
            if ln < 4:
                break
            if typ & 0x3FFF == NFACCT_NAME:
                result.append(m[off + 4: off + ln].split(b"\0", 1)[0].decode())
            off += (ln + 3) & ~3
    return result


def main(argv):
    if argv[:1] == ["list"]:
        for n in names():
            print(n)
        return 0
    if argv[:1] == ["del"] and len(argv) > 1:
        rc = 0
        for n in argv[1:]:
            _, err = request(MSG_DEL, F_REQUEST | F_ACK, attr(NFACCT_NAME, n.encode() + b"\0"))
            if err:
                print("nfacct.py: del %s: %s" % (n, os.strerror(err)), file=sys.stderr)
                rc = 1
        return rc
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
