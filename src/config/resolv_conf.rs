//! The `nameserver` lines of a resolv.conf file.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// Why a resolv.conf file gives no upstreams; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ResolvConfError {
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no nameserver lines", path.display())]
    NoNameservers { path: PathBuf },
}

/// Reads the `nameserver` lines of a resolv.conf file.
pub fn nameservers(path: &Path) -> Result<Vec<SocketAddr>, ResolvConfError> {
    let text = std::fs::read_to_string(path).map_err(|source| ResolvConfError::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    let servers = parse_nameservers(&text);
    if servers.is_empty() {
        return Err(ResolvConfError::NoNameservers {
            path: path.to_owned(),
        });
    }
    Ok(servers)
}

/// The `nameserver` addresses of resolv.conf text, port 53; lines that do
/// not parse are skipped, as the C library skips them.
pub(crate) fn parse_nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
        })
        // Strip an IPv6 zone index ("fe80::1%eth0"): std cannot parse it.
        .filter_map(|ip| ip.split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("resolv.conf");
        std::fs::write(&p, "search a b\n# nameserver 9.9.9.9\nnameserver 127.0.0.53\nnameserver fe80::1%eth0\noptions ndots:5\n")
            .unwrap();
        let s = nameservers(&p).unwrap();
        assert_eq!(
            s,
            vec![
                "127.0.0.53:53".parse().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
    }
}
