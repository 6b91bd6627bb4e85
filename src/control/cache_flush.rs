//! `nodens cache flush NAME | --zone ZONE | --all`: drops cached entries
//! in every view. The cache is one for every worker, so the next query on
//! any worker misses; counted in `nodens_cache_flushes_total`.

use std::io::{self, Write};
use std::time::Instant;

use super::Served;
use super::metrics::ControlMetrics;
use super::protocol::{FlushScope, Reply};
use super::records::folded;
use super::write_reply;
use crate::cache::inspect::Flush;

pub(super) fn run(
    served: &dyn Served,
    metrics: &ControlMetrics,
    scope: &FlushScope,
    out: &mut impl Write,
) -> io::Result<()> {
    let flush = match scope {
        FlushScope::All => Ok(Flush::All),
        FlushScope::Name(name) => folded(name).map(Flush::Name),
        FlushScope::Zone(zone) => folded(zone).map(Flush::Zone),
    };
    let flush = match flush {
        Ok(f) => f,
        Err(e) => return write_reply(out, &Reply::Error(e.to_string())),
    };
    let entries = served.cache().flush(flush, Instant::now());
    metrics.flush(scope.label(), entries);
    tracing::info!(scope = scope.label(), entries, "cache flushed: {scope:?}");
    write_reply(
        out,
        &Reply::Flushed {
            scope: scope.label().into(),
            entries,
        },
    )
}
