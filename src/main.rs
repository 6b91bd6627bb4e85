//! The `nodens` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use nodens::config::Config;
use nodens::server::Server;
use nodens::{cpus, limits, logging, privileges};

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
    },
    /// Check a configuration file and exit: 0 if valid, 1 with the line of the error if not.
    CheckConfig { file: PathBuf },
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
        Command::Serve { config } => serve(config),
    }
}

fn serve(path: Option<PathBuf>) -> ExitCode {
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
        let server = Server::start(config, path, workers, log).await?;
        privileges::keep_only_bind_in_this_thread();
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
