//! Coalescing of concurrent identical misses.
//!
//! 20 clients ask the same uncached question at once. The first upstream is
//! a silent socket, so the miss lasts about upstream_timeout (1 s) and all 20
//! arrive while it is in flight. Proves that exactly one query went to each
//! upstream (the silent socket received one, CoreDNS logged one) and that
//! every client got the right answer under its own ID.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use support::*;

const CLIENTS: usize = 20;

#[test]
fn concurrent_identical_misses_make_one_upstream_query() {
    needs!(Need::CoreDns);
    let (_net, silent, core, nodens) = silent_first();

    let barrier = Arc::new(Barrier::new(CLIENTS));
    let dns = nodens.dns;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let q = Q::new("www.test.", Rt::A).id(0x7000 + i as u16);
                barrier.wait();
                (i, udp_query_timeout(dns, &q, Duration::from_secs(6)))
            })
        })
        .collect();

    for c in clients {
        let (i, r) = c.join().unwrap();
        let r = r.unwrap_or_else(|| panic!("client {i} got no answer"));
        assert_eq!(r.id(), 0x7000 + i as u16, "client {i}: ID");
        assert_eq!(r.rcode(), rcode::NOERROR, "client {i}");
        assert_eq!(r.a(), vec![ipv4("192.0.2.1")], "client {i}");
        assert!(
            r.elapsed >= Duration::from_millis(700),
            "client {i} answered in {:?}: before the slow miss finished?",
            r.elapsed
        );
    }

    let to_silent: Vec<_> = silent
        .drain()
        .into_iter()
        .filter(|(_, p)| question_of(p) == Some(("www.test.".to_string(), Rt::A)))
        .collect();
    assert_eq!(
        to_silent.len(),
        1,
        "the silent upstream got {} queries for www.test. A, expected 1",
        to_silent.len()
    );
    core.sync_log();
    assert_eq!(
        core.count_queries("www.test.", "A"),
        1,
        "CoreDNS got more than one query for www.test. A"
    );
}
