//! The guard: fail-open from outside the server's container.
//!
//! The supervisor (`supervisor.rs`) shares the server's container, so an OOM
//! kill of the whole container (cgroup v2 `memory.oom.group`, set by the
//! kubelet since Kubernetes 1.28) takes it too, and the interface and rules
//! stay behind with nothing listening. `nodens node guard`, run as a second
//! container of the same pod (its own memory cgroup, the same host network),
//! probes the server as the supervisor does and withdraws the node setup
//! when a server it has seen answering stops answering.
//!
//! It only acts on a server it has seen: it arms once the interface exists
//! and the probe is answered, and disarms when the interface goes away or is
//! made again (a clean stop removed it, or a new server set it up). So it
//! never removes the setup of a server that is starting, and it never
//! touches anything on its own exit.

use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};

use super::link;
use super::probe::{MISSES, PROBE_EVERY, answers};
use super::supervisor::withdraw;
use crate::config::NodePlan;

/// The index of the interface, if it exists.
async fn interface_index(plan: &NodePlan) -> Option<u32> {
    let name = &plan.interface;
    match link::with_netlink(|handle| async move { link::state(&handle, name).await }).await {
        Ok(state) if state.exists => Some(state.index),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!("guard: cannot read the interface {name}: {e}");
            None
        }
    }
}

/// Watches the server of `plan` until SIGTERM or SIGINT (see the module docs).
pub async fn guard(plan: &NodePlan) -> ExitCode {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("guard: cannot handle signals");
        return ExitCode::FAILURE;
    };
    let target = plan.addresses[0];
    tracing::info!(%target, interface = %plan.interface, "guard: waiting for a server to watch");
    let mut ticks = tokio::time::interval(PROBE_EVERY);
    // The interface index of the server being watched.
    let mut watching: Option<u32> = None;
    let mut misses = 0;
    loop {
        tokio::select! {
            _ = term.recv() => return ExitCode::SUCCESS,
            _ = int.recv() => return ExitCode::SUCCESS,
            _ = ticks.tick() => {
                let index = interface_index(plan).await;
                let ok = tokio::task::spawn_blocking(move || answers(target)).await.unwrap_or(false);
                match watching {
                    None if ok && index.is_some() => {
                        watching = index;
                        misses = 0;
                        tracing::info!(%target, "guard: watching the server");
                    }
                    None => {}
                    // Checked before the probe's answer: without the
                    // interface, the answer may come from the cluster DNS.
                    Some(watched) if index != Some(watched) => {
                        tracing::info!("guard: the interface was removed or made again; waiting for a server");
                        watching = None;
                    }
                    Some(_) if ok => misses = 0,
                    Some(_) => {
                        misses += 1;
                        if misses >= MISSES {
                            tracing::error!(%target, misses, "guard: the server stopped answering");
                            withdraw(plan).await;
                            watching = None;
                        }
                    }
                }
            }
        }
    }
}
