//! One server block's plugins, and the zones the block becomes. `forward`
//! and `cache` have files of their own; `bind`, `prometheus` and `health`
//! are here, and so are the plugins whose job nodens does another way
//! (`ready`, `reload`, `loop`, `errors`: a note each; `log` has a file of
//! its own) and the rest
//! (listed as having no equivalent).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::super::corefile::{Directive, ServerBlock, go_duration};
use super::super::{ConvertError, Options};
use super::block_out::{BlockOut, describe};
use super::keys::Keys;
use super::{Findings, Plan, ZoneOut, cache, dns64, forward, log, records, rewrite, zone_defaults};

/// Translates one block into zones; returns its listen addresses, or
/// `None` when the block gave no zone.
pub(super) fn translate_block(
    block: &ServerBlock,
    keys: &Keys,
    options: &Options,
    plan: &mut Plan,
) -> Result<Option<Vec<SocketAddr>>, ConvertError> {
    let mut out = BlockOut::default();
    for d in &block.directives {
        let line = d.line();
        match d.name.text.as_str() {
            "bind" => bind(d, &mut out, plan),
            "forward" => forward::forward(d, keys, &mut out, options, plan)?,
            "cache" => cache::cache(d, &mut out, plan),
            "rewrite" => rewrite::rewrite(d, &mut out, plan),
            "dns64" => dns64::dns64(d, &mut out, plan),
            "prometheus" => http_endpoint(
                d,
                "localhost:9153",
                &mut plan.metrics,
                "prometheus",
                &mut plan.untranslated,
            ),
            "health" => {
                health_options(d, plan);
                http_endpoint(
                    d,
                    ":8080",
                    &mut plan.health,
                    "health",
                    &mut plan.untranslated,
                )
            }
            "hosts" => records::hosts(d, &mut out, plan),
            "template" => records::template(d, &mut out, plan),
            "local" => records::local(d, &mut out),
            "whoami" => records::whoami(d, &mut out),
            "minimal" => out.minimal = true,
            "ready" => plan.notes.add(
                line,
                "ready: nodens answers /ready on the [metrics] listen address",
            ),
            "reload" => plan.notes.add(
                line,
                "reload: nodens re-reads its file on SIGHUP (docs/configuration.md, Reloading); a changed ConfigMap needs a SIGHUP or a rollout",
            ),
            "loop" => plan.notes.add(
                line,
                "loop: no probe query at start; check-config refuses an upstream that is one of nodens' own listen addresses",
            ),
            "errors" => plan.notes.add(
                line,
                "errors: nodens logs upstream errors (one line per upstream per log.upstream_error_interval) and counts every one in its metrics",
            ),
            "log" => log::log(d, keys, &mut out, plan),
            "dnstap" => super::dnstap::dnstap(d, plan),
            other => plan.untranslated.add(
                line,
                format!("{}: the `{other}` plugin has no nodens equivalent", describe(d)),
            ),
        }
    }
    records::settle_whoami(&mut out, &options.resolv_conf, plan);

    let no_bind = out.binds.is_empty();
    let listen_on = |port: u16| -> Vec<SocketAddr> {
        if no_bind {
            vec![SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)]
        } else {
            out.binds
                .iter()
                .map(|ip| SocketAddr::new(*ip, port))
                .collect()
        }
    };
    let zone_listens: Vec<Vec<SocketAddr>> = keys.ports.iter().map(|&p| listen_on(p)).collect();
    plan.served
        .extend(zone_listens.iter().flatten().map(|&a| (a, block.line())));
    let Some((upstream, forward_line)) = out.forward.clone() else {
        super::unforwarded::block_without_forward(block.line(), keys, &zone_listens, plan);
        return Ok(None);
    };
    if !out.cached {
        out.cache.off = Some(block.line());
    }
    if no_bind {
        plan.notes.add(
            block.line(),
            "no `bind`: CoreDNS listened on every address; nodens listens on 0.0.0.0 (IPv4 only) and sets up nothing on the node",
        );
    }
    let mut listen: Vec<SocketAddr> = Vec::new();
    if let Some(min) = out.min_ttl
        && min > out.max_ttl.unwrap_or_else(|| zone_defaults().max_ttl)
    {
        plan.untranslated.add(
            block.line(),
            "cache success MINTTL above its TTL: nodens needs min_ttl <= max_ttl; min_ttl left out",
        );
        out.min_ttl = None;
    }
    let mut added = false;
    for ((name, line), zone_listen) in keys.zones.iter().zip(&zone_listens) {
        let shares = |z: &ZoneOut| z.listen.iter().any(|a| zone_listen.contains(a));
        if let Some(earlier) = plan.zones.iter().find(|z| &z.name == name && shares(z)) {
            plan.untranslated.add(
                *line,
                format!("zone {name} again (first at line {}): nodens has one set of upstreams per zone; this block is left out", earlier.line),
            );
            continue;
        }
        let policy = out.policy.or_else(|| {
            upstream
                .may_be_several()
                .then_some(("random", "forward's default policy (random) kept"))
        });
        plan.zones.push(ZoneOut {
            name: name.clone(),
            line: *line,
            upstream: upstream.clone(),
            forward_line,
            force_tcp: out.force_tcp,
            tls: out.tls.clone(),
            policy,
            max_fails: out.max_fails,
            max_misses_in_flight: out.max_concurrent,
            health_check: out.health_check,
            idle_timeout: out.idle_timeout,
            min_ttl: out.min_ttl,
            max_ttl: out.max_ttl,
            negative_max_ttl: out.negative_max_ttl,
            cache: out.cache.clone(),
            records: out.records.clone(),
            listen: zone_listen.clone(),
            rules: out.rules.clone(),
            query_log: log::classes_of(&out, name),
            minimal: out.minimal,
        });
        for &a in zone_listen {
            if !listen.contains(&a) {
                listen.push(a);
            }
        }
        added = true;
    }
    Ok(added.then_some(listen))
}

fn bind(d: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let mut args = d.args.iter();
    for t in args.by_ref() {
        if t.text == "except" {
            plan.untranslated.add(
                t.line,
                "bind ... except: list the addresses to serve instead",
            );
            break;
        }
        match t.text.parse::<IpAddr>() {
            Ok(ip) if !out.binds.contains(&ip) => out.binds.push(ip),
            Ok(_) => {}
            Err(_) => plan.untranslated.add(
                t.line,
                format!(
                    "bind `{}`: not an IP address (an interface name?); list its addresses",
                    t.text
                ),
            ),
        }
    }
}

/// `prometheus [ADDR]` or `health [ADDR]`: the first address wins.
fn http_endpoint(
    d: &Directive,
    default: &str,
    slot: &mut Option<(SocketAddr, usize)>,
    what: &str,
    untranslated: &mut Findings,
) {
    let line = d.line();
    let text = d.args.first().map_or(default, |t| t.text.as_str());
    let Some(addr) = http_address(text) else {
        untranslated.add(
            line,
            format!("{what} `{text}`: not an address nodens can listen on"),
        );
        return;
    };
    match slot {
        None => *slot = Some((addr, line)),
        Some((a, _)) if *a == addr => {}
        Some((a, first)) => untranslated.add(
            line,
            format!("{what} {addr} differs from {a} (line {first}): nodens has one HTTP address"),
        ),
    }
}

/// `:9253` (every address), `localhost:9153`, `IP:port`, `[IPv6]:port`.
fn http_address(text: &str) -> Option<SocketAddr> {
    if let Some(port) = text.strip_prefix(':') {
        return Some(SocketAddr::new(
            Ipv4Addr::UNSPECIFIED.into(),
            port.parse().ok()?,
        ));
    }
    if let Some(port) = text.strip_prefix("localhost:") {
        return Some(SocketAddr::new(
            Ipv4Addr::LOCALHOST.into(),
            port.parse().ok()?,
        ));
    }
    text.parse().ok()
}

/// `health { lameduck D }`: answering, not ready, for D after SIGTERM is
/// `[server] lameduck` (the longest of the blocks' for the one process).
fn health_options(d: &Directive, plan: &mut Plan) {
    for sub in d.block.iter().flatten() {
        let args = sub.arg_texts();
        match (sub.name.text.as_str(), args.as_slice()) {
            ("lameduck", [text]) if go_duration(text).is_some() => {
                let lameduck = go_duration(text).unwrap_or_default();
                plan.lameduck = plan.lameduck.max(Some(lameduck));
            }
            _ => plan.untranslated.add(
                sub.line(),
                format!(
                    "health `{}`: not understood (CoreDNS knows `lameduck DURATION`); on SIGTERM nodens turns /ready to 503 and drains for server.shutdown_grace",
                    sub.name.text
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_addresses() {
        assert_eq!(http_address(":9253"), Some("0.0.0.0:9253".parse().unwrap()));
        assert_eq!(
            http_address("localhost:9153"),
            Some("127.0.0.1:9153".parse().unwrap())
        );
        assert_eq!(
            http_address("169.254.20.10:8080"),
            Some("169.254.20.10:8080".parse().unwrap())
        );
        assert_eq!(http_address("nowhere"), None);
    }
}
