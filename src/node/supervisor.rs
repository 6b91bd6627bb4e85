//! Fail-open: with node setup on, `nodens serve` runs the server as a child
//! process and watches it. When the server dies (SIGKILL, an OOM kill, a
//! crash) or stops making progress, the supervisor removes the interface
//! and the rules at once: queries the pods send to the cluster DNS Service
//! IP then meet kube-proxy's DNAT again and are answered by the cluster DNS,
//! instead of hitting a closed port until the server is back. Then it exits
//! with the server's status, and the kubelet restarts the pod, whose new
//! server takes the traffic back.
//!
//! "Stops making progress" is judged by the server's heartbeat
//! (`liveness.rs`), on a pipe the supervisor makes and only the server
//! holds: a beat every 250 ms while each of its serving loops turns. No
//! client can fill that pipe, so a flood that fills the client sockets
//! leaves the beats alone; a server overloaded by clients is not killed
//! (a kill would withdraw the node setup, lose the cache and send every pod
//! to the cluster DNS at once). A second without a beat, once the first
//! has come, is a hang: a stopped process, or a serving loop blocked for
//! good (the server names it, and the kill's log line says which).
//!
//! The supervisor is small and long-lived and holds no sockets. Once the
//! server runs, it keeps only the capabilities its withdraw and its signals
//! need. When the OOM killer takes the whole container (cgroup v2
//! `memory.oom.group`, which the kubelet sets since Kubernetes 1.28), the
//! supervisor dies with the server: the guard (`guard.rs`), run in a
//! container of its own, covers that case.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use caps::Capability;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use super::config::NodePlan;
use crate::liveness::{Report, Reports};

/// How long without a beat, once the first one has come, makes a hang: four
/// of the server's looks at its loops (`liveness::CHECK_EVERY`).
const SILENCE: Duration = Duration::from_secs(1);

/// What the supervisor keeps once the server runs: `CAP_NET_ADMIN` and
/// `CAP_NET_RAW` for the withdraw (netlink, `nft`, `iptables`). Not
/// `CAP_KILL`: the server it signals runs as its own uid (both switch to
/// `run_as_user`, or both stay root), which kill(2) allows without it.
const KEEP: [Capability; 2] = [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW];

/// What the `nft` and `iptables` of a withdraw get: handed on through the
/// ambient set when the supervisor runs as a uid of its own
/// (`server.run_as_user`), where nothing else crosses `execve`.
const FOR_PROGRAMS: [Capability; 2] = [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW];

/// One process to signal, by a positive pid. kill(2) reads 0 as "my process
/// group", -1 as "every process I may signal" and other negative numbers as
/// process groups; none of them can be made into a `Pid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pid(libc::pid_t);

impl Pid {
    /// The process `id` (as `Child::id` gives it), if it names one process.
    fn new(id: u32) -> Option<Pid> {
        libc::pid_t::try_from(id).ok().filter(|&p| p > 0).map(Pid)
    }

    fn signal(self, sig: libc::c_int) -> io::Result<()> {
        // SAFETY: kill(2) with a positive pid (see `new`) and a signal number.
        if unsafe { libc::kill(self.0, sig) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// The heartbeat pipe, both ends close-on-exec: the read end for the
/// supervisor, the write end for the server (it is made inheritable in the
/// child only, between fork and exec).
fn heartbeat_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What the server's heartbeat said.
#[derive(Default)]
struct Heard {
    reports: Reports,
    /// When the last beat came; `None` until the first.
    last_beat: Option<Instant>,
    /// The loops the server named as stalled since that beat.
    stalled: Option<String>,
}

impl Heard {
    fn feed(&mut self, bytes: &[u8]) {
        for report in self.reports.feed(bytes) {
            match report {
                Report::Beat => {
                    self.last_beat = Some(Instant::now());
                    self.stalled = None;
                }
                Report::Stalled(names) => self.stalled = Some(names),
                Report::Unknown => {}
            }
        }
    }
}

/// Runs `nodens serve --supervised` as a child and watches it (see the
/// module docs). Returns the server's exit code.
/// `plan`: the node setup of the configuration at `path`.
pub async fn supervise(plan: &NodePlan, path: &Path, keep_rules: bool) -> ExitCode {
    let plan = plan.clone();
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("supervisor: cannot find its own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (beats, beat_writer) = match heartbeat_pipe() {
        Ok(ends) => ends,
        Err(e) => {
            tracing::error!("supervisor: cannot make the heartbeat pipe: {e}");
            return ExitCode::FAILURE;
        }
    };
    let writer_fd = beat_writer.as_raw_fd();
    let mut command = Command::new(exe);
    command
        .arg("serve")
        .arg("--config")
        .arg(path)
        .arg("--supervised")
        .arg("--heartbeat-fd")
        .arg(writer_fd.to_string());
    if keep_rules {
        command.arg("--keep-rules");
    }
    // SAFETY: prctl(PR_SET_PDEATHSIG) and fcntl are async-signal-safe and
    // touch only the child's own state between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                || libc::fcntl(writer_fd, libc::F_SETFD, 0) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = command.spawn();
    // Only the server holds the write end now: its exit closes the pipe.
    drop(beat_writer);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("supervisor: cannot start the server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(pid) = child.id().and_then(Pid::new) else {
        tracing::error!("supervisor: the server has no process id to watch");
        let _ = child.start_kill();
        return ExitCode::FAILURE;
    };
    // The server is started with the capabilities it needs; from here the
    // supervisor needs only its withdraw's and its signals'.
    crate::privileges::forbid_new_privileges();
    crate::privileges::keep_only_these_in_this_thread(&KEEP, &FOR_PROGRAMS);
    tracing::info!(
        pid = pid.0,
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
    let mut beats = match pipe::Receiver::from_owned_fd(beats) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("supervisor: cannot read the heartbeat pipe: {e}");
            let _ = pid.signal(libc::SIGKILL);
            return ExitCode::FAILURE;
        }
    };
    let mut heard = Heard::default();
    let mut buf = [0u8; 1024];
    // Until the server closes its end (it exits, and the wait arm follows).
    let mut reading = true;
    let silence = tokio::time::sleep(SILENCE);
    tokio::pin!(silence);
    let mut stopping = false;
    let forward = |sig| {
        if let Err(e) = pid.signal(sig) {
            tracing::warn!("supervisor: cannot signal the server: {e}");
        }
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
            read = beats.read(&mut buf), if reading => match read {
                Ok(0) | Err(_) => reading = false,
                Ok(n) => {
                    heard.feed(&buf[..n]);
                    if let Some(last) = heard.last_beat {
                        silence.as_mut().reset(last + SILENCE);
                    }
                }
            },
            _ = &mut silence, if heard.last_beat.is_some() && !stopping => {
                // A beat may have come while this process waited for the CPU.
                while let Ok(n @ 1..) = beats.try_read(&mut buf) {
                    heard.feed(&buf[..n]);
                }
                let last = heard.last_beat.unwrap_or_else(Instant::now);
                if last.elapsed() < SILENCE {
                    silence.as_mut().reset(last + SILENCE);
                    continue;
                }
                // Its death releases its claim on the node setup; the
                // withdraw follows in the wait arm above.
                let stalled = heard
                    .stalled
                    .as_deref()
                    .unwrap_or("none named: the whole process stopped");
                tracing::error!(
                    silent_for = ?last.elapsed(),
                    stalled,
                    "supervisor: server made no progress; killing it"
                );
                forward(libc::SIGKILL);
                stopping = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_pid_names_a_process_group_or_every_process() {
        // 0 is kill(2)'s own process group, -1 every process, -n group n.
        assert_eq!(Pid::new(0), None);
        assert_eq!(Pid::new(u32::MAX), None, "-1 as a pid_t");
        assert_eq!(Pid::new(1 << 31), None, "negative as a pid_t");
        assert_eq!(Pid::new(i32::MAX as u32), Some(Pid(i32::MAX)));
        assert_eq!(Pid::new(1), Some(Pid(1)));
    }

    #[test]
    fn a_pid_signals_its_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = Pid::new(child.id()).unwrap();
        pid.signal(libc::SIGKILL).unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn a_stall_is_remembered_until_the_next_beat() {
        let mut heard = Heard::default();
        heard.feed(b"beat\nstalled udp 10.96.0.10:53 #1\n");
        assert!(heard.last_beat.is_some());
        assert_eq!(heard.stalled.as_deref(), Some("udp 10.96.0.10:53 #1"));
        heard.feed(b"beat\n");
        assert_eq!(heard.stalled, None);
    }
}
