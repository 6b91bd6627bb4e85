//! CoreDNS's `whoami`: the client's address (A or AAAA) and, in an SRV
//! record `_udp.<name>` or `_tcp.<name>`, its port, in the additional
//! section of an empty authoritative answer, TTL 0, the question's class.
//! Used to check which server and path a client reaches.

use std::net::{IpAddr, SocketAddr};

use super::reply::{Owner, Reply, Section};
use crate::wire::query::Query;
use crate::wire::{HEADER_LEN, rcode, rtype};

pub(super) fn answer(
    query: &Query<'_>,
    client: SocketAddr,
    tcp: bool,
    limit: usize,
    out: &mut Vec<u8>,
) {
    let class = query.qclass;
    let mut reply = Reply::new(query, rcode::NOERROR, true, out);
    let ip = match client.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => reply.add(
            Section::Additional,
            Owner::Question,
            rtype::A,
            class,
            0,
            &v4.octets(),
        ),
        IpAddr::V6(v6) => reply.add(
            Section::Additional,
            Owner::Question,
            rtype::AAAA,
            class,
            0,
            &v6.octets(),
        ),
    }
    // `_udp.` or `_tcp.` before the question's name (a pointer to it).
    let label: &[u8] = if tcp { b"\x04_tcp" } else { b"\x04_udp" };
    let owner = [label, &[0xc0, HEADER_LEN as u8]].concat();
    let mut srv = vec![0, 0, 0, 0];
    srv.extend(client.port().to_be_bytes());
    srv.push(0);
    reply.add(
        Section::Additional,
        Owner::Name(&owner),
        rtype::SRV,
        class,
        0,
        &srv,
    );
    reply.finish(limit);
}
