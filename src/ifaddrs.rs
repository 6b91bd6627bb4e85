//! The interfaces of this network namespace and their addresses, read
//! through getifaddrs(3): which addresses are the node's own (`config`'s
//! check that no upstream is one of nodens's listen addresses) and which
//! interface holds an address (`doctor`).

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An interface, with an address or (`None`) just its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) name: String,
    pub(crate) addr: Option<IpAddr>,
}

/// Every interface and address of this network namespace.
pub(crate) fn getifaddrs() -> std::io::Result<Vec<Link>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut links = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs.
        let entry = unsafe { &*cur };
        // SAFETY: the name is a NUL-terminated string of that list.
        let name = unsafe { CStr::from_ptr(entry.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the address is null or a sockaddr of the family it names.
        let addr = unsafe { address_of(entry.ifa_addr) };
        links.push(Link { name, addr });
        cur = entry.ifa_next;
    }
    // SAFETY: the list getifaddrs allocated, freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(links)
}

/// The IP of an AF_INET/AF_INET6 sockaddr; `None` for other families.
///
/// # Safety
/// `sa` is null or points to a sockaddr of the family it names.
unsafe fn address_of(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: as the caller promises.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}
