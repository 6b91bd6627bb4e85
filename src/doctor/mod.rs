//! `nodens doctor` and `nodens trace`: name a cluster's DNS problems from
//! where a pod or a node stands. Not on the request path.
//!
//! Every check returns [`Finding`]s: what is wrong, the numbers that show
//! it, and the fix. A check that cannot run (a file not readable, a tool
//! missing) says so as an [`Severity::Info`] note instead of guessing, so
//! that a healthy setup gives no warning and a finding never comes
//! without its evidence.

pub(crate) mod finding;
pub(crate) mod node;
pub(crate) mod probe;
pub(crate) mod resolver;
pub(crate) mod status;
pub(crate) mod trace;
pub(crate) mod workloads;

pub use finding::{Finding, Report, Severity};
pub use node::{NodeOptions, split_words};
pub use probe::{ProbeOptions, servers};
pub use resolver::ResolvConf;
pub use trace::run as trace;

pub(crate) mod client;

/// What `nodens doctor` runs.
pub struct Options {
    pub resolv: ResolvConf,
    /// External names whose query cost is shown.
    pub names: Vec<String>,
    /// `None`: no query is sent.
    pub probes: Option<probe::ProbeOptions>,
    /// `None`: the node is not looked at.
    pub node: Option<node::NodeOptions>,
    /// A running nodens's control socket: its workload counts (`None`:
    /// not read).
    pub control_socket: Option<ControlSocket>,
}

/// Where doctor reads a running nodens's workload counts.
pub struct ControlSocket {
    pub path: std::path::PathBuf,
    /// Named by the user (a flag, the configuration): a socket that cannot
    /// be read is a finding. Not named (the chart's default path), a socket
    /// file nobody listens on is one a killed nodens left: no nodens to
    /// report on, and nothing to say.
    pub named: bool,
}

/// Runs the checks asked for and ranks the findings.
pub fn run(options: Options) -> Report {
    let mut report = Report::default();
    let (lines, findings) = resolver::analyse(&options.resolv, &options.names);
    report.section("Resolver configuration", lines);
    report.add(findings);
    if let Some(probes) = &options.probes {
        let samples = resolver::samples(&options.resolv, &options.names);
        let probed = probe::run(probes, &options.resolv, &samples);
        report.section("Probes", probed.lines);
        report.add(probed.findings);
        if probed.autopath {
            resolver::paid_by_autopath(&mut report.findings);
        }
    }
    if let Some(node) = &options.node {
        let (lines, findings) = node::check(node);
        report.section("Node", lines);
        report.add(findings);
    }
    // Last: run as root, reading the socket makes this process nodens's uid.
    if let Some(socket) = &options.control_socket
        && let Some((lines, findings)) = workloads::check(socket)
    {
        report.section("Workloads (nodens's counts)", lines);
        report.add(findings);
    }
    if let Some(socket) = &options.control_socket
        && let Some((lines, findings)) = status::check(socket)
    {
        report.section("nodens's status", lines);
        report.add(findings);
    }
    report.rank();
    report
}
