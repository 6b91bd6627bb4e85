//! The command line's side of the control channel. It trusts the socket as
//! nodens does its clients: the socket file must sit in a directory
//! private to this process's uid, and the server at the other end must run
//! as that uid (`SO_PEERCRED`), so a process that took the path cannot pose
//! as nodens. Run as root (`kubectl exec` into nodens's container), it
//! first becomes the socket's owner, nodens's uid, as only root may.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use super::protocol::{Reply, Request};

/// How long nodens may take to answer: a dump of a full cache streams
/// for a while, but no reply line is that far from the last.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A control socket this process may use.
pub struct Client {
    path: PathBuf,
}

/// Checks the socket at `path` (becoming its owner first when run as
/// root) and returns a client for it.
pub fn connect(path: &Path) -> anyhow::Result<Client> {
    // Root in nodens's container has no CAP_DAC_OVERRIDE (`kubectl exec`,
    // the kubelet's exec probes): it cannot look inside nodens's private
    // directory. Its owner, read from outside, is whom to become first.
    if crate::trust::own_uid() == 0
        && let Some(dir) = path.parent()
        && let Ok(dir_meta) = std::fs::symlink_metadata(dir)
        && dir_meta.is_dir()
        && dir_meta.uid() != 0
    {
        crate::privileges::become_user(dir_meta.uid(), dir_meta.gid(), &[]).with_context(|| {
            format!(
                "becoming uid {} (the owner of {})",
                dir_meta.uid(),
                dir.display()
            )
        })?;
    }
    let meta = std::fs::symlink_metadata(path).with_context(|| {
        format!(
            "{}: is nodens running with `[server] control_socket` set here?",
            path.display()
        )
    })?;
    let me = crate::trust::own_uid();
    if me == 0 && meta.uid() != 0 {
        crate::privileges::become_user(meta.uid(), meta.gid(), &[]).with_context(|| {
            format!(
                "becoming uid {} (the owner of {})",
                meta.uid(),
                path.display()
            )
        })?;
    }
    crate::trust::check_socket_file(path).context("the control socket")?;
    Ok(Client { path: path.into() })
}

impl Client {
    /// Sends `request` and returns every reply line; an `Error` reply is
    /// an error.
    pub fn ask(&self, request: &Request) -> anyhow::Result<Vec<Reply>> {
        let mut stream = UnixStream::connect(&self.path)
            .with_context(|| format!("connecting to {}", self.path.display()))?;
        crate::trust::check_peer(&stream).context("the process behind the control socket")?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
        let mut line = serde_json::to_vec(request)?;
        line.push(b'\n');
        // A refusal comes before the request is read: the write may fail,
        // and the reply still says why.
        let written = stream.write_all(&line);
        let mut replies = Vec::new();
        for line in BufReader::new(stream).lines() {
            let line = line.context("reading nodens's reply")?;
            let reply: Reply = serde_json::from_str(&line)
                .with_context(|| format!("a reply line nodens should not send: {line:?}"))?;
            if let Reply::Error(why) = reply {
                bail!("nodens: {why}");
            }
            replies.push(reply);
        }
        if replies.is_empty() {
            written.context("sending the request")?;
            bail!("nodens closed the control socket without a reply");
        }
        Ok(replies)
    }
}
