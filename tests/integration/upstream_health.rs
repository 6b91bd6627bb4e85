//! Upstream health around an outage: a real CoreDNS frozen (SIGSTOP) under
//! a steady stream of cache misses, then thawed.
//!
//! Proves: the upstream is marked down once and up once per outage. The
//! backlog of the outage (answers to queries sent during it, arriving
//! late, and the timeouts of others sent at the same time) no longer flips
//! it back and forth: only exchanges sent after the last change count. The
//! two changes are counted in `nodens_upstream_health_transitions_total`
//! and logged once each. (Without that rule this test saw 198 changes each
//! way.)

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use support::*;

const TRANSITIONS: &str = "nodens_upstream_health_transitions_total";
const HEALTHY: &str = "nodens_upstream_healthy";

/// Sends queries for new names (each a miss) at `rate` a second (which
/// the test changes as it goes) until `stop`, at most `max` in all; counts
/// the answers.
fn miss_stream(
    to: std::net::SocketAddr,
    rate: Arc<AtomicU32>,
    max: u64,
    stop: Arc<AtomicBool>,
) -> (thread::JoinHandle<u64>, Arc<AtomicU64>) {
    let answered = Arc::new(AtomicU64::new(0));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(to).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let receiver = socket.try_clone().unwrap();
    let count = answered.clone();
    let stop_rx = stop.clone();
    thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while !stop_rx.load(Ordering::Relaxed) {
            if receiver.recv(&mut buf).is_ok() {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let sender = thread::spawn(move || {
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) && sent < max {
            thread::sleep(Duration::from_secs_f64(
                1.0 / f64::from(rate.load(Ordering::Relaxed)),
            ));
            let q = Q::new(&format!("m{sent}.test."), Rt::A).id(sent as u16);
            let _ = socket.send(&q.to_bytes());
            sent += 1;
        }
        sent
    });
    (sender, answered)
}

#[test]
fn an_outage_is_one_change_down_and_one_up() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let to = core.addr.to_string();
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .query_timeout(secs(2))
            .zone(Zone::new("test.", &[core.addr]).upstream_timeout(Duration::from_millis(1500))),
    );
    let transitions = |state: &str| nodens.metric(TRANSITIONS, &[("to", &to), ("state", state)]);

    let stop = Arc::new(AtomicBool::new(false));
    let rate = Arc::new(AtomicU32::new(200));
    let (sender, answered) = miss_stream(nodens.dns, rate.clone(), 20_000, stop.clone());
    thread::sleep(Duration::from_secs(1));
    let before_outage = answered.load(Ordering::Relaxed);
    assert!(
        before_outage > 100,
        "the stream is answered before the outage: {before_outage}"
    );

    // The outage, with the clients' retries piling up: more queries than
    // the frozen server's socket buffer holds, so that the last ones sent
    // before the thaw are lost and time out after it, among the answers
    // to the others and to the queries that follow.
    core.proc.signal(libc::SIGSTOP);
    wait_until(
        Duration::from_secs(5),
        "the frozen upstream to be marked down",
        || (nodens.metric(HEALTHY, &[("to", &to)]) == 0.0).then_some(()),
    );
    rate.store(2_000, Ordering::Relaxed);
    thread::sleep(Duration::from_secs(2));
    rate.store(100, Ordering::Relaxed);
    core.proc.signal(libc::SIGCONT);
    wait_until(
        Duration::from_secs(5),
        "the thawed upstream to be marked up",
        || (nodens.metric(HEALTHY, &[("to", &to)]) == 1.0).then_some(()),
    );
    // The backlog's late answers and timeouts all land in this window.
    thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    let after = answered.load(Ordering::Relaxed);
    eprintln!(
        "sent {sent}, answered {after}; transitions down {} up {}",
        transitions("down"),
        transitions("up")
    );

    assert_eq!(transitions("down"), 1.0, "marked down once");
    assert_eq!(transitions("up"), 1.0, "marked up once");
    assert_eq!(nodens.metric(HEALTHY, &[("to", &to)]), 1.0);
    assert!(
        after > before_outage + 200,
        "answers after the outage: {before_outage} -> {after}"
    );
    let logged = |what: &str| {
        nodens
            .proc
            .lines()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    };
    assert_eq!(logged("upstream marked down"), 1);
    assert_eq!(logged("upstream is answering again"), 1);
}
