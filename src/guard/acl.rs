//! The source-address allow list. A node cache answers the pods and the
//! node it serves; bound to a wildcard or a routable address without a
//! list it would be an open resolver (an amplifier for anyone who can
//! reach it). By default it serves only the ranges pods and nodes use:
//! loopback, the private ranges (RFC 1918), shared address space (RFC
//! 6598, used for pod networks), link-local, and IPv6 ULA and link-local.

use std::net::IpAddr;

use ipnet::IpNet;

/// The ranges served when `server.allow` is not set.
pub const DEFAULT_ALLOW: &[&str] = &[
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
];

#[derive(Debug, Clone)]
pub struct Acl {
    allowed: Vec<IpNet>,
    /// Set when the list has `0.0.0.0/0` and `::/0`: nothing to check.
    everyone: bool,
}

impl Acl {
    pub fn new(allowed: Vec<IpNet>) -> Acl {
        let everyone = allowed
            .iter()
            .any(|n| n.prefix_len() == 0 && n.addr().is_ipv4())
            && allowed
                .iter()
                .any(|n| n.prefix_len() == 0 && n.addr().is_ipv6());
        Acl { allowed, everyone }
    }

    /// Whether `client` may be answered. IPv4 clients of a dual-stack
    /// socket (`::ffff:a.b.c.d`) are checked as IPv4.
    #[inline]
    pub fn allows(&self, client: IpAddr) -> bool {
        if self.everyone {
            return true;
        }
        let client = client.to_canonical();
        self.allowed.iter().any(|net| net.contains(&client))
    }
}

pub fn default_allow() -> Vec<IpNet> {
    DEFAULT_ALLOW
        .iter()
        .map(|s| s.parse().expect("valid built-in range"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_serves_pod_ranges_only() {
        let acl = Acl::new(default_allow());
        for ok in [
            "127.0.0.1",
            "10.244.1.7",
            "172.20.0.1",
            "192.168.1.1",
            "100.64.3.4",
            "169.254.20.10",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.1.2.3",
        ] {
            assert!(acl.allows(ok.parse().unwrap()), "{ok}");
        }
        for refused in [
            "8.8.8.8",
            "192.0.2.1",
            "172.32.0.1",
            "2001:db8::1",
            "::ffff:1.1.1.1",
        ] {
            assert!(!acl.allows(refused.parse().unwrap()), "{refused}");
        }
    }

    #[test]
    fn everyone() {
        let acl = Acl::new(vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()]);
        assert!(acl.allows("8.8.8.8".parse().unwrap()));
        assert!(acl.allows("2001:db8::1".parse().unwrap()));
    }
}
