//! Local answers (`[zone.hosts]`, `[[zone.template]]`, `local`) against
//! CoreDNS 1.13 running the same Corefile: nodens serves what
//! `nodens convert-corefile` makes of it, both forward to the same
//! upstream, and every question gets the same response code, answer
//! RRsets and authority section over UDP and TCP. Then the hosts file
//! while running: a change shows within the reload interval, a deleted or
//! broken file keeps its last records, and a broken file at reload or in
//! `check-config` is refused with its file and line.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::*;

const HOSTS: &str = "10.0.0.1 a.example.org b.example.org\n\
                     2001:db8::5 a.example.org\n\
                     10.0.0.2 c.example.org # comment\n";

/// The Corefile block under test, for a server at `listen` forwarding to `upstream`.
fn corefile(listen: std::net::SocketAddr, upstream: std::net::SocketAddr, hosts: &Path) -> String {
    format!(
        r#".:{port} {{
  bind {ip}
  local
  template IN AAAA test {{
    rcode NOERROR
  }}
  template ANY ANY test {{
    match "^(?:[^.]+\.){{3,}}test\.$"
    rcode NXDOMAIN
    fallthrough
  }}
  template ANY ANY reddog.example {{
    rcode NXDOMAIN
  }}
  template IN A test {{
    match "^ip-(\d+)-(\d+)\.test\.$"
    answer "{{{{ .Name }}}} 60 IN A 10.9.{{{{ index .Match 1 }}}}.{{{{ index .Match 2 }}}}"
    fallthrough
  }}
  hosts {hosts} example.org {{
    10.0.0.3 inline.example.org
    ttl 60
  }}
  forward . {upstream}
}}
"#,
        port = listen.port(),
        ip = listen.ip(),
        hosts = hosts.display(),
    )
}

/// The configuration `nodens convert-corefile` makes of `corefile`, with
/// the harness's listen and metrics addresses.
fn converted(corefile: &str, net: &Net, dir: &Path) -> String {
    let path = dir.join("Corefile");
    std::fs::write(&path, corefile).unwrap();
    let Converted {
        toml: text,
        stderr,
        code,
    } = convert_corefile(&path);
    assert!(
        code == Some(0) || !text.is_empty(),
        "convert-corefile failed: {stderr}"
    );
    let mut table: toml::Table = text.parse().unwrap();
    let harness: toml::Table = Cfg::new(net).to_toml().parse().unwrap();
    for key in ["server", "metrics"] {
        table.insert(key.into(), harness[key].clone());
    }
    toml::to_string(&table).unwrap()
}

/// CoreDNS running the block `corefile(addr)` makes (its first two lines,
/// the key and `bind`, are the harness's) and nodens serving its conversion.
fn pair(
    net: &Net,
    dir: &Path,
    corefile: impl Fn(std::net::SocketAddr) -> String,
) -> (CoreDns, Nodens) {
    let block = corefile(net.upstream(1));
    let directives = block
        .lines()
        .skip(2)
        .take_while(|l| *l != "}")
        .collect::<Vec<_>>()
        .join("\n");
    let reference = CoreDns::start_with_blocks(
        net.upstream(1),
        &[("ready.example.", zone_file("ready.example.", ""))],
        &[(".", &directives)],
    );
    let config = converted(&corefile(net.nodens()), net, dir);
    (reference, Nodens::start_toml(&config))
}

/// The same rcode, answer RRsets and authority section from both, over UDP and TCP.
fn compare(reference: &CoreDns, nodens: &Nodens, cases: &[(&str, Rt)]) {
    for &(name, t) in cases {
        for (proto, ask) in [("udp", udp_query as fn(_, &Q) -> Reply), ("tcp", tcp_query)] {
            let want = ask(reference.addr, &Q::new(name, t));
            let got = ask(nodens.dns, &Q::new(name, t));
            let what = format!("{name} {t} over {proto}");
            assert_eq!(got.rcode(), want.rcode(), "{what}: rcode");
            assert_eq!(got.answer_set(), want.answer_set(), "{what}: answers");
            assert_eq!(
                got.authority_set(),
                want.authority_set(),
                "{what}: authority"
            );
        }
    }
}

#[test]
fn answers_match_coredns() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let upstream = CoreDns::test_zone(net.upstream(0), "");
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, HOSTS).unwrap();
    let (reference, nodens) = pair(&net, dir.path(), |at| corefile(at, upstream.addr, &hosts));

    let cases = [
        ("a.example.org.", Rt::A),
        ("a.example.org.", Rt::AAAA),
        ("a.example.org.", Rt::MX),
        ("b.example.org.", Rt::A),
        ("c.example.org.", Rt::AAAA),
        ("inline.example.org.", Rt::A),
        ("absent.example.org.", Rt::A),
        ("1.0.0.10.in-addr.arpa.", Rt::PTR),
        ("3.0.0.10.in-addr.arpa.", Rt::PTR),
        ("www.test.", Rt::A),
        ("www.test.", Rt::AAAA),
        ("nope.test.", Rt::AAAA),
        ("mail.test.", Rt::MX),
        ("a.b.c.test.", Rt::A),
        ("a.b.c.test.", Rt::TXT),
        ("ip-3-4.test.", Rt::A),
        ("reddog.example.", Rt::SOA),
        ("x.y.reddog.example.", Rt::AAAA),
        ("localhost.", Rt::A),
        ("localhost.", Rt::AAAA),
        ("localhost.", Rt::MX),
        ("localhost.example.", Rt::A),
        ("foo.localhost.", Rt::A),
        ("1.0.0.127.in-addr.arpa.", Rt::PTR),
        ("2.0.0.127.in-addr.arpa.", Rt::PTR),
        ("127.in-addr.arpa.", Rt::NS),
    ];
    compare(&reference, &nodens, &cases);
    // AAAA suppression is NODATA, not NXDOMAIN; a name the hosts zone
    // lacks is SERVFAIL (CoreDNS has no SOA for an NXDOMAIN there).
    let suppressed = udp_query(nodens.dns, &Q::new("www.test.", Rt::AAAA));
    assert_eq!((suppressed.rcode(), suppressed.msg.answers().len()), (0, 0));
    let absent = udp_query(nodens.dns, &Q::new("absent.example.org.", Rt::A));
    assert_eq!(absent.rcode(), 2);
    let groups = udp_query(nodens.dns, &Q::new("ip-3-4.test.", Rt::A));
    assert_eq!(
        groups.a(),
        ["10.9.3.4".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let deep = udp_query(nodens.dns, &Q::new("a.b.c.test.", Rt::A));
    assert_eq!((deep.rcode(), deep.msg.name_servers().len()), (3, 0));
    let localhost = udp_query(nodens.dns, &Q::new("localhost.example.", Rt::A));
    assert_eq!(
        localhost.a(),
        ["127.0.0.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let hosts_a = udp_query(nodens.dns, &Q::new("inline.example.org.", Rt::A));
    assert_eq!(
        hosts_a.a(),
        ["10.0.0.3".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert!(hosts_a.msg.authoritative());
    let ptr = udp_query(nodens.dns, &Q::new("1.0.0.10.in-addr.arpa.", Rt::PTR));
    assert_eq!(ptr.msg.answers().len(), 2);
}

fn a_of(nodens: &Nodens, name: &str) -> Vec<std::net::Ipv4Addr> {
    udp_query(nodens.dns, &Q::new(name, Rt::A)).a()
}

#[test]
fn hosts_file_followed_while_running() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let upstream = CoreDns::test_zone(net.upstream(0), "");
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, HOSTS).unwrap();
    let config = |file: &Path| {
        format!(
            "{}[[zone]]\nname = \".\"\nupstreams = [\"{}\"]\n[zone.hosts]\nfiles = [\"{}\"]\nzones = [\"example.org\"]\nreload = \"100ms\"\n",
            Cfg::new(&net).to_toml(),
            upstream.addr,
            file.display()
        )
    };
    let mut nodens = Nodens::start_toml(&config(&hosts));
    assert_eq!(
        a_of(&nodens, "a.example.org."),
        ["10.0.0.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );

    // Changed: the new address within the reload interval (and some).
    std::fs::write(&hosts, "10.0.0.7 a.example.org\n").unwrap();
    wait_until(Duration::from_secs(5), "the changed hosts file", || {
        (a_of(&nodens, "a.example.org.") == ["10.0.0.7".parse::<std::net::Ipv4Addr>().unwrap()])
            .then_some(())
    });
    // Deleted: the last records stay (the poll saw it gone: logged once).
    std::fs::remove_file(&hosts).unwrap();
    nodens.proc.wait_for_line(
        0,
        Duration::from_secs(5),
        "the deleted file's warning",
        |l| l.contains("hosts file cannot read"),
    );
    assert_eq!(
        a_of(&nodens, "a.example.org."),
        ["10.0.0.7".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    // Back with a broken line: still the last records.
    std::fs::write(&hosts, "10.0.0.8 a.example.org\n10.0.0.999 d.example.org\n").unwrap();
    nodens.proc.wait_for_line(
        0,
        Duration::from_secs(5),
        "the broken line's warning",
        |l| l.contains("line 2"),
    );
    assert_eq!(
        a_of(&nodens, "a.example.org."),
        ["10.0.0.7".parse::<std::net::Ipv4Addr>().unwrap()]
    );

    // check-config names the file and the line.
    let conf = dir.path().join("nodens.toml");
    std::fs::write(&conf, config(&hosts)).unwrap();
    let out = Command::new(nodens_bin())
        .arg("check-config")
        .arg(&conf)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("hosts file {} line 2", hosts.display())),
        "{stderr}"
    );

    // A reload with the broken file keeps the running configuration.
    let failures = nodens.metric("nodens_config_reloads_total", &[("result", "failure")]);
    nodens.reload(&config(&hosts));
    nodens.wait_metric(
        "nodens_config_reloads_total",
        &[("result", "failure")],
        failures + 1.0,
    );
    assert_eq!(
        a_of(&nodens, "a.example.org."),
        ["10.0.0.7".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    // Fixed: the records follow again.
    std::fs::write(&hosts, "10.0.0.9 a.example.org\n").unwrap();
    wait_until(Duration::from_secs(5), "the fixed hosts file", || {
        (a_of(&nodens, "a.example.org.") == ["10.0.0.9".parse::<std::net::Ipv4Addr>().unwrap()])
            .then_some(())
    });
}

/// `hosts` with `fallthrough` for some zones: a name the records lack in
/// those goes upstream, elsewhere it is SERVFAIL; a name the records have
/// is NODATA for another type even when upstream has that type.
#[test]
fn hosts_fallthrough_matches_coredns() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let upstream = CoreDns::test_zone(net.upstream(0), "");
    let dir = tempfile::tempdir().unwrap();
    let (reference, nodens) = pair(&net, dir.path(), |at| {
        format!(
            ".:{port} {{\n  bind {ip}\n  hosts {{\n    10.1.1.1 extra.test\n    10.1.1.2 www.test\n    fe80::1%eth0 six.test\n    fallthrough test\n  }}\n  forward . {up}\n}}\n",
            port = at.port(),
            ip = at.ip(),
            up = upstream.addr,
        )
    });
    let cases = [
        ("extra.test.", Rt::A),
        ("extra.test.", Rt::MX),
        ("www.test.", Rt::A),
        ("www.test.", Rt::AAAA),
        ("six.test.", Rt::AAAA),
        ("nope.test.", Rt::A),
        ("mail.test.", Rt::MX),
        ("absent.example.", Rt::A),
        ("1.1.1.10.in-addr.arpa.", Rt::PTR),
    ];
    compare(&reference, &nodens, &cases);
    let www = udp_query(nodens.dns, &Q::new("www.test.", Rt::AAAA));
    assert_eq!((www.rcode(), www.msg.answers().len()), (0, 0));
    let nope = udp_query(nodens.dns, &Q::new("nope.test.", Rt::A));
    assert_eq!(nope.rcode(), 3, "from upstream");
}

/// Asks `server` for `name` A from a socket of its own; the reply's
/// additional section as text, the client's port written `PORT`.
fn whoami(server: std::net::SocketAddr, name: &str, tcp: bool) -> (u16, bool, usize, Vec<String>) {
    let q = Q::new(name, Rt::A);
    let (raw, port) = if tcp {
        let mut c = Tcp::connect(server);
        let port = c.stream.local_addr().unwrap().port();
        c.send(&q.to_bytes()).unwrap();
        match c.recv(Duration::from_secs(5)) {
            TcpRead::Msg(raw) => (raw, port),
            other => panic!("no TCP answer from {server}: {other:?}"),
        }
    } else {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        socket.send_to(&q.to_bytes(), server).unwrap();
        let mut buf = [0u8; 1500];
        let n = socket.recv(&mut buf).unwrap();
        (buf[..n].to_vec(), socket.local_addr().unwrap().port())
    };
    let reply = Reply::parse(raw, Duration::ZERO);
    let mut extra: Vec<String> = reply
        .msg
        .additionals()
        .iter()
        .map(|r| r.to_string().replace(&format!(" {port} "), " PORT "))
        .collect();
    extra.sort();
    (
        reply.rcode(),
        reply.msg.authoritative(),
        reply.msg.answers().len(),
        extra,
    )
}

/// `whoami` alone in a block: every name answered with the client's
/// address and port, as CoreDNS.
#[test]
fn whoami_matches_coredns() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let dir = tempfile::tempdir().unwrap();
    let (reference, nodens) = pair(&net, dir.path(), |at| {
        format!(
            ".:{port} {{\n  bind {ip}\n  whoami\n}}\n",
            port = at.port(),
            ip = at.ip()
        )
    });
    for tcp in [false, true] {
        for name in ["example.org.", "Mixed.Case.example.", "."] {
            let want = whoami(reference.addr, name, tcp);
            let got = whoami(nodens.dns, name, tcp);
            assert_eq!(got, want, "{name} over tcp={tcp}");
            assert!(got.3.iter().any(|r| r.contains("PORT")), "{got:?}");
        }
    }
}
