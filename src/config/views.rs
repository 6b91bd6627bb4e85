//! Views: a zone may serve only some of the listen addresses (`[[zone]]
//! listen`), so that one name can be answered differently on different
//! addresses or ports (NodeLocal DNSCache's pod and node addresses, a
//! second server block on port 5353). The rules a file's views follow,
//! and which upstream addresses would send a query back to nodens itself.

use std::net::{IpAddr, SocketAddr};

use super::check::Invalid;
use super::file::{File, ZoneConfig};

/// Whether two zones' listen sets share an address (empty: every address).
fn overlap(a: &ZoneConfig, b: &ZoneConfig) -> bool {
    a.listen.is_empty()
        || b.listen.is_empty()
        || a.listen
            .iter()
            .any(|x| b.listen.iter().any(|y| x.get_ref() == y.get_ref()))
}

impl File {
    /// The `index`-th zone's `listen`: each entry one of `[server] listen`,
    /// none twice, and no earlier zone of the same name on any of them.
    pub(super) fn check_zone_views(&self, index: usize) -> Result<(), Invalid> {
        let zone = &self.zones[index];
        let name = &zone.name.get_ref().0;
        for (k, a) in zone.listen.iter().enumerate() {
            let addr = a.get_ref().0;
            let problem = if !self.server.listen.iter().any(|l| l.get_ref().0 == addr) {
                Some(format!(
                    "zone {name}: listen address {addr} is not one of server.listen"
                ))
            } else if zone.listen[..k].iter().any(|b| b.get_ref().0 == addr) {
                Some(format!(
                    "zone {name}: listen address {addr} is listed twice"
                ))
            } else {
                None
            };
            if let Some(message) = problem {
                return Err(match (!a.span().is_empty()).then(|| a.span()) {
                    Some(span) => Invalid::At(span, message),
                    None => self.zone_error(index, "listen", message),
                });
            }
        }
        if !zone.listen.is_empty() && self.server.listen.len() > crate::upstream::MAX_VIEWS {
            return Err(self.zone_error(
                index,
                "listen",
                format!(
                    "zone {name}: views need at most {} server.listen addresses",
                    crate::upstream::MAX_VIEWS
                ),
            ));
        }
        let earlier = self.zones[..index]
            .iter()
            .position(|z| &z.name.get_ref().0 == name && overlap(z, zone));
        if let Some(other) = earlier {
            let message = if zone.listen.is_empty() && self.zones[other].listen.is_empty() {
                format!("zone {name} is listed twice")
            } else {
                format!(
                    "zone {name} is listed twice for the same listen address: give each a `listen` list of its own addresses"
                )
            };
            return Err(self.zone_error(index, "name", message));
        }
        Ok(())
    }
}

/// This host's addresses: loopback, and those of its interfaces.
pub(crate) struct OwnAddresses(Option<Vec<IpAddr>>);

/// The interface on which kube-proxy's IPVS mode puts every Service's
/// ClusterIP: IPVS takes a packet to one of them before any socket, so a
/// query sent there reaches the Service's endpoints, not nodens.
const IPVS_SERVICES_LINK: &str = "kube-ipvs0";

// The host a unit test's thread pretends (`OwnAddresses::pretend`).
#[cfg(test)]
thread_local! {
    static PRETENDED: std::cell::RefCell<Vec<IpAddr>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl OwnAddresses {
    /// Reads the interfaces' addresses now (getifaddrs(3)); when they
    /// cannot be read, every address counts as this host's (the careful
    /// side of the loop check). A unit test reads the host its thread set
    /// with [`OwnAddresses::pretend`] (none but loopback unless it did),
    /// so that no test's verdict depends on the machine it runs on.
    #[cfg(not(test))]
    pub(crate) fn read() -> OwnAddresses {
        OwnAddresses::of(crate::ifaddrs::getifaddrs().ok())
    }

    #[cfg(test)]
    pub(crate) fn read() -> OwnAddresses {
        PRETENDED.with(|held| OwnAddresses(Some(held.borrow().clone())))
    }

    /// The addresses that count for the loop check among `links`: all but
    /// the ClusterIPs on IPVS's interface.
    fn of(links: Option<Vec<crate::ifaddrs::Link>>) -> OwnAddresses {
        OwnAddresses(links.map(|links| {
            links
                .into_iter()
                .filter(|l| l.name != IPVS_SERVICES_LINK)
                .filter_map(|l| l.addr)
                .collect()
        }))
    }

    #[cfg(test)]
    pub(crate) fn these(ips: Vec<IpAddr>) -> OwnAddresses {
        OwnAddresses(Some(ips))
    }

    /// Makes [`OwnAddresses::read`] on this thread see a host holding `ips`.
    #[cfg(test)]
    pub(crate) fn pretend(ips: Vec<IpAddr>) {
        PRETENDED.with(|held| *held.borrow_mut() = ips);
    }

    fn holds(&self, ip: IpAddr) -> bool {
        ip.is_loopback()
            || ip.is_unspecified()
            || self.0.as_ref().is_none_or(|ips| ips.contains(&ip))
    }

    /// Whether a query forwarded to `upstream` would arrive at one of
    /// `listen`: the same address and port, or the port of an unspecified
    /// listen address (`0.0.0.0`, `::`) on an address this host holds.
    /// A Service's ClusterIP on port 53 is not this host's address, so a
    /// wildcard listener does not loop to it.
    pub(crate) fn loops(&self, listen: &[SocketAddr], upstream: SocketAddr) -> bool {
        listen.iter().any(|l| {
            l.port() == upstream.port()
                && (l.ip() == upstream.ip() || l.ip().is_unspecified() && self.holds(upstream.ip()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_wildcard_listener_loops_only_to_this_hosts_addresses() {
        let own = OwnAddresses::these(vec!["192.0.2.7".parse().unwrap()]);
        let any = [addr("0.0.0.0:53")];
        assert!(own.loops(&any, addr("127.0.0.1:53")));
        assert!(own.loops(&any, addr("127.0.0.53:53")));
        assert!(own.loops(&any, addr("192.0.2.7:53")));
        assert!(!own.loops(&any, addr("10.96.0.10:53")), "a ClusterIP");
        assert!(!own.loops(&any, addr("127.0.0.1:5300")), "another port");
        let one = [addr("169.254.20.10:53")];
        assert!(own.loops(&one, addr("169.254.20.10:53")));
        assert!(!own.loops(&one, addr("127.0.0.1:53")));
        let unknown = OwnAddresses(None);
        assert!(unknown.loops(&any, addr("10.96.0.10:53")));
    }

    #[test]
    fn clusterips_on_the_ipvs_interface_are_not_this_hosts() {
        let link = |name: &str, ip: &str| crate::ifaddrs::Link {
            name: name.into(),
            addr: Some(ip.parse().unwrap()),
        };
        let own = OwnAddresses::of(Some(vec![
            link("eth0", "192.0.2.7"),
            link("kube-ipvs0", "10.96.0.10"),
            link("nodelocaldns", "169.254.20.10"),
        ]));
        let any = [addr("0.0.0.0:53")];
        assert!(!own.loops(&any, addr("10.96.0.10:53")), "IPVS takes it");
        assert!(own.loops(&any, addr("192.0.2.7:53")));
        assert!(own.loops(&any, addr("169.254.20.10:53")));
    }

    #[test]
    fn a_host_holding_an_address_loops_a_wildcard_listener_to_it() {
        let text = "[server]\nlisten = [\"0.0.0.0:53\"]\n[[zone]]\nname = \".\"\nupstreams = [\"10.96.0.10\"]\n";
        check(text).unwrap_or_else(|e| panic!("{e}"));
        OwnAddresses::pretend(vec!["10.96.0.10".parse().unwrap()]);
        let e = check(text).unwrap_err().to_string();
        assert!(e.contains("forwarding loop"), "{e}");
    }

    fn check(text: &str) -> Result<crate::config::Config, crate::config::ConfigError> {
        crate::config::Config::parse(text)
    }

    const LISTEN: &str = "[server]\nlisten = [\"127.0.0.1:1053\", \"127.0.0.2:1053\"]\n";

    #[test]
    fn one_name_twice_on_disjoint_listen_sets_is_two_views() {
        let text = format!(
            "{LISTEN}[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5300\"]\nlisten = [\"127.0.0.1:1053\"]\n\
             [[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5301\"]\nlisten = [\"127.0.0.2:1053\"]\n"
        );
        let config = check(&text).unwrap();
        assert_eq!(config.zones[1].listen, vec![addr("127.0.0.2:1053")]);
    }

    #[test]
    fn overlapping_views_are_an_error_at_the_line() {
        let text = format!(
            "{LISTEN}[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5300\"]\nlisten = [\"127.0.0.1:1053\"]\n\
             [[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5301\"]\n"
        );
        let e = check(&text).unwrap_err().to_string();
        assert!(
            e.starts_with("8:") && e.contains("same listen address"),
            "{e}"
        );
    }

    #[test]
    fn a_view_address_must_be_listened_on() {
        let text = format!(
            "{LISTEN}[[zone]]\nname = \".\"\nupstreams = [\"127.0.0.1:5300\"]\n\
             listen = [\"127.0.0.3:1053\"]\n"
        );
        let e = check(&text).unwrap_err().to_string();
        assert!(
            e.starts_with("6:") && e.contains("not one of server.listen"),
            "{e}"
        );
    }
}
