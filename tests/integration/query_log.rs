//! The query log (`[zone.query_log]`, `[query_log]`), against a real
//! CoreDNS upstream that logs with its own `log` plugin.
//!
//! - every kind of answer (a miss, a hit, NXDOMAIN, SERVFAIL from a dead
//!   upstream, REFUSED for a name in no zone, FORMERR, TCP) gives one line
//!   in CoreDNS's common format (read by the same parser the tests use on
//!   CoreDNS's own log) with the client's address and port, the question,
//!   rcode, flags, sizes and nodens's fields; a zone without a log gives
//!   none;
//! - the JSON format, to a file: every line parses; the class filter keeps
//!   only what it names; a sample of 1 in 4 logs about a quarter;
//! - a reload (SIGHUP) switches a zone's log off, on, and to other classes;
//! - a flood with a queue of 4 records loses no query: every query is
//!   answered, and what the log could not take is counted as dropped.
//!
//! The pod's namespace and name on a line are tested in autopath.rs, where
//! a real kube-apiserver feeds the pod watch.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use support::*;

/// A text line of nodens's query log: CoreDNS's fields, then nodens's.
#[derive(Debug)]
struct Line {
    /// As the tests read CoreDNS's own log.
    coredns: LoggedQuery,
    class: String,
    size: usize,
    dnssec_ok: bool,
    bufsize: u16,
    rcode: String,
    flags: String,
    rsize: usize,
    duration: f64,
    extras: BTreeMap<String, String>,
}

impl Line {
    fn parse(text: &str) -> Option<Line> {
        let coredns = LoggedQuery::parse(text)?;
        let (_, quoted_and_rest) = text.split_once('"')?;
        let (quoted, rest) = quoted_and_rest.split_once('"')?;
        let q: Vec<&str> = quoted.split(' ').collect();
        let r: Vec<&str> = rest.split_whitespace().collect();
        if q.len() != 7 || r.len() < 4 {
            return None;
        }
        Some(Line {
            coredns,
            class: q[1].to_string(),
            size: q[4].parse().ok()?,
            dnssec_ok: q[5].parse().ok()?,
            bufsize: q[6].parse().ok()?,
            rcode: r[0].to_string(),
            flags: r[1].to_string(),
            rsize: r[2].parse().ok()?,
            duration: r[3].strip_suffix('s')?.parse().ok()?,
            extras: r[4..]
                .iter()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }

    fn extra(&self, key: &str) -> &str {
        self.extras.get(key).map_or("", String::as_str)
    }
}

/// The query log lines nodens wrote so far (its stdout).
fn log_lines(nodens: &Nodens) -> Vec<Line> {
    nodens
        .proc
        .lines()
        .iter()
        .filter(|l| l.contains(" source="))
        .filter_map(|l| Line::parse(l))
        .collect()
}

/// Waits until a line for `name` (as logged) is written; returns it.
fn wait_line(nodens: &Nodens, name: &str) -> Line {
    wait_until(secs(10), &format!("a query log line for {name}"), || {
        log_lines(nodens)
            .into_iter()
            .find(|l| l.coredns.name == name)
    })
}

/// `packet` to `server` from a socket of `source`; the reply and the
/// socket's port.
fn ask_from(source: IpAddr, server: SocketAddr, packet: &[u8]) -> (Vec<u8>, u16) {
    let sock = UdpSocket::bind(SocketAddr::new(source, 0)).unwrap();
    sock.connect(server).unwrap();
    sock.send(packet).unwrap();
    sock.set_read_timeout(Some(secs(5))).unwrap();
    let mut buf = vec![0u8; 65535];
    let n = sock.recv(&mut buf).expect("an answer within 5 s");
    (buf[..n].to_vec(), sock.local_addr().unwrap().port())
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A name no earlier query asked.
fn fresh(zone: &str) -> String {
    format!(
        "u{}-{}.{zone}",
        SEQ.fetch_add(1, Ordering::Relaxed),
        random_u64() % 10_000
    )
}

fn reloads(nodens: &Nodens) -> f64 {
    nodens.metric("nodens_config_reloads_total", &[("result", "success")])
}

/// Rewrites the config, sends SIGHUP, and waits until the reload is done.
fn reload(nodens: &Nodens, toml_text: &str) {
    let before = reloads(nodens);
    nodens.reload(toml_text);
    nodens.wait_metric(
        "nodens_config_reloads_total",
        &[("result", "success")],
        before + 1.0,
    );
}

#[test]
fn every_kind_of_answer_is_logged_with_its_fields() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let cfg = Cfg::new(&net)
        .query_timeout(secs(1))
        .zone(Zone::new("test.", &[core.addr]).query_log("{}"))
        .zone(
            Zone::new("dead.", &[net.silent(0)])
                .upstream_timeout(ms(200))
                .query_log("{}"),
        )
        .zone(Zone::new("quiet.", &[core.addr]))
        .raw("[query_log]\nunzoned = [\"all\"]\n");
    let nodens = Nodens::start(&cfg);
    let client = net.ip(60);

    // What CoreDNS itself logs for a query: the reference format.
    let _ = udp_query(core.addr, &Q::new("www.test.", Rt::A));
    core.sync_log();
    let reference = core
        .queries()
        .into_iter()
        .find(|q| q.name == "www.test.")
        .expect("CoreDNS logged www.test.");

    let cases: [(&str, Q, &str, &str, &str); 6] = [
        (
            "miss",
            Q::new("www.test.", Rt::A),
            "NOERROR",
            "upstream",
            "test.",
        ),
        (
            "hit",
            Q::new("www.test.", Rt::A),
            "NOERROR",
            "cache",
            "test.",
        ),
        (
            "nxdomain",
            Q::new("nope.test.", Rt::A),
            "NXDOMAIN",
            "upstream",
            "test.",
        ),
        (
            "dead upstream",
            Q::new("www.dead.", Rt::A),
            "SERVFAIL",
            "local",
            "dead.",
        ),
        (
            "no zone",
            Q::new("www.example.", Rt::A),
            "REFUSED",
            "local",
            "-",
        ),
        (
            "formerr",
            Q::new("x.test.", Rt::OPT).no_edns(),
            "FORMERR",
            "local",
            "-",
        ),
    ];
    let mut sent = Vec::new();
    for (what, q, rcode, _, _) in &cases {
        let packet = q.to_bytes();
        let (reply, port) = ask_from(client, nodens.dns, &packet);
        let reply = Reply::parse(reply, Duration::ZERO);
        assert_eq!(rcode_name(reply.rcode()), *rcode, "{what}: the answer");
        sent.push((port, packet.len(), reply.raw.len()));
    }
    // A zone without a log: answered, never logged.
    let _ = udp_query(nodens.dns, &Q::new("www.quiet.", Rt::A));
    let tcp = tcp_query(nodens.dns, &Q::new("www.test.", Rt::AAAA));
    assert_eq!(tcp.rcode(), 0);

    let lines = wait_until(secs(10), "seven query log lines", || {
        let lines = log_lines(&nodens);
        (lines.len() >= 7).then_some(lines)
    });
    assert_eq!(
        lines.len(),
        7,
        "one line per query of a logged zone: {lines:#?}"
    );
    for (i, (what, q, rcode, source, zone)) in cases.iter().enumerate() {
        let line = &lines[i];
        let (port, size, rsize) = sent[i];
        assert_eq!(
            line.coredns.remote,
            format!("{client}:{port}"),
            "{what}: client"
        );
        assert_eq!(line.coredns.id, q.id, "{what}: id");
        assert_eq!(line.coredns.name, q.name, "{what}: name");
        assert_eq!(line.coredns.qtype, q.qtype.to_string(), "{what}: type");
        assert_eq!(line.coredns.proto, "udp", "{what}: proto");
        assert_eq!(line.class, "IN", "{what}: class");
        assert_eq!(line.size, size, "{what}: request size");
        assert!(!line.dnssec_ok, "{what}: do");
        let bufsize = if q.edns.is_some() { 1232 } else { 512 };
        assert_eq!(line.bufsize, bufsize, "{what}: bufsize");
        assert_eq!(line.rcode, *rcode, "{what}: rcode");
        assert!(line.flags.starts_with("qr"), "{what}: flags {}", line.flags);
        assert_eq!(line.rsize, rsize, "{what}: reply size");
        assert!(
            line.duration >= 0.0 && line.duration < 5.0,
            "{what}: duration"
        );
        assert_eq!(line.extra("source"), *source, "{what}: source");
        assert_eq!(line.extra("zone"), *zone, "{what}: zone");
        assert_eq!(
            line.extra("namespace"),
            "",
            "{what}: no pod watch, no namespace"
        );
    }
    assert_eq!(lines[0].flags, "qr,rd,ra");
    let tcp_line = &lines[6];
    assert_eq!(tcp_line.coredns.proto, "tcp");
    assert_eq!(tcp_line.bufsize, 65535, "CoreDNS's bufsize for TCP");
    // The same fields in the same places as CoreDNS's own line.
    let fields = |l: &str| {
        let (head, rest) = l.split_once("[INFO] ").unwrap().1.split_once('"').unwrap();
        let (quoted, tail) = rest.split_once('"').unwrap();
        (
            head.split_whitespace().count(),
            quoted.split(' ').count(),
            tail.split_whitespace().take(4).count(),
        )
    };
    assert_eq!(fields(&lines[1].coredns.line), fields(&reference.line));
    assert_eq!(nodens.metric("nodens_query_log_dropped_total", &[]), 0.0);
    assert_eq!(
        nodens.wait_metric("nodens_query_log_written_total", &[], 7.0),
        7.0
    );
}

fn rcode_name(code: u16) -> &'static str {
    match code {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        5 => "REFUSED",
        _ => "other",
    }
}

#[test]
fn json_to_a_file_with_classes_and_sampling() {
    needs!(Need::CoreDns);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queries.log");
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .zone(Zone::new("test.", &[core.addr]).query_log("{ classes = [\"denial\"] }"))
            .zone(Zone::new("sampled.test.", &[core.addr]).query_log("{ sample = 4 }"))
            .raw(&format!(
                "[query_log]\noutput = \"{}\"\nformat = \"json\"\n",
                path.display()
            )),
    );
    let read = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };

    // Only denials of test.: www (success) is left out, nope (NXDOMAIN)
    // and www TXT (NODATA) are in.
    for (name, t) in [
        ("www.test.", Rt::A),
        ("nope.test.", Rt::A),
        ("www.test.", Rt::TXT),
    ] {
        let _ = udp_query(nodens.dns, &Q::new(name, t));
    }
    let lines = wait_until(secs(10), "two JSON lines", || {
        let lines = read();
        (lines.len() >= 2).then_some(lines)
    });
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert_eq!(lines[0]["name"], "nope.test.");
    assert_eq!(lines[0]["rcode"], "NXDOMAIN");
    assert_eq!(lines[1]["type"], "TXT");
    assert_eq!(lines[1]["rcode"], "NOERROR");
    for l in &lines {
        assert_eq!(l["zone"], "test.");
        assert_eq!(l["client"], "127.0.0.1", "the harness's client address");
        assert!(l["port"].as_u64().unwrap() > 0);
        assert_eq!(l["class"], "IN");
        assert_eq!(l["proto"], "udp");
        assert_eq!(l["source"], "upstream");
        assert!(l["time"].as_str().unwrap().ends_with('Z'));
        assert!(l["duration"].as_f64().unwrap() >= 0.0);
        assert!(l.get("pod").is_none());
    }

    // 1 in 4 of 400 hits: about 100 (binomial, sd 8.7).
    let q = Q::new("www.sampled.test.", Rt::A);
    let _ = udp_query(nodens.dns, &q);
    let sampled_before = read().len();
    for _ in 0..400 {
        let _ = udp_query(nodens.dns, &q);
    }
    // A denial of test. after them: once it is written, so are they.
    let marker = fresh("test.");
    let _ = udp_query(nodens.dns, &Q::new(&marker, Rt::A));
    let lines = wait_until(secs(10), "the marker line", || {
        let lines = read();
        lines
            .iter()
            .any(|l| l["name"] == marker.as_str())
            .then_some(lines)
    });
    let sampled = lines[sampled_before..]
        .iter()
        .filter(|l| l["zone"] == "sampled.test.")
        .count();
    assert!(
        (50..=160).contains(&sampled),
        "1 in 4 of 400 queries logged: {sampled}"
    );
}

#[test]
fn reload_switches_the_log_off_on_and_its_classes() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    // The same log for both zones: `dead.` answers SERVFAIL (nothing
    // listens on its upstream).
    let with = |log: Option<&str>| {
        let test = Zone::new("test.", &[core.addr]);
        let dead = Zone::new("dead.", &[net.silent(0)]).upstream_timeout(ms(200));
        let (test, dead) = match log {
            Some(l) => (test.query_log(l), dead.query_log(l)),
            None => (test, dead),
        };
        Cfg::new(&net)
            .query_timeout(secs(1))
            .zone(test)
            .zone(dead)
            .to_toml()
    };
    let nodens = Nodens::start_toml(&with(Some("{}")));
    let on = fresh("test.");
    let _ = udp_query(nodens.dns, &Q::new(&on, Rt::A));
    wait_line(&nodens, &on);

    // Off (the table removed), then off by `enabled = false`.
    reload(&nodens, &with(None));
    let off = fresh("test.");
    let _ = udp_query(nodens.dns, &Q::new(&off, Rt::A));
    reload(&nodens, &with(Some("{ enabled = false }")));
    let still_off = fresh("test.");
    let _ = udp_query(nodens.dns, &Q::new(&still_off, Rt::A));

    // On again for errors only: a success is left out, a SERVFAIL is in.
    reload(&nodens, &with(Some("{ classes = [\"error\"] }")));
    let success = "www.test.";
    let _ = udp_query(nodens.dns, &Q::new(success, Rt::A));
    let _ = udp_query(nodens.dns, &Q::new("www.dead.", Rt::A));
    let error = wait_line(&nodens, "www.dead.");
    assert_eq!(error.rcode, "SERVFAIL");
    assert_eq!(error.extra("zone"), "dead.");
    // Written in order: what came before the error line is all there is.
    let names: Vec<String> = log_lines(&nodens)
        .into_iter()
        .map(|l| format!("{} {}", l.coredns.name, l.rcode))
        .collect();
    assert!(!names.iter().any(|n| n.starts_with(&off)), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with(&still_off)),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n == &format!("{success} NOERROR")),
        "{names:?}"
    );
    assert_eq!(names.len(), 2, "{names:?}");
}

/// A flood with the log on: every query answered; the records the queue
/// (4 long) could not take are dropped and counted. Bounded: 30,000
/// queries at most, 20 s at most, 64 in flight.
#[test]
fn a_flood_loses_no_query_the_log_drops_and_counts() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .log_level("warn")
            .zone(Zone::new("test.", &[core.addr]).query_log("{}"))
            .raw("[query_log]\nqueue = 4\noutput = \"/dev/null\"\n"),
    );
    let q = Q::new("www.test.", Rt::A);
    let _ = udp_query(nodens.dns, &q);

    const TOTAL: usize = 30_000;
    const WINDOW: usize = 64;
    const RATE: f64 = 50_000.0;
    let sock = UdpSocket::bind(SocketAddr::new(net.ip(61), 0)).unwrap();
    sock.connect(nodens.dns).unwrap();
    sock.set_read_timeout(Some(secs(2))).unwrap();
    let mut packet = q.to_bytes();
    let (mut sent, mut answered) = (0usize, 0usize);
    let mut buf = [0u8; 1500];
    let start = Instant::now();
    let deadline = start + secs(20);
    while answered < TOTAL && Instant::now() < deadline {
        // Paced at RATE, at most WINDOW unanswered.
        let allowed = ((start.elapsed().as_secs_f64() * RATE) as usize).min(TOTAL);
        while sent < allowed && sent - answered < WINDOW {
            packet[..2].copy_from_slice(&(sent as u16).to_be_bytes());
            sock.send(&packet).unwrap();
            sent += 1;
        }
        if sent == answered {
            continue;
        }
        match sock.recv(&mut buf) {
            Ok(n) if n >= 12 && buf[3] & 0x0f == 0 => answered += 1,
            Ok(n) => panic!("an answer that is not NOERROR: {:?}", &buf[..n]),
            Err(e) => panic!("query {answered} of {sent} unanswered for 2 s: {e}"),
        }
    }
    let took = start.elapsed();
    assert_eq!(answered, TOTAL, "every query answered within 20 s");
    let rate = TOTAL as f64 / took.as_secs_f64();
    let written = nodens.metric("nodens_query_log_written_total", &[]);
    let dropped = nodens.metric("nodens_query_log_dropped_total", &[]);
    eprintln!("{TOTAL} queries at {rate:.0} q/s: {written} lines written, {dropped} dropped");
    // Every record either written, waiting, or dropped and counted.
    let all = wait_until(secs(5), "the writer to catch up", || {
        let written = nodens.metric("nodens_query_log_written_total", &[]);
        let dropped = nodens.metric("nodens_query_log_dropped_total", &[]);
        (written + dropped >= (TOTAL + 1) as f64).then_some(written + dropped)
    });
    assert_eq!(
        all,
        (TOTAL + 1) as f64,
        "each answer written or counted as dropped"
    );
    // A queue of 4 records against a writer that naps 10 ms when it is
    // empty: at any rate above 400 queries a second, records are dropped.
    assert!(
        dropped > 0.0,
        "a full queue of 4 dropped nothing at {rate:.0} q/s"
    );
}

/// `log . { class denial error }` converted by `nodens convert-corefile`
/// and the same Corefile run by CoreDNS: for the same queries, both log the
/// same names (a success left out by both).
#[test]
fn a_converted_log_logs_what_coredns_logs() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = tempfile::tempdir().unwrap();
    let corefile = |bind: IpAddr, port: u16| {
        format!(
            "test.:{port} {{\n  bind {bind}\n  log . {{\n    class denial error\n  }}\n  \
             cache 30\n  forward . {}\n  prometheus {bind}:9253\n}}\n",
            core.addr
        )
    };
    // nodens, from the conversion.
    let path = dir.path().join("Corefile.nodens");
    std::fs::write(&path, corefile(net.ip(1), 1053)).unwrap();
    let Converted { toml, stderr, .. } = convert_corefile(&path);
    assert!(
        toml.contains("[zone.query_log]   # log\nclasses = [\"denial\", \"error\"]"),
        "{toml}\n{stderr}"
    );
    assert!(!stderr.contains("keeps no query log"), "{stderr}");
    let nodens = Nodens::start_toml(&toml);
    // CoreDNS, from the same Corefile on another address.
    let reference_addr = net.other(70, 1053);
    let path = dir.path().join("Corefile.coredns");
    std::fs::write(&path, corefile(reference_addr.ip(), 1053)).unwrap();
    let mut cmd = wrapped_command(&[], &coredns_bin());
    cmd.arg("-conf").arg(&path);
    let reference = Proc::spawn("coredns reference", cmd);
    wait_until(secs(15), "the reference CoreDNS to answer", || {
        udp_query_timeout(reference_addr, &Q::new("www.test.", Rt::A), ms(200))
    });

    let asked = ["www.test.", "nope.test.", "mail.test.", "gone.test."];
    for server in [nodens.dns, reference_addr] {
        for name in asked {
            let _ = udp_query(server, &Q::new(name, Rt::A));
        }
    }
    let names = |lines: Vec<String>| -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| LoggedQuery::parse(l))
            .map(|q| q.name)
            .collect()
    };
    // NXDOMAIN twice and NODATA (a denial too): three lines each. CoreDNS
    // logs after its reply, so its lines may come in another order.
    let from_nodens = wait_until(secs(10), "nodens's three lines", || {
        let n = names(nodens.proc.lines());
        (n.len() >= 3).then_some(n)
    });
    let mut from_coredns = wait_until(secs(10), "CoreDNS's three lines", || {
        let n: Vec<String> = names(reference.lines())
            .into_iter()
            .filter(|n| asked.contains(&n.as_str()))
            .collect();
        (n.len() >= 3).then_some(n)
    });
    assert_eq!(from_nodens, ["nope.test.", "mail.test.", "gone.test."]);
    from_coredns.sort();
    let mut expected = from_nodens.clone();
    expected.sort();
    assert_eq!(expected, from_coredns);
}

/// The query log file is nodens's alone: another process that can write
/// its directory plants a symlink at the path before nodens starts (to make
/// nodens append to a file of its own choosing): not followed, nothing
/// written there, and nodens serves. Once the path is free, the file
/// is made mode 0600, rotated to `<path>.1` past `max_size`, and opened
/// again after a SIGHUP when an outside rotation moved it away.
#[test]
fn the_query_log_file_is_private_capped_and_reopened() {
    needs!(Need::CoreDns, Need::Tool("ln"));
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queries.log");
    let target = dir.path().join("target");
    std::fs::write(&target, "").unwrap();
    let status = Command::new("ln")
        .arg("-s")
        .arg(&target)
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let cfg = Cfg::new(&net)
        .log_level("info")
        .zone(Zone::new("test.", &[core.addr]).query_log("{}"))
        .raw(&format!(
            "[query_log]\noutput = \"{}\"\nmax_size = \"128 KiB\"\n",
            path.display()
        ));
    let mut nodens = Nodens::start(&cfg);
    let q = Q::new("www.test.", Rt::A);
    assert_eq!(udp_query(nodens.dns, &q).a(), vec![ipv4("192.0.2.1")]);
    nodens.proc.wait_for_line(0, secs(5), "the refusal", |l| {
        l.contains("query log not written") && l.contains("symlink")
    });
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "",
        "written through the symlink"
    );

    // The path freed, a reload opens the file: 0600, and capped.
    std::fs::remove_file(&path).unwrap();
    nodens.reload(&cfg.to_toml().replace("128 KiB", "64 KiB"));
    wait_until(secs(10), "the log file", || {
        let _ = udp_query(nodens.dns, &q);
        path.exists().then_some(())
    });
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let rotated = dir.path().join("queries.log.1");
    // About 150 bytes a line: 1,000 lines are more than 64 KiB.
    for _ in 0..1_000 {
        let _ = udp_query(nodens.dns, &q);
    }
    wait_until(secs(10), "a rotated file", || {
        rotated.exists().then_some(())
    });
    for file in [&path, &rotated] {
        let size = std::fs::metadata(file).unwrap().len();
        assert!(
            size <= 64 * 1024,
            "{}: {size} bytes, past max_size",
            file.display()
        );
    }

    // An outside rotation: the file moved away, SIGHUP, a new file.
    let moved = dir.path().join("moved.log");
    std::fs::rename(&path, &moved).unwrap();
    std::fs::remove_file(&rotated).unwrap();
    nodens.proc.signal(libc::SIGHUP);
    wait_until(secs(10), "the file opened again", || {
        let _ = udp_query(nodens.dns, &q);
        path.exists().then_some(())
    });
    nodens.assert_alive();
}
