//! `nodens doctor`: the DNS problems seen from here (a pod or a node),
//! ranked by severity. Exit 0, 1 when a critical finding is present, 2 when
//! it cannot start on what it was given. The checks are the library's
//! (`nodens::doctor`); this file turns flags into its options.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use nodens::config::Config;
use nodens::doctor;

use super::report::{Failure, Outcome};

#[derive(clap::Args)]
pub(super) struct DoctorArgs {
    /// The resolv.conf whose search list, options and nameservers apply.
    #[arg(long, value_name = "FILE", default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Probe this server instead of resolv.conf's nameservers (IP or
    /// IP:PORT; repeatable).
    #[arg(long, value_name = "ADDR")]
    server: Vec<String>,
    /// External names whose query cost is shown (default: example.com).
    #[arg(long, value_name = "NAME")]
    name: Vec<String>,
    /// A name whose answer is larger than 512 bytes, to check truncation
    /// (TC) and the fallback to TCP.
    #[arg(long, value_name = "NAME")]
    tc_name: Option<String>,
    /// Most TCP connections the concurrency ramp holds open at once.
    #[arg(long, value_name = "N", default_value_t = 40)]
    tcp_max: usize,
    /// Skip the live probes (no query is sent).
    #[arg(long)]
    no_probes: bool,
    /// Skip the node checks.
    #[arg(long)]
    no_node: bool,
    /// Skip the workloads of a running nodens (its control socket).
    #[arg(long, conflicts_with = "control_socket")]
    no_workloads: bool,
    /// The nodens configuration of this node (its addresses, HTTP port and
    /// upstreams, for the node checks).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The node cache's address (default: the configuration's, else
    /// 169.254.20.10; repeatable).
    #[arg(long, value_name = "IP")]
    local_ip: Vec<IpAddr>,
    /// The kubelet's configuration (its clusterDNS).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/lib/kubelet/config.yaml"
    )]
    kubelet_config: PathBuf,
    /// A running nodens's control socket, to name the workloads behind the
    /// findings (default: the configuration's `control_socket`, else
    /// /run/nodens/control.sock when a nodens answers there).
    #[arg(long, value_name = "PATH")]
    control_socket: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(args: DoctorArgs) -> Result<Outcome, Failure> {
    let config = match &args.config {
        Some(path) => Some(Config::load(path).map_err(Failure::unusable)?),
        None => None,
    };
    let (resolv, servers) = resolv_and_servers(&args.resolv_conf, &args.server)?;
    let named = args.control_socket.clone().or_else(|| {
        config
            .as_ref()
            .and_then(|c| c.server.control_socket.clone())
    });
    let control_socket = match (args.no_workloads, named) {
        (true, _) => None,
        (false, Some(path)) => Some(doctor::ControlSocket { path, named: true }),
        (false, None) => Some(doctor::ControlSocket {
            path: PathBuf::from(super::cache::DEFAULT_SOCKET),
            named: false,
        }),
    };
    let options = doctor::Options {
        control_socket,
        resolv,
        names: args.name,
        probes: (!args.no_probes).then_some(doctor::ProbeOptions {
            servers,
            tc_name: args.tc_name,
            tcp_max: args.tcp_max,
        }),
        node: (!args.no_node).then(|| doctor::NodeOptions {
            local_ips: args.local_ip,
            config,
            kubelet_config: args.kubelet_config,
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            node_resolv_conf: PathBuf::from("/etc/resolv.conf"),
        }),
    };
    let report = doctor::run(options);
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    Ok(Outcome::answer(!report.has_critical()))
}

/// The resolv.conf doctor and trace read, and the servers they ask
/// (`--server`, else its nameservers); unusable (exit 2) when either is
/// wrong.
pub(super) fn resolv_and_servers(
    path: &Path,
    given: &[String],
) -> Result<(doctor::ResolvConf, Vec<SocketAddr>), Failure> {
    let resolv = doctor::ResolvConf::read(path).map_err(Failure::unusable)?;
    let servers = doctor::servers(given, &resolv).map_err(Failure::unusable)?;
    Ok((resolv, servers))
}
