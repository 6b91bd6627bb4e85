//! A cache hit allocates nothing: the request path from a received packet to
//! the reply in the worker's buffer (parse, route, metrics, lookup, render)
//! is run thousands of times under a counting allocator, for positive and
//! negative entries, with and without EDNS, and must not allocate once warm.
//! (The first hit resolves metric handles lazily; that is the warm-up.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

/// A client the default allow list serves.
const LOCALHOST: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5353);
use std::time::Instant;

use nodens::NameBuf;
use nodens::Shared;
use nodens::config::Config;
use nodens::wire::{query, response};
use nodens::{Arrival, Handled, ListenerInfo, Proto, Service};
use nodens::{Entry, KeyRef, TtlPolicy};

/// Counts allocations made by the current thread while `COUNTING` is set.
struct CountingAlloc;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// counting touches only thread-local cells, which never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: `ptr` came from `System` through this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocations_during(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

const POLICY: TtlPolicy = TtlPolicy {
    min_ttl: 0,
    max_ttl: 3600,
    negative_max_ttl: 1800,
    failure_ttl: 5,
};

fn client_query(name: &[u8], edns: bool) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)];
    q.extend(name);
    q.extend([0, 1, 0, 1]);
    if edns {
        q.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    }
    q
}

/// An upstream answer for `name` A: one address (rcode NOERROR), or
/// NXDOMAIN with an SOA (TTL 60) in the authority section.
fn upstream(name: &[u8], nxdomain: bool) -> Vec<u8> {
    let mut m = vec![
        0xab,
        0xcd,
        0x81,
        0x80 | (u8::from(nxdomain) * 3),
        0,
        1,
        0,
        u8::from(!nxdomain),
        0,
        u8::from(nxdomain),
        0,
        0,
    ];
    m.extend(name);
    m.extend([0, 1, 0, 1]);
    if nxdomain {
        m.extend([
            0xc0, 0x0c, 0, 6, 0, 1, 0, 0, 0, 60, 0, 24, 0xc0, 0x0c, 0xc0, 0x0c,
        ]);
        m.extend([0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 60]);
    } else {
        m.extend([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, 1]);
    }
    m
}

#[test]
fn cache_hits_allocate_nothing() {
    hits_allocate_nothing("", &[]);
}

/// With the zone's query log on: a record taken and queued for every hit,
/// and, with a queue of 64 that the writer empties every 10 ms, most of
/// them dropped and counted. Neither allocates on the request path.
#[test]
fn cache_hits_with_the_query_log_on_allocate_nothing() {
    hits_allocate_nothing(
        "[zone.query_log]\n[query_log]\noutput = \"/dev/null\"\nqueue = 64\n",
        &[(
            &[
                "nodens_query_log_written_total",
                "nodens_query_log_dropped_total",
            ],
            1,
        )],
    );
}

/// With dnstap on and no reader listening (the writer empties the queue,
/// counting): a record with the query and the reply taken and queued for
/// every hit, or dropped and counted when the queue of 64 is full. Neither
/// allocates on the request path.
#[test]
fn cache_hits_with_dnstap_on_allocate_nothing() {
    hits_allocate_nothing(
        "[dnstap]\nsocket = \"unix:/nonexistent/dnstap.sock\"\nqueue = 64\n",
        &[(
            &["nodens_dnstap_sent_total", "nodens_dnstap_dropped_total"],
            2,
        )],
    );
}

/// Budgets on (`[budget]`) at a rate no query reaches: the client's
/// bucket is updated on every hit.
#[test]
fn cache_hits_with_budgets_on_allocate_nothing() {
    hits_allocate_nothing(
        "[budget]\nqueries_per_second = 1000000000\nmisses_in_flight = 10\n",
        &[],
    );
}

/// Budgets on at one query a second: after the warm-up every query is
/// over budget and REFUSED, counted under a series the slot resolved at
/// the first excess (in the warm-up). The cheap path allocates nothing.
#[test]
fn queries_over_budget_allocate_nothing() {
    hits_allocate_nothing(
        "[budget]\nqueries_per_second = 1\nburst = 1\naction = \"refuse\"\n",
        &[],
    );
}

/// Hits of positive and negative entries, with and without EDNS, over UDP
/// and TCP, with `more` appended to the configuration (after its zone).
/// Each of `offered` names counters whose sum must reach that many records
/// a reply (written or dropped, each counted): what the hits were offered
/// to, so a sink that is never offered a record fails the test.
fn hits_allocate_nothing(more: &str, offered: &[(&[&str], usize)]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let config = Config::parse(&format!(
        "[cache]\nprefetch_min_hits = 0\n[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:9\"]\n{more}",
    ))
    .unwrap();
    let _main = runtime.enter();
    let (shared, metrics) = Shared::standalone_with_metrics(&config);
    let shared = Arc::new(shared);
    let info = ListenerInfo::new("127.0.0.1:1053".parse().unwrap());

    let cases: [(&[u8], bool); 2] = [
        (b"\x04host\x07example\x03com\x00", false),
        (b"\x07missing\x07example\x03com\x00", true),
    ];
    let mut packets = Vec::new();
    for (name, nxdomain) in cases {
        let msg = upstream(name, nxdomain);
        let layout = response::layout(&msg).unwrap();
        for edns in [false, true] {
            let packet = client_query(name, edns);
            let q = query::parse(&packet).unwrap();
            let mut buf: NameBuf = [0; 255];
            let entry = Entry::from_response(&msg, &layout, &POLICY, Instant::now()).unwrap();
            shared
                .cache()
                .insert(KeyRef::from_query(&q, &mut buf).to_owned(), Arc::new(entry));
            packets.push(packet);
        }
    }

    let mut out = Vec::with_capacity(4096);
    // A UDP worker's tally: its batches' hits counted in it, added to the
    // shared metrics at each batch's end.
    let mut tally = <Shared as Service>::Tally::default();
    let mut batch = |shared: &Arc<Shared>, out: &mut Vec<u8>| {
        let at = Instant::now();
        let mut answered = 0;
        for packet in &packets {
            let arrival = Arrival {
                at,
                tally: Some(&mut tally),
            };
            if let Handled::Reply =
                shared.handle(packet, LOCALHOST, &info, Proto::Udp, arrival, out)
            {
                answered += 1;
            }
        }
        shared.end_batch(&mut tally, Instant::now());
        answered
    };
    // Warm-up: every metric handle these queries touch is resolved once.
    assert_eq!(batch(&shared, &mut out), packets.len());
    for packet in &packets {
        assert!(matches!(
            shared.handle(
                packet,
                LOCALHOST,
                &info,
                Proto::Udp,
                Arrival::alone(Instant::now()),
                &mut out
            ),
            Handled::Reply
        ));
        assert!(matches!(
            shared.handle(
                packet,
                LOCALHOST,
                &info,
                Proto::Tcp,
                Arrival::alone(Instant::now()),
                &mut out
            ),
            Handled::Reply
        ));
    }
    let mut replies = 0;
    let allocated = allocations_during(|| {
        for _ in 0..2500 {
            replies += batch(&shared, &mut out);
            for packet in &packets {
                for proto in [Proto::Udp, Proto::Tcp] {
                    if let Handled::Reply = shared.handle(
                        packet,
                        LOCALHOST,
                        &info,
                        proto,
                        Arrival::alone(Instant::now()),
                        &mut out,
                    ) {
                        replies += 1;
                    }
                }
            }
        }
    });
    assert_eq!(
        replies,
        2500 * packets.len() * 3,
        "every query must be answered (a hit, or REFUSED over budget)"
    );
    assert_eq!(
        allocated, 0,
        "{allocated} allocations in {replies} cache hits"
    );
    for (names, per_reply) in offered {
        // The warm-up's replies count too; the writer counts what it took
        // off the queue a moment later.
        let want = (replies + 3 * packets.len()) * per_reply;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let text = metrics();
            let counted: f64 = text
                .lines()
                .filter(|l| names.iter().any(|n| l.starts_with(n)))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            if counted >= want as f64 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{names:?} counted {counted} records, {want} were offered"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

#[test]
fn the_counter_sees_allocations() {
    // Guards against a counting allocator that counts nothing.
    let n = allocations_during(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert!(n >= 1);
}
