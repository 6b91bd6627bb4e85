//! The guard: fail-open from outside the server's container.
//!
//! The supervisor (`supervisor.rs`) shares the server's container, so an OOM
//! kill of the whole container (cgroup v2 `memory.oom.group`, set by the
//! kubelet since Kubernetes 1.28) takes it too, and the interface and rules
//! stay behind with nothing listening. `nodens node guard`, run as a second
//! container of the same pod (its own memory cgroup, the same host network),
//! withdraws the node setup when it is in place but no nodens is alive to
//! serve it.
//!
//! "Alive" is the server's claim on the node setup (`presence.rs`), which the
//! kernel drops the instant the process dies: no probe timeout, and a server
//! that is starting (it claims before it sets anything up) is never taken for
//! a dead one. The withdraw also asks the probe, for the moment of a handover
//! when the new process serves but has not yet claimed. A hung server is
//! still alive: that is the supervisor's case (it kills it). A claim whose
//! holder nothing answers for is overruled after a while (see `withdraw`):
//! whatever holds it then is not serving the pods.

use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};

use super::config::NodePlan;
use super::link;
use super::presence::Presence;
use super::probe::{PROBE_EVERY, answers};

/// Probes in a row that a holder of the claim may leave unanswered before
/// the guard asks for a withdraw (which then gives the holder
/// `HOLDER_SILENCE` more to answer).
const SILENT_PROBES: u32 = 4;

/// Whether the interface exists.
async fn interface_exists(plan: &NodePlan) -> bool {
    let name = &plan.interface;
    match link::with_netlink(|handle| async move { link::state(&handle, name).await }).await {
        Ok(state) => state.exists,
        Err(e) => {
            tracing::warn!("guard: cannot read the interface {name}: {e}");
            false
        }
    }
}

/// Whether the node setup is in place with no nodens serving it: nobody
/// holds the claim, or its holder has not answered for `silent` probes in a
/// row (the withdraw then waits out [`super::presence::HOLDER_SILENCE`]
/// before it overrules a holder, so an overload that loses some probes
/// does not withdraw a serving nodens).
async fn abandoned(plan: &NodePlan, silent: &mut u32) -> bool {
    if !interface_exists(plan).await {
        *silent = 0;
        return false;
    }
    match Presence::held(&plan.state_dir, &plan.interface) {
        Ok(false) => return true,
        Ok(true) => {}
        Err(e) => {
            tracing::warn!("guard: cannot tell whether a server holds the node setup: {e}");
            return false;
        }
    }
    let target = plan.addresses[0];
    if tokio::task::spawn_blocking(move || answers(target))
        .await
        .unwrap_or(false)
    {
        *silent = 0;
        return false;
    }
    *silent += 1;
    *silent >= SILENT_PROBES
}

/// Watches the node setup of `plan` until SIGTERM or SIGINT (see the module
/// docs). It changes nothing on its way out.
pub async fn guard(plan: &NodePlan) -> ExitCode {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("guard: cannot handle signals");
        return ExitCode::FAILURE;
    };
    tracing::info!(interface = %plan.interface, "guard: watching the node setup");
    let mut ticks = tokio::time::interval(PROBE_EVERY);
    let mut silent = 0;
    loop {
        tokio::select! {
            _ = term.recv() => return ExitCode::SUCCESS,
            _ = int.recv() => return ExitCode::SUCCESS,
            _ = ticks.tick() => {
                if abandoned(plan, &mut silent).await {
                    tracing::error!(interface = %plan.interface, "guard: the node setup is in place but no nodens serves it");
                    super::withdraw(plan, "guard").await;
                    silent = 0;
                }
            }
        }
    }
}
