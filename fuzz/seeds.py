#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/.

DNS messages are assembled here byte by byte (struct), not captured from a
network. Run again after editing; files are rewritten, none are removed.

    python3 fuzz/seeds.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def name(text):
    out = b""
    for label in text.rstrip(".").split("."):
        if label:
            out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def header(ident, flags, qd=1, an=0, ns=0, ar=0):
    return struct.pack(">HHHHHH", ident, flags, qd, an, ns, ar)


def question(qname, qtype=1, qclass=1):
    return name(qname) + struct.pack(">HH", qtype, qclass)


def opt(udp=1232, do=False, version=0, ext_rcode=0, options=b""):
    ttl = (ext_rcode << 24) | (version << 16) | (0x8000 if do else 0)
    return b"\0" + struct.pack(">HHIH", 41, udp, ttl, len(options)) + options


def option(code, data):
    return struct.pack(">HH", code, len(data)) + data


def rr(owner, rtype, ttl, rdata, rclass=1):
    """owner: wire bytes (a name or a 2-byte pointer)."""
    return owner + struct.pack(">HHIH", rtype, rclass, ttl, len(rdata)) + rdata


def ptr(offset):
    return struct.pack(">H", 0xC000 | offset)


def soa(mname, rname, serial=1, refresh=7200, retry=1800, expire=86400, minimum=30):
    return mname + rname + struct.pack(">IIIII", serial, refresh, retry, expire, minimum)


RD, QR, RA, AA, AD, CD, TC = 0x0100, 0x8000, 0x0080, 0x0400, 0x0020, 0x0010, 0x0200

# ---------------------------------------------------------------- queries
queries = {
    "a_rd": header(0x1234, RD) + question("www.example.com"),
    "aaaa_edns_do": header(0x0001, RD, ar=1) + question("example.org", 28) + opt(1232, do=True),
    "k8s_svc_edns": header(0xBEEF, RD | AD, ar=1)
    + question("kubernetes.default.svc.cluster.local")
    + opt(4096),
    "ndots_search": header(0x2222, RD) + question("api.github.com.default.svc.cluster.local", 28),
    "ptr": header(0x0102, RD) + question("10.0.96.10.in-addr.arpa", 12),
    "srv": header(0x7777, RD | CD, ar=1) + question("_dns._udp.kube-dns.kube-system.svc.cluster.local", 33) + opt(512),
    "mixed_case": header(0x4242, RD) + question("WwW.ExAmPlE.CoM", 1),
    "chaos_version_bind": header(0x0003, 0) + question("version.bind", 16, 3),
    "https_type": header(0x0065, RD, ar=1) + question("example.com", 65) + opt(1232),
    "root_ns": header(0x0009, 0) + question(".", 2),
    "edns_cookie": header(0x3333, RD, ar=1)
    + question("example.net")
    + opt(1232, options=option(10, bytes(range(8)))),
    "edns_ecs": header(0x4444, RD, ar=1)
    + question("example.net")
    + opt(1232, options=option(8, struct.pack(">HBB", 1, 24, 0) + bytes([10, 1, 2]))),
    "edns_padding_ede": header(0x5555, RD, ar=1)
    + question("a.b")
    + opt(1400, do=True, options=option(12, b"\0" * 16) + option(15, b"\0\x03")),
    "tsig_additional": header(0x6666, RD, ar=2)
    + question("example.com")
    + opt(1232)
    + rr(name("key.example"), 250, 0, name("hmac-sha256") + b"\0" * 16),
    "sig0_then_opt": header(0x6767, RD, ar=2)
    + question("example.com")
    + rr(b"\0", 24, 0, b"\0" * 20)
    + opt(1232),
    "compressed_additional": header(0x6868, RD, ar=1)
    + question("example.com")
    + rr(ptr(12), 1, 60, b"\x01\x02\x03\x04"),
    "badvers": header(0x0777, RD, ar=1) + question("example.com") + opt(1232, version=1),
    "axfr": header(0x0888, 0) + question("cluster.local", 252),
    "any_class": header(0x0999, RD) + question("example.com", 1, 255),
    "notify": header(0x0AAA, 4 << 11) + question("example.com", 6),
    "two_questions": header(0x0BBB, RD, qd=2) + question("a.example") + question("b.example"),
    "two_opt": header(0x0CCC, RD, ar=2) + question("example.com") + opt() + opt(),
    "compressed_question": header(0x0DDD, RD) + b"\xc0\x0c\x00\x01\x00\x01",
    "truncated": (header(0x0EEE, RD) + question("example.com"))[:-3],
    "response": header(0x0FFF, QR | RD | RA) + question("example.com"),
    "runt": b"\x12\x34\x01\x00\x00",
    "long_name": header(0x1111, RD) + question(".".join(["a" * 63] * 3 + ["b" * 61])),
}

# ---------------------------------------------------------------- responses
Q = 12  # offset of the question name: pointer target


def response(qname, qtype, flags, answers=(), authority=(), additional=(), qd=1, ident=0xABCD):
    body = question(qname, qtype) if qd else b""
    msg = header(ident, QR | flags, qd, len(answers), len(authority), len(additional)) + body
    for r in list(answers) + list(authority) + list(additional):
        msg += r
    return msg


def params(client=0x05, client_id=0x5566, policy=0x10, steps=b"\x01\x02\x03\x04"):
    """The 8-byte prefix response_walk reads (see its doc comment)."""
    return bytes([client]) + struct.pack(">H", client_id) + bytes([policy]) + steps


responses = {}
responses["a_two_records_opt"] = params() + response(
    "www.example.com", 1, RD | RA,
    answers=[rr(ptr(Q), 1, 300, bytes([93, 184, 216, 34])), rr(ptr(Q), 1, 300, bytes([93, 184, 216, 35]))],
    additional=[opt(1232)],
)
qn = name("www.example.com")
responses["cname_chain"] = params(0x35, 0x0102, 0x0D) + response(
    "www.example.com", 1, RD | RA | AD,
    answers=[
        rr(ptr(Q), 5, 3600, name("cdn")[:-1] + ptr(Q + 4)),  # cdn.example.com
        rr(ptr(12 + len(qn) + 4 + 12), 1, 20, bytes([10, 0, 0, 1])),
    ],
    additional=[opt(4096, do=True)],
)
responses["nxdomain_soa"] = params(0x01, 0x7777, 0x30) + response(
    "nope.svc.cluster.local", 1, 3 | RD | RA | AA,
    authority=[rr(ptr(Q + 9), 6, 5, soa(name("ns.dns.cluster.local"), name("hostmaster.cluster.local"), minimum=5))],
    additional=[opt(1232)],
)
responses["nodata_soa"] = params(0x04, 0x0001, 0x00) + response(
    "example.org", 28, RD | RA,
    authority=[rr(ptr(Q), 6, 3600, soa(name("ns.icann.org"), name("noc.dns.icann.org"), minimum=3600))],
)
responses["servfail_ext_rcode"] = params(0x03, 0x1111, 0x80) + response(
    "example.net", 1, 2 | RD | RA, additional=[opt(1232, ext_rcode=0)],
)
responses["badvers_ext"] = params(0x01, 0x1112, 0x80) + response(
    "example.net", 1, 0 | RD | RA, additional=[opt(1232, ext_rcode=1)],
)
responses["referral_glue"] = params(0x01, 0x2222, 0x11) + response(
    "example.com", 2, RD | RA,
    answers=[
        rr(ptr(Q), 2, 172800, name("a.iana-servers.net")),
        rr(ptr(Q), 2, 172800, b"\x01b" + ptr(12 + 13 + 4 + 12 + 2)),
    ],
    additional=[
        rr(ptr(12 + 13 + 4 + 12), 1, 172800, bytes([199, 43, 135, 53])),
        rr(ptr(12 + 13 + 4 + 12), 28, 172800, bytes(16)),
        opt(1232),
    ],
)
responses["opt_not_last"] = params(0x01, 0x2223, 0x11) + response(
    "example.com", 1, RD | RA,
    answers=[rr(ptr(Q), 1, 60, bytes([1, 2, 3, 4]))],
    additional=[opt(1232), rr(ptr(Q), 1, 60, bytes([5, 6, 7, 8]))],
)
responses["mx_srv"] = params(0x05, 0x3333, 0x12) + response(
    "example.com", 15, RD | RA,
    answers=[
        rr(ptr(Q), 15, 300, struct.pack(">H", 10) + name("mail")[:-1] + ptr(Q)),
        rr(ptr(Q), 33, 300, struct.pack(">HHH", 0, 5, 443) + ptr(Q)),
    ],
)
responses["txt_large"] = params(0x01, 0x4444, 0x10) + response(
    "big.example", 16, RD | RA,
    answers=[rr(ptr(Q), 16, 60, (b"\xff" + b"x" * 255) * 2) for _ in range(4)],
    additional=[opt(4096)],
)
responses["many_a_over_512"] = params(0x00, 0x5555, 0x10) + response(
    "pool.example", 1, RD | RA,
    answers=[rr(ptr(Q), 1, 30, bytes([10, 0, i // 256, i % 256])) for i in range(40)],
    authority=[rr(ptr(Q + 5), 2, 3600, name("ns1")[:-1] + ptr(Q + 5))],
    additional=[rr(ptr(Q + 5), 1, 3600, bytes([10, 9, 9, 9])) for _ in range(10)] + [opt(1232)],
)
responses["refused_no_question"] = params(0x01, 0x6666, 0x10) + response(
    "", 1, 5 | RD | RA, qd=0,
)
responses["https_answer"] = params(0x03, 0x6767, 0x10) + response(
    "example.com", 65, RD | RA,
    answers=[rr(ptr(Q), 65, 300, struct.pack(">H", 1) + b"\0" + struct.pack(">HH", 1, 3) + b"\x02h2")],
    additional=[opt(1232)],
)
responses["ttl_top_bit"] = params(0x01, 0x6868, 0x1F) + response(
    "example.com", 1, RD | RA,
    answers=[rr(ptr(Q), 1, 0x80000001, bytes([1, 1, 1, 1])), rr(ptr(Q), 1, 50000, bytes([1, 1, 1, 2]))],
)
responses["dname"] = params(0x01, 0x6969, 0x10) + response(
    "a.old.example", 1, RD | RA,
    answers=[
        rr(ptr(Q + 2), 39, 600, name("new.example")),
        rr(ptr(Q), 5, 600, b"\x01a" + ptr(12 + 15 + 4 + 12)),
    ],
)
responses["truncated_tc"] = params(0x00, 0x7070, 0x10) + response("big.example", 16, TC | RD | RA)
# A pointer to a pointer: the second answer's owner points at the first
# answer's owner (offset 29), itself a pointer to the question. Legal.
responses["pointer_to_pointer"] = params(0x05, 0x7171, 0x14) + response(
    "example.com", 1, RD | RA,
    answers=[rr(ptr(Q), 1, 300, bytes([1, 2, 3, 4])), rr(ptr(29), 1, 300, bytes([5, 6, 7, 8]))],
)

# ---------------------------------------------------------------- regressions
# Inputs that made response_walk fail on defects found in nodens (fixed in
# 54ddf1b; docs/fuzzing.md), kept in its corpus as regression seeds.
regressions = {}
# check_answers with Case::Ignore folds the whole question, type and class
# included: type 0x0041 (HTTPS) matches 0x0061.
regressions["question_type_case"] = params(0x05, 0x0065, 0x10) + response(
    "example.com", 65, RD | RA,
    answers=[rr(ptr(Q), 65, 300, struct.pack(">H", 1) + b"\0")],
)
# The upstream's opcode (2, STATUS) is kept in the cached answer and sent
# to clients whose query had opcode 0.
regressions["reply_opcode"] = params(0x01, 0x0202, 0x10) + response(
    "example.com", 1, (2 << 11) | RD | RA,
    answers=[rr(ptr(Q), 1, 300, bytes([1, 2, 3, 4]))],
)
# An SOA whose RDATA is its two names and nothing else (24 bytes, so over
# the 22-byte minimum): layout reads MINIMUM from the names' bytes.
regressions["soa_short_rdata"] = params(0x01, 0x0303, 0x70) + response(
    "nope.example", 1, 3 | RD | RA,
    authority=[rr(ptr(Q + 5), 6, 3600, name("ns1.example") + name("h.example"))],
)
# A compression pointer into a TTL field, reached through another pointer:
# the second answer's owner points at offset 37, the low half of the first
# answer's TTL (0x0000c00c), whose bytes c0 0c are a pointer to the
# question. layout checks that no label read through a pointer lies in a
# TTL field, but not the pointers read there; the cache then rewrites the
# TTL (clamped, then counted down) and with it the owner name.
regressions["ttl_pointer_chain"] = params(0x05, 0x5566, 0x14) + response(
    "example.com", 1, RD | RA,
    answers=[rr(ptr(Q), 1, 0xC00C, bytes([1, 2, 3, 4])), rr(ptr(37), 1, 300, bytes([5, 6, 7, 8]))],
)

# ---------------------------------------------------------------- configs
configs = {
    "empty": b"",
    "docs_node": b'''[server]
listen = ["169.254.20.10:53", "10.96.0.10:53"]

[cache]
capacity = "128 MiB"

[metrics]
listen = "169.254.20.10:9253"

[[zone]]
name = "cluster.local"
upstreams = ["10.96.0.11"]     # the kube-dns Service's second ClusterIP
max_ttl = "30s"
negative_max_ttl = "5s"
# transport = "force_tcp"      # only if the path loses UDP; the pool bounds it

[[zone]]
name = "in-addr.arpa"
upstreams = ["10.96.0.11"]

[[zone]]
name = "ip6.arpa"
upstreams = ["10.96.0.11"]

[[zone]]
name = "."
resolv_conf = "/etc/resolv.conf"    # the node's resolvers
''',
    "docs_pool": b'''[[zone]]
name = "cluster.local"
upstreams = ["10.96.0.11"]
transport = "force_tcp"

[zone.pool]
max_connections = 4
max_in_flight = 1
idle_timeout = "1s"
''',
    "every_option": b'''[server]
listen = ["127.0.0.1:1053", "[::1]:1053"]
workers = 2
max_udp_payload = 1232
tcp_idle_timeout = "10s"
tcp_max_connections = 1024
tcp_max_in_flight = 64
query_timeout = "4s"
shutdown_grace = "5s"

[cache]
capacity = "64 MiB"
servfail_ttl = "5s"
stale_ttl = "30s"
stale_max_age = "1h"
prefetch_min_hits = 3
prefetch_percent = 10

[metrics]
listen = "127.0.0.1:9253"

[log]
level = "nodens=debug,warn"
format = "json"
upstream_error_interval = "10s"

[[zone]]
name = "example."
upstreams = ["192.0.2.1", "[2001:db8::1]:5353"]
policy = "random"
upstream_timeout = "2s"
min_ttl = "0s"
max_ttl = "1h"
negative_max_ttl = "30m"
transport = "tcp_fallback_on_timeout"
max_fails = 2
health_check = "500ms"

[zone.pool]
max_connections = 4
max_in_flight = 1
max_queries_per_connection = 100
connect_timeout = "1s"
idle_timeout = "10s"
max_queue = 256
max_queue_wait = "1s"
''',
    "docs_broken": b'''[server]
workers = 1

[[zone]]
name = "cluster.local"
upstreams = ["10.0.0.300"]
''',
    "loop": b'''[server]
listen = ["0.0.0.0:53"]
[[zone]]
name = "."
upstreams = ["127.0.0.1"]
''',
}

# ---------------------------------------------------------------- resolv.conf
resolvs = {
    "pod": b"search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
    "systemd_resolved": b"# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n",
    "ipv6_zone": b"nameserver fe80::1%eth0\nnameserver 2001:db8::53\nnameserver 192.0.2.53\n",
    "comments_crlf": b"; comment\r\n# nameserver 9.9.9.9\r\nnameserver\t8.8.8.8\r\ndomain example.com\r\n",
    "no_nameserver": b"search example.com\noptions rotate timeout:1 attempts:2\n",
}

# Corefiles: the real NodeLocal DNSCache ones of tests/fixtures/corefile/ (each
# cites its source) and one with the rest of the syntax the reader knows.
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "corefile")
corefiles = {}
for fixture in sorted(os.listdir(FIXTURES)):
    if not fixture.endswith(".Corefile"):
        continue  # installers/: the converter's tests', not seeds
    with open(os.path.join(FIXTURES, fixture), "rb") as f:
        corefiles[fixture.removesuffix(".Corefile")] = f.read()
corefiles["syntax_mix"] = (
    b'.:53 {\n  bind {$IP} "127.0.0.2"\n  cache 30 {\n    prefetch 2 1m 15%\n'
    b"    serve_stale\n    servfail 3s\n  }\n"
    b"  forward . dns://127.0.0.1:5300 10.0.0.0:53 {\n    policy round_robin\n    max_fails 3\n  }\n}\n"
    b"10.0.0.0/8:53, 172.16.0.0/16:53 {\n  forward . /etc/resolv.conf\n}\n"
)
# Found by the fuzzer: a key whose zone name nodens writes with a \DDD escape,
# which did not read back (now refused with its line).
corefiles["regression_escaped_zone"] = b"a\x7fb:53 {\n  forward . 127.0.0.1:5300\n}\n"


# ---------------------------------------------------------------- cache snapshots
def snapshot_record(qname, msg, qtype=1, flags=0, kind=0, rcode=0, age_ms=0, lifetime_ms=300_000, offsets=()):
    """One record of a cache snapshot (src/cache/snapshot.rs), every field chosen."""
    key = name(qname)
    out = bytes([len(key)]) + key + struct.pack(">HHBBH", qtype, 1, flags, kind, rcode)
    out += struct.pack(">HHIQQH", 0, 0, 0, lifetime_ms, age_ms, len(offsets))
    out += b"".join(struct.pack(">H", o) for o in offsets)
    return out + struct.pack(">I", len(msg)) + msg


def snapshot(params, *records, end=True):
    """The 1-byte parameters of snapshot_read, then the stream."""
    out = bytes([params]) + b"NDC1"
    for r in records:
        out += struct.pack(">I", len(r)) + r
    return out + (struct.pack(">I", 0) if end else b"")


www_a = response("www.example.com", 1, RD | RA, answers=[rr(ptr(Q), 1, 300, bytes([192, 0, 2, 1]))])
nx = response(
    "nope.example.com", 1, RD | RA | 3,
    authority=[rr(name("example.com"), 6, 3600, soa(name("ns.example.com"), name("h.example.com"), minimum=60))],
)
nodata = response(
    "www.example.com", 28, RD | RA,
    authority=[rr(ptr(Q + 4), 6, 3600, soa(name("ns.example.com"), name("h.example.com"), minimum=60))],
)
snapshots = {
    "answer": snapshot(0, snapshot_record("www.example.com", www_a, offsets=(45,))),
    "answer_do_cd_stale": snapshot(4, snapshot_record("www.example.com", www_a, flags=3, age_ms=400_000)),
    "nxdomain": snapshot(1, snapshot_record("nope.example.com", nx, kind=1, rcode=3)),
    "nodata": snapshot(2, snapshot_record("www.example.com", nodata, qtype=28, kind=1)),
    "cname_chain": snapshot(0, snapshot_record("www.example.com", responses["cname_chain"][8:])),
    "ttl_136_years": snapshot(3, snapshot_record(
        "www.example.com",
        response("www.example.com", 1, RD | RA, answers=[rr(ptr(Q), 1, 0xFFFFFFFF, bytes([192, 0, 2, 1]))]),
        lifetime_ms=0xFFFFFFFF * 1000)),
    "ttl_68_years": snapshot(3, snapshot_record(
        "www.example.com",
        response("www.example.com", 1, RD | RA, answers=[rr(ptr(Q), 1, 0x7FFFFFFF, bytes([192, 0, 2, 1]))]),
        lifetime_ms=2**64 - 1)),
    "question_mismatch": snapshot(0, snapshot_record("victim.example.com", response(
        "attack.example.com", 1, RD | RA, answers=[rr(ptr(Q), 1, 300, bytes([192, 0, 2, 66]))]))),
    "kind_mismatch": snapshot(0, snapshot_record("nope.example.com", nx, kind=0, rcode=3)),
    "servfail": snapshot(0, snapshot_record("www.example.com", response("www.example.com", 1, RD | RA | 2), kind=1, rcode=2)),
    "no_zone": snapshot(0, snapshot_record("www.nz", response("www.nz", 1, RD | RA, answers=[rr(ptr(Q), 1, 300, bytes([192, 0, 2, 1]))]))),
    "several_and_bounded": snapshot(8, *[snapshot_record("www.example.com", www_a)] * 5),
    "no_end_marker": snapshot(0, snapshot_record("www.example.com", www_a), end=False),
    "empty": snapshot(0),
}


def named(*items):
    return json.dumps([{"addr": a, "kind": k} for a, k in items]).encode()


handover_lists = {
    "udp_tcp_http": named(("169.254.20.10:53", "udp"), ("169.254.20.10:53", "udp"),
                          ("169.254.20.10:53", "tcp"), ("[fd00::a]:53", "tcp"), ("0.0.0.0:9253", "http")),
    "empty": b"[]",
    "bad_kind": named(("127.0.0.1:53", "sctp")),
    "max": named(*[("127.0.0.1:53", "udp")] * 250),
    "one_too_many": named(*[("127.0.0.1:53", "udp")] * 251),
    "not_a_list": b'{"addr": "127.0.0.1:53", "kind": "udp"}',
    # Found by the fuzzer: bytes that are not UTF-8 in a field serde_json skips were
    # accepted (now refused: the payload is checked for UTF-8 first).
    "regression_invalid_utf8_unknown_field": bytes.fromhex(
        "5b7b2261646472223a20223136382e3235342e32302e31303a3533222c20226b696e64223a2022756470"
        "227d2c207b2261646472223a20223136392e3235342e32302e31303a3533222c20226b696e6164647222"
        "3a20225b666430d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7d7303a3a215d"
        "3a3533222c20226b696e64223a2022746370227d2c207b2261646472223a2022302e302e302e303a3932"
        "3533222c20226b696e64223a202268747470227d5d"),
}


# rewrite_answers: 1 byte of dns64 parameters, the first answer's length, the first
# answer (to a.b.up., written back to a.b.fuzz.; or dns64's AAAA answer), the A answer.
def rebuild_input(params, first, a=b""):
    return bytes([params]) + struct.pack(">H", len(first)) + first + a


def addresses(qname, count):
    return [rr(ptr(12), 1, 300, bytes([10, i >> 16, (i >> 8) & 255, i & 255])) for i in range(count)]


rebuild_inputs = {
    "rewrite_two_a": rebuild_input(5, response("a.b.up", 1, 0x8180, addresses("a.b.up", 2))),
    "rewrite_cname_chain": rebuild_input(5, response("a.b.up", 1, 0x8180, [
        rr(ptr(12), 5, 60, name("c.d.up")), rr(name("c.d.up"), 1, 60, b"\xc0\x00\x02\x01")])),
    "dns64_nodata_and_40_a": rebuild_input(
        3, response("a.b.fuzz", 28, 0x8180), response("a.b.fuzz", 1, 0x8180, addresses("a.b.fuzz", 40))),
    # 1,850 A records (about 30 KB): AAAA records of 28 bytes each fit 65,535.
    "dns64_1850_a": rebuild_input(
        5, response("a.b.fuzz", 28, 0x8180), response("a.b.fuzz", 1, 0x8180, addresses("a.b.fuzz", 1850))),
    # 2,400: they do not; SERVFAIL.
    "dns64_2400_a": rebuild_input(
        0x85, response("a.b.fuzz", 28, 0x8180), response("a.b.fuzz", 1, 0x8180, addresses("a.b.fuzz", 2400))),
}


def write(target, items):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for key, data in items.items():
        with open(os.path.join(d, key), "wb") as f:
            f.write(data)


write("query_parse", queries)
write("differential_hickory", queries)
write("response_walk", responses)
write("config_parse", configs)
write("resolv_conf", resolvs)
write("response_walk", {"regression_" + k: v for k, v in regressions.items()})
write("corefile_convert", corefiles)
write("snapshot_read", snapshots)
write("handover_names", handover_lists)
write("rewrite_answers", rebuild_inputs)
