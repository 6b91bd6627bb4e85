//! The UDP worker's two modes: it blocks in recvmmsg while no miss is in
//! flight, and runs its event loop while one is. With one worker, every
//! query goes through the same thread, so a miss waiting on a silent
//! upstream must not hold up hits or other misses, and the worker must go
//! back to plain blocking receives (and keep answering) once it is done.
//! And what a panic on the request path costs: the query that met it, over
//! UDP and over TCP.

use std::net::{SocketAddr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use support::*;

#[test]
fn hits_and_misses_go_on_while_a_miss_waits() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let (core, silent, nodens) = with_a_silent_zone(&net, secs(3));
    let dns = nodens.dns;
    let www = Q::new("www.test.", Rt::A);
    assert_eq!(udp_query(dns, &www).a(), vec![ipv4("192.0.2.1")]);

    let started = Instant::now();
    let slow = thread::spawn(move || udp_query(dns, &Q::new("x.slow.", Rt::A)));
    silent
        .recv(Duration::from_secs(5))
        .expect("the slow miss reached its upstream");

    // The worker now has a miss in flight for about 3 s.
    for i in 0..50 {
        let r = udp_query(dns, &www);
        assert_eq!(r.a(), vec![ipv4("192.0.2.1")], "hit {i}");
        assert!(
            r.elapsed < Duration::from_millis(500),
            "hit {i} took {:?}",
            r.elapsed
        );
    }
    let mx = udp_query(dns, &Q::new("mail.test.", Rt::MX));
    assert_eq!(mx.rcode(), rcode::NOERROR);
    assert!(
        mx.elapsed < Duration::from_millis(1000),
        "miss took {:?}",
        mx.elapsed
    );
    assert!(
        !slow.is_finished() && started.elapsed() < Duration::from_secs(2),
        "the slow miss was still in flight during all of that"
    );

    let slow = slow.join().unwrap();
    assert_eq!(slow.rcode(), rcode::SERVFAIL);
    assert!(
        slow.elapsed >= Duration::from_millis(2500),
        "{:?}",
        slow.elapsed
    );

    // Back to blocking receives: hits and new misses are still answered.
    for i in 0..20 {
        assert_eq!(
            udp_query(dns, &www).a(),
            vec![ipv4("192.0.2.1")],
            "hit {i} after"
        );
    }
    let aaaa = udp_query(dns, &Q::new("www.test.", Rt::AAAA));
    assert_eq!(aaaa.rcode(), rcode::NOERROR);
    // CoreDNS logs after it answers: wait for its log to catch up.
    core.sync_log();
    assert_eq!(core.count_queries("www.test.", "AAAA"), 1);
}

/// A socket in an epoll set costs the kernel a callback for every datagram
/// in and out, about 4 % of a hit's CPU: the worker's socket is in its event
/// loop's set only while misses come, and leaves it after a run of turns
/// without one (1,024). Read from the kernel's side: the epoll descriptors
/// of the process (`/proc/PID/fdinfo`) name the inodes they watch.
#[test]
fn a_worker_with_only_hits_leaves_its_event_loop() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let (_core, silent, nodens) = with_a_silent_zone(&net, secs(2));
    let dns = nodens.dns;
    let pid = nodens.proc.pid();
    let socket = udp_socket_inode(pid, dns);
    let www = Q::new("www.test.", Rt::A);
    assert_eq!(udp_query(dns, &www).a(), vec![ipv4("192.0.2.1")]);

    // A miss in flight: the worker waits on its socket and the upstream's.
    let slow = thread::spawn(move || udp_query(dns, &Q::new("x.slow.", Rt::A)));
    silent
        .recv(Duration::from_secs(5))
        .expect("the slow miss reached its upstream");
    assert!(
        epoll_watches(pid, socket),
        "the listening socket is in the event loop while a miss is in flight"
    );
    assert_eq!(slow.join().unwrap().rcode(), rcode::SERVFAIL);

    // Hits only, one at a time (a batch each): after 1,024 of them the
    // socket is out of the set, and hits and misses are still answered.
    for i in 0..1100 {
        assert_eq!(udp_query(dns, &www).a(), vec![ipv4("192.0.2.1")], "hit {i}");
    }
    assert!(
        !epoll_watches(pid, socket),
        "the listening socket left the event loop after a run of hits"
    );
    let mx = udp_query(dns, &Q::new("mail.test.", Rt::MX));
    assert_eq!(mx.rcode(), rcode::NOERROR);
    assert_eq!(udp_query(dns, &www).a(), vec![ipv4("192.0.2.1")]);
}

/// nodens (one worker) with CoreDNS's test zone and a zone `slow.` whose
/// upstream never answers: a miss there waits `timeout`, then SERVFAIL.
fn with_a_silent_zone(net: &Net, timeout: Duration) -> (CoreDns, Silent, Nodens) {
    let core = CoreDns::test_zone(net.upstream(0), "");
    let silent = Silent::bind(net.silent(0));
    let nodens = Nodens::start(
        &Cfg::new(net)
            .query_timeout(timeout)
            .zone(Zone::new("test.", &[core.addr]))
            .zone(Zone::new("slow.", &[silent.addr]).upstream_timeout(timeout)),
    );
    (core, silent, nodens)
}

/// The inode of the UDP socket `pid` has bound to `addr` (IPv4).
fn udp_socket_inode(pid: u32, addr: SocketAddr) -> u64 {
    let SocketAddr::V4(v4) = addr else {
        panic!("an IPv4 listener: {addr}")
    };
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(v4.ip().octets()),
        v4.port()
    );
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let ours: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.get(1) == Some(&local.as_str())).then(|| f.get(9)?.parse::<u64>().ok())?
        })
        .find(|inode| ours.contains(inode))
        .unwrap_or_else(|| panic!("no UDP socket of pid {pid} on {addr} ({local})"))
}

/// Whether an epoll descriptor of `pid` watches the file with `inode`.
fn epoll_watches(pid: u32, inode: u64) -> bool {
    let hex = format!("ino:{inode:x}");
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .any(|info| {
            info.lines()
                .any(|l| l.starts_with("tfd:") && l.split_whitespace().any(|w| w == hex))
        })
}

/// Many misses at once, each answered once and right, from one worker:
/// the event loop carries them all concurrently (a serial loop would take
/// 200 × the upstream's round trip and the test's deadline would catch it).
#[test]
fn concurrent_misses_on_one_worker() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let mut records = String::new();
    for i in 0..200 {
        records.push_str(&format!("n{i} 300 IN A 192.0.2.{}\n", i % 250 + 1));
    }
    let core = CoreDns::test_zone(net.upstream(0), &records);
    let nodens = Nodens::start(&Cfg::new(&net).zone(Zone::new("test.", &[core.addr])));
    let dns = nodens.dns;
    let sock = std::net::UdpSocket::bind((net.ip(50), 0)).unwrap();
    for i in 0..200u16 {
        let q = Q::new(&format!("n{i}.test."), Rt::A).id(i);
        sock.send_to(&q.to_bytes(), dns).unwrap();
    }
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut seen = [false; 200];
    let mut buf = [0u8; 1500];
    for _ in 0..200 {
        let (n, _) = sock.recv_from(&mut buf).expect("an answer within 5 s");
        let r = Reply::parse(buf[..n].to_vec(), Duration::ZERO);
        let i = usize::from(r.id());
        assert!(!seen[i], "answer {i} twice");
        seen[i] = true;
        assert_eq!(
            r.a(),
            vec![ipv4(&format!("192.0.2.{}", i % 250 + 1))],
            "answer to n{i}"
        );
    }
    assert_eq!(core.count_queries("n7.test.", "A"), 1);
}

/// A worker's bug must cost the query that met it, not the worker: before,
/// a panicking worker thread ended with its socket still in the
/// `SO_REUSEPORT` group (the listener keeps a descriptor for the handover),
/// so the kernel went on steering its share of every client's flows into a
/// buffer nobody read, and /health said OK. The debug build's test trigger
/// (`NODENS_TEST_PANIC_QNAME`) panics the worker that reads the name; each
/// query comes from a new socket, so the kernel spreads them over both
/// workers, and every one of 300 queries after the panics is answered.
#[test]
fn a_worker_that_panics_serves_again_and_health_says_so() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let silent = Silent::bind(net.silent(0));
    let cfg = Cfg::new(&net)
        .workers(2)
        .query_timeout(secs(3))
        .zone(Zone::new("test.", &[core.addr]))
        .zone(Zone::new("slow.", &[silent.addr]).upstream_timeout(secs(3)));
    let mut nodens = Nodens::launch(
        &cfg.to_toml(),
        &["env", "NODENS_TEST_PANIC_QNAME=boom.test."],
    );
    nodens.wait_ready();
    let http = nodens.http.unwrap();
    assert_eq!(
        http_get(http, "/health").unwrap(),
        (200, "OK\n".to_string())
    );
    let www = Q::new("www.test.", Rt::A);
    assert_eq!(udp_query(nodens.dns, &www).a(), vec![ipv4("192.0.2.1")]);

    // Twenty panics from twenty source ports: both workers meet some, and
    // each while a miss waits on the silent upstream (the worker's event
    // loop runs: the panic unwinds out of it).
    let boom = Q::new("boom.test.", Rt::A);
    let slow = UdpSocket::bind(SocketAddr::new(net.ip(60), 0)).unwrap();
    for i in 0..20 {
        let _ = slow.send_to(
            &Q::new(&format!("m{i}.slow."), Rt::A).to_bytes(),
            nodens.dns,
        );
        assert!(udp_query_timeout(nodens.dns, &boom, Duration::from_millis(200)).is_none());
    }
    let mut lost = 0;
    for _ in 0..300 {
        match udp_query_timeout(nodens.dns, &www, Duration::from_secs(2)) {
            Some(r) => assert_eq!(r.a(), vec![ipv4("192.0.2.1")]),
            None => lost += 1,
        }
    }
    assert_eq!(lost, 0, "queries of 300 lost to the workers that panicked");
    let restarts = nodens.wait_metric("nodens_worker_restarts_total", &[], 20.0);
    assert_eq!(restarts, 20.0, "one restart a panic");
    assert!(nodens.metric("nodens_panics_total", &[]) >= 20.0);
    let (status, page) = http_get(http, "/health").unwrap();
    assert_eq!(status, 200, "{page}");
    let named = format!("restarted: udp {} #", nodens.dns);
    assert!(page.contains(&named), "{page}");
    assert!(page.contains("panics: 20"), "{page}");
    nodens.assert_alive();
}

/// The TCP side of the same promise. A connection whose query meets a bug
/// loses that connection only; an acceptor that panics accepts again on the
/// same socket. Before, the acceptor was a task that a panic ended for
/// good while the listener's second descriptor kept the socket listening:
/// the kernel went on completing handshakes into a backlog nobody read, so
/// every TCP client of the address hung. The debug build's triggers panic a
/// connection on `boom.test.` and the acceptor on a connection from one
/// address of the test's range.
#[test]
fn a_tcp_acceptor_or_connection_that_panics_costs_only_itself() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let cfg = Cfg::new(&net).zone(Zone::new("test.", &[core.addr]));
    let breaker = net.ip(61);
    let mut nodens = Nodens::launch(
        &cfg.to_toml(),
        &[
            "env",
            "NODENS_TEST_PANIC_QNAME=boom.test.",
            &format!("NODENS_TEST_PANIC_ACCEPT_FROM={breaker}"),
        ],
    );
    nodens.wait_ready();
    let http = nodens.http.unwrap();
    let www = Q::new("www.test.", Rt::A);
    assert_eq!(tcp_query(nodens.dns, &www).a(), vec![ipv4("192.0.2.1")]);

    // Five connections panic on their query: each loses its connection.
    let boom = Q::new("boom.test.", Rt::A);
    for _ in 0..5 {
        assert!(tcp_query_timeout(nodens.dns, &boom, Duration::from_secs(2)).is_none());
    }
    // Five connections from the breaker panic the acceptor that takes them.
    for _ in 0..5 {
        if let Some(mut c) = Tcp::connect_from(breaker, nodens.dns) {
            let _ = c.send(&www.to_bytes());
            assert!(
                !matches!(c.recv(Duration::from_secs(2)), TcpRead::Msg(_)),
                "the breaker's connection was served"
            );
        }
    }
    let mut lost = 0;
    for _ in 0..100 {
        match tcp_query_timeout(nodens.dns, &www, Duration::from_secs(2)) {
            Some(r) => assert_eq!(r.a(), vec![ipv4("192.0.2.1")]),
            None => lost += 1,
        }
    }
    assert_eq!(lost, 0, "TCP queries of 100 lost after the panics");
    let restarts = nodens.wait_metric("nodens_worker_restarts_total", &[], 5.0);
    assert_eq!(restarts, 5.0, "one acceptor restart a breaker connection");
    assert!(nodens.metric("nodens_panics_total", &[]) >= 10.0);
    let (status, page) = http_get(http, "/health").unwrap();
    assert_eq!(status, 200, "{page}");
    let named = format!("restarted: tcp {} (5 times)", nodens.dns);
    assert!(page.contains(&named), "{page}");
    nodens.assert_alive();
}
