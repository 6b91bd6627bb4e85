//! The source-address allow list. A node cache answers the pods and the
//! node it serves; bound to a wildcard or a routable address without a
//! list it would be an open resolver (an amplifier for anyone who can
//! reach it). By default it serves only the ranges pods and nodes use:
//! loopback, the private ranges (RFC 1918), shared address space (RFC
//! 6598, used for pod networks), link-local, and IPv6 ULA and link-local.

use std::net::IpAddr;

use ipnet::IpNet;

/// The ranges served when `server.allow` is not set.
pub(crate) const DEFAULT_ALLOW: &[&str] = &[
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

/// The allowed ranges as (network, mask) pairs per family: checked on
/// every query, hits included, so a check is a few integer operations.
#[derive(Debug, Clone)]
pub(crate) struct Acl {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl Acl {
    /// Overlapping and adjacent ranges are merged first: an allow list
    /// made of every node's pod range (the chart's default where they are
    /// not private) becomes the few ranges they cover, so the check on every
    /// query stays a few comparisons however many nodes there are.
    pub(crate) fn new(allowed: &[IpNet]) -> Acl {
        let mut acl = Acl {
            v4: Vec::new(),
            v6: Vec::new(),
        };
        for net in IpNet::aggregate(&allowed.to_vec()) {
            match net {
                IpNet::V4(n) => acl
                    .v4
                    .push((u32::from(n.network()), u32::from(n.netmask()))),
                IpNet::V6(n) => acl
                    .v6
                    .push((u128::from(n.network()), u128::from(n.netmask()))),
            }
        }
        acl
    }

    /// Whether `client` may be answered. IPv4 clients of a dual-stack
    /// socket (`::ffff:a.b.c.d`) are checked as IPv4.
    #[inline]
    pub(crate) fn allows(&self, client: IpAddr) -> bool {
        match client.to_canonical() {
            IpAddr::V4(ip) => {
                let ip = u32::from(ip);
                self.v4.iter().any(|&(net, mask)| ip & mask == net)
            }
            IpAddr::V6(ip) => {
                let ip = u128::from(ip);
                self.v6.iter().any(|&(net, mask)| ip & mask == net)
            }
        }
    }
}

pub(crate) fn default_allow() -> Vec<IpNet> {
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
        let acl = Acl::new(&default_allow());
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
    fn every_node_s_range_merged_into_what_they_cover() {
        // 256 nodes' /24 pod ranges of 203.0.0.0/16 (one node missing) and
        // the defaults: the same addresses allowed, in a handful of ranges.
        let mut allowed = default_allow();
        for i in (0..=255u32).filter(|&i| i != 77) {
            allowed.push(format!("203.0.{i}.0/24").parse().unwrap());
        }
        let acl = Acl::new(&allowed);
        assert!(acl.v4.len() <= default_allow().len() + 8, "{:?}", acl.v4);
        for i in (0..=255u32).filter(|&i| i != 77) {
            assert!(
                acl.allows(format!("203.0.{i}.9").parse().unwrap()),
                "203.0.{i}.9"
            );
        }
        assert!(!acl.allows("203.0.77.9".parse().unwrap()));
        assert!(!acl.allows("203.1.0.9".parse().unwrap()));
        assert!(acl.allows("10.244.1.7".parse().unwrap()));
    }

    #[test]
    fn everyone() {
        let acl = Acl::new(&["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()]);
        assert!(acl.allows("8.8.8.8".parse().unwrap()));
        assert!(acl.allows("2001:db8::1".parse().unwrap()));
    }
}
