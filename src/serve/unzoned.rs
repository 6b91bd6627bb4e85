//! The query log of the replies written before a query reaches a zone:
//! REFUSED by the allow list or for a name in no zone, FORMERR or NOTIMP
//! for a malformed query. These are counted outside `ZoneStats::reply`,
//! so they are offered to the log here (`[query_log] unzoned`). A rare
//! path: the packet is read again for what the record needs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::{Job, Settings, Shared};
use crate::answered::{Answered, Event, Observer, Source};
use crate::listen::{Handled, Proto};
use crate::wire::query::{self, Query, Reject};
use crate::wire::{HEADER_LEN, read_u16};

/// A query turned away before routing, as the log needs it.
pub(super) struct Unzoned<'a> {
    pub(super) packet: &'a [u8],
    pub(super) client: SocketAddr,
    pub(super) proto: Proto,
    pub(super) started: Instant,
    pub(super) settings: &'a Arc<Settings>,
}

impl Shared {
    /// Offers a reply written before routing to the unzoned log; returns `done`.
    pub(super) fn log_unzoned(
        &self,
        q: &Unzoned<'_>,
        done: Handled<Job>,
        out: &[u8],
    ) -> Handled<Job> {
        if !matches!(done, Handled::Reply)
            || !q.settings.query_log.logs_unzoned()
            || out.len() < HEADER_LEN
        {
            return done;
        }
        let settings = q.settings;
        let guard = self
            .query_log
            .unzoned(&settings.query_log, settings.generation);
        let Some(log) = guard.as_ref().and_then(|u| u.log.as_ref()) else {
            return done;
        };
        let Some(query) = readable(q.packet) else {
            return done;
        };
        let code = read_u16(out, 2) & 0xf;
        let seconds = q.started.elapsed().as_secs_f64();
        let answered = Answered {
            query: &query,
            client: q.client,
            started: q.started,
            source: Source::Local,
            reply: out,
        };
        log.observe(&Event {
            answered,
            proto: q.proto,
            rcode: code,
            seconds,
        });
        done
    }
}

/// The query as far as it can be read: the whole of it, or its header and
/// question when the rest is malformed; a bare header has the root as name.
fn readable(packet: &[u8]) -> Option<Query<'_>> {
    if packet.len() < HEADER_LEN {
        return None;
    }
    match query::parse(packet) {
        Ok(q) => Some(q),
        Err(Reject::Drop(_)) => None,
        Err(Reject::Answer {
            question_end, edns, ..
        }) => {
            let (name_end, qtype, qclass) = match question_end {
                Some(end) if end >= HEADER_LEN + 4 && end <= packet.len() => (
                    end - 4,
                    read_u16(packet, end - 4),
                    read_u16(packet, end - 2),
                ),
                _ => (HEADER_LEN, 0, 0),
            };
            Some(Query {
                packet,
                id: read_u16(packet, 0),
                flags: read_u16(packet, 2),
                name_end,
                qtype,
                qclass,
                edns,
            })
        }
    }
}
