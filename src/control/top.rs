//! `nodens top`'s request: the node's workloads with their cumulative
//! counts, busiest first; the client turns two replies into rates.

use std::io::{self, Write};

use super::protocol::Reply;
use super::write_reply;
use crate::serve::Shared;

/// Workloads sent when the client names no limit: every slot of the table.
const ALL: usize = 1024;

pub(super) fn run(shared: &Shared, limit: Option<usize>, out: &mut impl Write) -> io::Result<()> {
    let Some(workloads) = shared.settings.load().workloads.clone() else {
        return write_reply(
            out,
            &Reply::Error(
                "workload counters are off: set `[server] workload_counters = true`".into(),
            ),
        );
    };
    let view = workloads.view(&shared.search.clients, limit.unwrap_or(ALL).min(ALL));
    write_reply(out, &Reply::Top(view))
}
