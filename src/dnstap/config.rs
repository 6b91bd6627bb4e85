//! dnstap's configuration (`[dnstap]`): where the Frame Streams reader
//! listens, what nodens calls itself there, which messages it sends and how
//! many may wait. The section present turns dnstap on. Every bad value is a
//! deserialisation error, which carries its line.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

/// `[dnstap]`, as written.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DnstapConfig {
    /// "unix:/path" or "tcp:host:port" (CoreDNS's `unix://` and `tcp://`
    /// forms are taken too).
    pub socket: DnstapSocket,
    /// The `identity` of every message; unset: the node's name
    /// (`[kubernetes] node_name`, `$NODE_NAME`), else the host name.
    #[serde(default)]
    pub identity: Option<String>,
    /// The `version` of every message.
    #[serde(default = "default_version")]
    pub version: String,
    /// CLIENT_QUERY and CLIENT_RESPONSE for every reply of a zone.
    #[serde(default = "yes")]
    pub client: bool,
    /// FORWARDER_QUERY and FORWARDER_RESPONSE for every upstream exchange.
    #[serde(default)]
    pub forwarder: bool,
    /// The DNS messages themselves in each frame (CoreDNS's `full`).
    #[serde(default = "yes")]
    pub full: bool,
    /// Records waiting for the writer at most; beyond, a record is dropped
    /// and counted, the query goes on.
    #[serde(default = "default_queue")]
    pub queue: DnstapQueue,
    /// A Unix socket's reader may run as root, as nodens's uid, or as this
    /// uid (a collector of its own); any other peer is refused: whoever
    /// can listen at the path would read every query of the node.
    #[serde(default)]
    pub reader_uid: Option<u32>,
}

fn default_version() -> String {
    format!("nodens {}", env!("CARGO_PKG_VERSION"))
}

fn yes() -> bool {
    true
}

fn default_queue() -> DnstapQueue {
    DnstapQueue(4096)
}

/// Where the Frame Streams reader listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnstapSocket {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl std::fmt::Display for DnstapSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DnstapSocket::Unix(p) => write!(f, "unix:{}", p.display()),
            DnstapSocket::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// A `dnstap.socket` that is none of the forms nodens reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dnstap.socket: \"unix:/path\" or \"tcp:address:port\" (an IP address), not {0:?}")]
pub(crate) struct BadSocket(String);

impl DnstapSocket {
    /// "unix:/path", "unix:///path", "/path", "tcp:1.2.3.4:6000" or
    /// "tcp://1.2.3.4:6000".
    pub(crate) fn parse(s: &str) -> Result<DnstapSocket, BadSocket> {
        let bad = || BadSocket(s.to_string());
        if let Some(rest) = s.strip_prefix("tcp:") {
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            return rest.parse().map(DnstapSocket::Tcp).map_err(|_| bad());
        }
        let path = match s.strip_prefix("unix:") {
            Some(rest) => rest.strip_prefix("//").unwrap_or(rest),
            None => s,
        };
        if !path.starts_with('/') {
            return Err(bad());
        }
        Ok(DnstapSocket::Unix(PathBuf::from(path)))
    }
}

impl<'de> Deserialize<'de> for DnstapSocket {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DnstapSocket::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The queue's length: 1 to 1,048,576 records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnstapQueue(pub usize);

impl<'de> Deserialize<'de> for DnstapQueue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(d)?;
        if !(1..=1 << 20).contains(&n) {
            return Err(serde::de::Error::custom(
                "dnstap.queue: from 1 to 1048576 records",
            ));
        }
        Ok(DnstapQueue(n as usize))
    }
}

/// dnstap as the server runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnstapPlan {
    pub socket: DnstapSocket,
    pub identity: String,
    pub version: String,
    pub client: bool,
    pub forwarder: bool,
    pub full: bool,
    pub queue: usize,
    pub reader_uid: Option<u32>,
}

impl DnstapConfig {
    /// `node_name`: the identity when none is written.
    pub(crate) fn compile(&self, node_name: Option<String>) -> DnstapPlan {
        DnstapPlan {
            socket: self.socket.clone(),
            identity: self
                .identity
                .clone()
                .or(node_name)
                .unwrap_or_else(host_name),
            version: self.version.clone(),
            client: self.client,
            forwarder: self.forwarder,
            full: self.full,
            reader_uid: self.reader_uid,
            queue: self.queue.0,
        }
    }
}

/// The host's name, "" if it has none.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..len]).into_owned()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<DnstapConfig, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn socket_takes_nodens_and_coredns_forms() {
        for (text, want) in [
            (
                "unix:/run/tap.sock",
                DnstapSocket::Unix("/run/tap.sock".into()),
            ),
            (
                "unix:///run/tap.sock",
                DnstapSocket::Unix("/run/tap.sock".into()),
            ),
            ("/run/tap.sock", DnstapSocket::Unix("/run/tap.sock".into())),
            (
                "tcp:127.0.0.1:6000",
                DnstapSocket::Tcp("127.0.0.1:6000".parse().unwrap()),
            ),
            (
                "tcp://[::1]:6000",
                DnstapSocket::Tcp("[::1]:6000".parse().unwrap()),
            ),
        ] {
            assert_eq!(DnstapSocket::parse(text), Ok(want), "{text}");
        }
        for bad in ["tcp:localhost:6000", "unix:relative", "udp:1.2.3.4:5", ""] {
            assert!(DnstapSocket::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_and_checks() {
        let c = parse("socket = \"unix:/t.sock\"").unwrap();
        assert!(c.client && c.full && !c.forwarder);
        assert_eq!(c.queue, DnstapQueue(4096));
        let plan = c.compile(Some("node-1".into()));
        assert_eq!(plan.identity, "node-1");
        assert!(plan.version.starts_with("nodens "));
        assert!(parse("").is_err(), "socket is required");
        assert!(parse("socket = \"unix:/t\"\nqueue = 0").is_err());
        let e = parse("socket = \"tcp:nowhere\"").unwrap_err().to_string();
        assert!(e.contains("dnstap.socket"), "{e}");
        assert!(parse("socket = \"unix:/t\"\nsome = 1").is_err());
    }
}
