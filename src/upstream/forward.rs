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
use std::time::Instant as StdInstant;

use rand::Rng;
use tokio::time::Instant;

use super::{ExchangeError, Upstream, Zone, udp};
use crate::cache::Key;
use crate::config::{Policy, Transport};
use crate::metrics::Metrics;
use crate::wire::response::{self, Layout};
use crate::wire::{build, flag, rcode, rcode_name, read_u16};

/// An upstream answer to our question.
pub struct Forwarded {
    pub msg: Vec<u8>,
    pub layout: Layout,
}

pub async fn forward(
    zone: &Zone,
    key: &Key,
    deadline: Instant,
    metrics: &Metrics,
) -> Option<Forwarded> {
    let question = key.question();
    let mut fallback = None;
    for upstream in try_order(zone) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let try_deadline = (now + zone.upstream_timeout).min(deadline);
        match ask(
            upstream,
            zone.transport,
            key,
            &question,
            try_deadline,
            metrics,
        )
        .await
        {
            Ok(answer) => {
                upstream.record_success();
                match answer.layout.rcode {
                    rcode::NOERROR | rcode::NXDOMAIN => return Some(answer),
                    other => {
                        log_failure(
                            upstream,
                            &zone.name,
                            key,
                            &format!("answered {}", rcode_name(other)),
                        );
                        fallback = Some(answer);
                    }
                }
            }
            Err(e) => {
                if e.counts_against_health() {
                    upstream.record_failure();
                }
                metrics
                    .upstream_errors
                    .with_label_values(&[&upstream.label, e.label()])
                    .inc();
                log_failure(upstream, &zone.name, key, &e.to_string());
            }
        }
    }
    fallback
}

/// The zone's upstreams in policy order, those marked down last.
fn try_order(zone: &Zone) -> Vec<&Arc<Upstream>> {
    let n = zone.upstreams.len();
    let first = match zone.policy {
        Policy::Sequential => 0,
        Policy::Random => rand::rng().random_range(0..n.max(1)),
    };
    let ordered = (0..n).map(|i| &zone.upstreams[(first + i) % n]);
    let (up, down): (Vec<_>, Vec<_>) = ordered.partition(|u| u.health.is_up());
    up.into_iter().chain(down).collect()
}

/// One upstream, over the zone's transport.
async fn ask(
    upstream: &Upstream,
    transport: Transport,
    key: &Key,
    question: &[u8],
    deadline: Instant,
    metrics: &Metrics,
) -> Result<Forwarded, ExchangeError> {
    let id: u16 = rand::rng().random();
    let query = build::upstream_query(id, question, key.dnssec_ok(), key.checking_disabled());
    let started = StdInstant::now();
    let msg = match transport {
        Transport::ForceTcp => upstream.pool.exchange(&query, question, deadline).await?,
        Transport::PreferUdp => {
            let msg = ask_udp(upstream, &query, id, question, deadline, metrics).await?;
            if read_u16(&msg, 2) & flag::TC != 0 {
                upstream.pool.exchange(&query, question, deadline).await?
            } else {
                msg
            }
        }
        Transport::TcpFallbackOnTimeout => {
            let now = Instant::now();
            let udp_deadline = now + (deadline - now) / 2;
            match ask_udp(upstream, &query, id, question, udp_deadline, metrics).await {
                Ok(msg) if read_u16(&msg, 2) & flag::TC == 0 => msg,
                Ok(_) | Err(ExchangeError::Timeout) => {
                    upstream.pool.exchange(&query, question, deadline).await?
                }
                Err(e) => return Err(e),
            }
        }
    };
    let layout = response::layout(&msg).map_err(|_| ExchangeError::Malformed)?;
    upstream.observe_duration(layout.rcode, started.elapsed().as_secs_f64());
    Ok(Forwarded { msg, layout })
}

async fn ask_udp(
    upstream: &Upstream,
    query: &[u8],
    id: u16,
    question: &[u8],
    deadline: Instant,
    metrics: &Metrics,
) -> Result<Vec<u8>, ExchangeError> {
    upstream.inflight.inc();
    let done = udp::exchange(upstream.addr, query, id, question, deadline).await;
    upstream.inflight.dec();
    if done.reused {
        upstream.udp_conn_hits.inc();
    } else {
        upstream.udp_conn_misses.inc();
    }
    let reply = done.result?;
    if reply.mismatched > 0 {
        metrics
            .upstream_errors
            .with_label_values(&[&upstream.label, "mismatch"])
            .inc_by(reply.mismatched.into());
    }
    Ok(reply.msg)
}

fn log_failure(upstream: &Upstream, zone: &str, key: &Key, what: &str) {
    if let Some(suppressed) = upstream.log_limit.allow() {
        tracing::warn!(
            upstream = %upstream.label,
            zone,
            name = %crate::wire::name::to_text(key.name()),
            qtype = crate::metrics::qtype_label(key.qtype()),
            suppressed,
            "upstream failed: {what}"
        );
    }
}
