//! The CHAOS identity names (`[server] identity`): `id.server` and
//! `hostname.bind` give the node, `version.server` and `version.bind`
//! give nodens's version, answered here before the cache so that a client
//! behind the node address can tell who answers (the node cache itself,
//! not the cluster DNS behind it). With identity off, REFUSED, as unbound's
//! `hide-identity` does.

use crate::wire::query::Query;
use crate::wire::{build, class, rcode, rtype};

use super::hit::Request;

/// What the identity names answer.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub id: String,
    pub version: String,
}

impl Identity {
    /// The node's name from the downward API (`NODE_NAME`), else the host
    /// name (on the host network, the node's).
    pub(crate) fn of_this_node() -> Identity {
        let id = std::env::var("NODE_NAME")
            .ok()
            .filter(|n| !n.is_empty())
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .map(|n| n.trim().to_string())
            .unwrap_or_default();
        Identity {
            id,
            version: format!("nodens {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

enum Asked {
    Id,
    Version,
}

/// Which identity name `query` asks for, if any (any letter case).
fn asked(query: &Query<'_>) -> Option<Asked> {
    if query.qclass != class::CH || !matches!(query.qtype, rtype::TXT | rtype::ANY) {
        return None;
    }
    let name = &query.packet[crate::wire::HEADER_LEN..query.name_end];
    let is = |wire: &[u8]| name.eq_ignore_ascii_case(wire);
    if is(b"\x02id\x06server\x00") || is(b"\x08hostname\x04bind\x00") {
        Some(Asked::Id)
    } else if is(b"\x07version\x06server\x00") || is(b"\x07version\x04bind\x00") {
        Some(Asked::Version)
    } else {
        None
    }
}

/// Writes the answer to an identity query into `out`; false for any other
/// query.
pub(super) fn answer(
    request: &Request<'_, '_>,
    identity: Option<&Identity>,
    out: &mut Vec<u8>,
) -> bool {
    let query = request.query;
    let Some(asked) = asked(query) else {
        return false;
    };
    let question_end = query.name_end + 4;
    let code = match identity {
        Some(identity) => {
            let text = match asked {
                Asked::Id => &identity.id,
                Asked::Version => &identity.version,
            };
            build::chaos_txt(query, text, out);
            rcode::NOERROR
        }
        None => {
            build::reply_with_rcode(
                query.packet,
                rcode::REFUSED,
                Some(question_end),
                query.edns,
                None,
                out,
            );
            rcode::REFUSED
        }
    };
    let seconds = request.started.elapsed().as_secs_f64();
    let answered = request.answered(crate::answered::Source::Local, out);
    request
        .stats
        .reply(request.proto, code, false, out.len(), seconds, answered);
    true
}
