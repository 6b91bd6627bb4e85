//! The probes of one server's behaviour beyond latency: whether it caches
//! negative answers, how many TCP connections it takes, whether it
//! truncates a large answer over UDP and gives all of it over TCP.

use super::*;

/// Two identical queries for a name that does not exist, 1.1 s apart:
/// a cache answers the second from memory, its SOA TTL counted down.
pub(super) async fn negative_caching(
    server: SocketAddr,
    resolv: &ResolvConf,
    samples: &[Sample],
    lines: &mut Vec<String>,
) -> Option<Finding> {
    let parent = match resolv.stub.search.first() {
        Some(domain) => domain.clone(),
        None => samples.first()?.exists_as.clone(),
    };
    let name = format!("nodens-doctor-{:08x}.{parent}", rand::random::<u32>());
    let q = Question::new(&name, rtype::A).ok()?;
    let first = ask(server, &q, Transport::Udp, DEADLINE).await;
    tokio::time::sleep(NEGATIVE_GAP).await;
    let second = ask(server, &q, Transport::Udp, DEADLINE).await;
    let (first, second) = match (first, second) {
        (Ok(a), Ok(b)) if a.rcode == 3 && b.rcode == 3 => (a, b),
        (a, b) => {
            let got = |r: &Result<Reply, _>| r.as_ref().map_or("no answer".into(), describe);
            lines.push(format!(
                "  negative caching: not checked ({name}: {}, then {})",
                got(&a),
                got(&b)
            ));
            return None;
        }
    };
    let (Some(ttl1), Some(ttl2)) = (first.soa_ttl, second.soa_ttl) else {
        lines.push(format!(
            "  negative caching: not checked (NXDOMAIN for {name} without an SOA)"
        ));
        return Some(
            Finding::new("nxdomain-without-soa", Severity::Warning, format!("{server} sends NXDOMAIN without an SOA record"))
                .evidence(format!("{name} A: NXDOMAIN, empty authority section"))
                .fix("RFC 2308: without the SOA no cache on the way may keep the answer, so every repeat goes to the authority. Check the zone's server."),
        );
    };
    let evidence = format!(
        "{name} A twice, {} apart: NXDOMAIN with SOA TTL {ttl1} then {ttl2}, in {} then {}",
        ms(NEGATIVE_GAP),
        ms(first.latency),
        ms(second.latency)
    );
    if ttl2 < ttl1 {
        lines.push(format!("  negative caching: yes ({evidence})"));
        return None;
    }
    lines.push(format!("  negative caching: no ({evidence})"));
    Some(
        Finding::new("no-negative-cache", Severity::Warning, format!("{server} does not cache negative answers"))
            .evidence(evidence)
            .evidence("the SOA TTL did not count down: the second NXDOMAIN came from the authority again, and so does every search expansion of every lookup")
            .fix("Cache negative answers (RFC 2308): dnsmasq without --no-negcache, CoreDNS's cache plugin with `denial`, unbound by default; nodens does by default. Or put a node cache in front."),
    )
}

/// Opens TCP connections one after the other and holds them, each asking
/// one query, up to `max`: a server with a fixed number of TCP slots
/// (dnsmasq: 20 processes) stops answering at the first connection past
/// them, while one with a per-client limit closes it.
pub(super) async fn tcp_ramp(
    server: SocketAddr,
    q: &Question,
    max: usize,
    lines: &mut Vec<String>,
) -> Option<Finding> {
    let mut held: Vec<TcpStream> = Vec::with_capacity(max);
    let mut times = Vec::new();
    let mut end = None;
    for n in 1..=max {
        let step = async {
            let mut stream = TcpStream::connect(server)
                .await
                .map_err(|e| client::QueryError::Io(e.to_string()))?;
            let reply = ask_on(&mut stream, q, DEADLINE).await?;
            Ok::<_, client::QueryError>((stream, reply))
        };
        match tokio::time::timeout(DEADLINE * 2, step).await {
            Ok(Ok((stream, reply))) => {
                times.push(reply.latency);
                held.push(stream);
            }
            Ok(Err(client::QueryError::Timeout(_))) | Err(_) => {
                end = Some((n, true, String::new()));
                break;
            }
            Ok(Err(e)) => {
                end = Some((n, false, e.to_string()));
                break;
            }
        }
    }
    drop(held);
    times.sort();
    let median = times
        .get(times.len() / 2)
        .copied()
        .map(ms)
        .unwrap_or_else(|| "-".into());
    match end {
        None => {
            lines.push(format!(
                "  TCP ramp: {max} connections held open, each answered (median {median})"
            ));
            None
        }
        Some((n, true, _)) => {
            lines.push(format!("  TCP ramp: stalled at connection {n}"));
            Some(
                Finding::new(
                    "tcp-stall",
                    Severity::Critical,
                    format!("{server} stalls beyond {} concurrent TCP connections", n - 1),
                )
                .evidence(format!("{} connections held open, each answered one query (median {median})", n - 1))
                .evidence(format!("connection {n} got no answer within {DEADLINE:?}: it waits for a slot, as do truncated answers' retries and TCP-forwarding caches"))
                .fix("dnsmasq serves 20 TCP connections at once, one process each, unless --max-tcp-connections (2.90) raises it. Do not force TCP to such a server (node-local-dns `force_tcp`), or put a cache in front that keeps a small pool of TCP connections (nodens: the upstream TCP pool)."),
            )
        }
        Some((n, false, error)) => {
            lines.push(format!(
                "  TCP ramp: connection {n} refused or closed ({error}); {} held before",
                n - 1
            ));
            Some(
                Finding::new("tcp-limit", Severity::Info, format!("{server} closes TCP connections beyond {} from one client", n - 1))
                    .evidence(format!("connection {n}: {error}"))
                    .fix("A per-client limit answers clearly and clients retry; no action unless pods keep many TCP connections open."),
            )
        }
    }
}

/// A name whose answer does not fit in 512 bytes: over UDP without EDNS
/// the reply must be cut with TC set, and TCP must give all of it.
pub(super) async fn truncation(
    server: SocketAddr,
    name: &str,
    lines: &mut Vec<String>,
) -> Option<Finding> {
    let mut q = match Question::new(name, rtype::TXT) {
        Ok(q) => q,
        Err(e) => {
            lines.push(format!("  TC: not checked ({e})"));
            return None;
        }
    };
    let tcp = ask(server, &q, Transport::Tcp, DEADLINE).await;
    q.edns = false;
    let udp = ask(server, &q, Transport::Udp, DEADLINE).await;
    let finding = |title: String, evidence: String| {
        Some(
            Finding::new("truncation", Severity::Critical, title)
                .evidence(evidence)
                .fix("A large answer must come back truncated over UDP (TC) and whole over TCP; check TCP reachability (port 53/tcp) and the server's truncation."),
        )
    };
    match (udp, tcp) {
        (Ok(u), Ok(_)) if u.size > 512 => finding(
            format!(
                "{server} sent a {}-byte UDP reply to a query without EDNS",
                u.size
            ),
            format!("{name} TXT: {} bytes over UDP, the limit is 512", u.size),
        ),
        (Ok(u), Ok(t)) if !u.truncated && u.answers < t.answers => finding(
            format!("{server} drops records from a large UDP answer without setting TC"),
            format!(
                "{name} TXT: {} records over UDP, {} over TCP, TC not set",
                u.answers, t.answers
            ),
        ),
        (Ok(u), Ok(t)) => {
            lines.push(format!(
                "  TC: {name} TXT over UDP without EDNS: {} bytes{}; over TCP: {} bytes, {} records",
                u.size,
                if u.truncated { ", TC set" } else { "" },
                t.size,
                t.answers
            ));
            if !u.truncated && t.size <= 512 {
                lines.push(
                    "  TC: the answer fits in 512 bytes; give a larger one to check truncation"
                        .into(),
                );
            }
            None
        }
        (Ok(u), Err(e)) if u.truncated => finding(
            format!("{server} truncates over UDP but its TCP fails"),
            format!("{name} TXT: TC over UDP, then over TCP: {e}"),
        ),
        (u, t) => {
            let show = |r: &Result<Reply, client::QueryError>| match r {
                Ok(r) => describe(r),
                Err(e) => e.to_string(),
            };
            lines.push(format!(
                "  TC: not checked ({name} TXT: UDP {}, TCP {})",
                show(&u),
                show(&t)
            ));
            None
        }
    }
}
