//! `nodens probe health|ready`: the kubelet's exec probes, over the control
//! socket. A probe on a TCP port depends on a port any local process can
//! take while nodens restarts, and on the pod network on slots any pod can
//! hold; the control socket is nodens's alone (docs/security.md).

use std::path::PathBuf;

use nodens::control::{self, ProbeKind, Reply, Request};

use super::cache::DEFAULT_SOCKET;
use super::report::{Failure, Outcome};

#[derive(clap::Args)]
pub(super) struct ProbeArgs {
    #[command(subcommand)]
    what: What,
    /// The control socket of the nodens to ask.
    #[arg(long, global = true, value_name = "PATH", env = "NODENS_CONTROL_SOCKET", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
}

#[derive(Clone, Copy, clap::Subcommand)]
enum What {
    /// Exit 0 while every serving thread runs (the liveness probe).
    Health,
    /// Exit 0 while nodens serves and is not draining (the readiness probe).
    Ready,
}

pub(super) fn run(args: ProbeArgs) -> Result<Outcome, Failure> {
    let what = match args.what {
        What::Health => ProbeKind::Health,
        What::Ready => ProbeKind::Ready,
    };
    let client = control::connect(&args.socket).map_err(anyhow::Error::from)?;
    let replies = client
        .ask(&Request::Probe { what })
        .map_err(anyhow::Error::from)?;
    match replies.as_slice() {
        [Reply::Probe { ok, page }] => {
            print!("{page}");
            Ok(Outcome::answer(*ok))
        }
        other => Err(Failure::new(format!("unexpected reply: {other:?}"))),
    }
}
