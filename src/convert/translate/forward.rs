//! `forward`: where a zone's queries go (addresses, a resolv.conf, the
//! Service or resolv.conf a pillar stands for) and its options; `tls://`
//! destinations and the TLS options are `tls.rs`'s. nodens keeps one pool
//! and one health state per upstream server, so zones that share a server
//! must agree on the pool's settings, TLS included ([`agree_on_pools`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::super::corefile::{Directive, Token, go_duration};
use super::super::pillars::{CLUSTER_DNS, UPSTREAM_SERVERS};
use super::super::{ConvertError, Options};
use super::block_out::{BlockOut, describe};
use super::keys::Keys;
use super::tls::{self, TlsDestinations};
use super::{Plan, Upstream, ZoneOut, zone_defaults};
use crate::config::ZoneName;

pub(super) fn forward(
    d: &Directive,
    keys: &Keys,
    out: &mut BlockOut,
    options: &Options,
    plan: &mut Plan,
) -> Result<(), ConvertError> {
    let line = d.line();
    if out.forward.is_some() {
        plan.untranslated.add(
            line,
            "a second `forward` in one block: nodens has one set of upstreams per zone",
        );
        return Ok(());
    }
    let Some((from, to)) = d.args.split_first() else {
        return Err(ConvertError::at(line, "forward without arguments"));
    };
    if from.text != "." {
        let from_zone: Option<ZoneName> = from.text.parse().ok();
        let matches = keys.zones.iter().all(|(z, _)| {
            let zone: Option<ZoneName> = z.parse().ok();
            zone.is_some() && zone == from_zone
        });
        if !matches {
            plan.untranslated.add(
                line,
                format!("forward {}: forwarding part of the block's zone is not translated; make it a server block of its own", from.text),
            );
            return Ok(());
        }
    }
    if to.is_empty() {
        return Err(ConvertError::at(line, "forward without a destination"));
    }
    let Some((upstream, tls)) = destinations(to, options, plan)? else {
        return Ok(());
    };
    if let Upstream::ResolvConf(_, true) = upstream {
        plan.notes.add(
            line,
            format!(
                "{UPSTREAM_SERVERS}: the nameservers of {} (node-cache's default); if the kube-dns ConfigMap sets upstreamNameservers or stubDomains, node-cache used those: set [kubernetes] kube_dns_config to the mounted ConfigMap to follow them",
                options.resolv_conf.display()
            ),
        );
    }
    if let Upstream::Service(s) = &upstream {
        plan.notes.add(
            line,
            format!("{CLUSTER_DNS}: upstream_service = \"{s}\", the Service node-cache's -upstreamsvc names; nodens reads its address from the pod's environment"),
        );
    }
    out.forward = Some((upstream, line));
    for option in d.block.iter().flatten() {
        forward_option(option, out, plan);
    }
    tls::settle(tls, line, out, plan)
}

/// `forward`'s destinations: addresses (plain, or all `tls://` with what
/// they say about TLS), a resolv.conf, or a pillar. `None` when they are
/// listed as not translated.
fn destinations(
    to: &[Token],
    options: &Options,
    plan: &mut Plan,
) -> Result<Option<(Upstream, Option<TlsDestinations>)>, ConvertError> {
    let mut addresses = Vec::new();
    let mut tls = Vec::new();
    let mut other: Option<Upstream> = None;
    for t in to {
        if let Some((addr, name)) = tls::destination(t)? {
            addresses.push(addr);
            tls.push((addr, name));
            continue;
        }
        let text = t.text.as_str();
        let kind = if text == CLUSTER_DNS {
            Upstream::Service(options.upstream_service.clone())
        } else if text == UPSTREAM_SERVERS {
            Upstream::ResolvConf(options.resolv_conf.clone(), true)
        } else if text.starts_with('/') {
            Upstream::ResolvConf(PathBuf::from(text), false)
        } else {
            let bare = text.strip_prefix("dns://").unwrap_or(text);
            if bare.contains("://") {
                plan.untranslated.add(
                    t.line,
                    format!("forward to `{text}`: nodens forwards plain DNS and DNS over TLS (tls://) only; this forward is not translated"),
                );
                return Ok(None);
            }
            let addr = bare
                .parse::<SocketAddr>()
                .ok()
                .or_else(|| {
                    bare.parse::<IpAddr>()
                        .ok()
                        .map(|ip| SocketAddr::new(ip, 53))
                })
                .ok_or_else(|| {
                    ConvertError::at(
                        t.line,
                        format!("forward to `{text}`: not an address or a file"),
                    )
                })?;
            addresses.push(addr);
            continue;
        };
        if other.as_ref().is_some_and(|o| o != &kind) {
            return Err(ConvertError::at(
                t.line,
                "forward mixes two resolv.conf files or Services: nodens takes one per zone",
            ));
        }
        other = Some(kind);
    }
    let line = to[0].line;
    if !tls.is_empty() && tls.len() < addresses.len() {
        plan.untranslated.add(
            line,
            "forward mixes tls:// and plain destinations: CoreDNS speaks TLS to some and plain DNS to the others, nodens has one transport per zone; this forward is not translated",
        );
        return Ok(None);
    }
    match (other, addresses.is_empty()) {
        (Some(kind), true) => Ok(Some((kind, None))),
        (None, false) if tls.is_empty() => Ok(Some((Upstream::Addresses(addresses), None))),
        (None, false) => Ok(tls::destinations(&tls, line, plan)
            .map(|tls| (Upstream::Addresses(addresses), Some(tls)))),
        (Some(_), false) => Err(ConvertError::at(
            line,
            "forward mixes addresses with a resolv.conf or a Service: nodens takes one kind per zone",
        )),
        (None, true) => unreachable!("`to` is not empty"),
    }
}

fn forward_option(option: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    if tls::option(option, out, plan) {
        return;
    }
    let line = option.line();
    let args = option.arg_texts();
    let duration = |plan: &mut Plan| -> Option<Duration> {
        let d = args.first().and_then(|a| go_duration(a));
        if d.is_none() {
            plan.untranslated.add(
                line,
                format!("forward {}: expected a duration", describe(option)),
            );
        }
        d
    };
    match option.name.text.as_str() {
        "force_tcp" => out.force_tcp = true,
        "prefer_udp" => out.force_tcp = false,
        "expire" | "health_check" if args.first().and_then(|a| go_duration(a)) == Some(Duration::ZERO) => {
            plan.untranslated.add(
                line,
                format!("forward {}: nodens needs a duration above 0", describe(option)),
            );
        }
        "expire" => out.idle_timeout = duration(plan),
        "health_check" => {
            out.health_check = duration(plan);
            if args.len() > 1 {
                plan.untranslated.add(
                    line,
                    format!("forward health_check {}: nodens probes with `. IN NS`, recursion desired", args[1..].join(" ")),
                );
            }
        }
        "max_fails" => match args.first().and_then(|a| a.parse::<u32>().ok()) {
            Some(n) if n > 0 => out.max_fails = Some(n),
            _ => plan.untranslated.add(
                line,
                "forward max_fails 0 (never mark an upstream down): nodens always does after max_fails",
            ),
        },
        "policy" => match args.first().copied() {
            Some("sequential") => out.policy = Some(("sequential", "forward's policy sequential")),
            Some("random") => out.policy = Some(("random", "forward's policy random")),
            Some("round_robin") => {
                out.policy = Some(("round_robin", "forward's policy round_robin"))
            }
            _ => plan.untranslated.add(line, format!("forward {}: unknown policy", describe(option))),
        },
        "except" => super::except::except(option, out, plan),
        "max_concurrent" => match args.first().and_then(|a| a.parse::<u32>().ok()) {
            Some(0) => {}
            Some(n) => {
                out.max_concurrent = Some(n);
                *plan.max_misses_in_flight.get_or_insert(0) += u64::from(n);
                plan.notes.add(
                    line,
                    "forward max_concurrent: the zone's max_misses_in_flight, and the server's the sum of them; beyond the zone's a miss gets a stale answer or SERVFAIL at once, where CoreDNS answered REFUSED",
                );
            }
            None => plan.untranslated.add(line, format!("forward {}: expected a number", describe(option))),
        },
        _ => plan.untranslated.add(
            line,
            format!("forward option {}: no nodens equivalent", describe(option)),
        ),
    }
}

/// nodens gives one server one connection pool and one health state, so
/// zones that share an upstream must agree on `expire`, `max_fails`,
/// `health_check` and TLS (`tls_servername`, `tls`): the first zone's
/// settings are kept, and a later zone that asked for others is listed.
/// One zone over TLS and another in the clear to the same server is an
/// error: keeping either zone's would change what the other sends.
pub(super) fn agree_on_pools(plan: &mut Plan) -> Result<(), ConvertError> {
    // What a zone that does not set them has.
    let defaults = zone_defaults();
    let differences = |a: &ZoneOut, b: &ZoneOut| -> Vec<&'static str> {
        let differs = [
            (
                a.idle_timeout.unwrap_or(defaults.pool.idle_timeout)
                    != b.idle_timeout.unwrap_or(defaults.pool.idle_timeout),
                "expire",
            ),
            (
                a.max_fails.unwrap_or(defaults.max_fails)
                    != b.max_fails.unwrap_or(defaults.max_fails),
                "max_fails",
            ),
            (
                a.health_check.unwrap_or(defaults.health_check)
                    != b.health_check.unwrap_or(defaults.health_check),
                "health_check",
            ),
            (a.tls != b.tls, "tls_servername / tls"),
        ];
        differs
            .iter()
            .filter(|(d, _)| *d)
            .map(|&(_, what)| what)
            .collect()
    };
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..plan.zones.len() {
        let keys = plan.zones[i].upstream.share_keys();
        let owner = keys.iter().find_map(|k| owners.get(k).map(|&j| (k, j)));
        if let Some((server, j)) = owner {
            let first = plan.zones[j].clone();
            let zone = &mut plan.zones[i];
            if zone.tls.is_some() != first.tls.is_some() {
                return Err(ConvertError::at(
                    zone.forward_line,
                    format!(
                        "forward to {server}: zone {} forwards to it {} (line {}); nodens keeps one pool per server, TLS or plain, not both",
                        first.name,
                        if first.tls.is_some() {
                            "over TLS"
                        } else {
                            "in the clear"
                        },
                        first.forward_line
                    ),
                ));
            }
            let differ = differences(zone, &first);
            if !differ.is_empty() {
                zone.idle_timeout = first.idle_timeout;
                zone.max_fails = first.max_fails;
                zone.health_check = first.health_check;
                zone.tls = first.tls.clone();
                let message = format!(
                    "zone {}: forward's {} differ from zone {} (line {}), which forwards to the same server; nodens keeps one pool per server, so zone {}'s are used",
                    zone.name,
                    differ.join(" / "),
                    first.name,
                    first.line,
                    first.name
                );
                let line = zone.line;
                plan.untranslated.add(line, message);
            }
        }
        for k in keys {
            owners.entry(k).or_insert(i);
        }
    }
    Ok(())
}
