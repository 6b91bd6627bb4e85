"""Small DNS wire helpers for the abuse lab (standard library only).

Queries are built by hand so that the lab can also build the ones no
library would: odd classes, bad opcodes, wrong counts, cut names.
"""

import json
import os
import socket
import struct
import time
import urllib.request

RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP",
          5: "REFUSED", 9: "NOTAUTH", 16: "BADVERS"}


def encode_name(name):
    out = b""
    for label in name.strip(".").split("."):
        if label:
            b = label.encode()
            out += bytes([len(b)]) + b
    return out + b"\x00"


def opt_rr(udp_size=1232, do=False, version=0):
    ttl = (version << 16) | (0x8000 if do else 0)
    return b"\x00" + struct.pack(">HHIH", 41, udp_size, ttl, 0)


def query(name, qtype=1, qclass=1, qid=None, rd=True, edns=1232, opcode=0):
    """A query; `edns` is the advertised UDP size, or None for no OPT."""
    if qid is None:
        qid = struct.unpack(">H", os.urandom(2))[0]
    flags = (opcode & 0xF) << 11 | (0x0100 if rd else 0)
    ar = 1 if edns is not None else 0
    msg = struct.pack(">HHHHHH", qid, flags, 1, 0, 0, ar)
    msg += encode_name(name) + struct.pack(">HH", qtype, qclass)
    if edns is not None:
        msg += opt_rr(edns)
    return msg


def skip_name(msg, at):
    """Offset after the (possibly compressed) name at `at`."""
    while True:
        n = msg[at]
        if n == 0:
            return at + 1
        if n & 0xC0 == 0xC0:
            return at + 2
        at += 1 + n


def read_name(msg, at, depth=0):
    labels = []
    while True:
        n = msg[at]
        if n == 0:
            return ".".join(labels) + ".", at + 1
        if n & 0xC0 == 0xC0:
            ptr = ((n & 0x3F) << 8) | msg[at + 1]
            if depth > 20:
                raise ValueError("pointer loop")
            rest, _ = read_name(msg, ptr, depth + 1)
            return ".".join(labels + [rest.rstrip(".")]) + ("." if rest != "." else ""), at + 2
        labels.append(msg[at + 1:at + 1 + n].decode("latin-1"))
        at += 1 + n


class Reply:
    """What the lab needs to know of a reply."""

    def __init__(self, raw):
        self.raw = raw
        (self.id, self.flags, self.qd, self.an, self.ns, self.ar) = struct.unpack(">HHHHHH", raw[:12])
        self.rcode = self.flags & 0xF
        self.tc = bool(self.flags & 0x0200)
        self.opt = False
        self.answers = []  # (type, rdata bytes)
        self.qname = None
        try:
            at = 12
            for _ in range(self.qd):
                self.qname, at = read_name(raw, at)
                at += 4
            for section, count in (("an", self.an), ("ns", self.ns), ("ar", self.ar)):
                for _ in range(count):
                    at = skip_name(raw, at)
                    rtype, _rclass, _ttl, rdlen = struct.unpack(">HHIH", raw[at:at + 10])
                    at += 10
                    rdata = raw[at:at + rdlen]
                    at += rdlen
                    if section == "an":
                        self.answers.append((rtype, rdata))
                    if rtype == 41:
                        self.opt = True
                        self.rcode |= (_ttl >> 24) << 4
        except (IndexError, struct.error, ValueError):
            pass

    @property
    def rcode_name(self):
        return RCODES.get(self.rcode, str(self.rcode))

    def a(self):
        return [socket.inet_ntoa(r) for t, r in self.answers if t == 1 and len(r) == 4]


def udp_ask(server, msg, source=None, timeout=2.0, connect=False):
    """(Reply or None, seconds, reply source address or None)."""
    fam = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        if source:
            s.bind((source, 0))
        s.settimeout(timeout)
        t0 = time.monotonic()
        if connect:
            s.connect(server)
            s.send(msg)
        else:
            s.sendto(msg, server)
        while True:
            try:
                if connect:
                    data = s.recv(65535)
                    frm = server
                else:
                    data, frm = s.recvfrom(65535)
            except (socket.timeout, ConnectionRefusedError):
                return None, time.monotonic() - t0, None
            if len(data) >= 12 and data[:2] == msg[:2]:
                return Reply(data), time.monotonic() - t0, frm
    finally:
        s.close()


def tcp_ask(server, msg, source=None, timeout=2.0):
    """(Reply or None, seconds, error text or None)."""
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET6 if ":" in server[0] else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        if source:
            s.bind((source, 0))
        s.connect(server)
        s.sendall(struct.pack(">H", len(msg)) + msg)
        hdr = recv_exact(s, 2)
        body = recv_exact(s, struct.unpack(">H", hdr)[0])
        return Reply(body), time.monotonic() - t0, None
    except (OSError, EOFError) as e:
        return None, time.monotonic() - t0, type(e).__name__
    finally:
        s.close()


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("closed")
        buf += chunk
    return buf


# ---- nodens metrics ---------------------------------------------------------

def scrape(url, timeout=2.0):
    """{(name, frozenset(labels)): value} of a Prometheus text page."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            head, value = line.rsplit(" ", 1)
            if "{" in head:
                name, rest = head.split("{", 1)
                labels = []
                for part in split_labels(rest.rstrip("}")):
                    k, v = part.split("=", 1)
                    labels.append((k, v.strip('"')))
                key = (name, frozenset(labels))
            else:
                key = (head, frozenset())
            out[key] = float(value)
        except ValueError:
            continue
    return out


def split_labels(s):
    parts, cur, quoted = [], "", False
    for ch in s:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def metric(samples, name, **labels):
    """Sum of the series `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def series(samples, name):
    """{labels dict as sorted tuple: value} of every series `name`."""
    return {tuple(sorted(ls)): v for (n, ls), v in samples.items() if n == name}


# ---- process figures ----------------------------------------------------------

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


# ---- results ------------------------------------------------------------------

class Results:
    """Rows of one round, written as JSON lines for report.py."""

    def __init__(self, path, round_no, title):
        self.path, self.round, self.title = path, round_no, title
        self.rows = []

    def row(self, item, value, ok=None, expect=""):
        """ok: True (a defence held), False (it failed), None (information)."""
        self.rows.append({"round": self.round, "title": self.title, "item": item,
                          "value": str(value), "expect": expect, "ok": ok})
        mark = {True: "ok", False: "FAIL", None: "--"}[ok]
        print(f"  [{mark:4}] {item}: {value}" + (f"   (expect {expect})" if expect else ""), flush=True)

    def save(self):
        with open(self.path, "a") as f:
            for r in self.rows:
                f.write(json.dumps(r) + "\n")
        return all(r["ok"] is not False for r in self.rows)


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def ms(seconds):
    return f"{seconds * 1000:.1f} ms"
