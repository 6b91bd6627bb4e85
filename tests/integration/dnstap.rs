//! dnstap output (`[dnstap]`), read by real dnstap software: the reader is
//! `fstrm_capture` (fstrm-bin, the Frame Streams reference reader, doing
//! the bidirectional handshake) writing a capture file, and every message
//! of it is decoded by `dnstap-ldns`; the upstream is a real CoreDNS.
//!
//! - each answered query gives CLIENT_QUERY and CLIENT_RESPONSE with the
//!   client's and the listener's addresses and ports, the protocol, the
//!   question and the answer's rcode; identity and version as configured;
//! - with `forwarder = true`, FORWARDER_QUERY and FORWARDER_RESPONSE for
//!   the miss only (over a TCP reader);
//! - no reader, then a reader that stops reading: every query answered at
//!   once, the messages dropped and counted; the reader back (and resumed)
//!   gets messages again; every message sent or counted as dropped;
//! - a count: 20,000 queries at 4,000 q/s, every message decoded, the
//!   decoded count equal to nodens's sent counter, sent + dropped equal to
//!   two per answer. `a_long_run_decodes_every_message` (ignored: 60 s at
//!   5,000 q/s) is the same with the issue's numbers.
//!
//! - behind a real kube-apiserver (in a network namespace), the client
//!   messages of a pod's query carry `pod=NAMESPACE/NAME` in `extra`, and
//!   those of an address that is no pod carry none (`extra` read from the
//!   capture file with prost: neither dnstap-ldns nor the Go `dnstap` tool
//!   prints it);
//! - `[dnstap]` follows SIGHUP;
//! - `dnstap unix://... full` converted, against the same Corefile run by
//!   CoreDNS 1.13 with its own reader: the same messages (kind, question,
//!   rcode) for the same queries.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// A running `fstrm_capture` writing what it reads to a file.
struct Capture {
    proc: Proc,
    file: PathBuf,
}

impl Capture {
    fn unix(socket: &Path, file: &Path) -> Capture {
        let mut cmd = Command::new(tool("fstrm_capture"));
        cmd.args(["-t", "protobuf:dnstap.Dnstap", "-ddd", "-u"])
            .arg(socket)
            .arg("-w")
            .arg(file);
        Capture::spawn(cmd, file)
    }

    fn tcp(addr: SocketAddr, file: &Path) -> Capture {
        let mut cmd = Command::new(tool("fstrm_capture"));
        cmd.args(["-t", "protobuf:dnstap.Dnstap", "-ddd", "-a"])
            .arg(addr.ip().to_string())
            .arg("-p")
            .arg(addr.port().to_string())
            .arg("-w")
            .arg(file);
        Capture::spawn(cmd, file)
    }

    fn spawn(cmd: Command, file: &Path) -> Capture {
        let mut proc = Proc::spawn("fstrm_capture", cmd);
        proc.wait_for_line(0, secs(10), "the output file opened", |l| {
            l.contains("opened output file")
        });
        Capture {
            proc,
            file: file.to_path_buf(),
        }
    }

    /// Data frames read so far on connections that closed.
    fn frames_read(&self) -> u64 {
        self.proc
            .lines()
            .iter()
            .filter_map(|l| {
                let (_, rest) = l.split_once(": closing (read ")?;
                rest.split_once(' ')?.0.parse::<u64>().ok()
            })
            .sum()
    }

    /// Once nodens is gone (its connection closed, all read): stops the
    /// capture, which closes its file whole, and decodes every message.
    fn finish(self, frames: u64) -> Vec<Tapped> {
        let file = self.file.clone();
        self.finish_raw(frames);
        decode(&file)
    }

    /// As [`Capture::finish`], leaving the file to decode.
    fn finish_raw(mut self, frames: u64) {
        wait_until(secs(30), &format!("{frames} frames read"), || {
            (self.frames_read() >= frames).then_some(())
        });
        self.proc.signal(libc::SIGINT);
        self.proc
            .wait_exit(secs(10))
            .expect("fstrm_capture ends on SIGINT");
    }
}

/// One dnstap message as `dnstap-ldns -y` prints it.
#[derive(Debug, Default)]
struct Tapped {
    kind: String,
    identity: String,
    version: String,
    protocol: String,
    query_address: String,
    query_port: String,
    response_address: String,
    response_port: String,
    /// From the DNS message: the question and the rcode.
    question: String,
    rcode: String,
}

/// Every message of a capture file, decoded by `dnstap-ldns -y`.
fn decode(file: &Path) -> Vec<Tapped> {
    let out = Command::new(tool("dnstap-ldns"))
        .arg("-y")
        .arg("-r")
        .arg(file)
        .output()
        .expect("dnstap-ldns runs");
    assert!(out.status.success(), "dnstap-ldns: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("---\n")
        .filter(|doc| doc.contains("type: MESSAGE"))
        .map(parse_yaml)
        .collect()
}

fn parse_yaml(doc: &str) -> Tapped {
    let mut t = Tapped::default();
    let unquote = |v: &str| v.trim().trim_matches('"').to_string();
    for line in doc.lines() {
        let field = |name: &str| line.strip_prefix(name).map(unquote);
        if let Some(v) = field("identity: ") {
            t.identity = v;
        } else if let Some(v) = field("version: ") {
            t.version = v;
        } else if let Some(v) = field("  type: ") {
            t.kind = v;
        } else if let Some(v) = field("  socket_protocol: ") {
            t.protocol = v;
        } else if let Some(v) = field("  query_address: ") {
            t.query_address = v;
        } else if let Some(v) = field("  query_port: ") {
            t.query_port = v;
        } else if let Some(v) = field("  response_address: ") {
            t.response_address = v;
        } else if let Some(v) = field("  response_port: ") {
            t.response_port = v;
        } else if let Some((_, rest)) = line.split_once("->>HEADER<<- opcode: QUERY, rcode: ") {
            t.rcode = rest.split(',').next().unwrap_or("").to_string();
        } else if let Some(q) = line.trim().strip_prefix(';')
            && q.contains("\tIN\t")
        {
            t.question = q.split_whitespace().collect::<Vec<_>>().join(" ");
        }
    }
    t
}

/// Every message of a capture file as `dnstap-ldns` prints it by default,
/// one line each: its kind (CQ, CR, FQ, FR) and question, counted without
/// holding the text (a long run has 600,000).
fn decode_lines(file: &Path) -> std::collections::BTreeMap<(String, String), u64> {
    use std::io::BufRead;
    let mut child = Command::new(tool("dnstap-ldns"))
        .arg("-r")
        .arg(file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("dnstap-ldns runs");
    let mut counts = std::collections::BTreeMap::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // "2026-11-28 04:22:59.842728 CQ 127.0.0.1 UDP 56b "a.test." IN A"
        let fields: Vec<&str> = line.split_whitespace().collect();
        let key = match fields.as_slice() {
            [_, _, kind, _, _, _, name, class, qtype] => (
                kind.to_string(),
                format!("{} {class} {qtype}", name.trim_matches('"')),
            ),
            _ => ("undecoded".to_string(), line.clone()),
        };
        *counts.entry(key).or_insert(0) += 1;
    }
    assert!(child.wait().unwrap().success(), "dnstap-ldns");
    counts
}

/// The `extra` field of each data frame of a Frame Streams file, in order.
fn extras_of(file: &Path) -> Vec<Option<String>> {
    /// `Dnstap` with only its field 3, `extra`.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Extra {
        #[prost(bytes = "vec", optional, tag = "3")]
        extra: Option<Vec<u8>>,
    }
    use prost::Message as _;
    let bytes = std::fs::read(file).unwrap();
    let mut rest = &bytes[..];
    let take = |n: usize, rest: &mut &[u8]| {
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        head.to_vec()
    };
    let mut extras = Vec::new();
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(take(4, &mut rest).try_into().unwrap()) as usize;
        if len == 0 {
            // A control frame (START, STOP): its length, then it.
            let len = u32::from_be_bytes(take(4, &mut rest).try_into().unwrap()) as usize;
            take(len, &mut rest);
            continue;
        }
        let frame = Extra::decode(&take(len, &mut rest)[..]).expect("a dnstap frame");
        extras.push(frame.extra.map(|e| String::from_utf8(e).unwrap()));
    }
    extras
}

/// The messages of one kind.
fn of_kind<'a>(tapped: &'a [Tapped], kind: &str) -> Vec<&'a Tapped> {
    tapped.iter().filter(|t| t.kind == kind).collect()
}

fn sent(nodens: &Nodens) -> f64 {
    nodens.metric("nodens_dnstap_sent_total", &[])
}

fn dropped(nodens: &Nodens, reason: &str) -> f64 {
    nodens.metric("nodens_dnstap_dropped_total", &[("reason", reason)])
}

/// `packet` to `server` from a socket of `source`: the reply and the
/// socket's port.
fn ask_from(source: IpAddr, server: SocketAddr, packet: &[u8]) -> (Reply, u16) {
    let sock = UdpSocket::bind(SocketAddr::new(source, 0)).unwrap();
    sock.connect(server).unwrap();
    sock.send(packet).unwrap();
    sock.set_read_timeout(Some(secs(5))).unwrap();
    let mut buf = vec![0u8; 65535];
    let n = sock.recv(&mut buf).expect("an answer within 5 s");
    let reply = Reply::parse(buf[..n].to_vec(), Duration::ZERO);
    (reply, sock.local_addr().unwrap().port())
}

fn dnstap_section(socket: &str, extra: &str) -> String {
    format!("[dnstap]\nsocket = \"{socket}\"\n{extra}\n")
}

#[test]
fn each_answer_is_a_client_query_and_response() {
    needs!(
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns")
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tap.sock");
    let capture = Capture::unix(&socket, &dir.path().join("out.fstrm"));
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let mut nodens = Nodens::start(&Cfg::new(&net).zone(Zone::new("test.", &[core.addr])).raw(
        &dnstap_section(
            &format!("unix:{}", socket.display()),
            "identity = \"node-a\"\nversion = \"v-test\"",
        ),
    ));
    let client = net.ip(60);
    // A miss, a hit, an NXDOMAIN (UDP); then TCP.
    let cases = [
        (Q::new("www.test.", Rt::A), "NOERROR", "www.test. IN A"),
        (Q::new("www.test.", Rt::A), "NOERROR", "www.test. IN A"),
        (Q::new("nope.test.", Rt::A), "NXDOMAIN", "nope.test. IN A"),
    ];
    let mut ports = Vec::new();
    for (q, rcode, _) in &cases {
        let (reply, port) = ask_from(client, nodens.dns, &q.to_bytes());
        assert_eq!(reply.rcode(), if *rcode == "NOERROR" { 0 } else { 3 });
        ports.push(port);
    }
    assert_eq!(
        tcp_query(nodens.dns, &Q::new("www.test.", Rt::AAAA)).rcode(),
        0
    );
    nodens.wait_metric("nodens_dnstap_sent_total", &[], 8.0);
    assert_eq!(sent(&nodens), 8.0, "two messages per answer");
    assert_eq!(
        dropped(&nodens, "queue_full") + dropped(&nodens, "no_reader"),
        0.0
    );
    nodens.terminate();
    let tapped = capture.finish(8);

    assert_eq!(tapped.len(), 8, "{tapped:#?}");
    for (i, (_, rcode, question)) in cases.iter().enumerate() {
        let (q, r) = (&tapped[2 * i], &tapped[2 * i + 1]);
        assert_eq!(q.kind, "CLIENT_QUERY", "{i}");
        assert_eq!(r.kind, "CLIENT_RESPONSE", "{i}");
        for m in [q, r] {
            assert_eq!(m.identity, "node-a");
            assert_eq!(m.version, "v-test");
            assert_eq!(m.protocol, "UDP");
            assert_eq!(m.query_address, client.to_string(), "{i}");
            assert_eq!(m.query_port, ports[i].to_string(), "{i}");
            assert_eq!(m.response_address, nodens.dns.ip().to_string());
            assert_eq!(m.response_port, nodens.dns.port().to_string());
            assert_eq!(m.question, *question, "{i}: {m:?}");
        }
        assert_eq!(q.rcode, "NOERROR", "a query's header");
        assert_eq!(r.rcode, *rcode, "{i}: the answer's rcode");
    }
    let (q, r) = (&tapped[6], &tapped[7]);
    assert_eq!((q.protocol.as_str(), r.protocol.as_str()), ("TCP", "TCP"));
    assert_eq!(r.question, "www.test. IN AAAA");
    assert!(
        of_kind(&tapped, "FORWARDER_QUERY").is_empty(),
        "forwarder off"
    );
}

#[test]
fn forwarder_messages_for_the_miss_only() {
    needs!(
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns")
    );
    let dir = tempfile::tempdir().unwrap();
    let net = Net::alloc();
    let reader = net.other(70, 6000);
    let capture = Capture::tcp(reader, &dir.path().join("out.fstrm"));
    let core = CoreDns::test_zone(net.upstream(0), "");
    let mut nodens = Nodens::start(&Cfg::new(&net).zone(Zone::new("test.", &[core.addr])).raw(
        &dnstap_section(&format!("tcp://{reader}"), "forwarder = true"),
    ));
    for _ in 0..3 {
        assert_eq!(
            udp_query(nodens.dns, &Q::new("www.test.", Rt::A)).rcode(),
            0
        );
    }
    nodens.wait_metric("nodens_dnstap_sent_total", &[], 8.0);
    nodens.terminate();
    let tapped = capture.finish(8);
    assert_eq!(tapped.len(), 8, "{tapped:#?}");
    assert_eq!(of_kind(&tapped, "CLIENT_QUERY").len(), 3);
    assert_eq!(of_kind(&tapped, "CLIENT_RESPONSE").len(), 3);
    let fq = of_kind(&tapped, "FORWARDER_QUERY");
    let fr = of_kind(&tapped, "FORWARDER_RESPONSE");
    assert_eq!(
        (fq.len(), fr.len()),
        (1, 1),
        "one upstream exchange: the miss"
    );
    for m in [fq[0], fr[0]] {
        assert_eq!(m.response_address, core.addr.ip().to_string());
        assert_eq!(m.response_port, core.addr.port().to_string());
        assert_eq!(m.protocol, "UDP");
        assert_eq!(m.question.to_lowercase(), "www.test. in a");
    }
    assert_eq!(fr[0].rcode, "NOERROR");
    // The upstream exchange ends before the miss is answered.
    let at = |kind: &str| tapped.iter().position(|t| t.kind == kind).unwrap();
    assert!(at("FORWARDER_RESPONSE") < at("CLIENT_RESPONSE"));
}

/// Bounded: 20,000 queries at most in the stalled phase, each waited for
/// 2 s at most; every phase bounded in time.
#[test]
fn an_absent_or_stalled_reader_slows_no_query() {
    needs!(
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns"),
        Need::Alone
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tap.sock");
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .log_level("info")
            .zone(Zone::new("test.", &[core.addr]))
            .raw(&dnstap_section(
                &format!("unix:{}", socket.display()),
                "queue = 64",
            )),
    );
    let q = Q::new("www.test.", Rt::A);
    let mut answered = 0u64;
    let mut ask = || {
        let start = Instant::now();
        let reply = udp_query_timeout(nodens.dns, &q, secs(2)).expect("an answer within 2 s");
        assert_eq!(reply.rcode(), 0);
        answered += 1;
        start.elapsed()
    };

    // No reader: answered, the messages dropped and counted.
    for _ in 0..10 {
        ask();
    }
    let no_reader = nodens.wait_metric(
        "nodens_dnstap_dropped_total",
        &[("reason", "no_reader")],
        20.0,
    );
    assert_eq!(no_reader, 20.0);
    assert_eq!(sent(&nodens), 0.0);

    // The reader comes: messages flow (the writer tries again within 2 s).
    let capture = Capture::unix(&socket, &dir.path().join("out.fstrm"));
    wait_until(secs(10), "messages sent to the new reader", || {
        ask();
        (sent(&nodens) > 0.0).then_some(())
    });

    // The reader stops reading (SIGSTOP): its socket fills, then the
    // queue; queries go on at once, the rest is dropped and counted.
    capture.proc.signal(libc::SIGSTOP);
    let mut slowest = Duration::ZERO;
    let start = Instant::now();
    let mut stalled = 0;
    // Bounded by time more than by count: on a fast machine 20,000
    // queries pass before a write has been blocked the 2 s it takes.
    while stalled < 500_000 && start.elapsed() < secs(30) {
        slowest = slowest.max(ask());
        stalled += 1;
        // Until the queue has overflowed and the writer has given up on
        // the connection (a write blocked for 2 s).
        if stalled % 500 == 0
            && dropped(&nodens, "queue_full") > 0.0
            && nodens
                .proc
                .lines()
                .iter()
                .any(|l| l.contains("dnstap: reader lost"))
        {
            break;
        }
    }
    let full = dropped(&nodens, "queue_full");
    eprintln!(
        "stalled reader: {stalled} queries, slowest {slowest:?}, {full} dropped (queue full)"
    );
    assert!(
        full > 0.0,
        "a stalled reader fills the queue: drops counted"
    );
    assert!(
        slowest < secs(1),
        "no query waited on the reader: {slowest:?}"
    );

    // The reader resumes: the writer, which gave up on the stalled
    // connection, connects again and messages flow.
    assert!(
        nodens
            .proc
            .lines()
            .iter()
            .any(|l| l.contains("dnstap: reader lost")),
        "the writer gave up on the stalled reader"
    );
    capture.proc.signal(libc::SIGCONT);
    let before = sent(&nodens);
    wait_until(secs(15), "messages sent after the reader resumed", || {
        ask();
        (sent(&nodens) > before && nodens.metric("nodens_dnstap_reconnects_total", &[]) >= 1.0)
            .then_some(())
    });
    // Every answer's two messages are sent or counted as dropped.
    let want = 2.0 * answered as f64;
    let all = wait_until(secs(10), "every message accounted for", || {
        let all = sent(&nodens) + dropped(&nodens, "queue_full") + dropped(&nodens, "no_reader");
        (all >= want).then_some(all)
    });
    assert_eq!(all, want);
}

/// `total` queries at `rate` q/s (64 in flight at most, each waited for
/// 2 s at most, `total / rate * 2 + 20` s in all at most) through nodens
/// with a reader: every message decoded, the decoded count equal to the
/// sent counter, sent + dropped two per answer.
/// A CoreDNS and a nodens sending dnstap to the reader at `socket`, its
/// writer connected (one exchange sent) before the caller's clock starts.
fn tapped(socket: &Path) -> (Net, CoreDns, Nodens) {
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let nodens = Nodens::start(
        &Cfg::new(&net)
            .log_level("warn")
            .zone(Zone::new("test.", &[core.addr]))
            .raw(&dnstap_section(&format!("unix:{}", socket.display()), "")),
    );
    let _ = udp_query(nodens.dns, &Q::new("www.test.", Rt::A));
    nodens.wait_metric("nodens_dnstap_sent_total", &[], 2.0);
    (net, core, nodens)
}

/// Asks `total` queries of 50 names (misses and hits both) at `rate` a
/// second, 64 at most unanswered, from one socket; returns how many were
/// answered (each within 2 s, or the test fails).
fn ask_at_rate(net: &Net, dns: SocketAddr, total: usize, rate: f64) -> usize {
    let names: Vec<Vec<u8>> = (0..50)
        .map(|i| Q::new(&format!("n{i}.www.test."), Rt::A).to_bytes())
        .collect();
    const WINDOW: usize = 64;
    let sock = UdpSocket::bind(SocketAddr::new(net.ip(61), 0)).unwrap();
    sock.connect(dns).unwrap();
    sock.set_read_timeout(Some(secs(2))).unwrap();
    let (mut sent_q, mut answered) = (0usize, 0usize);
    let mut buf = [0u8; 1500];
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(total as f64 / rate * 2.0 + 20.0);
    while answered < total && Instant::now() < deadline {
        let allowed = ((start.elapsed().as_secs_f64() * rate) as usize).min(total);
        while sent_q < allowed && sent_q - answered < WINDOW {
            let mut packet = names[sent_q % names.len()].clone();
            packet[..2].copy_from_slice(&(sent_q as u16).to_be_bytes());
            sock.send(&packet).unwrap();
            sent_q += 1;
        }
        if sent_q == answered {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        match sock.recv(&mut buf) {
            Ok(n) if n >= 12 => answered += 1,
            Ok(n) => panic!("a short answer: {:?}", &buf[..n]),
            Err(e) => panic!("query {answered} of {sent_q} unanswered for 2 s: {e}"),
        }
    }
    answered
}

fn count_run(total: usize, rate: f64) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tap.sock");
    let capture = Capture::unix(&socket, &dir.path().join("out.fstrm"));
    let (net, _core, mut nodens) = tapped(&socket);
    let start = Instant::now();
    let answered = ask_at_rate(&net, nodens.dns, total, rate);
    let took = start.elapsed();
    assert_eq!(answered, total, "every query answered in time");
    let want = 2.0 * (total + 1) as f64;
    let (sent_n, dropped_n) = wait_until(secs(20), "every message accounted for", || {
        let s = sent(&nodens);
        let d = dropped(&nodens, "queue_full") + dropped(&nodens, "no_reader");
        (s + d >= want).then_some((s, d))
    });
    nodens.terminate();
    let file = capture.file.clone();
    capture.finish_raw(sent_n as u64);
    let decoded = decode_lines(&file);
    let of = |kind: &str| -> u64 {
        decoded
            .iter()
            .filter(|((k, q), _)| k == kind && q.ends_with("www.test. IN A"))
            .map(|(_, n)| n)
            .sum()
    };
    let (cq, cr) = (of("CQ"), of("CR"));
    let all: u64 = decoded.values().sum();
    eprintln!(
        "{total} queries in {took:.1?} ({:.0} q/s): {sent_n} messages sent, {dropped_n} dropped, \
         {all} decoded ({cq} CLIENT_QUERY, {cr} CLIENT_RESPONSE)",
        total as f64 / took.as_secs_f64(),
    );
    assert_eq!(sent_n + dropped_n, want, "two messages per answer");
    // The reader (fstrm_capture) keeps up at these rates, and the queue
    // holds a second of them: nothing may be dropped.
    assert_eq!(
        dropped_n, 0.0,
        "messages dropped with a reader that keeps up"
    );
    assert_eq!(all as f64, sent_n, "every message sent is decoded");
    assert_eq!(
        cq + cr,
        all,
        "each a client message with its question: {decoded:?}"
    );
}

#[test]
fn every_message_of_20000_queries_is_decoded_and_counted() {
    needs!(
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns"),
        Need::Alone
    );
    count_run(20_000, 4_000.0);
}

/// The issue's check: 60 s at 5,000 q/s. Run by hand:
/// `cargo test --release --test integration dnstap::a_long_run -- --ignored --nocapture`.
#[test]
#[ignore = "60 s of load: run by hand"]
fn a_long_run_decodes_every_message() {
    needs!(
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns"),
        Need::Alone
    );
    let start = Instant::now();
    count_run(300_000, 5_000.0);
    // The issue's figure: 300,000 queries at 5,000 a second take 60 s.
    let took = start.elapsed();
    assert!(
        took < secs(75),
        "300,000 queries at 5,000 q/s took {took:?}: the load was not sustained"
    );
}

/// `[dnstap]` follows SIGHUP: added (messages flow to the reader), then
/// removed (nothing more sent), and a bad socket keeps the running config.
#[test]
fn reload_turns_dnstap_on_and_off() {
    needs!(
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns")
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tap.sock");
    let capture = Capture::unix(&socket, &dir.path().join("out.fstrm"));
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let base = Cfg::new(&net).zone(Zone::new("test.", &[core.addr]));
    let mut nodens = Nodens::start(&base);
    let q = Q::new("www.test.", Rt::A);
    let reloads = |nodens: &Nodens, result: &str| {
        nodens.metric("nodens_config_reloads_total", &[("result", result)])
    };
    let _ = udp_query(nodens.dns, &q);
    assert_eq!(sent(&nodens), 0.0, "off: nothing sent");

    let on = base
        .clone()
        .raw(&dnstap_section(&format!("unix:{}", socket.display()), ""));
    nodens.reload(&on.to_toml());
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "success")], 1.0);
    let _ = udp_query(nodens.dns, &Q::new("on.test.", Rt::A));
    nodens.wait_metric("nodens_dnstap_sent_total", &[], 2.0);

    // A bad socket: refused, the running dnstap goes on.
    nodens.reload(&format!(
        "{}[dnstap]\nsocket = \"tcp:nowhere\"\n",
        base.to_toml()
    ));
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "failure")], 1.0);
    let _ = udp_query(nodens.dns, &Q::new("still.test.", Rt::A));
    nodens.wait_metric("nodens_dnstap_sent_total", &[], 4.0);

    nodens.reload(&base.to_toml());
    wait_until(secs(10), "the second successful reload", || {
        (reloads(&nodens, "success") >= 2.0).then_some(())
    });
    let _ = udp_query(nodens.dns, &Q::new("off.test.", Rt::A));
    // A query answered after the reload is not sent; the count stays.
    let _ = udp_query(nodens.dns, &q);
    assert_eq!(sent(&nodens), 4.0, "off again: nothing more sent");
    nodens.terminate();
    let tapped = capture.finish(4);
    let questions: Vec<&str> = tapped.iter().map(|t| t.question.as_str()).collect();
    assert_eq!(
        questions,
        [
            "on.test. IN A",
            "on.test. IN A",
            "still.test. IN A",
            "still.test. IN A"
        ]
    );
}

/// The pod in `extra`: a Pod object of this node with its address on the
/// namespace's loopback, mapped by nodens's pod watch (which `[budget]`
/// runs; its limits are far above this test's queries).
#[test]
fn a_pods_messages_name_it_in_extra() {
    needs!(
        Need::Root,
        Need::Kubernetes,
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns")
    );
    const NODE: &str = "node-1";
    const UPSTREAM: &str = "10.53.0.2";
    const POD: &str = "127.0.0.51";
    const STRANGER: &str = "127.0.0.52";
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tap.sock");
    let capture = Capture::unix(&socket, &dir.path().join("out.fstrm"));
    let ns = Netns::create("dnstap");
    let kube = Kube::start(&ns);
    kube.create("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n");
    ns.add_to_lo(&[UPSTREAM, POD, STRANGER]);
    let upstream_addr = SocketAddr::new(UPSTREAM.parse().unwrap(), 53);
    let upstream = CoreDns::launch(
        &ns.exec(),
        upstream_addr,
        &[(
            "example.com.",
            zone_file("example.com.", "* 60 IN A 192.0.2.1\n"),
        )],
    );
    in_netns(&ns.name, || upstream.wait_ready());
    kube.create_pod("team-a", "client", &[POD], NODE, "");
    let net = Net::fixed(22);
    let toml = Cfg::new(&net)
        .zone(Zone::new(".", &[upstream_addr]))
        .raw(&format!(
            "{}\n[budget]\nqueries_per_second = 1000000\n\n{}",
            kube.pod_watch(NODE),
            dnstap_section(&format!("unix:{}", socket.display()), "")
        ))
        .to_toml();
    let mut nodens = Nodens::launch(&toml, &ns.exec());
    in_netns(&ns.name, || nodens.wait_ready());
    let metric =
        |name: &str, labels: &[(&str, &str)]| in_netns(&ns.name, || nodens.metric(name, labels));
    wait_until(secs(30), "the pod watch to hold the pod", || {
        let labels = [("resource", "pods"), ("watch", NODE)];
        (metric("nodens_kubernetes_watch_synced", &labels) == 1.0
            && metric("nodens_kubernetes_watch_objects", &labels) == 1.0)
            .then_some(())
    });
    in_netns(&ns.name, || {
        for (source, name) in [
            (POD, "pod.example.com."),
            (STRANGER, "stranger.example.com."),
        ] {
            let (reply, _) = ask_from(
                source.parse().unwrap(),
                nodens.dns,
                &Q::new(name, Rt::A).to_bytes(),
            );
            assert_eq!(reply.rcode(), 0, "{name}");
        }
    });
    wait_until(secs(10), "4 messages sent", || {
        (metric("nodens_dnstap_sent_total", &[]) >= 4.0).then_some(())
    });
    nodens.terminate();
    let file = capture.file.clone();
    capture.finish_raw(4);
    // Neither dnstap-ldns nor the Go `dnstap` tool prints `extra`: the
    // frames fstrm_capture wrote are read here and `extra` decoded with
    // prost; dnstap-ldns decodes the rest.
    let extras = extras_of(&file);
    let tapped = decode(&file);
    assert_eq!((extras.len(), tapped.len()), (4, 4), "{tapped:#?}");
    for (t, extra) in tapped.iter().zip(&extras) {
        if t.question.starts_with("pod.") {
            assert_eq!(t.query_address, POD);
            assert_eq!(extra.as_deref(), Some("pod=team-a/client"), "{t:?}");
        } else {
            assert_eq!(t.query_address, STRANGER);
            assert_eq!(extra.as_deref(), None, "no pod known: {t:?}");
        }
    }
}

/// `dnstap unix://... full` converted by `nodens convert-corefile`, and the
/// same Corefile run by CoreDNS, each to a reader of its own: for the same
/// queries (a miss, a hit, an NXDOMAIN) both send the same messages, kind,
/// question and rcode (CoreDNS's `forward` sends the forwarder ones).
#[test]
fn a_converted_dnstap_sends_what_coredns_sends() {
    needs!(
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns")
    );
    let net = Net::alloc();
    let core = CoreDns::test_zone(net.upstream(0), "");
    let dir = tempfile::tempdir().unwrap();
    let corefile = |bind: IpAddr, socket: &Path| {
        format!(
            "test.:1053 {{\n  bind {bind}\n  dnstap unix://{} full\n  \
             cache 30\n  forward . {}\n  prometheus {bind}:9253\n}}\n",
            socket.display(),
            core.addr
        )
    };
    // nodens, from the conversion.
    let socket = dir.path().join("nodens.sock");
    let nodens_capture = Capture::unix(&socket, &dir.path().join("nodens.fstrm"));
    let path = dir.path().join("Corefile.nodens");
    std::fs::write(&path, corefile(net.ip(1), &socket)).unwrap();
    let Converted { toml, stderr, .. } = convert_corefile(&path);
    assert!(
        toml.contains(&format!(
            "[dnstap]   # dnstap, line 3\nsocket = \"unix:{}\"\nforwarder = true\n",
            socket.display()
        )),
        "{toml}\n{stderr}"
    );
    let mut nodens = Nodens::start_toml(&toml);
    // CoreDNS, from the same Corefile on another address.
    let reference_addr = net.other(70, 1053);
    let socket = dir.path().join("coredns.sock");
    let coredns_capture = Capture::unix(&socket, &dir.path().join("coredns.fstrm"));
    let path = dir.path().join("Corefile.coredns");
    std::fs::write(&path, corefile(reference_addr.ip(), &socket)).unwrap();
    let mut cmd = wrapped_command(&[], &coredns_bin());
    cmd.arg("-conf").arg(&path);
    let mut reference = Proc::spawn("coredns reference", cmd);
    // Its readiness probe: a name of no later query (two messages more).
    wait_until(secs(15), "the reference CoreDNS to answer", || {
        udp_query_timeout(reference_addr, &Q::new("probe.test.", Rt::TXT), ms(200))
    });

    for server in [nodens.dns, reference_addr] {
        for name in ["www.test.", "www.test.", "nope.test."] {
            let _ = udp_query(server, &Q::new(name, Rt::A));
        }
    }
    nodens.wait_metric("nodens_dnstap_sent_total", &[], 10.0);
    nodens.terminate();
    reference.signal(libc::SIGTERM);
    reference
        .wait_exit(secs(15))
        .expect("CoreDNS ends on SIGTERM");
    let summary = |tapped: Vec<Tapped>| -> Vec<String> {
        let mut s: Vec<String> = tapped
            .iter()
            .filter(|t| !t.question.starts_with("probe."))
            .map(|t| format!("{} {} {}", t.kind, t.question.to_lowercase(), t.rcode))
            .collect();
        s.sort();
        s
    };
    let from_nodens = summary(nodens_capture.finish(10));
    let from_coredns = summary(coredns_capture.finish(10));
    assert_eq!(from_nodens.len(), 10, "{from_nodens:#?}");
    assert_eq!(from_nodens, from_coredns);
}

/// SIGTERM while the reader is behind: nodens's queue holds records when
/// the shutdown starts (the reader is stopped, SIGSTOP, through a burst of
/// queries, and resumed 100 ms after the SIGTERM). Before it exits, nodens
/// writes them and ends the stream (STOP, the reader's FINISH): the reader
/// gets every message of the last queries. Without that, nodens exited
/// with them queued and the reader got only what its socket held.
#[test]
fn sigterm_writes_the_queue_and_ends_the_stream() {
    needs!(
        Need::CoreDns,
        Need::Tool("fstrm_capture"),
        Need::Tool("dnstap-ldns"),
        Need::Alone
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tap.sock");
    let capture = Capture::unix(&socket, &dir.path().join("out.fstrm"));
    let (net, _core, mut nodens) = tapped(&socket);
    // 4,002 messages, about 570 KB: more than the reader's socket holds.
    let total = 2_000;
    capture.proc.signal(libc::SIGSTOP);
    assert_eq!(ask_at_rate(&net, nodens.dns, total, 100_000.0), total);
    nodens.proc.signal(libc::SIGTERM);
    std::thread::sleep(ms(100));
    capture.proc.signal(libc::SIGCONT);
    let status = nodens.proc.wait_exit(secs(20)).expect("nodens exits");
    assert!(status.success(), "nodens exits 0 on SIGTERM: {status:?}");
    let closed = |c: &Capture| {
        c.proc
            .lines()
            .iter()
            .any(|l| l.contains(": closing (read "))
            .then_some(())
    };
    wait_until(secs(10), "the reader to see the stream end", || {
        closed(&capture)
    });
    let want = 2 * (total as u64 + 1);
    assert_eq!(
        capture.frames_read(),
        want,
        "every message of the last queries read"
    );
    let file = capture.file.clone();
    capture.finish_raw(want);
    let all: u64 = decode_lines(&file).values().sum();
    assert_eq!(all, want, "every message decoded");
}
