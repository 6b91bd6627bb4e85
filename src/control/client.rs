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

use super::protocol::{Reply, Request};

/// How long nodens may take to answer: a dump of a full cache streams
/// for a while, but no reply line is that far from the last.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the control channel could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("becoming uid {uid} (the owner of {})", path.display())]
    Become {
        uid: u32,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: is nodens running with `[server] control_socket` set here?", path.display())]
    NoSocket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the control socket")]
    Untrusted(#[source] std::io::Error),
    #[error("connecting to {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the process behind the control socket")]
    Peer(#[source] std::io::Error),
    #[error("talking to nodens")]
    Io(#[from] std::io::Error),
    #[error("a reply line nodens should not send: {line:?}")]
    BadReply {
        line: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("nodens: {0}")]
    Refused(String),
    #[error("nodens closed the control socket without a reply")]
    NoReply,
}

impl ClientError {
    /// The error and each of its causes, after a colon (as the command
    /// line prints an error).
    pub fn describe(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            text.push_str(": ");
            text.push_str(&e.to_string());
            cause = e.source();
        }
        text
    }

    /// Nobody listens on the socket (no file, or no process behind it).
    pub fn nobody_listens(&self) -> bool {
        let kind = match self {
            ClientError::NoSocket { source, .. } | ClientError::Connect { source, .. } => {
                source.kind()
            }
            _ => return false,
        };
        matches!(
            kind,
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
        )
    }
}

/// A control socket this process may use.
pub struct Client {
    path: PathBuf,
}

/// Checks the socket at `path` (becoming its owner first when run as
/// root) and returns a client for it.
pub fn connect(path: &Path) -> Result<Client, ClientError> {
    // Root in nodens's container has no CAP_DAC_OVERRIDE (`kubectl exec`,
    // the kubelet's exec probes): it cannot look inside nodens's private
    // directory. Its owner, read from outside, is whom to become first.
    if crate::trust::own_uid() == 0
        && let Some(dir) = path.parent()
        && let Ok(dir_meta) = std::fs::symlink_metadata(dir)
        && dir_meta.is_dir()
        && dir_meta.uid() != 0
    {
        crate::privileges::become_user(dir_meta.uid(), dir_meta.gid(), &[]).map_err(|source| {
            ClientError::Become {
                uid: dir_meta.uid(),
                path: dir.to_owned(),
                source,
            }
        })?;
    }
    let meta = std::fs::symlink_metadata(path).map_err(|source| ClientError::NoSocket {
        path: path.to_owned(),
        source,
    })?;
    let me = crate::trust::own_uid();
    if me == 0 && meta.uid() != 0 {
        crate::privileges::become_user(meta.uid(), meta.gid(), &[]).map_err(|source| {
            ClientError::Become {
                uid: meta.uid(),
                path: path.to_owned(),
                source,
            }
        })?;
    }
    crate::trust::check_socket_file(path).map_err(ClientError::Untrusted)?;
    Ok(Client { path: path.into() })
}

impl Client {
    /// Sends `request` and returns every reply line; an `Error` reply is
    /// an error.
    pub fn ask(&self, request: &Request) -> Result<Vec<Reply>, ClientError> {
        let mut stream =
            UnixStream::connect(&self.path).map_err(|source| ClientError::Connect {
                path: self.path.clone(),
                source,
            })?;
        crate::trust::check_peer(&stream).map_err(ClientError::Peer)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
        let mut line = serde_json::to_vec(request).map_err(std::io::Error::from)?;
        line.push(b'\n');
        // A refusal comes before the request is read: the write may fail,
        // and the reply still says why.
        let written = stream.write_all(&line);
        let mut replies = Vec::new();
        for line in BufReader::new(stream).lines() {
            let line = line?;
            let reply: Reply = match serde_json::from_str(&line) {
                Ok(reply) => reply,
                Err(source) => return Err(ClientError::BadReply { line, source }),
            };
            if let Reply::Error(why) = reply {
                return Err(ClientError::Refused(why));
            }
            replies.push(reply);
        }
        if replies.is_empty() {
            written?;
            return Err(ClientError::NoReply);
        }
        Ok(replies)
    }
}
