//! `nodens node guard`: the entry point of the guard, the process that
//! watches the node setup from outside the server's container and withdraws
//! it when no nodens is alive to serve it. The watching is the library's
//! (`nodens::node::guard`); this file loads the configuration, sets up
//! logging and drops to `run_as_user` first.

use std::path::Path;

use nodens::config::Config;
use nodens::{logging, node, privileges};

use super::report::Outcome;
use super::run_as::run_as;

/// Runs until SIGTERM or SIGINT; its status is the guard's.
pub(super) async fn run(path: &Path) -> anyhow::Result<Outcome> {
    // A bad kube-dns ConfigMap or hosts file (edited by others, and of
    // no use to the guard) must not stop it.
    let config = Config::load_to_start(path)?;
    let _log = logging::init(&config.log);
    let Some(plan) = &config.node else {
        anyhow::bail!(
            "node setup is off in {} ([node] setup = false): nothing to guard",
            path.display()
        );
    };
    run_as(&config, &privileges::for_guarding(), None)?;
    Ok(Outcome::Exited(node::guard(plan).await))
}
