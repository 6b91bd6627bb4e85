//! Abusive clients and forged answers: each test reproduces a defect found
//! by an independent abuse run and fails without its fix.
//!
//! - TCP slowloris: connections that trickle one byte at a time, or say
//!   nothing, do not hold TCP slots; one client address cannot take them all.
//! - Question-less upstream errors (REFUSED with QDCOUNT 0) are taken as
//!   the upstream's answer, not waited out; odd classes never go upstream.
//! - NOTIMP and FORMERR replies carry an OPT record when the query had one.
//! - A wildcard UDP listener answers from the address it was asked on.
//! - Misses waiting on a silent upstream are capped: descriptors stay bounded
//!   and cache hits are still answered.
//! - The source allow list refuses clients outside it; the per-client rate
//!   limit drops a flooding client and not its neighbour.
//! - Forged answers (right ID and port, wrong letter case; a flood of wrong
//!   IDs) never reach the cache: 0x20 and TCP confirmation.
//!
//! Each test allocates its loopback block ([`Net::alloc`]); the IPv6
//! wildcard test runs in a network namespace of its own (root).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use support::*;

/// A UDP socket bound to `source` (port chosen by the kernel).
fn udp_from(source: IpAddr) -> UdpSocket {
    UdpSocket::bind(SocketAddr::new(source, 0)).unwrap()
}

/// A TCP connection to `server` from `source`.
fn tcp_from(source: IpAddr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.bind(&SocketAddr::new(source, 0).into())?;
    socket.connect_timeout(&server.into(), Duration::from_secs(2))?;
    Ok(socket.into())
}

/// One query over UDP from `source`; the reply if one came within `wait`.
fn ask_from(source: IpAddr, server: SocketAddr, q: &Q, wait: Duration) -> Option<Reply> {
    let sock = udp_from(source);
    sock.set_read_timeout(Some(wait)).unwrap();
    let start = Instant::now();
    sock.send_to(&q.to_bytes(), server).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = sock.recv_from(&mut buf).ok()?;
    Some(Reply::parse(buf[..n].to_vec(), start.elapsed()))
}

/// `msg` with its two-byte TCP length, as nodens frames its own.
fn framed(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    nodens::wire::framing::frame(msg, &mut out);
    out
}

/// Plays a TCP upstream on an accepted connection: every framed query
/// gets `answer(query)`, until the client closes or stays silent for `idle`.
fn serve_tcp(mut c: TcpStream, idle: Duration, mut answer: impl FnMut(&[u8]) -> Vec<u8>) {
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(idle)).unwrap();
    let mut len = [0u8; 2];
    while c.read_exact(&mut len).is_ok() {
        let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
        if c.read_exact(&mut q).is_err() {
            break;
        }
        if c.write_all(&framed(&answer(&q))).is_err() {
            break;
        }
    }
}

fn nodens_fds(nodens: &Nodens) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", nodens.proc.pid()))
        .map(|d| d.count())
        .unwrap_or(0)
}

// ---- 1. TCP slowloris -------------------------------------------------------

#[test]
fn trickling_and_silent_tcp_clients_do_not_deny_tcp() {
    needs!(Need::CoreDns);
    let (net, _core, nodens) = setup_with(|c, z| {
        c.tcp_max_connections(32)
            .tcp_max_connections_per_client(8)
            .tcp_read_timeout(secs(1))
            .tcp_idle_timeout(secs(10))
            .zone(z)
    });
    let dns = nodens.dns;

    // A trickling connection (one byte of a message every 400 ms, never a
    // whole message) is closed within the read timeout, not kept forever
    // by restarting an idle timer on every byte.
    let mut trickle = tcp_from(net.ip(10), dns).unwrap();
    let started = Instant::now();
    let mut closed_after = None;
    let message = { framed(&Q::new("www.test.", Rt::A).to_bytes()) };
    for byte in message.iter().cycle().take(20) {
        if trickle.write_all(&[*byte]).is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        trickle
            .set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        let mut b = [0u8; 1];
        if let Ok(0) = trickle.read(&mut b) {
            closed_after = Some(started.elapsed());
            break;
        }
    }
    let closed_after = closed_after.expect("trickling connection still open after 8 s");
    assert!(
        closed_after < Duration::from_secs(3),
        "trickling connection closed only after {closed_after:?}"
    );
    // A connection that says nothing is closed within the read timeout too.
    let mut silent = Tcp::connect(dns);
    let closed = silent.wait_closed(Duration::from_secs(3));
    assert!(closed.is_some(), "silent connection still open after 3 s");

    // Attackers on two addresses keep reopening trickling and silent
    // connections; a third client still gets every TCP answer.
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for (host, trickles) in [(11u8, true), (12, false)] {
        for _ in 0..20 {
            let (stop, opened) = (stop.clone(), opened.clone());
            let source = net.ip(host);
            attackers.push(thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let Ok(mut c) = tcp_from(source, dns) else {
                        thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    c.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                    loop {
                        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                            return;
                        }
                        if trickles && c.write_all(&[0]).is_err() {
                            break;
                        }
                        let mut b = [0u8; 1];
                        match c.read(&mut b) {
                            Ok(0) => break,
                            Err(e)
                                if e.kind() != std::io::ErrorKind::WouldBlock
                                    && e.kind() != std::io::ErrorKind::TimedOut =>
                            {
                                break;
                            }
                            _ => {}
                        }
                    }
                }
            }));
        }
    }
    wait_until(Duration::from_secs(5), "attackers to connect", || {
        (opened.load(Ordering::Relaxed) >= 16).then_some(())
    });
    let mut answered = 0;
    for i in 0..20u16 {
        let start = Instant::now();
        let mut c = match tcp_from(net.ip(20), dns) {
            Ok(s) => s,
            Err(e) => panic!("legitimate client could not connect: {e}"),
        };
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let q = framed(&Q::new("www.test.", Rt::A).id(i).to_bytes());
        let mut len = [0u8; 2];
        if c.write_all(&q).is_ok() && c.read_exact(&mut len).is_ok() {
            answered += 1;
        }
        assert!(start.elapsed() < Duration::from_secs(3));
        thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    assert_eq!(
        answered, 20,
        "TCP answers to the legitimate client under attack"
    );
    assert!(
        nodens.metric(
            "nodens_tcp_client_closed_total",
            &[("reason", "per_client_limit")]
        ) > 0.0
    );
    assert!(
        nodens.metric(
            "nodens_tcp_client_closed_total",
            &[("reason", "read_timeout")]
        ) > 0.0
    );
}

// ---- 2. question-less upstream errors and odd classes ---------------------

/// An upstream that answers every UDP query with a bare header: the
/// query's ID, QR set, REFUSED, no question (as NSD answers questions it
/// refuses to parse). Over TCP it answers the same way, or, with
/// `tcp_answers`, with a real answer ([`REAL`]). Returns the UDP and TCP
/// query counts when `stop` is set.
fn questionless_refuser(
    addr: SocketAddr,
    tcp_answers: bool,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(usize, usize)> {
    let sock = UdpSocket::bind(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let tcp = TcpListener::bind(addr).unwrap();
    tcp.set_nonblocking(true).unwrap();
    let tcp_seen = Arc::new(AtomicUsize::new(0));
    let tcp_side = {
        let (stop, tcp_seen) = (stop.clone(), tcp_seen.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok((c, _)) = tcp.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let tcp_seen = tcp_seen.clone();
                thread::spawn(move || {
                    serve_tcp(c, Duration::from_secs(5), |q| {
                        tcp_seen.fetch_add(1, Ordering::Relaxed);
                        if tcp_answers {
                            answer_to(q, REAL)
                        } else {
                            vec![q[0], q[1], 0x80, 0x05, 0, 0, 0, 0, 0, 0, 0, 0]
                        }
                    })
                });
            }
        })
    };
    thread::spawn(move || {
        let mut udp_seen = 0;
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf)
                && n >= 12
            {
                udp_seen += 1;
                let reply = [buf[0], buf[1], 0x80, 0x05, 0, 0, 0, 0, 0, 0, 0, 0];
                sock.send_to(&reply, from).unwrap();
            }
        }
        tcp_side.join().unwrap();
        (udp_seen, tcp_seen.load(Ordering::Relaxed))
    })
}

#[test]
fn questionless_upstream_error_is_an_answer_not_a_timeout() {
    let net = Net::alloc();
    let stop = Arc::new(AtomicBool::new(false));
    let upstream = net.other(10, 5300);
    let server = questionless_refuser(upstream, false, stop.clone());
    let nodens = Nodens::start(
        &Cfg::new(&net).query_timeout(secs(4)).zone(
            Zone::new("refusing.", &[upstream])
                .upstream_timeout(secs(2))
                .max_fails(2),
        ),
    );
    for i in 0..4 {
        let reply = udp_query(nodens.dns, &Q::new(&format!("n{i}.refusing."), Rt::A));
        assert_eq!(reply.rcode(), 5, "the upstream's REFUSED is relayed");
        assert!(
            reply.elapsed < Duration::from_secs(1),
            "answered after {:?}: the reply was waited out",
            reply.elapsed
        );
        assert_eq!(
            reply.question_bytes().len(),
            format!("n{i}.refusing.").len() + 1 + 4,
            "the reply carries the client's question"
        );
    }
    let to = upstream.to_string();
    assert_eq!(
        nodens.metric("nodens_upstream_healthy", &[("to", &to)]),
        1.0,
        "an upstream that answers is not marked down"
    );
    stop.store(true, Ordering::Relaxed);
    // With 0x20, a question-less UDP answer proves too little: confirmed over TCP.
    assert_eq!(server.join().unwrap(), (4, 4));
}

#[test]
fn forged_questionless_error_is_not_trusted() {
    let net = Net::alloc();
    let stop = Arc::new(AtomicBool::new(false));
    let upstream = net.other(11, 5300);
    let server = questionless_refuser(upstream, true, stop.clone());
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .listen(&[net.other(1, 1054)])
            .metrics_listen(&net.other(1, 9254).to_string())
            .zone(Zone::new("example.", &[upstream])),
    );
    let reply = udp_query(nodens.dns, &Q::new("victim.example.", Rt::A));
    assert_eq!(
        reply.a(),
        vec![ipv4("192.0.2.80")],
        "the answer confirmed over TCP"
    );
    stop.store(true, Ordering::Relaxed);
    assert_eq!(server.join().unwrap(), (1, 1));
}

#[test]
fn classes_other_than_in_and_ch_are_refused_without_asking_upstream() {
    let net = Net::alloc();
    let silent = Silent::bind(net.silent(0));
    let nodens = Nodens::start(&Cfg::new(&net).zone(Zone::new(".", &[silent.addr])));
    for class in [0u16, 2, 4, 254, 255, 65535] {
        let mut q = Q::new("www.example.", Rt::A).to_bytes();
        let at = 12 + "www.example.".len() + 1 + 2;
        q[at..at + 2].copy_from_slice(&class.to_be_bytes());
        let start = Instant::now();
        let reply = udp_exchange(nodens.dns, &q, Duration::from_secs(3))
            .unwrap_or_else(|| panic!("class {class}: no reply"));
        let m = RawMsg::parse(&reply).unwrap();
        assert_eq!(m.rcode(), 5, "class {class}");
        assert!(
            m.opt.is_some(),
            "class {class}: the client's OPT is answered"
        );
        assert!(start.elapsed() < Duration::from_secs(1), "class {class}");
    }
    assert!(
        silent.drain().is_empty(),
        "no odd-class query reached the upstream"
    );
}

// ---- 3. NOTIMP and FORMERR carry OPT --------------------------------------

#[test]
fn error_replies_carry_opt_when_the_query_had_one() {
    let net = Net::alloc();
    let silent = Silent::bind(net.silent(0));
    let nodens = Nodens::start(&Cfg::new(&net).zone(Zone::new(".", &[silent.addr])));
    let with_opt = Q::new("www.example.", Rt::A).to_bytes();
    let mut notify = with_opt.clone();
    notify[2] = (notify[2] & 0x87) | (4 << 3);
    let mut no_question = with_opt[..12].to_vec();
    no_question[5] = 0;
    no_question.extend_from_slice(&with_opt[with_opt.len() - 11..]);
    for (what, packet, rcode) in [("NOTIFY", notify, 4), ("QDCOUNT 0", no_question, 1)] {
        let reply = udp_exchange(nodens.dns, &packet, Duration::from_secs(3))
            .unwrap_or_else(|| panic!("{what}: no reply"));
        let m = RawMsg::parse(&reply).unwrap();
        assert_eq!(m.rcode(), rcode, "{what}");
        assert!(
            m.opt.is_some(),
            "{what}: reply without OPT (RFC 6891 section 7)"
        );
    }
}

// ---- 4. wildcard listeners -------------------------------------------------

#[test]
fn wildcard_listener_answers_from_the_queried_address() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    // A fixed port: the listener is 0.0.0.0, so it cannot sit in a block;
    // allocated blocks use ports 1053, 5300, 9253 and (on ::1) 20000-22559.
    let port = 30154;
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .listen(&[SocketAddr::from(([0, 0, 0, 0], port))])
            .zone(Zone::new("test.", &[core.addr])),
    );
    for host in [1u8, 77, 200] {
        let server = SocketAddr::new(net.ip(host), port);
        let sock = udp_from(net.ip(30));
        // A connected socket, as glibc uses: the kernel drops datagrams
        // from any other address.
        sock.connect(server).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        for name in ["www.test.", "www.test."] {
            sock.send(&Q::new(name, Rt::A).to_bytes()).unwrap();
            let mut buf = [0u8; 4096];
            let n = sock
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("no reply from {server} ({e})"));
            let reply = Reply::parse(buf[..n].to_vec(), Duration::ZERO);
            assert_eq!(reply.a(), vec![ipv4("192.0.2.1")]);
        }
    }
    drop(nodens);
}

#[test]
fn wildcard_ipv6_listener_answers_from_the_queried_address() {
    needs!(Need::Root, Need::Tool("ip"));
    let ns = Netns::create("wild6");
    for addr in ["fd00::1/128", "fd00::2/128"] {
        ns.run(&["ip", "addr", "add", addr, "dev", "lo", "nodad"]);
    }
    in_netns(&ns.name, || {
        // Fixed, not allocated: the namespace is this test's own.
        let net = Net::fixed(150);
        let listen: SocketAddr = "[::]:1053".parse().unwrap();
        let nodens = Nodens::start(
            &Cfg::new(&net)
                .listen(&[listen])
                .zone(Zone::new("test.", &[net.silent(0)])),
        );
        for (client, server) in [
            ("[fd00::1]:0", "[fd00::2]:1053"),
            ("[::1]:0", "[fd00::1]:1053"),
        ] {
            let sock = UdpSocket::bind(client).unwrap();
            sock.connect(server).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            // No zone for the name: answered REFUSED at once, by nodens itself.
            sock.send(&Q::new("www.other.", Rt::A).to_bytes()).unwrap();
            let mut buf = [0u8; 512];
            let n = sock
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("{client} -> {server}: no reply ({e})"));
            assert_eq!(Reply::parse(buf[..n].to_vec(), Duration::ZERO).rcode(), 5);
        }
        drop(nodens);
    });
}

// ---- 5. misses waiting on a silent upstream ----------------------------------

#[test]
fn misses_in_flight_are_capped() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let silent = Silent::bind(net.silent(0));
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .max_misses_in_flight(50)
            // No bulkhead: the server's own cap is what this fills
            // (tests/integration/bulkheads.rs has the zone's).
            .server_option("max_misses_in_flight_per_zone", "0")
            .query_timeout(secs(4))
            .zone(Zone::new("test.", &[core.addr]))
            .zone(Zone::new("silent.", &[silent.addr]).upstream_timeout(secs(4))),
    );
    udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    let fds_before = nodens_fds(&nodens);
    let sock = udp_from(net.ip(30));
    for i in 0..1000 {
        sock.send_to(
            &Q::new(&format!("n{i}.silent."), Rt::A).to_bytes(),
            nodens.dns,
        )
        .unwrap();
    }
    thread::sleep(Duration::from_millis(500));
    let fds_during = nodens_fds(&nodens);
    assert!(
        fds_during <= fds_before + 60,
        "{fds_during} descriptors open with 1000 misses waiting (before: {fds_before})"
    );
    let hit = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    assert_eq!(hit.a(), vec![ipv4("192.0.2.1")], "hits still answered");
    assert!(hit.elapsed < Duration::from_secs(1));
    let dropped = nodens.metric(
        "nodens_rejected_queries_total",
        &[("reason", "too many misses in flight")],
    );
    assert!(dropped >= 900.0, "{dropped} misses dropped at the cap");
    assert!(silent.drain().len() <= 50, "at most the cap went upstream");
}

// ---- 6. allow list and rate limit -------------------------------------------

#[test]
fn sources_outside_the_allow_list_are_refused() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .allow(&[&net.cidr(28)])
            .zone(Zone::new("test.", &[core.addr])),
    );
    let q = Q::new("www.test.", Rt::A);
    let inside = ask_from(net.ip(5), nodens.dns, &q, Duration::from_secs(3)).unwrap();
    assert_eq!(inside.a(), vec![ipv4("192.0.2.1")]);
    let outside = ask_from(net.ip(100), nodens.dns, &q, Duration::from_secs(3)).unwrap();
    assert_eq!(outside.rcode(), 5, "REFUSED outside the list");
    assert!(outside.a().is_empty());
    assert!(outside.raw.len() <= q.to_bytes().len(), "no amplification");
    let mut tcp = tcp_from(net.ip(100), nodens.dns).unwrap();
    tcp.write_all(&framed(&q.to_bytes())).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut reply = vec![0u8; 2];
    tcp.read_exact(&mut reply).unwrap();
    let len = u16::from_be_bytes([reply[0], reply[1]]) as usize;
    let mut msg = vec![0u8; len];
    tcp.read_exact(&mut msg).unwrap();
    assert_eq!(
        Reply::parse(msg, Duration::ZERO).rcode(),
        5,
        "REFUSED over TCP too"
    );
}

#[test]
fn per_client_rate_limit_drops_the_flooder_only() {
    needs!(Need::CoreDns, Need::Alone);
    let (net, _core, nodens) =
        setup_with(|c, z| c.client_rate_limit(20).client_rate_burst(20).zone(z));
    let flooder = udp_from(net.ip(40));
    flooder
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    for i in 0..200u16 {
        flooder
            .send_to(&Q::new("www.test.", Rt::A).id(i).to_bytes(), nodens.dns)
            .unwrap();
    }
    let mut answered = 0;
    let mut buf = [0u8; 4096];
    while flooder.recv_from(&mut buf).is_ok() {
        answered += 1;
    }
    assert!(
        (20..=40).contains(&answered),
        "{answered} of 200 answered at 20 q/s with a burst of 20"
    );
    let neighbour = ask_from(
        net.ip(41),
        nodens.dns,
        &Q::new("www.test.", Rt::A),
        Duration::from_secs(2),
    );
    assert!(neighbour.is_some(), "another client is not limited");
}

// ---- 7. forged answers --------------------------------------------------------

/// The answer to `query` (a query from nodens): its header and question
/// exactly as asked, one A record `ip`.
fn answer_to(query: &[u8], ip: [u8; 4]) -> Vec<u8> {
    let mut at = 12;
    while query[at] != 0 {
        at += 1 + query[at] as usize;
    }
    let question_end = at + 5;
    let mut a = query[..question_end].to_vec();
    a[2] = 0x81;
    a[3] = 0x80;
    a[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    a.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4]);
    a.extend_from_slice(&ip);
    a
}

const REAL: [u8; 4] = [192, 0, 2, 80];

/// When a forger's flood has the query's real ID.
#[derive(Clone, Copy)]
enum Guesses {
    /// Every other forgery, the first included: a forger who knows the ID.
    EveryOther,
    /// The last forgery only: a lucky guess at the end of a flood.
    Last,
    Never,
}
const POISON: [u8; 4] = [6, 6, 6, 6];

/// An authoritative server on UDP and TCP at `addr` that gives [`REAL`],
/// after a forger has flooded the asking socket, for each of `queries`
/// UDP queries: the forged answers carry [`POISON`], the question in lower
/// case, and `forged` IDs, the real one among them as `guesses` says.
/// The UDP side returns, per query, whether its name had upper-case
/// letters (0x20); the TCP side, how many queries it answered.
fn forged_then_real(
    addr: SocketAddr,
    queries: usize,
    forged: usize,
    guesses: Guesses,
) -> (thread::JoinHandle<Vec<bool>>, thread::JoinHandle<usize>) {
    let udp = UdpSocket::bind(addr).unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let tcp = TcpListener::bind(addr).unwrap();
    let udp_side = thread::spawn(move || {
        let mut randomised = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..queries {
            let Ok((n, from)) = udp.recv_from(&mut buf) else {
                break;
            };
            let query = buf[..n].to_vec();
            let id = u16::from_be_bytes([query[0], query[1]]);
            randomised.push(query[12..].iter().any(u8::is_ascii_uppercase));
            let mut lower = query.clone();
            lower.make_ascii_lowercase();
            // The forger knows the port (it is `from`) and the name; not the case.
            for k in 0..forged {
                let mut fake = answer_to(&lower, POISON);
                let right = match guesses {
                    Guesses::EveryOther => k % 2 == 0,
                    Guesses::Last => k + 1 == forged,
                    Guesses::Never => false,
                };
                let fake_id = if right {
                    id
                } else {
                    (id ^ 0x5a5a).wrapping_add(k as u16 | 1)
                };
                fake[..2].copy_from_slice(&fake_id.to_be_bytes());
                let _ = udp.send_to(&fake, from);
            }
            // The real server answers a moment later (the flood fills the
            // socket's buffer; the answer must not be lost behind it).
            thread::sleep(Duration::from_millis(100));
            let _ = udp.send_to(&answer_to(&query, REAL), from);
        }
        randomised
    });
    let tcp_side = thread::spawn(move || {
        tcp.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut served = 0;
        while Instant::now() < deadline {
            let Ok((c, _)) = tcp.accept() else {
                thread::sleep(Duration::from_millis(10));
                continue;
            };
            serve_tcp(c, Duration::from_secs(2), |q| {
                served += 1;
                answer_to(q, REAL)
            });
        }
        served
    });
    (udp_side, tcp_side)
}

#[test]
fn forged_answers_with_the_right_id_and_port_are_not_cached() {
    let net = Net::alloc();
    let upstream = net.other(10, 5300);
    let (udp_side, tcp_side) = forged_then_real(upstream, 1, 8, Guesses::EveryOther);
    let nodens = Nodens::start(
        &Cfg::new(&net).zone(Zone::new("example.", &[upstream]).upstream_timeout(secs(3))),
    );
    let name = "victim-with-many-letters.example.";
    let reply = udp_query(nodens.dns, &Q::new(name, Rt::A));
    udp_side.join().unwrap();
    assert_eq!(reply.a(), vec![ipv4("192.0.2.80")], "the real answer");
    let again = udp_query(nodens.dns, &Q::new(name, Rt::A));
    assert_eq!(
        again.a(),
        vec![ipv4("192.0.2.80")],
        "the cached answer is real"
    );
    assert!(tcp_side.join().unwrap() >= 1, "confirmed over TCP");
    let to = upstream.to_string();
    let caught = nodens.metric(
        "nodens_upstream_errors_total",
        &[("to", &to), ("error", "case_mismatch")],
    ) + nodens.metric(
        "nodens_upstream_errors_total",
        &[("to", &to), ("error", "spoof_suspected")],
    );
    assert!(caught >= 1.0, "the forgery was noticed");
}

#[test]
fn a_flood_of_forged_ids_poisons_nothing() {
    needs!(Need::Alone);
    let net = Net::alloc();
    let upstream = net.other(10, 5300);
    let (udp_side, tcp_side) = forged_then_real(upstream, 1, 20_000, Guesses::Never);
    let nodens = Nodens::start(
        &Cfg::new(&net).zone(Zone::new("example.", &[upstream]).upstream_timeout(secs(3))),
    );
    let reply = udp_query(nodens.dns, &Q::new("flooded.example.", Rt::A));
    udp_side.join().unwrap();
    assert_eq!(reply.a(), vec![ipv4("192.0.2.80")]);
    let to = upstream.to_string();
    assert!(
        nodens.metric(
            "nodens_upstream_errors_total",
            &[("to", &to), ("error", "spoof_suspected")]
        ) >= 1.0,
        "a near-miss flood is noticed and the answer confirmed over TCP"
    );
    assert!(tcp_side.join().unwrap() >= 1);
}

#[test]
fn lucky_forgeries_do_not_switch_0x20_off() {
    let net = Net::alloc();
    let upstream = net.other(11, 5300);
    let rounds = 6;
    // Three forgeries, the last with the right ID: fewer than near-miss
    // detection needs, so the lucky one is read.
    let (udp_side, tcp_side) = forged_then_real(upstream, rounds, 3, Guesses::Last);
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .listen(&[net.other(1, 1054)])
            .metrics_listen(&net.other(1, 9254).to_string())
            .zone(Zone::new("example.", &[upstream]).upstream_timeout(secs(3))),
    );
    for i in 0..rounds {
        let name = format!("victim-number-{i}-with-many-letters.example.");
        let reply = udp_query(nodens.dns, &Q::new(&name, Rt::A));
        assert_eq!(reply.a(), vec![ipv4("192.0.2.80")], "{name}");
    }
    let randomised = udp_side.join().unwrap();
    assert_eq!(
        randomised,
        vec![true; rounds],
        "every query asked in random case, after forgeries with the right ID"
    );
    assert_eq!(tcp_side.join().unwrap(), rounds, "each confirmed over TCP");
}
