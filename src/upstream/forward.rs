//! Asking a zone's upstreams, one after the other, until one answers.
//!
//! Each try gets `upstream_timeout`, the whole lookup `query_timeout`
//! (the deadline). UDP first with a fresh ID and socket; a truncated answer
//! is asked again over TCP. An upstream that answers SERVFAIL, REFUSED,
//! NOTIMP or FORMERR is passed over for the next one; if all do, the last
//! such answer is returned (it still tells the client something true).

use std::time::Instant as StdInstant;

use rand::Rng;
use tokio::time::Instant;

use super::{tcp, udp, ExchangeError, Upstream, Zone};
use crate::cache::Key;
use crate::config::Policy;
use crate::metrics::{Metrics, PROXY_NAME};
use crate::wire::response::{self, Layout};
use crate::wire::{build, flag, rcode, rcode_name, read_u16};

/// An upstream answer to our question.
pub struct Forwarded {
    pub msg: Vec<u8>,
    pub layout: Layout,
}

pub async fn forward(zone: &Zone, key: &Key, deadline: Instant, metrics: &Metrics) -> Option<Forwarded> {
    let question = key.question();
    let n = zone.upstreams.len();
    let first = match zone.policy {
        Policy::Sequential => 0,
        Policy::Random => rand::rng().random_range(0..n.max(1)),
    };
    let mut fallback = None;
    for i in 0..n {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let upstream = &zone.upstreams[(first + i) % n];
        let try_deadline = (now + zone.upstream_timeout).min(deadline);
        match ask(upstream, key, &question, try_deadline, metrics).await {
            Ok(answer) => match answer.layout.rcode {
                rcode::NOERROR | rcode::NXDOMAIN => return Some(answer),
                other => {
                    log_failure(upstream, &zone.name, key, &format!("answered {}", rcode_name(other)));
                    fallback = Some(answer);
                }
            },
            Err(e) => {
                metrics.upstream_errors.with_label_values(&[&upstream.label, e.label()]).inc();
                log_failure(upstream, &zone.name, key, &e.to_string());
            }
        }
    }
    fallback
}

/// One upstream: UDP, then TCP if the answer was truncated.
async fn ask(upstream: &Upstream, key: &Key, question: &[u8], deadline: Instant, metrics: &Metrics) -> Result<Forwarded, ExchangeError> {
    let id: u16 = rand::rng().random();
    let query = build::upstream_query(id, question, key.dnssec_ok(), key.checking_disabled());
    let started = StdInstant::now();
    metrics.proxy_conn_misses.with_label_values(&[PROXY_NAME, &upstream.label, "udp"]).inc();
    let reply = udp::exchange(upstream.addr, &query, id, question, deadline).await?;
    if reply.mismatched > 0 {
        metrics.upstream_errors.with_label_values(&[&upstream.label, "mismatch"]).inc_by(reply.mismatched.into());
    }
    let mut msg = reply.msg;
    if read_u16(&msg, 2) & flag::TC != 0 {
        metrics.proxy_conn_misses.with_label_values(&[PROXY_NAME, &upstream.label, "tcp"]).inc();
        msg = tcp::exchange(upstream.addr, &query, id, question, deadline).await?;
    }
    let layout = response::layout(&msg).map_err(|_| ExchangeError::Malformed)?;
    metrics
        .proxy_duration
        .with_label_values(&[PROXY_NAME, &upstream.label, rcode_name(layout.rcode)])
        .observe(started.elapsed().as_secs_f64());
    Ok(Forwarded { msg, layout })
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
