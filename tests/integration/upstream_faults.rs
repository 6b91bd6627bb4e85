//! The upstream TCP pool when upstreams misbehave.
//!
//! No real server misbehaves on demand, so the misbehaving upstreams here
//! are small TCP servers the test writes ([`Fake`]): they accept and never
//! answer, answer N queries then close, answer with the wrong ID or the
//! wrong question, reset the connection, or answer pipelined queries in
//! reverse order. Real answers come from a real CoreDNS (proxied over UDP),
//! and the healthy upstream next to a bad one is a real CoreDNS too. Each
//! fake records what it accepted, every query, and when nodens closed each
//! connection, so leaks are visible from the upstream's side.
//!
//! Also one pool edge case with no slack at all: `max_queue = 0`.
//!
//! Every test is bounded in time and ends with the pool gauges of every
//! upstream back at idle (busy connections, queue length, in flight: 0).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record};
use support::*;

// ---- metrics ---------------------------------------------------------------------

const DIALS: &str = "nodens_upstream_tcp_dials_total";
const DIAL_FAILURES: &str = "nodens_upstream_tcp_dial_failures_total";
const CLOSED: &str = "nodens_upstream_tcp_closed_total";
const ERRORS: &str = "nodens_upstream_errors_total";
const HEALTHY: &str = "nodens_upstream_healthy";
const HEALTH_CHECKS: &str = "nodens_upstream_health_checks_total";
const PROXY_HC_FAILURES: &str = "coredns_proxy_healthcheck_failures_total";
const CONN_MISSES: &str = "coredns_proxy_conn_cache_misses_total";

/// The `nodens_upstream_errors_total` series of one upstream, for messages.
fn errors_of(nodens: &Nodens, to: &str) -> Vec<(String, f64)> {
    parse_metrics(&nodens.metrics_text())
        .into_iter()
        .filter(|s| s.name == ERRORS && s.label("to") == Some(to))
        .map(|s| (s.label("error").unwrap_or("?").to_string(), s.value))
        .collect()
}

/// Waits until the sum of `name{to, reason}` over `reasons` is at least `n`.
fn wait_closed_for(nodens: &Nodens, to: &str, reasons: &[&str], n: f64) -> f64 {
    wait_until(
        Duration::from_secs(5),
        &format!("{CLOSED}{{to={to}, reason in {reasons:?}}} >= {n}"),
        || {
            let m = parse_metrics(&nodens.metrics_text());
            let v: f64 = reasons
                .iter()
                .map(|r| sum_metric(&m, CLOSED, &[("to", to), ("reason", r)]))
                .sum();
            (v >= n).then_some(v)
        },
    )
}

// ---- fake upstreams --------------------------------------------------------------

/// What a fake upstream saw on one connection.
#[derive(Clone, Debug)]
struct ConnLog {
    accepted: Instant,
    /// Each query, raw.
    queries: Vec<Vec<u8>>,
    /// When nodens closed (FIN or RST) its end, if it has.
    peer_closed: Option<Instant>,
}

#[derive(Debug, Default)]
struct FakeLog {
    conns: Vec<ConnLog>,
    /// Sizes of the batches a batching behaviour answered.
    batches: Vec<usize>,
}

/// What a fake does with one accepted connection; when it returns, the
/// connection is closed (FIN, or RST if [`Conn::reset`] was called).
type Behaviour = Arc<dyn Fn(&mut Conn) + Send + Sync>;

/// A TCP DNS server written by the test, one thread per connection, stopped
/// (and its accept loop joined) on drop.
struct Fake {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<FakeLog>>,
    accept: Option<thread::JoinHandle<()>>,
}

enum Got {
    Msg(Vec<u8>),
    Closed,
    Timeout,
}

struct Conn {
    stream: Option<TcpStream>,
    idx: usize,
    log: Arc<Mutex<FakeLog>>,
    stop: Arc<AtomicBool>,
    buf: Vec<u8>,
}

impl Conn {
    /// The next framed query within `timeout` (recorded), or Closed when
    /// nodens closed the connection (recorded) or the fake is stopping.
    fn read_query(&mut self, timeout: Duration) -> Got {
        let deadline = Instant::now() + timeout;
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(msg) = take_frame(&mut self.buf) {
                self.log.lock().unwrap().conns[self.idx]
                    .queries
                    .push(msg.clone());
                return Got::Msg(msg);
            }
            if self.stop.load(Ordering::SeqCst) {
                return Got::Closed;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Got::Timeout;
            };
            let Some(stream) = self.stream.as_mut() else {
                return Got::Closed;
            };
            stream
                .set_read_timeout(Some(
                    left.clamp(Duration::from_millis(1), Duration::from_millis(50)),
                ))
                .unwrap();
            match stream.read(&mut chunk) {
                Ok(0) => return self.peer_closed(),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => return self.peer_closed(),
            }
        }
    }

    fn peer_closed(&mut self) -> Got {
        let mut log = self.log.lock().unwrap();
        log.conns[self.idx]
            .peer_closed
            .get_or_insert_with(Instant::now);
        Got::Closed
    }

    /// Sends one framed message (errors ignored: nodens may have gone).
    fn write(&mut self, msg: &[u8]) {
        if let Some(s) = self.stream.as_mut() {
            let mut framed = (msg.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(msg);
            let _ = s.write_all(&framed);
        }
    }

    /// Reads (and records) queries without answering until nodens closes
    /// the connection, or `timeout`.
    fn drain_until_closed(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if let Got::Closed = self.read_query(left) {
                return;
            }
        }
    }

    /// Closes with SO_LINGER 0: the kernel sends RST instead of FIN.
    fn reset(&mut self) {
        if let Some(s) = self.stream.take() {
            socket2::SockRef::from(&s)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            drop(s);
        }
    }
}

impl Fake {
    fn start(addr: SocketAddr, behaviour: Behaviour) -> Fake {
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(FakeLog::default()));
        let accept = {
            let (stop, log) = (Arc::clone(&stop), Arc::clone(&log));
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _peer)) => {
                            stream.set_nonblocking(false).unwrap();
                            stream.set_nodelay(true).unwrap();
                            stream
                                .set_write_timeout(Some(Duration::from_secs(2)))
                                .unwrap();
                            let idx = {
                                let mut l = log.lock().unwrap();
                                l.conns.push(ConnLog {
                                    accepted: Instant::now(),
                                    queries: Vec::new(),
                                    peer_closed: None,
                                });
                                l.conns.len() - 1
                            };
                            let mut conn = Conn {
                                stream: Some(stream),
                                idx,
                                log: Arc::clone(&log),
                                stop: Arc::clone(&stop),
                                buf: Vec::new(),
                            };
                            let behaviour = Arc::clone(&behaviour);
                            // Ends when the behaviour returns: every read is bounded and watches `stop`.
                            thread::spawn(move || behaviour(&mut conn));
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            thread::sleep(Duration::from_millis(5))
                        }
                        Err(e) => panic!("accept on {addr}: {e}"),
                    }
                }
            })
        };
        Fake {
            addr,
            stop,
            log,
            accept: Some(accept),
        }
    }

    fn conns(&self) -> Vec<ConnLog> {
        self.log.lock().unwrap().conns.clone()
    }

    fn batches(&self) -> Vec<usize> {
        self.log.lock().unwrap().batches.clone()
    }

    /// Waits until nodens has closed every connection this fake accepted.
    fn wait_all_closed(&self, timeout: Duration) -> Vec<ConnLog> {
        wait_until(
            timeout,
            &format!("nodens to close every connection to {}", self.addr),
            || {
                let c = self.conns();
                c.iter().all(|c| c.peer_closed.is_some()).then_some(c)
            },
        )
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// CoreDNS's answer to a query nodens sent (same ID and question), over UDP.
fn proxy(core: SocketAddr, query: &[u8]) -> Vec<u8> {
    udp_exchange(core, query, Duration::from_secs(2)).expect("CoreDNS answered a proxied query")
}

/// A well-formed NOERROR answer with `id`, question `qname` A, and the
/// answer `qname` A `addr` (TTL 300): poison, if nodens accepted it.
fn forged_answer(query: &[u8], id: u16, qname: &str, addr: Ipv4Addr) -> Vec<u8> {
    let q = Message::from_vec(query).expect("nodens sent a parsable query");
    let name = Name::from_ascii(qname).unwrap();
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(q.recursion_desired())
        .set_recursion_available(true)
        .set_authoritative(true)
        .set_response_code(ResponseCode::NoError);
    m.add_query(Query::query(name.clone(), Rt::A));
    m.add_answer(Record::from_rdata(name, 300, RData::A(A(addr))));
    m.to_vec().unwrap()
}

fn id_of(msg: &[u8]) -> u16 {
    u16::from_be_bytes([msg[0], msg[1]])
}

/// The question name of a query, lower case, fully qualified.
fn qname(msg: &[u8]) -> String {
    question_of(msg).map(|(n, _)| n).unwrap_or_default()
}

const POISON: &str = "192.0.2.66";

/// CoreDNS's log, the harness's own probes left out.
fn logged(core: &CoreDns) -> Vec<LoggedQuery> {
    core.queries()
        .into_iter()
        .filter(|q| !q.name.starts_with("_ready.") && !q.name.starts_with("_sync"))
        .collect()
}

// ---- tests -------------------------------------------------------------------

/// An upstream that accepts, reads and never answers, before a CoreDNS. The
/// try fails after upstream_timeout (1 s), the CoreDNS answers the retry;
/// the stuck connection is retired (closed_total{reason="stuck"|"error"}),
/// and the fake sees every connection closed by nodens: none leaks.
#[test]
fn never_answering_upstream_is_retired() {
    needs!(Need::CoreDns, Need::Tool("ss"));
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let hole = Fake::start(
        net.silent(0),
        Arc::new(|c: &mut Conn| c.drain_until_closed(Duration::from_secs(30))),
    );
    let (to_hole, to_core) = (hole.addr.to_string(), core.addr.to_string());
    let nodens = Nodens::start(
        &Cfg::new(&net).query_timeout(secs(5)).zone(
            Zone::new("test.", &[hole.addr, core.addr])
                .transport(Transport::ForceTcp)
                .upstream_timeout(secs(1))
                .max_fails(10),
        ),
    );

    for (i, (name, t)) in [("www.test.", Rt::A), ("mail.test.", Rt::MX)]
        .into_iter()
        .enumerate()
    {
        let r = udp_query_timeout(nodens.dns, &Q::new(name, t), Duration::from_secs(8))
            .expect("an answer");
        assert_eq!(r.rcode(), rcode::NOERROR, "{name} {t}");
        assert!(!r.msg.answers().is_empty(), "{name} {t}: no answer records");
        assert!(
            r.elapsed >= Duration::from_millis(800) && r.elapsed <= Duration::from_millis(2500),
            "{name} {t} answered after {:?}; upstream_timeout is 1 s",
            r.elapsed
        );
        // The stuck connection is closed by nodens within upstream_timeout (+ margin) of its query.
        let conns = hole.wait_all_closed(Duration::from_secs(3));
        assert_eq!(
            conns.len(),
            i + 1,
            "connections the silent upstream accepted after query {}",
            i + 1
        );
        let c = &conns[i];
        assert_eq!(
            c.queries.iter().map(|q| qname(q)).collect::<Vec<_>>(),
            vec![name.to_string()],
            "queries on it"
        );
        let open_for = c.peer_closed.unwrap() - c.accepted;
        assert!(
            open_for <= Duration::from_millis(2500),
            "stuck connection closed only after {open_for:?}"
        );
    }
    let retired = wait_closed_for(&nodens, &to_hole, &["stuck", "error"], 2.0);
    assert_eq!(retired, 2.0, "{CLOSED}{{to={to_hole}, reason=stuck|error}}");
    assert!(
        nodens.metric(ERRORS, &[("to", &to_hole), ("error", "timeout")]) >= 2.0,
        "timeouts not counted: {:?}",
        errors_of(&nodens, &to_hole)
    );
    assert!(
        ss_established(hole.addr).is_empty(),
        "connections still established at the silent upstream"
    );

    core.sync_log();
    assert_eq!(core.count_tcp_queries("www.test.", "A"), 1);
    assert_eq!(core.count_tcp_queries("mail.test.", "MX"), 1);
    nodens.wait_pool_idle(&[&to_hole, &to_core]);
}

/// An upstream (CoreDNS's answers, proxied) that closes each connection
/// after 2 queries, the only upstream of the zone: 6 sequential queries all
/// succeed, over 3 connections, each closure counted as peer_closed.
#[test]
fn upstream_closing_after_two_queries() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let core_addr = core.addr;
    let closer = Fake::start(
        net.other(10, 5300),
        Arc::new(move |c: &mut Conn| {
            for _ in 0..2 {
                match c.read_query(Duration::from_secs(15)) {
                    Got::Msg(q) => c.write(&proxy(core_addr, &q)),
                    _ => return,
                }
            }
        }),
    );
    let to = closer.addr.to_string();
    let nodens = Nodens::start(
        &Cfg::new(&net).zone(
            Zone::new("test.", &[closer.addr])
                .transport(Transport::ForceTcp)
                .upstream_timeout(secs(2))
                .pool(Pool::new().max_connections(1)),
        ),
    );

    let cases = [
        ("www.test.", "192.0.2.1"),
        ("short.test.", "192.0.2.2"),
        ("mx.test.", "192.0.2.3"),
        ("short2.test.", "192.0.2.4"),
        ("pf.test.", "192.0.2.5"),
        ("pf2.test.", "192.0.2.6"),
    ];
    for (name, addr) in cases {
        let r = udp_query(nodens.dns, &Q::new(name, Rt::A));
        assert_eq!(r.rcode(), rcode::NOERROR, "{name}");
        assert_eq!(r.a(), vec![ipv4(addr)], "{name}");
        // The upstream closes right after its 2nd answer; "removed at once"
        // means nodens knows within these 100 ms that the connection is gone.
        thread::sleep(Duration::from_millis(100));
    }

    // Every query is answered, so the fake has logged every connection.
    let per_conn: Vec<usize> = closer.conns().iter().map(|c| c.queries.len()).collect();
    assert_eq!(per_conn, vec![2, 2, 2], "queries per connection");
    let peer_closed = wait_closed_for(&nodens, &to, &["peer_closed"], 3.0);
    assert_eq!(peer_closed, 3.0, "{CLOSED}{{reason=peer_closed}}");
    assert_eq!(nodens.metric(DIALS, &[("to", &to)]), 3.0, "{DIALS}");
    nodens.wait_pool_idle(&[&to]);
}

/// An upstream that answers with the wrong ID (and poisoned data) and then
/// nothing: the answer is ignored and counted as a mismatch, the try times
/// out, the connection is retired, CoreDNS answers; the poison is neither
/// returned nor cached.
#[test]
fn wrong_id_answer_ignored_then_timeout() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let bad = Fake::start(
        net.other(10, 5300),
        Arc::new(|c: &mut Conn| {
            if let Got::Msg(q) = c.read_query(Duration::from_secs(15)) {
                let forged = forged_answer(&q, id_of(&q).wrapping_add(1), &qname(&q), ipv4(POISON));
                c.write(&forged);
                c.drain_until_closed(Duration::from_secs(15));
            }
        }),
    );
    let (to_bad, to_core) = (bad.addr.to_string(), core.addr.to_string());
    let nodens = Nodens::start(
        &Cfg::new(&net).query_timeout(secs(5)).zone(
            Zone::new("test.", &[bad.addr, core.addr])
                .transport(Transport::ForceTcp)
                .upstream_timeout(secs(1))
                .max_fails(10),
        ),
    );

    let r = udp_query_timeout(
        nodens.dns,
        &Q::new("www.test.", Rt::A),
        Duration::from_secs(8),
    )
    .expect("an answer");
    assert_eq!(
        r.a(),
        vec![ipv4("192.0.2.1")],
        "the wrong-ID answer was used"
    );
    assert!(
        r.elapsed >= Duration::from_millis(800) && r.elapsed <= Duration::from_millis(2500),
        "answered after {:?}: the wrong-ID answer should be ignored until upstream_timeout (1 s)",
        r.elapsed
    );
    let mismatch = nodens.wait_metric(ERRORS, &[("to", &to_bad), ("error", "mismatch")], 1.0);
    assert_eq!(mismatch, 1.0, "{ERRORS}{{error=mismatch}}");
    assert!(
        nodens.metric(ERRORS, &[("to", &to_bad), ("error", "timeout")]) >= 1.0,
        "the try did not time out: {:?}",
        errors_of(&nodens, &to_bad)
    );
    let conns = bad.wait_all_closed(Duration::from_secs(3));
    assert_eq!(conns.len(), 1);
    wait_closed_for(&nodens, &to_bad, &["stuck", "error"], 1.0);

    // Cached is CoreDNS's answer, not the poison.
    let hit = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(hit.a(), vec![ipv4("192.0.2.1")]);
    core.sync_log();
    assert_eq!(
        core.count_queries("www.test.", "A"),
        1,
        "the second query was not a cache hit"
    );
    assert_eq!(
        bad.conns().iter().map(|c| c.queries.len()).sum::<usize>(),
        1
    );
    nodens.wait_pool_idle(&[&to_bad, &to_core]);
}

/// An upstream that answers the first query with the right ID but another
/// question (poison.test. A 192.0.2.66), then answers correctly (CoreDNS's
/// answers, proxied). That query fails at once (not after the 2 s
/// upstream_timeout) and CoreDNS answers it; the mismatch is counted; asking
/// for poison.test. afterwards goes upstream and gets CoreDNS's NXDOMAIN:
/// the forged record was not cached.
#[test]
fn right_id_wrong_question_fails_the_query() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let core_addr = core.addr;
    let forged_once = Arc::new(AtomicBool::new(false));
    let bad = Fake::start(
        net.other(10, 5300),
        Arc::new(move |c: &mut Conn| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                match c.read_query(left) {
                    Got::Msg(q) if !forged_once.swap(true, Ordering::SeqCst) => {
                        c.write(&forged_answer(&q, id_of(&q), "poison.test.", ipv4(POISON)))
                    }
                    Got::Msg(q) => c.write(&proxy(core_addr, &q)),
                    _ => return,
                }
            }
        }),
    );
    let (to_bad, to_core) = (bad.addr.to_string(), core.addr.to_string());
    let nodens = Nodens::start(
        &Cfg::new(&net).query_timeout(secs(5)).zone(
            Zone::new("test.", &[bad.addr, core.addr])
                .transport(Transport::ForceTcp)
                .upstream_timeout(secs(2))
                .max_fails(10),
        ),
    );

    let r = udp_query_timeout(
        nodens.dns,
        &Q::new("www.test.", Rt::A),
        Duration::from_secs(8),
    )
    .expect("an answer");
    assert_eq!(r.rcode(), rcode::NOERROR);
    assert_eq!(
        r.a(),
        vec![ipv4("192.0.2.1")],
        "answer records: {:?}",
        r.msg.answers()
    );
    assert!(
        r.elapsed < Duration::from_millis(1500),
        "answered after {:?}: a wrong-question answer must fail the try at once, not wait for upstream_timeout (2 s)",
        r.elapsed
    );
    core.sync_log();
    assert_eq!(
        core.count_tcp_queries("www.test.", "A"),
        1,
        "CoreDNS did not answer the failed try"
    );
    let errors: f64 = errors_of(&nodens, &to_bad).iter().map(|(_, v)| v).sum();
    assert!(
        errors >= 1.0,
        "the failed try was not counted at all: {:?}",
        errors_of(&nodens, &to_bad)
    );

    let p = udp_query(nodens.dns, &Q::new("poison.test.", Rt::A));
    assert_eq!(
        p.rcode(),
        rcode::NXDOMAIN,
        "poison.test. answered {:?}",
        p.msg.answers()
    );
    assert!(p.a().is_empty());
    core.sync_log();
    // Either directly or proxied by the fake: it went upstream, it was not in the cache.
    assert_eq!(
        core.count_queries("poison.test.", "A"),
        1,
        "poison.test. did not go upstream"
    );
    nodens.wait_pool_idle(&[&to_bad, &to_core]);
    // docs/metrics.md: `mismatch` is a message that answered no query of ours, "wrong ID or question".
    assert_eq!(
        nodens.metric(ERRORS, &[("to", &to_bad), ("error", "mismatch")]),
        1.0,
        "the wrong-question answer is not counted as a mismatch: {:?}",
        errors_of(&nodens, &to_bad)
    );
}

/// An upstream that reads the query and resets the connection (SO_LINGER 0)
/// before a CoreDNS: each query fails over at once (well within the 2 s
/// upstream_timeout), the error and the dead connection are counted.
#[test]
fn reset_connection_fails_over_at_once() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let rst = Fake::start(
        net.other(10, 5300),
        Arc::new(|c: &mut Conn| {
            if let Got::Msg(_) = c.read_query(Duration::from_secs(15)) {
                c.reset();
            }
        }),
    );
    let (to_rst, to_core) = (rst.addr.to_string(), core.addr.to_string());
    let nodens = Nodens::start(
        &Cfg::new(&net).query_timeout(secs(5)).zone(
            Zone::new("test.", &[rst.addr, core.addr])
                .transport(Transport::ForceTcp)
                .upstream_timeout(secs(2))
                .max_fails(10),
        ),
    );

    for (name, addr) in [
        ("www.test.", "192.0.2.1"),
        ("mx.test.", "192.0.2.3"),
        ("short.test.", "192.0.2.2"),
    ] {
        let r = udp_query_timeout(nodens.dns, &Q::new(name, Rt::A), Duration::from_secs(8))
            .expect("an answer");
        assert_eq!(r.a(), vec![ipv4(addr)], "{name}");
        assert!(
            r.elapsed < Duration::from_millis(1000),
            "{name}: answered after {:?} (reset is immediate)",
            r.elapsed
        );
    }
    let conns = rst.conns();
    assert_eq!(
        conns.len(),
        3,
        "connections the resetting upstream accepted"
    );
    assert!(conns.iter().all(|c| c.queries.len() == 1), "{conns:?}");

    let errors: f64 = errors_of(&nodens, &to_rst).iter().map(|(_, v)| v).sum();
    assert!(
        errors >= 3.0,
        "errors counted for the resetting upstream: {:?}",
        errors_of(&nodens, &to_rst)
    );
    wait_closed_for(&nodens, &to_rst, &["error", "peer_closed"], 3.0);
    core.sync_log();
    for name in ["www.test.", "mx.test.", "short.test."] {
        assert_eq!(core.count_tcp_queries(name, "A"), 1, "{name} at CoreDNS");
    }
    nodens.wait_pool_idle(&[&to_rst, &to_core]);
}

/// Nothing listening on the first upstream: each try fails at once (RST on
/// connect) and CoreDNS answers; after max_fails = 2 the upstream is marked
/// down (healthy 0) and queries go straight to CoreDNS (no dial, no error
/// for the down one). Health probes fail; then a CoreDNS is started on the
/// down address: healthy returns to 1 within a few seconds, what reached it
/// before that was only `. IN NS` probes, and it gets queries again.
#[test]
fn down_upstream_marked_unhealthy_then_recovers() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let down = net.upstream(0);
    let core = CoreDns::test_zone(net.upstream(1), "");
    let (to_down, to_core) = (down.to_string(), core.addr.to_string());
    assert!(
        TcpStream::connect_timeout(&down, Duration::from_secs(1)).is_err(),
        "something already listens on {down}"
    );
    let nodens = Nodens::start(
        &Cfg::new(&net).query_timeout(secs(4)).zone(
            Zone::new("test.", &[down, core.addr])
                .transport(Transport::ForceTcp)
                .upstream_timeout(secs(1))
                .max_fails(2)
                .health_check(secs(1)),
        ),
    );
    assert_eq!(
        nodens.metric(HEALTHY, &[("to", &to_down)]),
        1.0,
        "{HEALTHY}{{to={to_down}}} at start"
    );

    for (name, t) in [("www.test.", Rt::A), ("www.test.", Rt::AAAA)] {
        let r = udp_query_timeout(nodens.dns, &Q::new(name, t), Duration::from_secs(6))
            .expect("an answer");
        assert_eq!(r.rcode(), rcode::NOERROR, "{name} {t}");
        assert!(
            r.elapsed < Duration::from_millis(500),
            "{name} {t}: {:?}, a refused connect is immediate",
            r.elapsed
        );
    }
    let m = parse_metrics(&nodens.metrics_text());
    assert!(
        sum_metric(&m, ERRORS, &[("to", &to_down), ("error", "refused")]) >= 2.0,
        "refusals not counted: {:?}",
        errors_of(&nodens, &to_down)
    );
    assert!(
        sum_metric(&m, DIAL_FAILURES, &[("to", &to_down)]) >= 2.0,
        "{DIAL_FAILURES}"
    );
    let marked_down = wait_until(
        Duration::from_secs(2),
        "the refusing upstream to be marked down",
        || (nodens.metric(HEALTHY, &[("to", &to_down)]) == 0.0).then(Instant::now),
    );
    assert_eq!(
        nodens.metric(HEALTHY, &[("to", &to_core)]),
        1.0,
        "{HEALTHY}{{to={to_core}}}"
    );

    // Queries now skip the down upstream. A health probe in the window would
    // blur the counters, so a window with a probe in it is tried again.
    let footprint = |m: &[Sample]| -> [f64; 4] {
        [
            sum_metric(m, DIALS, &[("to", &to_down)]),
            sum_metric(m, DIAL_FAILURES, &[("to", &to_down)]),
            sum_metric(m, ERRORS, &[("to", &to_down)]),
            sum_metric(m, CONN_MISSES, &[("to", &to_down)]),
        ]
    };
    let mut verified = false;
    for attempt in 0..4 {
        let m0 = parse_metrics(&nodens.metrics_text());
        for i in 0..3 {
            let name = format!("h{attempt}x{i}.test.");
            let r = udp_query(nodens.dns, &Q::new(&name, Rt::A));
            assert_eq!(r.rcode(), rcode::NXDOMAIN, "{name}");
            assert!(
                r.elapsed < Duration::from_millis(300),
                "{name}: {:?}",
                r.elapsed
            );
        }
        let m1 = parse_metrics(&nodens.metrics_text());
        if sum_metric(&m1, HEALTH_CHECKS, &[("to", &to_down)])
            != sum_metric(&m0, HEALTH_CHECKS, &[("to", &to_down)])
        {
            continue;
        }
        assert_eq!(
            footprint(&m1),
            footprint(&m0),
            "queries still went to the down upstream ([dials, dial failures, errors, conn misses] before/after)"
        );
        verified = true;
        break;
    }
    assert!(verified, "every window had a health probe in it");

    wait_until(
        Duration::from_secs(4),
        "a failed health probe of the down upstream",
        || {
            (nodens.metric(HEALTH_CHECKS, &[("to", &to_down), ("result", "failure")]) >= 1.0)
                .then_some(())
        },
    );
    assert!(
        nodens.metric(PROXY_HC_FAILURES, &[("to", &to_down)]) >= 1.0,
        "{PROXY_HC_FAILURES}{{to={to_down}}}"
    );

    // The upstream comes back; `.` is answered (by whoami) so probes show in its log.
    let revived = CoreDns::start_with_blocks(down, &[("test.", test_zone(""))], &[(".", "whoami")]);
    let up_at = Instant::now();
    wait_until(
        Duration::from_secs(10),
        "the revived upstream to be marked healthy",
        || (nodens.metric(HEALTHY, &[("to", &to_down)]) == 1.0).then_some(()),
    );
    eprintln!(
        "healthy again {:?} after the upstream came back ({:?} after it was marked down)",
        up_at.elapsed(),
        marked_down.elapsed()
    );
    assert!(
        nodens.metric(HEALTH_CHECKS, &[("to", &to_down), ("result", "success")]) >= 1.0,
        "successful probe not counted"
    );
    revived.sync_log();
    let before: Vec<LoggedQuery> = logged(&revived);
    assert!(!before.is_empty(), "the revived upstream never saw a probe");
    let not_probes: Vec<&LoggedQuery> = before
        .iter()
        .filter(|q| !(q.name == "." && q.qtype == "NS"))
        .collect();
    assert!(
        not_probes.is_empty(),
        "a down upstream got queries other than `. NS` probes: {not_probes:#?}"
    );

    let r = udp_query(nodens.dns, &Q::new("mail.test.", Rt::MX));
    assert_eq!(r.rcode(), rcode::NOERROR);
    revived.sync_log();
    assert_eq!(
        revived.count_tcp_queries("mail.test.", "MX"),
        1,
        "the recovered upstream (first in the list) was not used"
    );
    nodens.wait_pool_idle(&[&to_down, &to_core]);
}

/// RFC 7766 allows answers in any order. An upstream (CoreDNS's answers,
/// proxied) that collects the pipelined queries of a connection and answers
/// them in reverse: with max_in_flight = 4 on one connection, four
/// concurrent queries each get their own answer; nothing is a mismatch.
#[test]
fn out_of_order_answers_matched_by_id() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let core_addr = core.addr;
    let reverser = Fake::start(
        net.other(10, 5300),
        Arc::new(move |c: &mut Conn| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                let first = match c.read_query(Duration::from_secs(15)) {
                    Got::Msg(q) => q,
                    _ => return,
                };
                let mut batch = vec![first];
                let window = Instant::now() + Duration::from_millis(1500);
                while batch.len() < 4 {
                    let Some(left) = window.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    match c.read_query(left) {
                        Got::Msg(q) => batch.push(q),
                        Got::Timeout => break,
                        Got::Closed => return,
                    }
                }
                c.log.lock().unwrap().batches.push(batch.len());
                for q in batch.iter().rev() {
                    c.write(&proxy(core_addr, q));
                }
            }
        }),
    );
    let to = reverser.addr.to_string();
    let nodens = Nodens::start(
        &Cfg::new(&net).query_timeout(secs(6)).zone(
            Zone::new("test.", &[reverser.addr])
                .transport(Transport::ForceTcp)
                .upstream_timeout(secs(5))
                .pool(Pool::new().max_connections(1).max_in_flight(4)),
        ),
    );

    let cases = [
        ("www.test.", "192.0.2.1"),
        ("short.test.", "192.0.2.2"),
        ("mx.test.", "192.0.2.3"),
        ("short2.test.", "192.0.2.4"),
    ];
    let replies = in_parallel(cases.len(), |i| {
        udp_query_timeout(
            nodens.dns,
            &Q::new(cases[i].0, Rt::A),
            Duration::from_secs(8),
        )
    });
    for ((name, addr), r) in cases.iter().zip(&replies) {
        let r = r.as_ref().unwrap_or_else(|| panic!("{name}: no answer"));
        assert_eq!(
            r.rcode(),
            rcode::NOERROR,
            "{name}: rcode after {:?}",
            r.elapsed
        );
        assert_eq!(
            r.a(),
            vec![ipv4(addr)],
            "{name} got another query's answer: {:?}",
            r.msg.answers()
        );
    }
    assert_eq!(
        reverser.batches(),
        vec![4],
        "the 4 queries were not all in flight on the connection together"
    );
    assert_eq!(reverser.conns().len(), 1, "connections");
    assert_eq!(
        nodens.metric(ERRORS, &[("to", &to), ("error", "mismatch")]),
        0.0,
        "{:?}",
        errors_of(&nodens, &to)
    );
    nodens.wait_pool_idle(&[&to]);
}

/// max_queue = 0 means no query ever waits: one that finds every slot busy
/// fails at once. It must not mean that nothing is ever dialled: on a cold
/// pool (nothing open, room for connections) a query dials and is answered.
/// Then, with the only connection busy on a 1 s query, a second query
/// fails at once with queue_full.
#[test]
fn zero_queue_still_dials() {
    needs!(Need::CoreDns);
    let (_net, core, nodens) = delayed_force_tcp(
        "1s",
        secs(4),
        secs(3),
        Pool::new().max_connections(1).max_queue(0),
    );
    let to = core.addr.to_string();

    for (name, addr) in [("www.test.", "192.0.2.1"), ("mx.test.", "192.0.2.3")] {
        let r = udp_query(nodens.dns, &Q::new(name, Rt::A));
        assert_eq!(
            r.rcode(),
            rcode::NOERROR,
            "{name}: a free connection slot needs no queue place (dials {}, errors {:?})",
            nodens.metric(DIALS, &[("to", &to)]),
            errors_of(&nodens, &to)
        );
        assert_eq!(r.a(), vec![ipv4(addr)], "{name}");
    }
    assert_eq!(nodens.metric(DIALS, &[("to", &to)]), 1.0, "{DIALS}");

    let (slow, rejected) = thread::scope(|s| {
        let slow = s.spawn(|| {
            udp_query_timeout(
                nodens.dns,
                &Q::new("z0.delay.test.", Rt::A),
                Duration::from_secs(6),
            )
        });
        wait_until(
            Duration::from_secs(3),
            "the slow query to be on the connection",
            || {
                (nodens.metric(
                    "nodens_upstream_tcp_connections",
                    &[("to", &to), ("state", "busy")],
                ) >= 1.0)
                    .then_some(())
            },
        );
        let rejected = udp_query_timeout(
            nodens.dns,
            &Q::new("z1.delay.test.", Rt::A),
            Duration::from_secs(6),
        );
        (slow.join().unwrap(), rejected)
    });
    let rejected = rejected.expect("z1: no answer");
    assert_eq!(
        rejected.rcode(),
        rcode::SERVFAIL,
        "z1 with the only slot busy and no queue"
    );
    assert!(
        rejected.elapsed < Duration::from_millis(500),
        "z1 failed after {:?}, not at once",
        rejected.elapsed
    );
    assert_eq!(slow.expect("z0: no answer").a(), vec![ipv4(ERRATIC_A)]);
    assert_eq!(
        nodens.metric(
            "nodens_upstream_queue_rejected_total",
            &[("to", &to), ("reason", "full")]
        ),
        1.0
    );
    nodens.wait_pool_idle(&[&to]);
}

/// Over UDP, a port nothing listens on answers with ICMP port unreachable:
/// the try fails at once (counted as `refused`) and the next upstream
/// answers, instead of the query waiting out `upstream_timeout`.
#[test]
fn closed_udp_port_fails_over_at_once() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let closed = net.other(10, 5300);
    assert!(
        std::net::UdpSocket::bind(closed).is_ok(),
        "something already listens on {closed}"
    );
    let to_closed = closed.to_string();
    let nodens = Nodens::start(
        &Cfg::new(&net).zone(
            Zone::new("test.", &[closed, core.addr])
                .upstream_timeout(secs(2))
                .max_fails(100),
        ),
    );
    for (name, t) in [("www.test.", Rt::A), ("www.test.", Rt::AAAA)] {
        let r = udp_query(nodens.dns, &Q::new(name, t));
        assert_eq!(r.rcode(), rcode::NOERROR, "{name} {t}");
        assert!(
            r.elapsed < Duration::from_millis(500),
            "{name} {t}: {:?}; a port unreachable fails at once",
            r.elapsed
        );
    }
    let refused = nodens.metric(ERRORS, &[("to", &to_closed), ("error", "refused")]);
    assert!(
        refused >= 2.0,
        "refusals not counted: {:?}",
        errors_of(&nodens, &to_closed)
    );
}
