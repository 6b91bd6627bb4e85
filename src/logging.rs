//! Structured logs on stderr, text or JSON, with a level that SIGHUP can change.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

use crate::config::{LogFilter, LogFormat, LogSettings};

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
