//! `nodens node status|teardown|guard`: the node setup (the interface and
//! the rules of `[node]`) seen and handled from outside a serving process.
//! `status` and `teardown` are here; `guard` runs until SIGTERM and has a
//! file of its own ([`super::guard`]).

use std::path::{Path, PathBuf};

use clap::Subcommand;

use nodens::config::{Config, File, NodeConfig};
use nodens::node;

use super::guard;
use super::report::{Failure, Outcome};

#[derive(Subcommand)]
pub(super) enum NodeAction {
    /// Print the interface, its addresses and the rules; exit 0 if all that
    /// the configuration asks for is in place, 1 if not.
    Status {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Remove the interface and nodens's rules from every backend found
    /// (after a crash, or a process stopped with --keep-rules).
    Teardown {
        /// Read the interface name from this configuration (default: nodelocaldns).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Watch the node setup from outside the server's container and withdraw
    /// it when no nodens is alive to serve it (fail-open when the whole
    /// container is killed); runs until SIGTERM.
    Guard {
        #[arg(short, long)]
        config: PathBuf,
    },
}

/// Runs the action on a single-threaded runtime (netlink and the rule
/// backends are async).
pub(super) fn run(action: NodeAction) -> Result<Outcome, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(format!("cannot start a runtime: {e}")))?;
    let outcome = match action {
        NodeAction::Status { config } => runtime.block_on(status(&config)),
        NodeAction::Teardown { config } => runtime.block_on(teardown(config.as_deref())),
        NodeAction::Guard { config } => runtime.block_on(guard::run(&config)),
    };
    Ok(outcome?)
}

/// What is in place against what the configuration asks for: `No` when
/// anything is missing, or when the configuration sets nothing up.
async fn status(path: &Path) -> anyhow::Result<Outcome> {
    let config = Config::load(path)?;
    let Some(plan) = &config.node else {
        println!(
            "node setup is off in {} ([node] setup = false)",
            path.display()
        );
        return Ok(Outcome::No);
    };
    let status = node::status(plan).await?;
    let link = &status.link;
    let addresses: Vec<String> = link.addresses.iter().map(|a| a.to_string()).collect();
    println!(
        "interface {}: {}{}{}",
        plan.interface,
        if link.exists { "present" } else { "absent" },
        if link.exists && !link.up {
            ", down"
        } else {
            ""
        },
        link.kind
            .as_deref()
            .map(|k| format!(" ({k})"))
            .unwrap_or_default(),
    );
    println!("addresses: {}", addresses.join(" "));
    for missing in &status.missing_addresses {
        println!("missing address: {missing}");
    }
    println!(
        "rules ({}): {}",
        status.backend,
        if status.rules_in_place {
            "in place"
        } else {
            "missing or changed"
        }
    );
    Ok(Outcome::answer(status.complete()))
}

/// Removes the interface and nodens's rules from every backend. Only the
/// interface name is read from the file, so a configuration that no longer
/// passes the whole check can still be cleaned up after.
async fn teardown(path: Option<&Path>) -> anyhow::Result<Outcome> {
    let interface = match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)?;
            File::parse(&text)
                .map_err(|mut e| {
                    e.file = Some(p.to_owned());
                    e
                })?
                .node
                .interface
        }
        None => NodeConfig::default().interface,
    };
    let removed = node::teardown_everything(&interface).await?;
    if removed.is_empty() {
        println!("nothing to remove");
    }
    for what in removed {
        println!("removed {what}");
    }
    Ok(Outcome::Done)
}
