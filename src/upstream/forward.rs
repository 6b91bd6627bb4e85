//! Asking a zone's upstreams, one after the other, until one answers.
//!
//! Each try gets `upstream_timeout`, the whole lookup `query_timeout` (the
//! deadline). Upstreams marked down are tried only after the ones that are
//! up. The zone's transport decides UDP or TCP: `prefer_udp` asks over UDP
//! with a fresh ID and socket and asks again over the TCP pool if the answer
//! was truncated; `force_tcp` uses the pool only; `tcp_fallback_on_timeout`
//! gives UDP half the try and the pool the rest. An upstream that answers
//! SERVFAIL, REFUSED, NOTIMP or FORMERR is passed over for the next one; if
//! all do, the last such answer is returned (it still tells the client
//! something true).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant as StdInstant;

use rand::Rng;
use tokio::time::Instant;

use super::config::{Policy, Transport};
use super::{ExchangeError, Upstream, Zone, case, udp};
use crate::cache::Key;
use crate::dnstap::Carrier;
use crate::wire::response::Case;
use crate::wire::response::{self, Layout};
use crate::wire::{HEADER_LEN, build, flag, rcode, rcode_name, read_u16};

/// An upstream answer to our question.
pub(crate) struct Forwarded {
    pub msg: Vec<u8>,
    pub layout: Layout,
    /// When the answer arrived: the time the caller stores and serves it at.
    pub received: StdInstant,
}

pub(crate) async fn forward(zone: &Zone, key: &Key, deadline: Instant) -> Option<Forwarded> {
    // Boxed: a rare path, which would otherwise take room in every miss.
    let mut fallback: Option<Box<Forwarded>> = None;
    for upstream in try_order(zone) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let try_deadline = (now + zone.upstream_timeout).min(deadline);
        let attempt = Attempt {
            upstream,
            zone,
            key,
            started: now,
            deadline: try_deadline,
        };
        let result = ask(&attempt).await;
        // Taken from `attempt` after the wait: what lives across it takes
        // room in every miss, once is enough.
        let upstream = attempt.upstream;
        match result {
            Ok(answer) => {
                upstream.record_success(attempt.started.into_std());
                match answer.layout.rcode {
                    rcode::NOERROR | rcode::NXDOMAIN => return Some(answer),
                    other => {
                        log_failure(
                            upstream,
                            &zone.name,
                            key,
                            &format!("answered {}", rcode_name(other)),
                        );
                        fallback = Some(Box::new(answer));
                    }
                }
            }
            Err(e) => {
                if e.counts_against_health() {
                    upstream.record_failure(attempt.started.into_std());
                }
                upstream.count_error(&e);
                log_failure(upstream, &zone.name, key, &e.to_string());
            }
        }
    }
    fallback.map(|f| *f)
}

/// The zone's upstreams in policy order, those marked down last (as they
/// were at the start: an upstream marked down by its own try is not tried
/// again at the end).
fn try_order(zone: &Zone) -> TryOrder<'_> {
    let upstreams = &zone.upstreams[..];
    let n = upstreams.len();
    if zone.near != [0, 0] {
        return near_first(zone);
    }
    let first = first_of(zone, n);
    let in_policy_order = (0..n).map(move |i| &upstreams[(first + i) % n]);
    if in_policy_order.clone().all(|u| u.health.is_up()) {
        return TryOrder::AllUp {
            upstreams,
            first,
            tried: 0,
        };
    }
    let mut order: Vec<(bool, &Arc<Upstream>)> =
        in_policy_order.map(|u| (!u.health.is_up(), u)).collect();
    // Stable: the policy's order holds among the up and among the down.
    order.sort_by_key(|&(down, _)| down);
    TryOrder::DownLast(order.into_iter())
}

/// Where the zone's policy starts among `n` upstreams.
fn first_of(zone: &Zone, n: usize) -> usize {
    let n = n.max(1);
    match zone.policy {
        Policy::Sequential => 0,
        Policy::Random => rand::rng().random_range(0..n),
        Policy::RoundRobin => zone.next_first.fetch_add(1, Ordering::Relaxed) % n,
    }
}

/// The order of a zone whose Service's endpoints on this node and in its
/// zone come first (`kubernetes::near`): each tier (this node, this zone,
/// the rest) in the zone's policy order, up before down, so when the near
/// ones fail or are marked down the others take over.
fn near_first(zone: &Zone) -> TryOrder<'_> {
    let upstreams = &zone.upstreams[..];
    let [node, here] = zone.near;
    let tiers = [0..node, node..node + here, node + here..upstreams.len()];
    let mut order: Vec<(bool, &Arc<Upstream>)> = Vec::with_capacity(upstreams.len());
    for tier in tiers {
        let members = &upstreams[tier.start.min(upstreams.len())..tier.end.min(upstreams.len())];
        let first = first_of(zone, members.len());
        order.extend((0..members.len()).map(|i| {
            let u = &members[(first + i) % members.len()];
            (!u.health.is_up(), u)
        }));
    }
    // Stable: the tiers' order holds among the up and among the down.
    order.sort_by_key(|&(down, _)| down);
    TryOrder::DownLast(order.into_iter())
}

/// The order of [`try_order`]. All up is the usual case: the policy's
/// order as it is, with no list to build (an allocation per miss). Small:
/// the forward future keeps it across every try.
enum TryOrder<'a> {
    AllUp {
        upstreams: &'a [Arc<Upstream>],
        first: usize,
        tried: usize,
    },
    DownLast(std::vec::IntoIter<(bool, &'a Arc<Upstream>)>),
}

impl<'a> Iterator for TryOrder<'a> {
    type Item = &'a Arc<Upstream>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            TryOrder::AllUp {
                upstreams,
                first,
                tried,
            } => {
                let n = upstreams.len();
                if *tried == n {
                    return None;
                }
                *tried += 1;
                Some(&upstreams[(*first + *tried - 1) % n])
            }
            TryOrder::DownLast(order) => order.next().map(|(_, u)| u),
        }
    }
}

/// One try: an upstream asked the question, from `started` until
/// `deadline`. Passed by reference: each layer of the try's future would
/// otherwise keep its own copy of all of it.
struct Attempt<'a> {
    upstream: &'a Arc<Upstream>,
    zone: &'a Zone,
    key: &'a Key,
    started: Instant,
    deadline: Instant,
}

impl Attempt<'_> {
    /// A query for the key's question (in lower case), with ID `id`; and
    /// where in it the question is.
    fn query(&self, id: u16) -> (Vec<u8>, std::ops::Range<usize>) {
        let key = self.key;
        let query = build::query_for(
            id,
            key.name(),
            key.qtype(),
            key.qclass(),
            key.dnssec_ok(),
            key.checking_disabled(),
        );
        (query, HEADER_LEN..HEADER_LEN + key.name().len() + 4)
    }
}

/// One upstream, over the zone's transport.
async fn ask(attempt: &Attempt<'_>) -> Result<Forwarded, ExchangeError> {
    let &Attempt {
        upstream,
        zone,
        started,
        deadline,
        ..
    } = attempt;
    // The UDP answer, or `None` when TCP is to be asked. Decided before TCP
    // is awaited, so the two exchanges share their room in the future.
    let over_udp = match zone.transport {
        Transport::ForceTcp | Transport::Tls => None,
        Transport::PreferUdp => match ask_udp(attempt, deadline).await {
            Ok(msg) if read_u16(&msg, 2) & flag::TC == 0 => Some(msg),
            Ok(_) => None,
            Err(e) if e.needs_tcp_confirmation() => None,
            Err(e) => return Err(e),
        },
        Transport::TcpFallbackOnTimeout => {
            let now = Instant::now();
            match ask_udp(attempt, now + (deadline - now) / 2).await {
                Ok(msg) if read_u16(&msg, 2) & flag::TC == 0 => Some(msg),
                Ok(_) | Err(ExchangeError::Timeout) => None,
                Err(e) if e.needs_tcp_confirmation() => None,
                Err(e) => return Err(e),
            }
        }
    };
    let msg = match over_udp {
        Some(msg) => msg,
        None => ask_tcp(attempt).await?,
    };
    let received = StdInstant::now();
    let layout = response::layout(&msg).map_err(|_| ExchangeError::Malformed)?;
    let took = received.saturating_duration_since(started.into_std());
    upstream.observe_duration(layout.rcode, took.as_secs_f64());
    Ok(Forwarded {
        msg,
        layout,
        received,
    })
}

/// Over the upstream's TCP pool. TCP cannot be answered by an off-path
/// forger, so the question goes in the case it was asked.
async fn ask_tcp(attempt: &Attempt<'_>) -> Result<Vec<u8>, ExchangeError> {
    let id: u16 = rand::rng().random();
    let (query, question_at) = attempt.query(id);
    let question = &query[question_at];
    let asked = StdInstant::now();
    let result = (attempt.upstream.pool)
        .exchange(&query, question, attempt.deadline)
        .await;
    if let Ok(msg) = &result {
        let upstream = attempt.upstream.addr;
        let carrier = match attempt.zone.transport {
            Transport::Tls => Carrier::Dot,
            _ => Carrier::Tcp,
        };
        (attempt.zone.dnstap).offer(carrier, upstream, asked, &query, msg);
    }
    result
}

/// Over UDP, from a socket of its own, with a random ID and (0x20) the
/// question's letters in random case. The answer goes back with the
/// question as asked, so the cache holds one spelling. An answer that
/// needs TCP confirmation is counted here, as what it was.
async fn ask_udp(attempt: &Attempt<'_>, deadline: Instant) -> Result<Vec<u8>, ExchangeError> {
    let &Attempt {
        upstream,
        zone,
        key,
        started,
        ..
    } = attempt;
    let id: u16 = rand::rng().random();
    let randomised = zone.randomize_case && upstream.case.randomise();
    // The question as it goes out, in the query itself.
    let (mut query, sent_at) = attempt.query(id);
    let case = if randomised {
        case::randomise(&mut query[sent_at.clone()]);
        Case::Exact
    } else {
        Case::Ignore
    };
    let sent = &query[sent_at];
    upstream.inflight.inc();
    let done = udp::exchange(&upstream.udp, &query, id, sent, case, started, deadline).await;
    upstream.inflight.dec();
    if done.reused {
        upstream.udp_conn_hits.inc();
    } else {
        upstream.udp_conn_misses.inc();
    }
    if done.mismatched > 0 {
        upstream.mismatched.inc_by(done.mismatched.into());
    }
    let mut msg = match done.result {
        Ok(msg) => msg,
        Err(e) => {
            // Only a clean exchange (nothing else arrived on the socket)
            // says something about the upstream: a forger's lucky guess in
            // lower case comes among many wrong ones, and must not switch
            // 0x20 off.
            let clean_case_mismatch =
                matches!(e, ExchangeError::CaseMismatch) && done.mismatched == 0;
            if clean_case_mismatch && upstream.case.not_preserved() {
                tracing::warn!(
                    upstream = %upstream.label,
                    "upstream does not keep the letter case of questions: \
                     0x20 randomisation off for it for {}s",
                    case::FALLBACK_FOR.as_secs()
                );
            }
            if e.needs_tcp_confirmation() {
                upstream.count_error(&e);
            }
            return Err(e);
        }
    };
    // As it went out and came back: the question in the case it was sent.
    (zone.dnstap).offer(
        Carrier::Udp,
        upstream.addr,
        started.into_std(),
        &query,
        &msg,
    );
    if randomised {
        upstream.case.preserved();
    }
    // Type and class matched; the name goes back in lower case.
    let name = key.name();
    msg[HEADER_LEN..HEADER_LEN + name.len()].copy_from_slice(name);
    if randomised {
        crate::wire::response::restore_owner_case(&mut msg, &sent[..name.len()], name);
    }
    Ok(msg)
}

fn log_failure(upstream: &Upstream, zone: &str, key: &Key, what: &str) {
    if let Some(suppressed) = upstream.log_limit.allow() {
        tracing::warn!(
            upstream = %upstream.label,
            zone,
            name = %crate::wire::name::to_text(key.name()),
            qtype = crate::wire::qtype_label(key.qtype()),
            qclass = key.qclass(),
            suppressed,
            "upstream failed: {what}"
        );
    }
}
