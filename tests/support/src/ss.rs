//! `ss`: the sockets a server has, as the kernel sees them.

use std::net::SocketAddr;

use super::tools::{tool, wrapped_command};

/// One TCP connection as `ss -tn` shows it.
#[derive(Clone, Debug)]
pub struct SsConn {
    /// Bytes received and not yet read by the owning process.
    pub recv_q: u64,
    pub send_q: u64,
    pub local: String,
    pub peer: String,
}

/// The ESTABLISHED TCP connections whose local end is `local` (for a server,
/// the connections it has accepted), from `ss -Htn state established src
/// LOCAL`. `wrapper` runs ss elsewhere (`ip netns exec NAME`).
pub fn ss_established_via(wrapper: &[&str], local: SocketAddr) -> Vec<SsConn> {
    ss(
        wrapper,
        &["-Htn", "state", "established", "src", &local.to_string()],
    )
    .lines()
    .filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4).then(|| SsConn {
            recv_q: f[0].parse().unwrap_or(0),
            send_q: f[1].parse().unwrap_or(0),
            local: f[2].to_string(),
            peer: f[3].to_string(),
        })
    })
    .collect()
}

/// [`ss_established_via`] in this network namespace.
pub fn ss_established(local: SocketAddr) -> Vec<SsConn> {
    ss_established_via(&[], local)
}

/// How many UDP sockets in this network namespace are connected to `peer`
/// (`ss -Hun dst PEER`): a forwarder's sockets towards its upstream, which
/// itself listens unconnected.
pub fn udp_connected_to(peer: SocketAddr) -> usize {
    ss(&[], &["-Hun", "dst", &peer.to_string()]).lines().count()
}

/// What `ss ARGS` prints, run through `wrapper`; the test fails if it fails.
fn ss(wrapper: &[&str], args: &[&str]) -> String {
    let ss = tool("ss");
    let mut cmd = wrapped_command(wrapper, &ss);
    cmd.args(args);
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
