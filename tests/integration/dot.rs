//! DNS over TLS to upstreams (RFC 7858), against unbound's TLS listener
//! with a certificate authority made in the test.
//!
//! Proves: a `transport = "tls"` zone's answers come over TLS through the
//! bounded pool (many queries, few handshakes: sessions are reused, and a
//! new connection resumes a session); a certificate for another name, an
//! expired one, or one from an authority nodens was not told to trust is
//! refused (SERVFAIL, counted as `certificate`, nothing asked in the
//! clear); a server that accepts the connection and stalls the handshake
//! costs at most `connect_timeout` before the next upstream answers.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::*;

const DOT_PORT: u16 = 8853;
const SERVER_NAME: &str = "dns.test";

/// unbound on `net`'s first upstream address, with `cert` for its TLS
/// listener.
fn unbound(net: &Net, cert: &Issued) -> Unbound {
    Unbound::start(net.upstream(0).ip(), DOT_PORT, cert)
}

/// The zone `test.` over TLS to `upstreams`, whose certificates must name
/// SERVER_NAME and chain to `ca`; `more`: further `[zone.tls]` keys
/// (", cert = ..."), or "".
fn tls_zone(upstreams: &[SocketAddr], ca: &std::path::Path, more: &str) -> Zone {
    Zone::new("test.", upstreams)
        .transport(Transport::Tls)
        .tls(&format!(
            "{{ server_name = \"{SERVER_NAME}\", ca = \"{}\"{more} }}",
            ca.display()
        ))
}

/// nodens forwarding `test.` over TLS to `upstreams` (`tls_zone`), with
/// `pool` and a 4 s upstream timeout.
fn nodens(net: &Net, upstreams: &[SocketAddr], ca: &std::path::Path, pool: Pool) -> Nodens {
    Nodens::start(
        &Cfg::new(net).zone(
            tls_zone(upstreams, ca, "")
                .upstream_timeout(secs(4))
                .pool(pool),
        ),
    )
}

fn handshakes(nodens: &Nodens, to: SocketAddr, result: &str) -> f64 {
    nodens.metric(
        "nodens_upstream_tls_handshakes_total",
        &[("to", &to.to_string()), ("result", result)],
    )
}

#[test]
fn answers_come_over_tls_on_few_reused_sessions() {
    needs!(Need::Tool("unbound"));
    let net = Net::alloc();
    let pki = Pki::new("test CA");
    let ip = net.upstream(0).ip().to_string();
    let server = unbound(&net, &pki.issue("server", &[SERVER_NAME, &ip], false));
    let nodens = nodens(
        &net,
        &[server.dot],
        &pki.ca,
        Pool::new().max_connections(2).idle_timeout(ms(300)),
    );
    for i in 0..40 {
        let r = udp_query(nodens.dns, &Q::new(&format!("n{i}.test."), Rt::A));
        assert_eq!(r.a(), vec![ipv4("192.0.2.1")], "n{i}.test.");
    }
    for i in 0..40 {
        assert_eq!(
            server.wait_queries(&format!("n{i}.test."), 1),
            1,
            "n{i}.test. asked once"
        );
    }
    let full = handshakes(&nodens, server.dot, "full");
    assert!(
        (1.0..=2.0).contains(&full),
        "{full} full handshakes for 40 queries"
    );
    // The idle connection closes; the next miss resumes the session.
    wait_until(secs(5), "the idle connection to close", || {
        (nodens.metric(
            "nodens_upstream_tcp_connections",
            &[("to", &server.dot.to_string()), ("state", "idle")],
        ) == 0.0)
            .then_some(())
    });
    let r = udp_query(nodens.dns, &Q::new("after.test.", Rt::A));
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    assert_eq!(
        handshakes(&nodens, server.dot, "resumed"),
        1.0,
        "a resumed session"
    );
    assert_eq!(
        handshakes(&nodens, server.dot, "full"),
        full,
        "no new full handshake"
    );
}

/// Each certificate nodens must refuse: SERVFAIL, counted, the question
/// never reaching the server.
#[test]
fn certificates_for_another_name_expired_or_from_another_authority_are_refused() {
    needs!(Need::Tool("unbound"));
    let pki = Pki::new("test CA");
    let stranger = Pki::new("another CA");
    for (case, cert, trusted) in [
        (
            "another name",
            pki.issue("other", &["other.test"], false),
            &pki,
        ),
        ("expired", pki.issue("expired", &[SERVER_NAME], true), &pki),
        (
            "another authority",
            stranger.issue("stranger", &[SERVER_NAME], false),
            &pki,
        ),
    ] {
        let net = Net::alloc();
        let server = unbound(&net, &cert);
        let nodens = nodens(&net, &[server.dot], &trusted.ca, Pool::new());
        let r = udp_query(nodens.dns, &Q::new("secret.test.", Rt::A));
        assert_eq!(r.rcode(), rcode::SERVFAIL, "{case}: SERVFAIL");
        assert!(
            handshakes(&nodens, server.dot, "certificate") >= 1.0,
            "{case}: counted as a refused certificate"
        );
        let errors = nodens.metric(
            "nodens_upstream_errors_total",
            &[("to", &server.dot.to_string()), ("error", "tls")],
        );
        assert!(
            errors >= 1.0,
            "{case}: nodens_upstream_errors_total{{error=\"tls\"}} {errors}"
        );
        assert_eq!(
            server.count_queries("secret.test."),
            0,
            "{case}: nothing asked"
        );
    }
}

/// A server that accepts and never speaks: the handshake is given up at
/// `connect_timeout` (300 ms), and the next upstream answers, well before
/// the upstream timeout (4 s) the query would otherwise wait out.
#[test]
fn a_stalled_handshake_costs_at_most_the_connect_timeout() {
    needs!(Need::Tool("unbound"));
    let net = Net::alloc();
    let pki = Pki::new("test CA");
    let server = unbound(&net, &pki.issue("server", &[SERVER_NAME], false));
    let stall = Stall::bind(SocketAddr::new(net.upstream(1).ip(), DOT_PORT));
    let nodens = nodens(
        &net,
        &[stall.addr, server.dot],
        &pki.ca,
        Pool::new().connect_timeout(ms(300)),
    );
    let t0 = Instant::now();
    let r = udp_query_timeout(nodens.dns, &Q::new("stalled.test.", Rt::A), secs(10))
        .expect("an answer");
    let took = t0.elapsed();
    assert_eq!(r.a(), vec![ipv4("192.0.2.1")]);
    assert!(stall.connections() >= 1, "the stalled server was dialled");
    assert_eq!(handshakes(&nodens, stall.addr, "timeout"), 1.0);
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
}

/// Mutual TLS: CoreDNS's DoT listener (`tls CERT KEY CA` with
/// `client_auth require_and_verify`) answers nodens only when nodens
/// presents the client certificate `[zone.tls] cert`/`key` names.
#[test]
fn a_client_certificate_is_presented_when_configured() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let pki = Pki::new("test CA");
    let server = pki.issue("server", &[SERVER_NAME], false);
    let client = pki.issue("client", &["nodens.test"], false);
    let dot = SocketAddr::new(net.upstream(0).ip(), DOT_PORT);
    let plain = net.upstream(0);
    let corefile = format!(
        "tls://test.:{port} {{\n  bind {ip}\n  tls {cert} {key} {ca} {{\n    client_auth require_and_verify\n  }}\n  \
         template IN A test {{\n    answer \"{{{{ .Name }}}} 60 IN A 192.0.2.7\"\n  }}\n  log\n}}\n\
         test.:{pport} {{\n  bind {ip}\n  template IN A test {{\n    answer \"{{{{ .Name }}}} 60 IN A 192.0.2.7\"\n  }}\n}}\n",
        port = DOT_PORT,
        pport = plain.port(),
        ip = dot.ip(),
        cert = server.cert.display(),
        key = server.key.display(),
        ca = pki.ca.display(),
    );
    let core = CorefileServer::launch("coredns-dot", &[], &corefile, &[]);
    wait_until(secs(15), "CoreDNS to answer", || {
        udp_query_timeout(plain, &Q::new("ready.test.", Rt::A), ms(200)).map(|_| ())
    });
    let with_cert = |cert: Option<&Issued>| {
        let keys = cert.map_or(String::new(), |c| {
            format!(
                ", cert = \"{}\", key = \"{}\"",
                c.cert.display(),
                c.key.display()
            )
        });
        Nodens::start(&Cfg::new(&net).zone(tls_zone(&[dot], &pki.ca, &keys)))
    };
    let without = with_cert(None);
    let r = udp_query(without.dns, &Q::new("anonymous.test.", Rt::A));
    assert_eq!(r.rcode(), rcode::SERVFAIL, "no client certificate: refused");
    drop(without);
    let nodens = with_cert(Some(&client));
    let r = udp_query(nodens.dns, &Q::new("known.test.", Rt::A));
    assert_eq!(
        r.a(),
        vec![ipv4("192.0.2.7")],
        "with the client certificate"
    );
    // CoreDNS's `log` writes its line after the reply has gone: wait for it.
    let logged = |name: &str| {
        core.proc
            .lines()
            .iter()
            .filter(|l| l.contains(name))
            .count()
    };
    wait_until(secs(5), "CoreDNS's log line of known.test.", || {
        (logged("known.test.") > 0).then_some(())
    });
    assert_eq!(
        logged("known.test."),
        1,
        "CoreDNS's DoT listener answered it"
    );
    assert!(
        !core
            .proc
            .lines()
            .iter()
            .any(|l| l.contains("anonymous.test.")),
        "the anonymous question never reached CoreDNS"
    );
}

/// `nodens doctor` names a DNS-over-TLS upstream whose certificate is
/// refused at every handshake, with the TLS library's words for why.
#[test]
fn doctor_names_an_upstream_whose_certificate_is_refused() {
    needs!(Need::Tool("unbound"));
    let net = Net::alloc();
    let pki = Pki::new("test CA");
    let server = unbound(&net, &pki.issue("expired", &[SERVER_NAME], true));
    let dir = private_dir();
    let socket = dir.path().join("control.sock");
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .server_option("control_socket", &format!("\"{}\"", socket.display()))
            .zone(tls_zone(&[server.dot], &pki.ca, "")),
    );
    let r = udp_query(nodens.dns, &Q::new("doctor.test.", Rt::A));
    assert_eq!(r.rcode(), rcode::SERVFAIL);
    let (report, passed) = doctor_against(&socket, "nameserver 127.0.0.1\n");
    let f = finding(&report, "upstream-tls-refused");
    assert!(f.contains(&server.dot.to_string()), "{f}");
    assert!(f.contains("Expired") || f.contains("expired"), "{f}");
    assert!(!passed, "a critical finding fails the doctor");
}

/// A Corefile whose only `forward` is `tls://` (CoreDNS's `tls CA` and
/// `tls_servername`), converted by `nodens convert-corefile`, serves: the
/// converted nodens and CoreDNS running the Corefile itself get the same
/// answer from the same DoT server, each over TLS.
#[test]
fn a_converted_tls_forward_answers_as_coredns_does() {
    needs!(Need::CoreDns, Need::Tool("unbound"));
    let net = Net::alloc();
    let pki = Pki::new("test CA");
    let server = unbound(&net, &pki.issue("server", &[SERVER_NAME], false));
    let corefile = |bind: std::net::IpAddr, prometheus: &str| {
        format!(
            ".:1053 {{\n  bind {bind}\n  {prometheus}\n  forward . tls://{} {{\n    tls_servername {SERVER_NAME}\n    tls {}\n  }}\n}}\n",
            server.dot,
            pki.ca.display()
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("Corefile");
    std::fs::write(
        &path,
        corefile(net.ip(1), &format!("prometheus {}", net.metrics())),
    )
    .unwrap();
    let out = std::process::Command::new(nodens_bin())
        .arg("convert-corefile")
        .arg(&path)
        .output()
        .unwrap();
    let toml = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}\n{toml}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(toml.contains("transport = \"tls\""), "{toml}");
    let nodens = Nodens::start_toml(&toml);
    let coredns_at = net.ip(20);
    let _core = CorefileServer::launch("coredns-tls-forward", &[], &corefile(coredns_at, ""), &[]);
    let coredns = SocketAddr::new(coredns_at, 1053);
    wait_until(secs(15), "CoreDNS to forward", || {
        udp_query_timeout(coredns, &Q::new("ready.test.", Rt::A), ms(500))
            .filter(|r| r.rcode() == rcode::NOERROR)
            .map(|_| ())
    });
    let ours = udp_query(nodens.dns, &Q::new("same.test.", Rt::A));
    let theirs = udp_query(coredns, &Q::new("same.test.", Rt::A));
    assert_eq!(ours.a(), vec![ipv4("192.0.2.1")]);
    assert_eq!(ours.a(), theirs.a());
    assert_eq!(ours.rcode(), theirs.rcode());
    assert_eq!(
        server.wait_queries("same.test.", 2),
        2,
        "each asked unbound over TLS"
    );
    assert!(handshakes(&nodens, server.dot, "full") >= 1.0);
}

/// A connection per query (`max_queries_per_connection = 1`, 4
/// connections) with 8 clients asking 10 names each: every query gets its
/// answer on a session of its own, and all but the first few sessions are
/// resumed from the tickets the earlier ones left. (What that costs, and
/// how long it takes a release build: bench/dot's `tls-fresh`.)
#[test]
fn a_connection_per_query_resumes_a_session_each_time() {
    needs!(Need::Tool("unbound"));
    let net = Net::alloc();
    let pki = Pki::new("test CA");
    let server = unbound(&net, &pki.issue("server", &[SERVER_NAME], false));
    let nodens = nodens(
        &net,
        &[server.dot],
        &pki.ca,
        Pool::new().max_queries_per_connection(1).max_queue(1000),
    );
    std::thread::scope(|s| {
        for c in 0..8 {
            let dns = nodens.dns;
            s.spawn(move || {
                for i in 0..10 {
                    let r = udp_query(dns, &Q::new(&format!("fresh{c}-{i}.test."), Rt::A));
                    assert_eq!(r.a(), vec![ipv4("192.0.2.1")], "fresh{c}-{i}.test.");
                }
            });
        }
    });
    let full = handshakes(&nodens, server.dot, "full");
    let resumed = handshakes(&nodens, server.dot, "resumed");
    assert!(
        full + resumed >= 80.0,
        "a session per query: {full} full, {resumed} resumed"
    );
    assert!(full <= 8.0, "{full} full handshakes: sessions are resumed");
}
