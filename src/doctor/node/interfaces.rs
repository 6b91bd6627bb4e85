//! The interfaces of this network namespace and their addresses
//! (getifaddrs(3)): which one holds the node cache's address, and whether
//! kube-proxy's `kube-ipvs0` exists.

use std::net::IpAddr;

use super::Out;
pub(crate) use crate::ifaddrs::{Link, getifaddrs};

/// Which interface holds `ip`, if one does.
pub(crate) fn holder(links: &[Link], ip: IpAddr) -> Option<&str> {
    links
        .iter()
        .find(|l| l.addr == Some(ip))
        .map(|l| l.name.as_str())
}

pub(crate) fn exists(links: &[Link], name: &str) -> bool {
    links.iter().any(|l| l.name == name)
}

/// Every interface and address; `None` (and a fact) when getifaddrs fails.
pub(crate) fn read(out: &mut Out) -> Option<Vec<Link>> {
    match getifaddrs() {
        Ok(links) => Some(links),
        Err(e) => {
            out.fact(format!("interfaces: not read (getifaddrs: {e})"));
            None
        }
    }
}
