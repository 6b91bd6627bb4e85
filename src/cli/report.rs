//! The one reporter: every command ends in an [`Outcome`] or a [`Failure`],
//! and [`report`] alone turns that into what is printed and the exit code.
//!
//! Before, each command printed its error and chose its exit code its own
//! way (`eprintln!` here, `tracing::error!` there, `ExitCode::from(2)` in
//! between). The codes are part of the interface (scripts and the tests
//! read them), so they are named here once:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done, or the answer asked for is yes ([`Outcome::Done`]) |
//! | 1 | the answer is no ([`Outcome::No`]: a critical finding, a name that did not resolve, a node setup not in place), or the command failed ([`Failure::new`]) |
//! | 2 | `doctor` and `trace` cannot start on what they were given ([`Failure::unusable`]), or `convert-corefile --strict` left something out ([`Outcome::Incomplete`]) |
//!
//! A long-running process (the fail-open supervisor, the guard) decides its
//! own status and reports on its own ([`Outcome::Exited`]); clap exits 2 on
//! a usage error before any command runs.

use std::fmt::Display;
use std::process::ExitCode;

use super::LOG_TARGET;

/// What a command that ran to its end came to; what it found is already
/// printed by the command itself.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Exit 0: done, or the answer asked for is yes.
    Done,
    /// Exit 1: the answer is no (a critical finding, a name that did not
    /// resolve, a node setup not in place).
    No,
    /// Exit 2: done, but not all of it (`convert-corefile --strict` with
    /// something not translated).
    Incomplete,
    /// The status a long-running process decided: the supervisor passes on
    /// its server's, the guard its own. They have logged why.
    Exited(ExitCode),
}

impl Outcome {
    /// `Done` when `yes`, else `No`.
    pub(crate) fn answer(yes: bool) -> Outcome {
        if yes { Outcome::Done } else { Outcome::No }
    }
}

/// Why a command stopped short: its message and its exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    message: String,
    code: u8,
    /// Through the log rather than plain on stderr: the command had set
    /// logging up (`serve`), so the line has the log's format.
    logged: bool,
}

impl Failure {
    /// The command could not do its job: the message on stderr, exit 1.
    pub(crate) fn new(message: impl Display) -> Failure {
        Failure {
            message: message.to_string(),
            code: 1,
            logged: false,
        }
    }

    /// The command cannot start on what it was given (a configuration, a
    /// resolv.conf, a `--server`): exit 2, for the commands whose 1 is an
    /// answer (`doctor`, `trace`).
    pub(crate) fn unusable(message: impl Display) -> Failure {
        Failure {
            code: 2,
            ..Failure::new(message)
        }
    }

    /// Reported through the log, once the command has set logging up.
    pub(crate) fn logged(self) -> Failure {
        Failure {
            logged: true,
            ..self
        }
    }
}

/// An error with its causes, `outer: inner`.
impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::new(format_args!("{e:#}"))
    }
}

/// Prints a failure's message and gives the exit code.
pub(crate) fn report(result: Result<Outcome, Failure>) -> ExitCode {
    match result {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::No) => ExitCode::FAILURE,
        Ok(Outcome::Incomplete) => ExitCode::from(2),
        Ok(Outcome::Exited(code)) => code,
        Err(failure) => {
            if failure.logged {
                tracing::error!(target: LOG_TARGET, "{}", failure.message);
            } else {
                eprintln!("{}", failure.message);
            }
            ExitCode::from(failure.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        let cases = [
            (Ok(Outcome::Done), 0),
            (Ok(Outcome::No), 1),
            (Ok(Outcome::Incomplete), 2),
            (Ok(Outcome::Exited(ExitCode::from(3))), 3),
            (Err(Failure::new("x")), 1),
            (Err(Failure::new("x").logged()), 1),
            (Err(Failure::unusable("x")), 2),
            (Err(anyhow::anyhow!("x").into()), 1),
        ];
        for (result, code) in cases {
            let what = format!("{result:?}");
            assert_eq!(report(result), ExitCode::from(code), "{what}");
        }
    }

    #[test]
    fn anyhow_errors_keep_their_causes() {
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(Failure::from(e).message, "outer: inner");
    }
}
