//! `nodens top`'s request: the node's workloads with their cumulative
//! counts, busiest first; the client turns two replies into rates.

use std::io::{self, Write};

use super::Served;
use super::protocol::Reply;
use super::write_reply;

/// Workloads sent when the client names no limit: every slot of the table.
const ALL: usize = 1024;

pub(super) fn run(
    served: &dyn Served,
    limit: Option<usize>,
    out: &mut impl Write,
) -> io::Result<()> {
    let Some(view) = served.top(limit.unwrap_or(ALL).min(ALL)) else {
        return write_reply(
            out,
            &Reply::Error(
                "workload counters are off: set `[server] workload_counters = true`".into(),
            ),
        );
    };
    write_reply(out, &Reply::Top(view))
}
