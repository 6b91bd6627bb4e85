//! The first stage: may this client ask at all? The allow list, then the
//! per-client rate limit, before the packet is even parsed.

use std::net::IpAddr;
use std::time::Instant;

use super::metrics::ServeMetrics;
use super::{Job, Settings};
use crate::listen::Handled;
use crate::wire::{build, query, rcode};

/// `None` when the client may go on; otherwise what to do with the packet.
#[inline]
pub(super) fn admit(
    settings: &Settings,
    metrics: &ServeMetrics,
    packet: &[u8],
    client: IpAddr,
    now: Instant,
    out: &mut Vec<u8>,
) -> Option<Handled<Job>> {
    if !settings.acl.allows(client) {
        return Some(refuse(metrics, packet, "source not allowed", out));
    }
    if let Some(limit) = &settings.rate_limit
        && !limit.allow(client, now)
    {
        metrics.rejected("client rate limit");
        return Some(Handled::Drop);
    }
    None
}

/// REFUSED for a client that may not ask (the question echoed if it can be
/// read); nothing for what is not a query at all.
fn refuse(
    metrics: &ServeMetrics,
    packet: &[u8],
    reason: &'static str,
    out: &mut Vec<u8>,
) -> Handled<Job> {
    metrics.rejected(reason);
    refuse_packet(packet, out)
}

/// REFUSED for a packet not yet parsed, with its question echoed where it
/// reads (the budgets refuse here too); nothing for what is not a query.
pub(super) fn refuse_packet(packet: &[u8], out: &mut Vec<u8>) -> Handled<Job> {
    let (question_end, edns) = match query::parse(packet) {
        Ok(q) => (Some(q.name_end + 4), q.edns),
        Err(query::Reject::Answer {
            question_end, edns, ..
        }) => (question_end, edns),
        Err(query::Reject::Drop(_)) => return Handled::Drop,
    };
    build::reply_with_rcode(packet, rcode::REFUSED, question_end, edns, None, out);
    Handled::Reply
}
