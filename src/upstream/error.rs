//! Why one exchange with one upstream failed, and what that means for the
//! query (try another upstream, confirm over TCP).

use thiserror::Error;

/// Why one exchange with one upstream failed.
#[derive(Debug, Error)]
pub(crate) enum ExchangeError {
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("malformed response")]
    Malformed,
    #[error("connection closed before the answer")]
    Closed,
    #[error("answer to another question")]
    Mismatch,
    #[error("answer with the question in another letter case (0x20)")]
    CaseMismatch,
    #[error("a flood of answers that were not ours: spoofing suspected")]
    SpoofSuspected,
    #[error("an error answer without a question, which 0x20 cannot verify")]
    Unverifiable,
    #[error("TCP wait queue full")]
    QueueFull,
    #[error("waited too long in the TCP queue")]
    QueueTimeout,
}

impl ExchangeError {
    /// The `error` label of nodens_upstream_errors_total.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            ExchangeError::Timeout => "timeout",
            ExchangeError::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "refused",
            ExchangeError::Io(e) if super::tls::is_tls_error(e) => "tls",
            ExchangeError::Io(_) => "network",
            ExchangeError::Malformed => "malformed",
            ExchangeError::Closed => "closed",
            ExchangeError::Mismatch => "mismatch",
            ExchangeError::CaseMismatch => "case_mismatch",
            ExchangeError::SpoofSuspected => "spoof_suspected",
            ExchangeError::Unverifiable => "unverifiable",
            ExchangeError::QueueFull => "queue_full",
            ExchangeError::QueueTimeout => "queue_timeout",
        }
    }

    /// Whether this says something about the upstream's health. A full or
    /// slow queue is our own bound at work, not the upstream failing.
    pub(crate) fn counts_against_health(&self) -> bool {
        !matches!(
            self,
            ExchangeError::QueueFull
                | ExchangeError::QueueTimeout
                | ExchangeError::CaseMismatch
                | ExchangeError::SpoofSuspected
                | ExchangeError::Unverifiable
        )
    }

    /// Whether a UDP answer came but cannot be trusted: the query is asked
    /// again over TCP, which an off-path forger cannot answer.
    pub(crate) fn needs_tcp_confirmation(&self) -> bool {
        matches!(
            self,
            ExchangeError::CaseMismatch
                | ExchangeError::SpoofSuspected
                | ExchangeError::Unverifiable
        )
    }
}
