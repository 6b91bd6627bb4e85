//! The local-records stage, before the cache: a zone's `hosts` records,
//! `template` rules, `local` names and `whoami` (src/records/) answer here, counted
//! as the zone's replies. Off (no zone has any), the hit path pays the one
//! branch on `Settings::records` in `handle`.

use std::net::SocketAddr;

use super::hit::Request;
use super::reply_limit;
use crate::records::{Asked, Stage};

/// Writes the answer into `out` when the zone's records give one.
pub(super) fn answer(
    request: &Request<'_, '_>,
    stage: &Stage,
    client: SocketAddr,
    out: &mut Vec<u8>,
) -> bool {
    let limit = reply_limit(request.proto, request.query, request.settings);
    let asked = Asked {
        query: request.query,
        folded: request.key.name,
        client,
        tcp: request.proto == crate::listen::Proto::Tcp,
        limit,
    };
    let Some(code) = stage.answer(request.zone.index, &asked, out) else {
        return false;
    };
    let seconds = request.started.elapsed().as_secs_f64();
    let answered = request.answered(crate::answered::Source::Local, out);
    request
        .stats
        .reply(request.proto, code, false, out.len(), seconds, answered);
    true
}
