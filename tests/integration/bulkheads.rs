//! Bulkheads (`upstream::bulkhead`): a zone whose upstream never answers
//! (a real socket nobody reads), flooded with misses, takes at most its
//! share of the misses in flight; its misses beyond it get SERVFAIL at
//! once, and another zone's misses (CoreDNS) are answered as before.
//! Without bulkheads (`max_misses_in_flight_per_zone = 0`, nodens before
//! them) the flood takes the server's whole bound and the healthy zone's
//! misses are dropped: the test sees the difference.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType as Rt;
use support::*;

/// What one flood came to.
struct Seen {
    /// Flood queries answered SERVFAIL within a second.
    servfail_at_once: usize,
    /// Healthy-zone misses answered (NXDOMAIN from CoreDNS) within the
    /// second after, of 10.
    healthy_answered: usize,
    rejected_metric: f64,
}

fn flood(bulkheads: bool) -> Seen {
    let net = Net::alloc();
    let silent = Silent::bind(net.silent(0));
    let core = CoreDns::test_zone(net.upstream(0), "");
    let mut cfg = Cfg::new(&net)
        .max_misses_in_flight(40)
        .zone(Zone::new("test.", &[core.addr]))
        .zone(Zone::new("silent.example.", &[silent.addr]).upstream_timeout(secs(3)));
    if !bulkheads {
        cfg = cfg.server_option("max_misses_in_flight_per_zone", "0");
    }
    let mut nodens = Nodens::start(&cfg);
    nodens.wait_ready();

    // 60 names of the silent zone, never asked before, sent at once, and
    // right behind them 10 misses of the healthy zone; each miss of the
    // silent one holds its place for 3 s, the second read here.
    let flooder = UdpSocket::bind(SocketAddr::new(net.ip(1), 0)).unwrap();
    for i in 0..60u16 {
        let q = Q::new(&format!("f{i}.silent.example."), Rt::A).id(i);
        flooder.send_to(&q.to_bytes(), nodens.dns).unwrap();
    }
    let asker = UdpSocket::bind(SocketAddr::new(net.ip(1), 0)).unwrap();
    for i in 0..10u16 {
        let q = Q::new(&format!("h{i}.test."), Rt::A).id(i);
        asker.send_to(&q.to_bytes(), nodens.dns).unwrap();
    }
    let replies = |sock: &UdpSocket| {
        let until = Instant::now() + Duration::from_secs(1);
        let mut codes = Vec::new();
        let mut buf = [0u8; 512];
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            sock.set_read_timeout(Some(left.max(ms(1)))).unwrap();
            let Ok((n, _)) = sock.recv_from(&mut buf) else {
                break;
            };
            if n >= 4 {
                codes.push(buf[3] & 0x0f);
            }
        }
        codes
    };
    let servfail_at_once = replies(&flooder).iter().filter(|&&c| c == 2).count();
    let healthy_answered = replies(&asker).len();
    let rejected_metric = nodens.metric(
        "nodens_zone_misses_rejected_total",
        &[("zone", "silent.example.")],
    );
    nodens.assert_alive();
    Seen {
        servfail_at_once,
        healthy_answered,
        rejected_metric,
    }
}

#[test]
fn a_silent_zone_flooded_leaves_the_other_zones_their_room() {
    needs!(Need::CoreDns);
    let with = flood(true);
    let without = flood(false);
    eprintln!(
        "with bulkheads: {} of 60 flood queries SERVFAIL at once, {} of 10 healthy misses answered; \
         without: {} and {}",
        with.servfail_at_once,
        with.healthy_answered,
        without.servfail_at_once,
        without.healthy_answered
    );
    // The silent zone's bound is half of 40: 20 in flight, 40 answered at once.
    assert_eq!(
        with.servfail_at_once, 40,
        "the flood beyond its zone's bound"
    );
    assert_eq!(with.rejected_metric, 40.0);
    assert_eq!(with.healthy_answered, 10, "the healthy zone keeps its room");
    // Without: the flood takes all 40 places, its last 20 are dropped, and
    // so is every miss of the healthy zone.
    assert_eq!(without.servfail_at_once, 0);
    assert_eq!(without.healthy_answered, 0, "starved without bulkheads");
}
