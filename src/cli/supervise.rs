//! The entry point of the fail-open supervisor: what `serve` becomes when
//! `[node] fail_open` is on and it was not itself started by a supervisor.
//! The supervisor (`nodens::node::supervisor`) runs the server as a child
//! process and withdraws the node setup when it stops serving; this file
//! gives it its runtime and passes its status on.

use std::path::Path;

use nodens::config::Config;
use nodens::node;

use super::report::{Failure, Outcome};

/// Supervises `nodens serve --supervised` with the configuration at
/// `path` (already loaded as `config`) until SIGTERM or until the server
/// exits for good; the status is the server's.
pub(super) fn run(config: &Config, path: &Path, keep_rules: bool) -> Result<Outcome, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            Failure::new(format!("cannot start the supervisor's runtime: {e}")).logged()
        })?;
    let plan = config.node.as_ref().ok_or_else(|| {
        Failure::new("the fail-open supervisor needs `[node] setup = true`".to_string())
    })?;
    Ok(Outcome::Exited(
        runtime.block_on(node::supervise(plan, path, keep_rules)),
    ))
}
