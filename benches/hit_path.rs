//! Microbenchmarks of the cache-hit path, step by step and whole, so that a
//! regression shows up before the end-to-end benchmark (bench/). Run with
//! `cargo bench --bench hit_path`.

use std::hint::black_box;
use std::sync::Arc;

/// A client the default allow list serves.
const LOCALHOST: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5353);
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use nodens::NameBuf;
use nodens::Shared;
use nodens::config::Config;
use nodens::wire::{query, response};
use nodens::{Arrival, Handled, ListenerInfo, Proto, Service};
use nodens::{Cache, Entry, Freshness, KeyRef, TtlPolicy};

const POLICY: TtlPolicy = TtlPolicy {
    min_ttl: 0,
    max_ttl: 3600,
    negative_max_ttl: 1800,
    failure_ttl: 5,
};

/// A client query for `name` (wire form) type A, with EDNS.
fn client_query(name: &[u8]) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    q.extend(name);
    q.extend([0, 1, 0, 1]);
    q.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    q
}

/// An upstream answer to `name` A: one address, TTL 3600.
fn upstream_answer(name: &[u8]) -> Vec<u8> {
    let mut m = vec![0xab, 0xcd, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
    m.extend(name);
    m.extend([0, 1, 0, 1]);
    m.extend([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, 1]);
    m
}

fn name(i: u32) -> Vec<u8> {
    let label = format!("host-{i}");
    let mut n = vec![label.len() as u8];
    n.extend(label.as_bytes());
    n.extend(b"\x07example\x03com\x00");
    n
}

fn entry_for(wire_name: &[u8]) -> Arc<Entry> {
    let msg = upstream_answer(wire_name);
    let layout = response::layout(&msg).unwrap();
    Arc::new(Entry::from_response(&msg, &layout, &POLICY, Instant::now()).unwrap())
}

fn steps(c: &mut Criterion) {
    let n = name(42);
    let packet = client_query(&n);
    c.bench_function("parse", |b| {
        b.iter(|| query::parse(black_box(&packet)).unwrap().qtype)
    });

    let q = query::parse(&packet).unwrap();
    c.bench_function("key", |b| {
        b.iter(|| {
            let mut buf: NameBuf = [0; 255];
            let n = KeyRef::from_query(black_box(&q), &mut buf).name.len();
            black_box(&buf);
            n
        })
    });

    let cache = Cache::new(64 << 20);
    for i in 0..100_000 {
        let n = name(i);
        let mut buf: NameBuf = [0; 255];
        let packet = client_query(&n);
        let q = query::parse(&packet).unwrap();
        cache.insert(KeyRef::from_query(&q, &mut buf).to_owned(), entry_for(&n));
    }
    c.bench_function("lookup (100k entries)", |b| {
        b.iter(|| {
            let mut buf: NameBuf = [0; 255];
            let key = KeyRef::from_query(&q, &mut buf);
            matches!(
                cache.lookup(black_box(&key), Instant::now(), std::time::Duration::ZERO),
                nodens::Lookup::Fresh(_)
            )
        })
    });

    let entry = entry_for(&n);
    let mut out = Vec::with_capacity(1232);
    c.bench_function("render (copy + patch ID, case, TTLs, OPT)", |b| {
        b.iter(|| {
            entry
                .render(
                    black_box(&q),
                    Instant::now(),
                    Freshness::Fresh,
                    None,
                    1232,
                    &mut out,
                )
                .rcode
        })
    });
}

fn whole_hit(c: &mut Criterion) {
    hit_with(c, "handle: cache hit, metrics included", "");
    // What a UDP worker's hit costs: its recvmmsg reads 1 to 64 queries
    // (few on a node that is not saturated), with two clock reads and one
    // addition to the shared metrics per batch.
    for per_batch in [1, 4, 16] {
        hit_in_batches(
            c,
            &format!("handle: cache hit, metrics included, batches of {per_batch} (UDP)"),
            "",
            per_batch,
        );
    }
    // The A of a zone that answers IPv4-only pods' AAAA from the A: what
    // the setting costs a question it does not concern.
    hit_with(
        c,
        "handle: cache hit, no_aaaa_for_ipv4_pods on (an A)",
        "no_aaaa_for_ipv4_pods = true\n",
    );
}

/// The query log on: every hit offered (the writer, formatting to
/// /dev/null on another thread, keeps up with part of them; the rest are
/// dropped and counted), and 1 in 100 sampled.
fn whole_hit_logged(c: &mut Criterion) {
    let sink = "[query_log]\noutput = \"/dev/null\"\n";
    hit_with(
        c,
        "handle: cache hit, query log on",
        &format!("[zone.query_log]\n{sink}"),
    );
    hit_with(
        c,
        "handle: cache hit, query log on, sample 1/100",
        &format!("[zone.query_log]\nsample = 100\n{sink}"),
    );
}

/// dnstap on, with a reader that takes every frame (a thread here doing
/// the Frame Streams handshake, then reading and discarding): every hit
/// offered as a record (the writer, encoding on another thread, keeps up
/// with part of them; the rest are dropped and counted). Off is
/// "handle: cache hit, metrics included".
fn whole_hit_tapped(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tap.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || frame_streams_reader(listener));
    hit_with(
        c,
        "handle: cache hit, dnstap on",
        &format!("[dnstap]\nsocket = \"unix:{}\"\n", socket.display()),
    );
    hit_with(
        c,
        "handle: cache hit, dnstap on, without messages (full = false)",
        &format!(
            "[dnstap]\nsocket = \"unix:{}\"\nfull = false\n",
            socket.display()
        ),
    );
}

/// A Frame Streams reader: for each connection, READY is answered with
/// ACCEPT, then everything is read and thrown away.
fn frame_streams_reader(listener: std::os::unix::net::UnixListener) {
    use std::io::{Read, Write};
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { return };
        std::thread::spawn(move || {
            let mut head = [0u8; 8];
            if conn.read_exact(&mut head).is_err() {
                return;
            }
            let len = u32::from_be_bytes(head[4..8].try_into().unwrap()) as usize;
            let mut ready = vec![0; len];
            if conn.read_exact(&mut ready).is_err() {
                return;
            }
            // ACCEPT (1), with the content type READY offered.
            let mut accept = vec![0, 0, 0, 1];
            accept.extend_from_slice(&ready[4..]);
            let mut frame = vec![0, 0, 0, 0];
            frame.extend_from_slice(&(accept.len() as u32).to_be_bytes());
            frame.extend_from_slice(&accept);
            if conn.write_all(&frame).is_err() {
                return;
            }
            let mut sink = [0u8; 65536];
            while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
        });
    }
}

/// Budgets on (`[budget]`), at a rate no query reaches: what a hit pays
/// for its client's bucket (a client that is no known pod: its address).
fn whole_hit_budgeted(c: &mut Criterion) {
    hit_with(
        c,
        "handle: cache hit, budgets on",
        "[budget]\nqueries_per_second = 1000000000\nmisses_in_flight = 100\n",
    );
}

/// Per-workload counters on (`[server] workload_counters`): what a hit
/// pays for its client's slot (a client that is no known pod).
fn whole_hit_counted(c: &mut Criterion) {
    hit_with(
        c,
        "handle: cache hit, workload counters on",
        "[server]\nworkload_counters = true\n",
    );
}

/// A whole cache hit through `handle`, with `more` appended to the
/// configuration (after its zone), counted on its own (as over TCP).
fn hit_with(c: &mut Criterion, label: &str, more: &str) {
    hit_in_batches(c, label, more, 0);
}

/// [`hit_with`], in batches of `per_batch` hits counted in a UDP worker's
/// tally (0: each counted on its own).
fn hit_in_batches(c: &mut Criterion, label: &str, more: &str, per_batch: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let config = Config::parse(&format!(
        "[cache]\nprefetch_min_hits = 0\n[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:9\"]\n{more}",
    ))
    .unwrap();
    let _main = runtime.enter();
    let shared = Arc::new(Shared::standalone(&config));
    let n = name(7);
    let packet = client_query(&n);
    let q = query::parse(&packet).unwrap();
    let mut buf: NameBuf = [0; 255];
    shared
        .cache()
        .insert(KeyRef::from_query(&q, &mut buf).to_owned(), entry_for(&n));
    let info = ListenerInfo::new("127.0.0.1:1053".parse().unwrap());
    let mut out = Vec::with_capacity(1232);
    if per_batch == 0 {
        c.bench_function(label, |b| {
            b.iter(|| {
                matches!(
                    shared.handle(
                        black_box(&packet),
                        LOCALHOST,
                        &info,
                        Proto::Udp,
                        Arrival::alone(std::time::Instant::now()),
                        &mut out
                    ),
                    Handled::Reply
                )
            })
        });
        return;
    }
    // As a UDP worker does: one clock read before a batch and one after,
    // the hits counted in its tally and added up at the batch's end.
    let mut tally = <Shared as Service>::Tally::default();
    let mut in_batch = 0;
    let mut arrived = std::time::Instant::now();
    c.bench_function(label, |b| {
        b.iter(|| {
            let arrival = Arrival {
                at: arrived,
                tally: Some(&mut tally),
            };
            let hit = matches!(
                shared.handle(
                    black_box(&packet),
                    LOCALHOST,
                    &info,
                    Proto::Udp,
                    arrival,
                    &mut out
                ),
                Handled::Reply
            );
            in_batch += 1;
            if in_batch == per_batch {
                shared.end_batch(&mut tally, std::time::Instant::now());
                arrived = std::time::Instant::now();
                in_batch = 0;
            }
            hit
        })
    });
}

criterion_group!(
    benches,
    steps,
    whole_hit,
    whole_hit_logged,
    whole_hit_budgeted,
    whole_hit_counted,
    whole_hit_tapped
);
criterion_main!(benches);
