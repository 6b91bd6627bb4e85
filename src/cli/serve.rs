//! `nodens serve`: load the configuration, set up logging, drop to
//! `run_as_user`, then either become the fail-open supervisor
//! ([`super::supervise`]) or prepare the process (limits, privileges, the
//! worker count) and run the server on its multi-threaded runtime. Errors
//! before logging is up go to stderr; after, through the log.

use std::path::PathBuf;

use nodens::config::Config;
use nodens::liveness::Heartbeat;
use nodens::server::Server;
use nodens::{cpus, limits, logging, privileges};

use super::LOG_TARGET;
use super::report::{Failure, Outcome};
use super::run_as::run_as;
use super::supervise;

#[derive(clap::Args)]
pub(super) struct ServeArgs {
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
}

pub(super) fn run(args: ServeArgs) -> Result<Outcome, Failure> {
    let ServeArgs {
        config: path,
        keep_rules,
        supervised,
        heartbeat_fd,
    } = args;
    // Every panic is counted and shows in /health and the metrics.
    nodens::liveness::health::count_panics();
    // First, before any program is started: the pipe is made close-on-exec.
    let heartbeat = heartbeat_fd
        .map(Heartbeat::adopt)
        .transpose()
        .map_err(Failure::new)?;
    let config = match &path {
        Some(p) => Config::load_to_start(p).map_err(Failure::new)?,
        None => Config::defaults().map_err(|e| Failure::new(format!("built-in defaults: {e}")))?,
    };
    let log = logging::init(&config.log);
    let keep = privileges::for_serving(config.node.is_some());
    // The cache file's directory: the server's alone (the guard mounts none).
    let cache_dir = config.cache.snapshot.as_ref().and_then(|s| s.file.parent());
    run_as(&config, &keep, cache_dir).map_err(|e| Failure::from(e).logged())?;
    if let Some(path) = &path
        && !supervised
        && config.node.as_ref().is_some_and(|n| n.fail_open)
    {
        return supervise::run(&config, path, keep_rules);
    }
    if let Err(e) = limits::disable_transparent_huge_pages() {
        tracing::warn!(target: LOG_TARGET, "cannot opt out of transparent huge pages: {e}");
    }
    match limits::raise_open_files() {
        Ok(n) => tracing::debug!(target: LOG_TARGET, open_files = n, "open-files limit"),
        Err(e) => tracing::warn!(target: LOG_TARGET, "cannot raise the open-files limit: {e}"),
    }
    privileges::forbid_new_privileges();
    let (workers, source) = cpus::workers(config.workers);
    tracing::info!(
        target: LOG_TARGET,
        version = env!("CARGO_PKG_VERSION"),
        workers,
        "starting nodens: workers={workers} ({source})"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("nodens")
        .on_thread_start(privileges::drop_all_in_this_thread)
        .enable_all()
        .build()
        .map_err(|e| Failure::new(format!("cannot start the runtime: {e}")).logged())?;
    runtime
        .block_on(async {
            let node_setup = config.node.is_some();
            // The supervisor judges the server from its first beat on: from
            // before it sets anything up.
            if let Some(heartbeat) = heartbeat {
                heartbeat.start(&tokio::runtime::Handle::current())?;
            }
            let server = Server::start(config, path, workers, log, keep_rules).await?;
            privileges::keep_only_in_this_thread(node_setup);
            server.run().await
        })
        .map_err(|e| Failure::from(e).logged())?;
    Ok(Outcome::Done)
}
