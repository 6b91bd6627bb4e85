//! A cache snapshot is input: a process that holds the handover socket
//! before nodens starts (here a real second process, a Python script)
//! can hand it any listening sockets and any cache. nodens must serve
//! nothing from that cache that an upstream answer could not have put
//! there.
//!
//! The fake predecessor follows the handover protocol
//! (`src/listen/handover.rs`): it listens on the handover path, reads the
//! greeting, sends its UDP and TCP sockets (bound to nodens's listen
//! address) with their JSON list in one message, writes a snapshot, and
//! waits for `ready`. The snapshot plants:
//! - `forever.test.` A with a TTL of 2^32-1 s (136 years) and a lifetime
//!   to match: a TTL with the top bit set is zero (RFC 2181 8), so nothing
//!   is left of it; the name is asked upstream and served within max_ttl;
//! - `decades.test.` A with a TTL of 2^31-1 s (68 years): served from the
//!   snapshot, its TTL clamped to the zone's max_ttl;
//! - `victim.test.` A whose message answers `attack.test.` (same length,
//!   so a hit would write the client's question over it): refused; the
//!   name is asked upstream and served with CoreDNS's address.

use std::io::Write as _;
use std::process::Command;

use support::*;

/// The zone's max_ttl in the test configuration.
const MAX_TTL: u32 = 60;

const PREDECESSOR: &str = r#"
import json, os, socket, sys

path, host, port, snapshot = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
udp.bind((host, port))
tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind((host, port))
tcp.listen(128)
tcp.setblocking(False)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
os.chmod(path, 0o600)
server.listen(1)
print("fake predecessor: listening", flush=True)
conn, _ = server.accept()
conn.settimeout(30)
hello = b""
while not hello.endswith(b"\n") and len(hello) < 64:
    hello += conn.recv(1)
if hello != b"nodens-handover 1\n":
    sys.exit("fake predecessor: bad greeting %r" % hello)
names = json.dumps([
    {"addr": "%s:%d" % (host, port), "kind": "udp"},
    {"addr": "%s:%d" % (host, port), "kind": "tcp"},
]).encode()
socket.send_fds(conn, [names], [udp.fileno(), tcp.fileno()])
with open(snapshot, "rb") as f:
    conn.sendall(f.read())
reply = b""
while not reply.endswith(b"\n") and len(reply) < 64:
    chunk = conn.recv(1)
    if not chunk:
        break
    reply += chunk
print("fake predecessor: got %r" % reply, flush=True)
"#;

fn wire_name(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in text.trim_end_matches('.').split('.') {
        out.push(label.len() as u8);
        out.extend(label.as_bytes());
    }
    out.push(0);
    out
}

/// An upstream-like answer: `question` A, one A record `addr` with `ttl`
/// (its owner a pointer to the question). Returns it and where its TTL is.
fn answer(question: &str, ttl: u32, addr: [u8; 4]) -> (Vec<u8>, u16) {
    let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
    m.extend(wire_name(question));
    m.extend([0, 1, 0, 1, 0xc0, 0x0c, 0, 1, 0, 1]);
    let ttl_at = m.len() as u16;
    m.extend(ttl.to_be_bytes());
    m.extend([0, 4]);
    m.extend(addr);
    (m, ttl_at)
}

/// One snapshot record in the format `src/cache/snapshot.rs` documents,
/// every field as a writer would fill it for this message.
fn record(key: &str, msg: &[u8], ttl_at: u16, lifetime_ms: u64) -> Vec<u8> {
    let name = wire_name(key);
    let question_end = (12 + wire_name(key).len() + 4) as u16;
    let mut r = vec![name.len() as u8];
    r.extend(&name);
    r.extend(1u16.to_be_bytes()); // type A
    r.extend(1u16.to_be_bytes()); // class IN
    r.push(0); // flags
    r.push(0); // kind: success
    r.extend(0u16.to_be_bytes()); // rcode
    r.extend(question_end.to_be_bytes());
    r.extend((msg.len() as u16).to_be_bytes()); // additional section start
    r.extend(u32::MAX.to_be_bytes()); // original TTL
    r.extend(lifetime_ms.to_be_bytes());
    r.extend(0u64.to_be_bytes()); // age
    r.extend(1u16.to_be_bytes());
    r.extend(ttl_at.to_be_bytes());
    r.extend((msg.len() as u32).to_be_bytes());
    r.extend(msg);
    r
}

fn snapshot() -> Vec<u8> {
    let forever = answer("forever.test.", u32::MAX, [192, 0, 2, 99]);
    let decades = answer("decades.test.", 0x7fff_ffff, [192, 0, 2, 98]);
    let victim = answer("attack.test.", 3600, [192, 0, 2, 66]);
    let records = [
        record(
            "forever.test.",
            &forever.0,
            forever.1,
            u64::from(u32::MAX) * 1000,
        ),
        record("decades.test.", &decades.0, decades.1, u64::MAX),
        record("victim.test.", &victim.0, victim.1, 3_600_000),
    ];
    let mut out = b"NDC1".to_vec();
    for r in records {
        out.extend((r.len() as u32).to_be_bytes());
        out.extend(r);
    }
    out.extend(0u32.to_be_bytes());
    out
}

#[test]
fn a_planted_snapshot_is_checked_like_an_upstream_answer() {
    needs!(Need::CoreDns, Need::Tool("python3"));
    let net = Net::alloc();
    let core = CoreDns::test_zone(
        net.upstream(0),
        "forever 300 IN A 192.0.2.10\nvictim 300 IN A 192.0.2.20\n",
    );
    let dir = private_dir();
    let socket_path = dir.path().join("handover.sock");
    let snapshot_path = dir.path().join("snapshot");
    std::fs::File::create(&snapshot_path)
        .unwrap()
        .write_all(&snapshot())
        .unwrap();
    let script = dir.path().join("predecessor.py");
    std::fs::write(&script, PREDECESSOR).unwrap();
    let dns = net.nodens();
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .arg(&socket_path)
        .arg(dns.ip().to_string())
        .arg(dns.port().to_string())
        .arg(&snapshot_path);
    let mut fake = Proc::spawn("fake predecessor", cmd);
    fake.wait_for_line(0, secs(10), "its listening line", |l| {
        l.contains("fake predecessor: listening")
    });

    let toml = format!(
        "[server]\nlisten = [\"{dns}\"]\nworkers = 1\nhandover_socket = \"{path}\"\n\
         [metrics]\nlisten = \"{http}\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"{up}\"]\nmax_ttl = \"{MAX_TTL}s\"\n",
        http = net.metrics(),
        path = socket_path.display(),
        up = core.addr,
    );
    let mut nodens = Nodens::launch(&toml, &[]);
    nodens.proc.wait_for_line(0, secs(10), "the takeover", |l| {
        l.contains("handover: took over")
    });
    fake.wait_for_line(0, secs(10), "ready", |l| l.contains(r#"got b'ready\n'"#));
    nodens.wait_ready();

    // Served from the snapshot (CoreDNS has no such name), within max_ttl.
    let decades = udp_query(dns, &Q::new("decades.test.", Rt::A));
    assert_eq!(
        decades.a(),
        vec![ipv4("192.0.2.98")],
        "decades.test. from the snapshot"
    );
    assert!(
        decades.ttls().iter().all(|&t| t <= MAX_TTL),
        "decades.test. served with TTLs {:?}, the zone's max_ttl is {MAX_TTL}",
        decades.ttls()
    );

    // Nothing left of a 136-year TTL: asked upstream, served within max_ttl.
    let forever = udp_query(dns, &Q::new("forever.test.", Rt::A));
    assert!(
        forever.ttls().iter().all(|&t| t <= MAX_TTL),
        "forever.test. served with TTLs {:?}, the zone's max_ttl is {MAX_TTL}",
        forever.ttls()
    );
    assert_eq!(
        forever.a(),
        vec![ipv4("192.0.2.10")],
        "forever.test. from CoreDNS"
    );

    // An answer to another question is not served for the key.
    let victim = udp_query(dns, &Q::new("victim.test.", Rt::A));
    assert_eq!(
        victim.a(),
        vec![ipv4("192.0.2.20")],
        "victim.test. served from a planted answer to attack.test."
    );
    core.wait_queries("victim.test.", "A", 1, secs(5));
    core.sync_log();
    assert_eq!(core.count_queries("decades.test.", "A"), 0);

    let loaded = nodens.metric(
        "nodens_cache_snapshot_records_total",
        &[("result", "loaded")],
    );
    let refused = nodens.metric(
        "nodens_cache_snapshot_records_total",
        &[("result", "refused")],
    );
    assert_eq!((loaded, refused), (1.0, 2.0));
    assert!(
        nodens
            .proc
            .lines()
            .iter()
            .any(|l| l.contains("cache snapshot: records refused")),
        "the refusal is logged"
    );
}
