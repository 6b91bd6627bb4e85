//! Fail-open: with node setup on, `nodens serve` runs the server as a child
//! process and watches it. When the server dies (SIGKILL, an OOM kill, a
//! crash) or stops answering its own probe, the supervisor removes the
//! interface and the rules at once: queries the pods send to the cluster
//! DNS Service IP then meet kube-proxy's DNAT again and are answered by the
//! cluster DNS, instead of hitting a closed port until the server is back.
//! Then it exits with the server's status, and the kubelet restarts the pod,
//! whose new server takes the traffic back.
//!
//! The supervisor is small and long-lived, holds no sockets, and keeps the
//! capabilities to remove what the server set up. When the OOM killer takes
//! the whole container (cgroup v2 `memory.oom.group`, which the kubelet sets
//! since Kubernetes 1.28), the supervisor dies with the server: the guard
//! (`guard.rs`), run in a container of its own, covers that case.

use std::path::Path;
use std::process::ExitCode;

use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use super::probe::{MISSES, PROBE_EVERY, answers};
use crate::config::Config;

/// Runs `nodens serve --supervised` as a child and watches it (see the
/// module docs). Returns the server's exit code.
pub async fn supervise(config: &Config, path: &Path, keep_rules: bool) -> ExitCode {
    let plan = config
        .node
        .clone()
        .expect("supervised only with node setup");
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("supervisor: cannot find its own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = Command::new(exe);
    command
        .arg("serve")
        .arg("--config")
        .arg(path)
        .arg("--supervised");
    if keep_rules {
        command.arg("--keep-rules");
    }
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches only
    // the child's own state between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("supervisor: cannot start the server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let pid = child.id().unwrap_or(0) as libc::pid_t;
    tracing::info!(
        pid,
        "supervisor: server started; it is withdrawn if it dies or hangs"
    );
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("supervisor: cannot handle signals");
        return ExitCode::FAILURE;
    };
    let target = plan.addresses[0];
    let mut probes = tokio::time::interval(PROBE_EVERY);
    // Probing starts once the server has answered (it is starting until then).
    let mut armed = false;
    let mut stopping = false;
    let mut misses = 0;
    let forward = |sig| {
        // SAFETY: kill(2) with the child's pid and a signal number.
        unsafe { libc::kill(pid, sig) };
    };
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = match status {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!("supervisor: lost the server: {e}");
                        super::withdraw(&plan, "supervisor").await;
                        return ExitCode::FAILURE;
                    }
                };
                if status.success() {
                    return ExitCode::SUCCESS;
                }
                tracing::error!(%status, "supervisor: server died");
                super::withdraw(&plan, "supervisor").await;
                let code = status.code().unwrap_or(1).clamp(1, 255);
                return ExitCode::from(code as u8);
            }
            _ = term.recv() => { stopping = true; forward(libc::SIGTERM) }
            _ = int.recv() => { stopping = true; forward(libc::SIGINT) }
            _ = hup.recv() => forward(libc::SIGHUP),
            _ = probes.tick(), if !stopping => {
                let ok = tokio::task::spawn_blocking(move || answers(target)).await.unwrap_or(false);
                if ok {
                    armed = true;
                    misses = 0;
                } else if armed {
                    misses += 1;
                    if misses >= MISSES {
                        // Its death releases its claim on the node setup;
                        // the withdraw follows in the wait arm above.
                        tracing::error!(%target, misses, "supervisor: server stopped answering; killing it");
                        forward(libc::SIGKILL);
                        stopping = true;
                    }
                }
            }
        }
    }
}
