//! The `nodens` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use nodens::config::{Config, File, NodeConfig};
use nodens::server::Server;
use nodens::{convert, cpus, limits, logging, node, privileges, stub};

/// mimalloc rather than glibc's malloc: with misses allocated and freed on
/// each UDP worker's thread among long-lived cache entries, glibc's
/// per-thread arenas fragmented (from 310 up to 2,500 bytes of RSS per cached
/// entry, depending on the allocation pattern); mimalloc holds ~330 bytes
/// whatever the pattern, so the cache's byte capacity bounds memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(version, about = "A node-local DNS cache for Kubernetes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DNS. Without --config, listens on 127.0.0.1:1053 and forwards
    /// everything to the nameservers of /etc/resolv.conf.
    Serve {
        /// The TOML configuration file (see docs/configuration.md).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Leave the node interface and rules in place on exit (for the
        /// process that takes over).
        #[arg(long)]
        keep_rules: bool,
        /// Set by the fail-open supervisor on the server it starts.
        #[arg(long, hide = true)]
        supervised: bool,
        /// Set by the fail-open supervisor: the pipe the server beats on
        /// while its serving loops make progress.
        #[arg(long, hide = true, value_name = "FD", requires = "supervised")]
        heartbeat_fd: Option<i32>,
    },
    /// The node setup ([node] in the configuration): what is in place, or remove it.
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// Check a configuration file and exit: 0 if valid, 1 with the line of the error if not.
    CheckConfig { file: PathBuf },
    /// Convert a NodeLocal DNSCache Corefile into a nodens configuration: the
    /// TOML on stdout (or -o), what has no translation on stderr with its line.
    /// Exit 0 when converted (with or without warnings), 1 on an error (nothing
    /// written), 2 with --strict when something was not translated.
    ConvertCorefile(ConvertArgs),
    /// Expand names (`NAME [TYPE]` per line) through a pod's resolv.conf into
    /// dnsperf input (`name TYPE`), in the order its resolver sends the
    /// queries: every search expansion, A and AAAA, each name taken to exist
    /// only as written.
    Querygen(QuerygenArgs),
    /// Name the DNS problems seen from here (a pod or a node): the resolver
    /// configuration's query cost, probes of its nameservers, the node's
    /// conntrack, rules and listeners. Findings ranked by severity, each with
    /// its evidence and fix. Exit 1 when a critical finding is present.
    Doctor(DoctorArgs),
    /// Resolve one name the way the pod's resolver would, printing every
    /// query, its answer code and latency. Exit 0 when the name resolved.
    Trace(TraceArgs),
}

#[derive(clap::Args)]
struct DoctorArgs {
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
    /// The nodens configuration of this node (its addresses, HTTP port and
    /// upstreams, for the node checks).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The node cache's address (default: the configuration's, else
    /// 169.254.20.10; repeatable).
    #[arg(long, value_name = "IP")]
    local_ip: Vec<std::net::IpAddr>,
    /// The kubelet's configuration (its clusterDNS).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/lib/kubelet/config.yaml"
    )]
    kubelet_config: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct TraceArgs {
    /// The name, as an application would give it to getaddrinfo.
    name: String,
    /// The resolv.conf whose search list, options and nameservers apply.
    #[arg(long, value_name = "FILE", default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Ask this server instead of resolv.conf's nameservers (IP or IP:PORT).
    #[arg(long, value_name = "ADDR")]
    server: Vec<String>,
    /// The client's resolver.
    #[arg(long, value_enum, default_value_t = stub::Stub::Glibc)]
    resolver: stub::Stub,
    /// getaddrinfo's family.
    #[arg(long, value_enum, default_value_t = stub::Family::Unspec)]
    family: stub::Family,
    /// Print the trace as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct QuerygenArgs {
    /// The names, one per line with an optional type; stdin when absent or `-`.
    names: Option<PathBuf>,
    /// The resolv.conf whose search list, ndots and options apply.
    #[arg(long, value_name = "FILE", default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// The client's resolver.
    #[arg(long, value_enum, default_value_t = stub::Stub::Glibc)]
    resolver: stub::Stub,
    /// getaddrinfo's family for lines without a type.
    #[arg(long, value_enum, default_value_t = stub::Family::Unspec)]
    family: stub::Family,
}

#[derive(clap::Args)]
struct ConvertArgs {
    /// The Corefile (`-` for stdin), e.g. the node-local-dns ConfigMap's.
    file: PathBuf,
    /// Write the configuration here instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The value of __PILLAR__LOCAL__DNS__ (the node-local address, e.g. 169.254.20.10).
    #[arg(long, value_name = "IP")]
    local_dns: Option<String>,
    /// The value of __PILLAR__DNS__SERVER__ (the kube-dns Service IP; "" in IPVS mode).
    #[arg(long, value_name = "IP")]
    dns_server: Option<String>,
    /// The value of __PILLAR__DNS__DOMAIN__ (e.g. cluster.local).
    #[arg(long, value_name = "DOMAIN")]
    domain: Option<String>,
    /// The Service __PILLAR__CLUSTER__DNS__ stands for (node-cache's -upstreamsvc).
    #[arg(long, value_name = "NAME", default_value = "kube-dns-upstream")]
    upstream_service: String,
    /// The resolv.conf __PILLAR__UPSTREAM__SERVERS__ stands for.
    #[arg(long, value_name = "PATH", default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Write [server] handover_socket = PATH (the Helm chart's upgrades hand
    /// over on /run/nodens/handover.sock).
    #[arg(long, value_name = "PATH")]
    handover_socket: Option<PathBuf>,
    /// Also write what the Helm chart's pods expect of a configOverride: the
    /// handover socket (/run/nodens/handover.sock), run_as_user = 65532 and
    /// the probe server on 127.0.0.1:9254.
    #[arg(long)]
    for_chart: bool,
    /// Exit 2 when something was not translated (the configuration is still written).
    #[arg(long)]
    strict: bool,
}

#[derive(Subcommand)]
enum NodeAction {
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

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(_) => {
                println!("{}: OK", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Serve {
            config,
            keep_rules,
            supervised,
            heartbeat_fd,
        } => serve(config, keep_rules, supervised, heartbeat_fd),
        Command::Node { action } => node_command(action),
        Command::ConvertCorefile(args) => convert_corefile(args),
        Command::Querygen(args) => querygen(args),
        Command::Doctor(args) => doctor(args),
        Command::Trace(args) => trace(args),
    }
}

fn doctor(args: DoctorArgs) -> ExitCode {
    use nodens::doctor;
    let config = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(config) => Some(config),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let (resolv, servers) = match resolv_and_servers(&args.resolv_conf, &args.server) {
        Ok(both) => both,
        Err(code) => return code,
    };
    let options = doctor::Options {
        resolv,
        names: args.name,
        probes: (!args.no_probes).then_some(doctor::probe::ProbeOptions {
            servers,
            tc_name: args.tc_name,
            tcp_max: args.tcp_max,
        }),
        node: (!args.no_node).then(|| doctor::node::NodeOptions {
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
    if report.has_critical() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The resolv.conf doctor and trace read, and the servers they ask (`--server`,
/// else its nameservers); exit 2 with the error printed when either is wrong.
fn resolv_and_servers(
    path: &std::path::Path,
    given: &[String],
) -> Result<
    (
        nodens::doctor::resolver::ResolvConf,
        Vec<std::net::SocketAddr>,
    ),
    ExitCode,
> {
    use nodens::doctor;
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("{e}");
        ExitCode::from(2)
    };
    let resolv = doctor::resolver::ResolvConf::read(path).map_err(|e| fail(&e))?;
    let servers = doctor::probe::servers(given, &resolv).map_err(|e| fail(&e))?;
    Ok((resolv, servers))
}

fn trace(args: TraceArgs) -> ExitCode {
    use nodens::doctor;
    let (resolv, servers) = match resolv_and_servers(&args.resolv_conf, &args.server) {
        Ok(both) => both,
        Err(code) => return code,
    };
    let trace = doctor::trace::run(&resolv, &servers, args.resolver, args.family, &args.name);
    if args.json {
        println!("{}", trace.to_json());
    } else {
        print!("{}", trace.to_text());
    }
    if trace.resolved() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn querygen(args: QuerygenArgs) -> ExitCode {
    use std::io::{Read, Write};
    let resolv_conf = match std::fs::read_to_string(&args.resolv_conf) {
        Ok(text) => stub::StubConfig::parse(&text),
        Err(e) => {
            eprintln!("{}: cannot read: {e}", args.resolv_conf.display());
            return ExitCode::FAILURE;
        }
    };
    let (source, read) = match args.names.as_ref().filter(|p| p.as_os_str() != "-") {
        Some(path) => (path.display().to_string(), std::fs::read_to_string(path)),
        None => {
            let mut text = String::new();
            let read = std::io::stdin().read_to_string(&mut text).map(|_| text);
            ("<stdin>".to_string(), read)
        }
    };
    let names = match read {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{source}: cannot read: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = stub::querygen::Options {
        stub: args.resolver,
        family: args.family,
        config: resolv_conf,
    };
    match stub::querygen::generate(&names, &source, &options) {
        Ok(lines) => match std::io::stdout().write_all(lines.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cannot write stdout: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn convert_corefile(args: ConvertArgs) -> ExitCode {
    use std::io::{Read, Write};
    let stdin = args.file.as_os_str() == "-";
    let name = if stdin {
        "<stdin>".to_string()
    } else {
        args.file.display().to_string()
    };
    let mut text = String::new();
    let read = if stdin {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(&args.file).map(|t| text = t)
    };
    if let Err(e) = read {
        eprintln!("{name}: cannot read: {e}");
        return ExitCode::FAILURE;
    }
    let options = convert::Options {
        local_dns: args.local_dns,
        dns_server: args.dns_server,
        domain: args.domain,
        upstream_service: args.upstream_service,
        resolv_conf: args.resolv_conf,
        handover_socket: args.handover_socket,
        for_chart: args.for_chart,
        source_name: name.clone(),
    };
    let conversion = match convert::convert(&text, &options, &|v| std::env::var(v).ok()) {
        Ok(c) => c,
        Err(e) => {
            match e.line {
                Some(line) => eprintln!("{name}:{line}: {}", e.message),
                None => eprintln!("{name}: {}", e.message),
            }
            return ExitCode::FAILURE;
        }
    };
    let written = match &args.output {
        Some(path) => std::fs::write(path, &conversion.toml),
        None => std::io::stdout().write_all(conversion.toml.as_bytes()),
    };
    if let Err(e) = written {
        let to = args
            .output
            .as_ref()
            .map_or("stdout".into(), |p| p.display().to_string());
        eprintln!("cannot write {to}: {e}");
        return ExitCode::FAILURE;
    }
    for (kind, findings) in [
        ("not translated", &conversion.untranslated),
        ("note", &conversion.notes),
    ] {
        for f in findings {
            let also = match &f.lines[1..] {
                [] => String::new(),
                [one] => format!(" (also line {one})"),
                more => format!(
                    " (also lines {})",
                    more.iter()
                        .map(|l| l.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            eprintln!("{name}:{}: {kind}: {}{also}", f.lines[0], f.message);
        }
    }
    if args.strict && !conversion.untranslated.is_empty() {
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

fn node_command(action: NodeAction) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match action {
        NodeAction::Status { config } => runtime.block_on(node_status(&config)),
        NodeAction::Teardown { config } => runtime.block_on(node_teardown(config.as_deref())),
        NodeAction::Guard { config } => runtime.block_on(node_guard(&config)),
    };
    result.unwrap_or_else(|e| {
        eprintln!("{e:#}");
        ExitCode::FAILURE
    })
}

async fn node_status(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let config = Config::load(path)?;
    let Some(plan) = &config.node else {
        println!(
            "node setup is off in {} ([node] setup = false)",
            path.display()
        );
        return Ok(ExitCode::FAILURE);
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
    Ok(if status.complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn node_guard(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let config = Config::load(path)?;
    let _log = logging::init(&config.log);
    let Some(plan) = &config.node else {
        anyhow::bail!(
            "node setup is off in {} ([node] setup = false): nothing to guard",
            path.display()
        );
    };
    run_as(&config, &privileges::for_guarding())?;
    Ok(node::guard::guard(plan).await)
}

async fn node_teardown(path: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
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
    Ok(ExitCode::SUCCESS)
}

/// Switches to `[server] run_as_user` (from root, before any thread
/// starts), keeping `keep`; first makes the directories of nodens's local
/// channels (the claim's, the handover socket's) private to that uid.
/// Nothing when unset, or when already that uid (a supervised server).
fn run_as(config: &Config, keep: &[caps::Capability]) -> anyhow::Result<()> {
    use anyhow::Context;
    let Some((uid, gid)) = config.server.run_as else {
        return Ok(());
    };
    if nodens::trust::own_uid() == uid {
        return Ok(());
    }
    let claim = config.node.as_ref().map(|n| n.state_dir.as_path());
    let handover = config
        .server
        .handover_socket
        .as_deref()
        .and_then(|p| p.parent());
    let dirs: Vec<&std::path::Path> = claim.into_iter().chain(handover).collect();
    for dir in &dirs {
        nodens::trust::prepare_dir(dir, (uid, gid))
            .with_context(|| format!("making {} nodens's own", dir.display()))?;
    }
    privileges::become_user(uid, gid, keep)
        .with_context(|| format!("switching to uid {uid}, gid {gid}"))?;
    for dir in &dirs {
        nodens::trust::make_private(dir)
            .with_context(|| format!("making {} private", dir.display()))?;
    }
    tracing::info!(uid, gid, "running as uid {uid}");
    Ok(())
}

fn serve(
    path: Option<PathBuf>,
    keep_rules: bool,
    supervised: bool,
    heartbeat_fd: Option<i32>,
) -> ExitCode {
    // First, before any program is started: the pipe is made close-on-exec.
    let heartbeat = match heartbeat_fd.map(nodens::liveness::Heartbeat::adopt) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let config = match &path {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        },
        None => match Config::defaults() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("built-in defaults: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let log = logging::init(&config.log);
    let keep = privileges::for_serving(config.node.is_some());
    if let Err(e) = run_as(&config, &keep) {
        tracing::error!("{e:#}");
        return ExitCode::FAILURE;
    }
    if let Some(path) = &path
        && !supervised
        && config.node.as_ref().is_some_and(|n| n.fail_open)
    {
        return match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(node::supervisor::supervise(&config, path, keep_rules)),
            Err(e) => {
                tracing::error!("cannot start the supervisor's runtime: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Err(e) = limits::disable_transparent_huge_pages() {
        tracing::warn!("cannot opt out of transparent huge pages: {e}");
    }
    match limits::raise_open_files() {
        Ok(n) => tracing::debug!(open_files = n, "open-files limit"),
        Err(e) => tracing::warn!("cannot raise the open-files limit: {e}"),
    }
    privileges::forbid_new_privileges();
    let (workers, source) = cpus::workers(config.workers);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        workers,
        "starting nodens: workers={workers} ({source})"
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("nodens")
        .on_thread_start(privileges::drop_all_in_this_thread)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let node_setup = config.node.is_some();
        // The supervisor judges the server from its first beat on: from
        // before it sets anything up.
        if let Some(heartbeat) = heartbeat {
            heartbeat.start(&tokio::runtime::Handle::current())?;
        }
        let server = Server::start(config, path, workers, log, keep_rules).await?;
        privileges::keep_only_in_this_thread(node_setup);
        server.run().await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
