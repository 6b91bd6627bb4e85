//! CoreDNS's `local`: `localhost.` and the reverse zones `0.`, `127.` and
//! `255.in-addr.arpa.` answered here as RFC 6761 asks, and any
//! `localhost.<anything>` answered 127.0.0.1 / ::1, so that these never
//! leave the node. The answers are CoreDNS 1.13's, record for record (not
//! authoritative, TTL 604800, its SOA `localhost. root.localhost.`).

use super::reply::{Owner, Reply, Section};
use crate::wire::query::Query;
use crate::wire::{class, rcode, rtype};

const TTL: u32 = 604_800;
const LOCALHOST: &[u8] = b"\x09localhost\x00";
const ZONES: [&[u8]; 4] = [
    LOCALHOST,
    b"\x010\x07in-addr\x04arpa\x00",
    b"\x03127\x07in-addr\x04arpa\x00",
    b"\x03255\x07in-addr\x04arpa\x00",
];
const LOOPBACK_PTR: &[u8] = b"\x011\x010\x010\x03127\x07in-addr\x04arpa\x00";

fn soa_rdata() -> Vec<u8> {
    let mut rdata = LOCALHOST.to_vec();
    rdata.extend(b"\x04root\x09localhost\x00");
    for n in [1u32, 0, 0, 0, TTL] {
        rdata.extend(n.to_be_bytes());
    }
    rdata
}

fn soa(reply: &mut Reply<'_, '_>, section: Section, owner: Owner<'_>) {
    reply.add(section, owner, rtype::SOA, class::IN, TTL, &soa_rdata());
}

/// Writes `local`'s answer for `folded` (the question's name, folded);
/// false when the name is not one of its names.
pub(super) fn answer(query: &Query<'_>, folded: &[u8], limit: usize, out: &mut Vec<u8>) -> bool {
    let qtype = query.qtype;
    if folded.len() > LOCALHOST.len() && folded.starts_with(&LOCALHOST[..10]) {
        let mut reply = Reply::new(query, rcode::NOERROR, false, out);
        match qtype {
            rtype::A => reply.add(
                Section::Answer,
                Owner::Question,
                rtype::A,
                class::IN,
                TTL,
                &[127, 0, 0, 1],
            ),
            rtype::AAAA => {
                let one = std::net::Ipv6Addr::LOCALHOST.octets();
                reply.add(
                    Section::Answer,
                    Owner::Question,
                    rtype::AAAA,
                    class::IN,
                    TTL,
                    &one,
                );
            }
            _ => soa(&mut reply, Section::Authority, Owner::Question),
        }
        reply.finish(limit);
        return true;
    }
    let Some(zone) = ZONES
        .iter()
        .find(|z| crate::search::names::suffix_at(folded, z).is_some())
    else {
        return false;
    };
    let zone_at = Owner::QuestionFrom(folded.len() - zone.len());
    if folded == *zone {
        let mut reply = Reply::new(query, rcode::NOERROR, false, out);
        match qtype {
            rtype::A if folded == LOCALHOST => {
                reply.add(
                    Section::Answer,
                    Owner::Question,
                    rtype::A,
                    class::IN,
                    TTL,
                    &[127, 0, 0, 1],
                );
            }
            rtype::AAAA if folded == LOCALHOST => {
                let one = std::net::Ipv6Addr::LOCALHOST.octets();
                reply.add(
                    Section::Answer,
                    Owner::Question,
                    rtype::AAAA,
                    class::IN,
                    TTL,
                    &one,
                );
            }
            rtype::SOA => soa(&mut reply, Section::Answer, Owner::Question),
            rtype::NS => reply.add(
                Section::Answer,
                Owner::Question,
                rtype::NS,
                class::IN,
                TTL,
                LOCALHOST,
            ),
            _ => soa(&mut reply, Section::Authority, Owner::Question),
        }
        reply.finish(limit);
        return true;
    }
    if folded == LOOPBACK_PTR {
        let mut reply = Reply::new(query, rcode::NOERROR, false, out);
        if qtype == rtype::PTR {
            reply.add(
                Section::Answer,
                Owner::Question,
                rtype::PTR,
                class::IN,
                TTL,
                LOCALHOST,
            );
        } else {
            soa(&mut reply, Section::Authority, zone_at);
        }
        reply.finish(limit);
        return true;
    }
    let mut reply = Reply::new(query, rcode::NXDOMAIN, false, out);
    soa(&mut reply, Section::Authority, zone_at);
    reply.finish(limit);
    true
}
