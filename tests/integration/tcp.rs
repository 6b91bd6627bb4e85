//! The client TCP listener (RFC 7766).
//!
//! Proves pipelining with out-of-order answers (a slow miss sent first is
//! answered last, after cache hits sent behind it on the same connection),
//! that a connection with nothing in flight is closed after tcp_idle_timeout
//! while one with a query in flight is not, and that connections beyond
//! tcp_max_connections are closed at once while the others keep working.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use support::*;

/// `test.` goes straight to CoreDNS; `slow.test.` tries a silent socket
/// first, so a miss there takes about upstream_timeout.
fn slow_and_fast(
    net: &Net,
    upstream_timeout: Duration,
    cfg: impl FnOnce(Cfg) -> Cfg,
) -> (Silent, CoreDns, Nodens) {
    let silent = Silent::bind(net.silent(0));
    let core = CoreDns::test_zone(net.upstream(0), "");
    let nodens = Nodens::start(&cfg(Cfg::new(net)
        .query_timeout(secs(5))
        .zone(Zone::new("test.", &[core.addr]))
        .zone(
            Zone::new("slow.test.", &[silent.addr, core.addr]).upstream_timeout(upstream_timeout),
        )));
    (silent, core, nodens)
}

#[test]
fn pipelined_queries_answered_out_of_order() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let (_silent, _core, nodens) = slow_and_fast(&net, secs(1), |c| c);

    let fast = [
        ("www.test.", Rt::A),
        ("www.test.", Rt::AAAA),
        ("mail.test.", Rt::MX),
    ];
    for (name, t) in fast {
        assert_eq!(
            udp_query(nodens.dns, &Q::new(name, t)).rcode(),
            rcode::NOERROR,
            "priming {name} {t}"
        );
    }

    // All four frames in one write: the slow miss (ID 1) first.
    let mut frames = Vec::new();
    let mut queries = vec![(1u16, Q::new("x.slow.test.", Rt::A).id(1))];
    for (i, (name, t)) in fast.iter().enumerate() {
        queries.push((2 + i as u16, Q::new(name, *t).id(2 + i as u16)));
    }
    for (_, q) in &queries {
        let b = q.to_bytes();
        frames.extend_from_slice(&(b.len() as u16).to_be_bytes());
        frames.extend_from_slice(&b);
    }
    let start = Instant::now();
    let mut c = Tcp::connect(nodens.dns);
    c.send_raw(&frames).unwrap();

    let mut order = Vec::new();
    let mut replies = HashMap::new();
    while order.len() < queries.len() && start.elapsed() < Duration::from_secs(8) {
        match c.recv(Duration::from_secs(8) - start.elapsed().min(Duration::from_secs(8))) {
            TcpRead::Msg(raw) => {
                let r = Reply::parse(raw, start.elapsed());
                order.push(r.id());
                replies.insert(r.id(), r);
            }
            other => panic!("connection gave {other:?} after answers {order:?}"),
        }
    }
    assert_eq!(order.len(), 4, "answers received: {order:?}");
    assert_eq!(
        *order.last().unwrap(),
        1,
        "the slow miss was not answered last: {order:?}"
    );
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec![1, 2, 3, 4],
        "each query answered once: {order:?}"
    );

    assert_eq!(replies[&1].a(), vec![ipv4("192.0.2.30")]);
    assert!(
        replies[&1].elapsed >= Duration::from_millis(800),
        "slow miss answered in {:?}",
        replies[&1].elapsed
    );
    for id in 2..=4 {
        assert_eq!(replies[&id].rcode(), rcode::NOERROR);
        assert!(!replies[&id].msg.answers().is_empty(), "hit {id} empty");
        assert!(
            replies[&id].elapsed < Duration::from_millis(700),
            "hit {id} waited for the miss: {:?}",
            replies[&id].elapsed
        );
    }
    assert_eq!(replies[&2].a(), vec![ipv4("192.0.2.1")]);
}

#[test]
fn idle_connections_closed_after_tcp_idle_timeout() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    // The slow miss (2 s) outlasts the idle timeout (1 s).
    let (_silent, _core, nodens) = slow_and_fast(&net, secs(2), |c| c.tcp_idle_timeout(secs(1)));

    // Never sends anything.
    let mut silent_client = Tcp::connect(nodens.dns);
    // One query answered, then idle.
    let mut idle = Tcp::connect(nodens.dns);
    idle.send(&Q::new("www.test.", Rt::A).to_bytes()).unwrap();
    match idle.recv(Duration::from_secs(5)) {
        TcpRead::Msg(raw) => assert_eq!(
            Reply::parse(raw, Duration::ZERO).a(),
            vec![ipv4("192.0.2.1")]
        ),
        other => panic!("{other:?}"),
    }
    let answered = Instant::now();
    // A query in flight longer than the idle timeout.
    let mut busy = Tcp::connect(nodens.dns);
    busy.send(&Q::new("x.slow.test.", Rt::A).id(9).to_bytes())
        .unwrap();

    let closed = idle
        .wait_closed(Duration::from_secs(4))
        .expect("idle connection still open 4 s after its answer");
    let after = answered.elapsed();
    assert!(
        after >= Duration::from_millis(700),
        "closed {after:?} after the answer: sooner than tcp_idle_timeout"
    );
    assert!(closed <= Duration::from_secs(3));
    assert!(
        silent_client.wait_closed(Duration::from_secs(3)).is_some(),
        "connection that never sent a query not closed"
    );

    match busy.recv(Duration::from_secs(5)) {
        TcpRead::Msg(raw) => {
            let r = Reply::parse(raw, Duration::ZERO);
            assert_eq!((r.id(), r.a()), (9, vec![ipv4("192.0.2.30")]));
        }
        other => panic!("connection with a query in flight: {other:?} instead of the answer"),
    }
    assert!(
        busy.wait_closed(Duration::from_secs(4)).is_some(),
        "busy connection not closed once idle"
    );
}

#[test]
fn connections_above_the_cap_closed_at_once() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let (_silent, _core, nodens) = slow_and_fast(&net, secs(1), |c| {
        c.tcp_max_connections(2).tcp_idle_timeout(secs(30))
    });

    let ask = |c: &mut Tcp, id: u16| -> TcpRead {
        if c.send(&Q::new("www.test.", Rt::A).id(id).to_bytes())
            .is_err()
        {
            return TcpRead::Closed;
        }
        c.recv(Duration::from_secs(3))
    };
    let mut c1 = Tcp::connect(nodens.dns);
    assert!(
        matches!(ask(&mut c1, 1), TcpRead::Msg(_)),
        "first connection"
    );
    let mut c2 = Tcp::connect(nodens.dns);
    assert!(
        matches!(ask(&mut c2, 2), TcpRead::Msg(_)),
        "second connection"
    );

    // The kernel completes the handshake; nodens must close it at once.
    let mut c3 = Tcp::connect(nodens.dns);
    let start = Instant::now();
    let got = ask(&mut c3, 3);
    assert!(
        matches!(got, TcpRead::Closed),
        "third connection (cap 2) gave {got:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "third connection closed only after {:?}",
        start.elapsed()
    );

    // The first two still work.
    assert!(
        matches!(ask(&mut c1, 4), TcpRead::Msg(_)),
        "first connection after the cap was hit"
    );
    assert!(
        matches!(ask(&mut c2, 5), TcpRead::Msg(_)),
        "second connection after the cap was hit"
    );

    // Freeing a slot lets a new connection in.
    drop(c1);
    wait_until(
        Duration::from_secs(5),
        "a new connection to be served after one closed",
        || {
            let mut c = Tcp::connect(nodens.dns);
            matches!(ask(&mut c, 6), TcpRead::Msg(_)).then_some(())
        },
    );
}
