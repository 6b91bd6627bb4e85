//! Structured logs on stderr, text or JSON, with a level that SIGHUP can
//! change; their section (`[log]`).

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

use std::time::Duration;

use serde::Deserialize;

use crate::vocab::LogFilter;

/// Changes the log filter of the running process.
pub struct LogHandle(reload::Handle<EnvFilter, Registry>);

impl LogHandle {
    pub fn set_level(&self, level: &LogFilter) -> Result<(), reload::Error> {
        self.0.reload(level.filter())
    }
}

/// Installs the global subscriber. `RUST_LOG`, when set, wins over the file.
pub fn init(config: &LogSettings) -> LogHandle {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| config.level.filter());
    let (filter, handle) = reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    match config.format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(false),
            )
            .init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .init(),
    }
    LogHandle(handle)
}

/// `[log]`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing filter: "info", "debug", "nodens=debug,warn", ...
    pub level: LogFilter,
    pub format: LogFormat,
    /// At most one log line per upstream per this interval for upstream errors;
    /// the rest are counted and the count is logged with the next line.
    #[serde(with = "humantime_serde")]
    pub upstream_error_interval: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".parse().expect("a valid filter"),
            format: LogFormat::Text,
            upstream_error_interval: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

/// The logs asked for.
#[derive(Debug, Clone)]
pub struct LogSettings {
    pub level: LogFilter,
    pub format: LogFormat,
}
