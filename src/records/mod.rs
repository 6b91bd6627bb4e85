//! Answers nodens gives from its own configuration, per zone, before the
//! cache: local records (CoreDNS's `hosts`: inline entries and hosts files
//! followed while running), synthesised answers (`template`), the
//! RFC 6761 names (`local`) and the client's own address (`whoami`). In
//! CoreDNS's order: `local`, `template`, `hosts`, `whoami` (which answers
//! everything left); what none of them answers goes on to the cache and
//! upstream.
//!
//! They are answered before the cache, so they are not cached: a changed
//! hosts file or a reload shows at once. The cache-hit path of a
//! configuration without any pays one branch (`Settings::records` is
//! `None`); with some, a zone without any pays an index and a branch.
//!
//! Configuration: each zone's `hosts`, `template`, `local` and `whoami`
//! (`config.rs`, which reads the hosts files). Request path: `serve::records`,
//! after the route and before the cache.

pub(crate) mod config;
pub(crate) mod hosts;
mod local;
mod reply;
pub(crate) mod rr;
pub(crate) mod template;
mod watch;
mod whoami;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::wire::reverse::address as reverse_address;
use hosts::{HostsData, Stamp};
use reply::{Owner, Reply, Section};
use template::{Outcome, Template};
use watch::Source;

use crate::search::names::suffix_at;
use crate::tasks::Upkeep;
use crate::wire::query::Query;
use crate::wire::{class, rcode, rtype};
use config::RecordsPlan;

/// Where a name not found goes on (CoreDNS's `fallthrough [ZONES...]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fallthrough {
    None,
    All,
    /// Names at or below these (wire, folded).
    Zones(Vec<Box<[u8]>>),
}

impl Fallthrough {
    pub(crate) fn through(&self, folded: &[u8]) -> bool {
        match self {
            Fallthrough::None => false,
            Fallthrough::All => true,
            Fallthrough::Zones(zones) => zones.iter().any(|z| suffix_at(folded, z).is_some()),
        }
    }
}

/// A zone's local answers, compiled from its configuration.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) local: bool,
    pub(crate) templates: Vec<Template>,
    pub(crate) hosts: Option<HostsPlan>,
    /// Answer every other question with the client's address and port.
    pub(crate) whoami: bool,
}

/// `[zone.hosts]`, with its files read.
#[derive(Debug)]
pub(crate) struct HostsPlan {
    /// The names it answers for (CoreDNS's origins), wire and folded.
    pub(crate) zones: Vec<Box<[u8]>>,
    pub(crate) ttl: u32,
    pub(crate) reverse: bool,
    pub(crate) reload: Duration,
    pub(crate) fallthrough: Fallthrough,
    pub(crate) inline: HostsData,
    pub(crate) files: Vec<(PathBuf, Arc<HostsData>, Option<Stamp>)>,
}

/// One zone's local answers at run time.
struct ZoneRecords {
    plan: Arc<Plan>,
    /// The hosts files as last read, in `plan.hosts.files` order.
    files: Arc<Vec<Source>>,
}

/// A question as the local answers see it.
pub(crate) struct Asked<'r, 'q> {
    pub(crate) query: &'r Query<'q>,
    /// Its name, folded to lower case (wire form).
    pub(crate) folded: &'r [u8],
    pub(crate) client: SocketAddr,
    pub(crate) tcp: bool,
    /// The largest reply the client takes.
    pub(crate) limit: usize,
}

/// Every zone's local answers, by zone index.
pub(crate) struct Stage {
    zones: Box<[Option<ZoneRecords>]>,
}

impl Stage {
    /// The stage for `zones`; `None` when no zone has local answers. Starts
    /// following the hosts files (until the stage is dropped).
    pub(crate) fn build(zones: &[Option<&RecordsPlan>], upkeep: &Upkeep) -> Option<Stage> {
        if zones.iter().all(Option::is_none) {
            return None;
        }
        let zones = zones
            .iter()
            .map(|z| {
                let plan = z.as_ref()?.0.clone();
                let files: Vec<Source> = plan
                    .hosts
                    .iter()
                    .flat_map(|h| &h.files)
                    .map(|(path, data, stamp)| Source::new(path.clone(), data.clone(), *stamp))
                    .collect();
                let files = Arc::new(files);
                if let Some(h) = &plan.hosts {
                    watch::follow(&files, h.zones.clone(), h.reverse, h.reload, upkeep);
                }
                Some(ZoneRecords { plan, files })
            })
            .collect();
        Some(Stage { zones })
    }

    /// Writes the answer to the question (in zone `zone`) into `out` and returns its response code; `None` when the query
    /// goes on to the cache.
    pub(crate) fn answer(
        &self,
        zone: usize,
        asked: &Asked<'_, '_>,
        out: &mut Vec<u8>,
    ) -> Option<u16> {
        let &Asked {
            query,
            folded,
            client,
            tcp,
            limit,
        } = asked;
        let records = self.zones.get(zone)?.as_ref()?;
        let plan = &records.plan;
        if plan.local && local::answer(query, folded, limit, out) {
            return Some(crate::wire::read_u16(out, 2) & 0x000f);
        }
        if !plan.templates.is_empty()
            && let Some(code) = templates(&plan.templates, query, folded, client.ip(), limit, out)
        {
            return Some(code);
        }
        if let Some(hosts) = &plan.hosts
            && let Some(code) = answer_hosts(hosts, &records.files, query, folded, limit, out)
        {
            return Some(code);
        }
        if plan.whoami {
            whoami::answer(query, client, tcp, limit, out);
            return Some(rcode::NOERROR);
        }
        None
    }
}

fn servfail(query: &Query<'_>, out: &mut Vec<u8>) -> Option<u16> {
    crate::wire::build::servfail(query.packet, query.name_end + 4, query.edns, None, out);
    Some(rcode::SERVFAIL)
}

fn templates(
    templates: &[Template],
    query: &Query<'_>,
    folded: &[u8],
    client: IpAddr,
    limit: usize,
    out: &mut Vec<u8>,
) -> Option<u16> {
    let text = template::name_text(folded);
    let remote = client.to_string();
    for t in templates {
        match t.apply(folded, &text, query.qclass, query.qtype, &remote) {
            Outcome::Next => continue,
            Outcome::Fail => return servfail(query, out),
            Outcome::Broken(why) => {
                // A client repeating the name must not flood the log.
                static LIMIT: std::sync::LazyLock<crate::log_limit::LogLimiter> =
                    std::sync::LazyLock::new(|| {
                        crate::log_limit::LogLimiter::new(std::time::Duration::from_secs(10))
                    });
                if let Some(suppressed) = LIMIT.allow() {
                    tracing::warn!(name = %text, suppressed, "template answer: {why}");
                }
                return servfail(query, out);
            }
            Outcome::Answer {
                rcode: code,
                answer,
                authority,
                additional,
            } => {
                if code == rcode::SERVFAIL {
                    return servfail(query, out);
                }
                let mut reply = Reply::new(query, code, true, out);
                for (section, list) in [
                    (Section::Answer, &answer),
                    (Section::Authority, &authority),
                    (Section::Additional, &additional),
                ] {
                    for rr in list {
                        let owner = if rr.owner == folded {
                            Owner::Question
                        } else {
                            Owner::Name(&rr.owner)
                        };
                        reply.add(section, owner, rr.rtype, rr.class, rr.ttl, &rr.rdata);
                    }
                }
                reply.finish(limit);
                return Some(code);
            }
        }
    }
    None
}

/// CoreDNS's `hosts` answer: A, AAAA and PTR from the records, NODATA
/// for another type of a name it has, and for a name it does not have
/// in its zones either the next stage (`fallthrough`) or SERVFAIL (it has
/// no SOA for an NXDOMAIN).
fn answer_hosts(
    hosts: &HostsPlan,
    files: &[Source],
    query: &Query<'_>,
    folded: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Option<u16> {
    let in_zone = hosts.zones.iter().any(|z| suffix_at(folded, z).is_some());
    let qtype = query.qtype;
    if !in_zone && qtype != rtype::PTR {
        return None;
    }
    let loaded: Vec<_> = files.iter().map(|s| s.data.load_full()).collect();
    let all = || {
        loaded
            .iter()
            .map(|d| &**d)
            .chain(std::iter::once(&hosts.inline))
    };
    let mut reply: Option<Reply<'_, '_>> = None;
    match qtype {
        rtype::PTR => {
            let ip = reverse_address(folded)?;
            if all().all(|d| d.names_of(ip).is_empty()) {
                return None;
            }
            let r = reply.insert(Reply::new(query, rcode::NOERROR, true, out));
            for name in all().flat_map(|d| d.names_of(ip)) {
                r.add(
                    Section::Answer,
                    Owner::Question,
                    rtype::PTR,
                    class::IN,
                    hosts.ttl,
                    name,
                );
            }
        }
        rtype::A if all().any(|d| !d.v4(folded).is_empty()) => {
            let r = reply.insert(Reply::new(query, rcode::NOERROR, true, out));
            for ip in all().flat_map(|d| d.v4(folded)) {
                r.add(
                    Section::Answer,
                    Owner::Question,
                    rtype::A,
                    class::IN,
                    hosts.ttl,
                    &ip.octets(),
                );
            }
        }
        rtype::AAAA if all().any(|d| !d.v6(folded).is_empty()) => {
            let r = reply.insert(Reply::new(query, rcode::NOERROR, true, out));
            for ip in all().flat_map(|d| d.v6(folded)) {
                r.add(
                    Section::Answer,
                    Owner::Question,
                    rtype::AAAA,
                    class::IN,
                    hosts.ttl,
                    &ip.octets(),
                );
            }
        }
        _ => {}
    }
    if let Some(reply) = reply {
        reply.finish(limit);
        return Some(rcode::NOERROR);
    }
    let exists = all().any(|d| !d.v4(folded).is_empty() || !d.v6(folded).is_empty());
    if !exists {
        if hosts.fallthrough.through(folded) {
            return None;
        }
        return servfail(query, out);
    }
    Reply::new(query, rcode::NOERROR, true, out).finish(limit);
    Some(rcode::NOERROR)
}
