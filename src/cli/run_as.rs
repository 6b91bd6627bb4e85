//! The switch to `[server] run_as_user`, shared by the two commands that
//! start as root and serve on: `serve` (and the supervisor it may become)
//! and `node guard`. It must happen before any thread starts, which only
//! the command line knows.

use std::path::Path;

use anyhow::Context;

use nodens::config::Config;
use nodens::{privileges, trust};

use super::LOG_TARGET;

/// Switches to `[server] run_as_user` (from root, before any thread
/// starts), keeping `keep`; first makes the directories of nodens's local
/// channels (the claim's, the handover and control sockets', and `also`: the cache
/// file's, for the server alone) private to that uid.
/// Nothing when unset, or when already that uid (a supervised server).
pub(super) fn run_as(
    config: &Config,
    keep: &[caps::Capability],
    also: Option<&Path>,
) -> anyhow::Result<()> {
    let Some((uid, gid)) = config.server.run_as else {
        return Ok(());
    };
    if trust::own_uid() == uid {
        return Ok(());
    }
    let claim = config.node.as_ref().map(|n| n.state_dir.as_path());
    let handover = config
        .server
        .handover_socket
        .as_deref()
        .and_then(|p| p.parent());
    let control = config
        .server
        .control_socket
        .as_deref()
        .and_then(|p| p.parent());
    let dirs: Vec<&Path> = claim
        .into_iter()
        .chain(handover)
        .chain(control)
        .chain(also)
        .collect();
    for dir in &dirs {
        trust::prepare_dir(dir, (uid, gid))
            .with_context(|| format!("making {} nodens's own", dir.display()))?;
    }
    privileges::become_user(uid, gid, keep)
        .with_context(|| format!("switching to uid {uid}, gid {gid}"))?;
    for dir in &dirs {
        trust::make_private(dir).with_context(|| format!("making {} private", dir.display()))?;
    }
    tracing::info!(target: LOG_TARGET, uid, gid, "running as uid {uid}");
    Ok(())
}
