//! The TOML text of a [`Plan`]: only what differs from nodens' defaults,
//! each value with a comment saying which Corefile line it comes from, so
//! the file can be reviewed against the Corefile side by side.

use std::fmt::Write as _;
use std::time::Duration;

use super::Options;
use super::translate::{Plan, Upstream, ZoneCacheOut, ZoneOut};
use crate::config::File;

/// Bytes of cache per CoreDNS cache entry: a stored answer (at most
/// `max_udp_payload`, 1232 bytes, typically 100 to 300) with its key and
/// bookkeeping, rounded up so the converted cache holds at least as many.
const BYTES_PER_ENTRY: u64 = 1024;
const MIB: u64 = 1 << 20;

/// A TOML string, quoted and escaped.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `30s`, `2h`, `1500ms`: what nodens' duration values read.
fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() == 0 {
        match secs {
            0 => "0s".into(),
            s if s % 3600 == 0 => format!("{}h", s / 3600),
            s if s % 60 == 0 && s >= 300 => format!("{}m", s / 60),
            s => format!("{s}s"),
        }
    } else {
        format!("{}ms", d.as_nanos().div_ceil(1_000_000))
    }
}

fn quoted_list<T: ToString>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(|i| quote(&i.to_string())).collect();
    format!("[{}]", items.join(", "))
}

pub(super) fn emit(plan: &Plan, options: &Options) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "# nodens configuration converted from {} by `nodens convert-corefile`.\n\
         # Check it where it runs: nodens check-config FILE. Options: docs/configuration.md;\n\
         # moving from node-local-dns: docs/migration.md.",
        options.source_name.replace('\n', " ")
    );
    server(w, plan, options);
    cache(w, plan);
    metrics(w, plan, options);
    cluster(w, plan, options);
    for zone in &plan.zones {
        self::zone(w, zone);
    }
    dnstap(w, plan);
    out
}

/// `[dnstap]`, from CoreDNS's `dnstap` (its `forward` sends forwarder
/// messages too).
fn dnstap(w: &mut String, plan: &Plan) {
    let Some(d) = &plan.dnstap else { return };
    let _ = writeln!(
        w,
        "\n[dnstap]   # dnstap, line {}\nsocket = {}\nforwarder = true",
        d.line,
        quote(&d.socket)
    );
    if let Some(identity) = &d.identity {
        let _ = writeln!(w, "identity = {}", quote(identity));
    }
    if let Some(version) = &d.version {
        let _ = writeln!(w, "version = {}", quote(version));
    }
    if !d.full {
        let _ = writeln!(
            w,
            "full = false   # no `full`: the DNS messages are left out"
        );
    }
}

/// What the Helm chart's pods expect of a `configOverride` (its defaults):
/// the handover socket on its state hostPath, its uid, the control socket
/// its exec probes ask, its probe server (for `metrics.probes: http`).
const CHART_HANDOVER_SOCKET: &str = "/run/nodens/handover.sock";
const CHART_CONTROL_SOCKET: &str = "/run/nodens/control.sock";
const CHART_UID: u32 = 65353;
const CHART_PROBE_LISTEN: &str = "127.0.0.1:9254";

fn server(w: &mut String, plan: &Plan, options: &Options) {
    let _ = writeln!(w, "\n[server]\nlisten = {}", quoted_list(&plan.listen));
    let handover = match (&options.handover_socket, options.for_chart) {
        (Some(path), _) => Some(path.display().to_string()),
        (None, true) => Some(CHART_HANDOVER_SOCKET.to_string()),
        (None, false) => None,
    };
    if let Some(path) = handover {
        let _ = writeln!(
            w,
            "handover_socket = {}   # zero-loss upgrades (docs/node.md)",
            quote(&path)
        );
    }
    if options.for_chart {
        let _ = writeln!(
            w,
            "run_as_user = {CHART_UID}   # the chart's server.runAsUser (docs/security.md)"
        );
        let _ = writeln!(
            w,
            "control_socket = {}   # the chart's probes (nodens probe), nodens cache and top",
            quote(CHART_CONTROL_SOCKET)
        );
    }
    if let Some(n) = plan.max_misses_in_flight {
        let _ = writeln!(
            w,
            "max_misses_in_flight = {n}   # the sum of forward's max_concurrent"
        );
    }
    if let Some(d) = plan.lameduck {
        let _ = writeln!(
            w,
            "lameduck = {}   # health's lameduck: answering, not ready, after SIGTERM",
            quote(&duration(d))
        );
    }
    if plan.node_setup {
        let _ = writeln!(
            w,
            "\n# node-cache's -setupinterface -setupiptables: the interface nodelocaldns holds the\n\
             # listen addresses and rules take their DNS out of conntrack (docs/node.md).\n\
             [node]\nsetup = true"
        );
    }
}

/// The cluster domain of `[cluster]` (local NXDOMAIN for names the
/// Kubernetes DNS schema rules out), when it is not the default.
fn cluster(w: &mut String, plan: &Plan, options: &Options) {
    let from_block = plan.cluster_domain.as_ref();
    let (domain, source) = match (options.domain.as_deref(), from_block) {
        (Some(d), _) => (d, "__PILLAR__DNS__DOMAIN__".to_string()),
        (None, Some((d, line))) => (
            d.as_str(),
            format!("the zone of the block that forwards to the cluster DNS (line {line})"),
        ),
        (None, None) => return,
    };
    let domain = domain.trim_end_matches('.');
    let default = File::default().cluster.domain.into_inner();
    if domain.eq_ignore_ascii_case(default.0.trim_end_matches('.')) {
        return;
    }
    let _ = writeln!(
        w,
        "\n# {source}: names under it that cannot exist are answered locally.\n\
         [cluster]\ndomain = {}",
        quote(domain)
    );
}

fn cache(w: &mut String, plan: &Plan) {
    let c = &plan.cache;
    let _ = writeln!(w, "\n[cache]");
    if c.entries > 0 {
        let mib = c.entries.saturating_mul(BYTES_PER_ENTRY).div_ceil(MIB);
        let _ = writeln!(
            w,
            "capacity = \"{mib} MiB\"   # the Corefile's caches held {} entries (success + denial); 1 KiB each",
            c.entries
        );
    }
}

fn metrics(w: &mut String, plan: &Plan, options: &Options) {
    let chosen = plan.metrics.or(plan.health);
    let Some((addr, line)) = chosen else {
        let default = File::default()
            .metrics
            .listen
            .0
            .map_or("none".into(), |a| a.to_string());
        let _ = writeln!(
            w,
            "\n# No prometheus or health in the Corefile: nodens' default [metrics] listen, {default}."
        );
        if options.for_chart {
            let _ = writeln!(w, "[metrics]");
            chart_probes(w);
        }
        return;
    };
    let _ = writeln!(
        w,
        "\n[metrics]\n# /metrics, /health and /ready, all on this one address (line {line})."
    );
    if let Some((health, hline)) = plan.health
        && health != addr
    {
        let _ = writeln!(
            w,
            "# The Corefile had health on {health} (line {hline}): move the liveness probe here."
        );
    }
    let _ = writeln!(w, "listen = {}", quote(&addr.to_string()));
    if options.for_chart {
        chart_probes(w);
    }
}

/// The probe server the chart's liveness and readiness probes ask.
fn chart_probes(w: &mut String) {
    let _ = writeln!(
        w,
        "probe_listen = {}   # the chart's probes with metrics.probes: http",
        quote(CHART_PROBE_LISTEN)
    );
}

fn zone(w: &mut String, z: &ZoneOut) {
    let _ = writeln!(
        w,
        "\n[[zone]]   # line {}\nname = {}",
        z.line,
        quote(&z.name)
    );
    match &z.upstream {
        Upstream::Addresses(a) => {
            let _ = writeln!(w, "upstreams = {}", quoted_list(a));
        }
        Upstream::Service(s) => {
            let _ = writeln!(
                w,
                "upstream_service = {}   # __PILLAR__CLUSTER__DNS__ (node-cache's -upstreamsvc)",
                quote(s)
            );
        }
        Upstream::ResolvConf(p, pillar) => {
            let why = if *pillar {
                "   # __PILLAR__UPSTREAM__SERVERS__: the node's resolvers"
            } else {
                ""
            };
            let _ = writeln!(w, "resolv_conf = {}{why}", quote(&p.display().to_string()));
        }
    }
    if !z.listen.is_empty() {
        let _ = writeln!(
            w,
            "listen = {}   # a view: only the addresses its block serves",
            quoted_list(&z.listen)
        );
    }
    if let Some(tls) = &z.tls {
        tls.write_keys(w);
    } else if z.force_tcp {
        let _ = writeln!(w, "transport = \"force_tcp\"");
    }
    if z.minimal {
        let _ = writeln!(w, "minimal = true");
    }
    if let Some((policy, why)) = z.policy {
        let _ = writeln!(w, "policy = {}   # {why}", quote(policy));
    }
    let durations = [
        ("min_ttl", z.min_ttl),
        ("max_ttl", z.max_ttl),
        ("negative_max_ttl", z.negative_max_ttl),
        ("health_check", z.health_check),
    ];
    for (key, value) in durations {
        if let Some(d) = value {
            let _ = writeln!(w, "{key} = {}", quote(&duration(d)));
        }
    }
    if let Some(n) = z.max_misses_in_flight {
        let _ = writeln!(w, "max_misses_in_flight = {n}   # forward's max_concurrent");
    }
    if let Some(n) = z.max_fails {
        let _ = writeln!(w, "max_fails = {n}");
    }
    w.push_str(&z.records.keys);
    z.rules.write_keys(w);
    if let Some(idle) = z.idle_timeout {
        let _ = writeln!(
            w,
            "\n[zone.pool]\nidle_timeout = {}   # forward's expire",
            quote(&duration(idle))
        );
    }
    if let Some(tls) = &z.tls {
        tls.write_table(w, z.forward_line);
    }
    zone_cache(w, &z.cache);
    w.push_str(&z.records.tables);
    z.rules.write_tables(w);
    if let Some(classes) = &z.query_log {
        let _ = writeln!(
            w,
            "\n[zone.query_log]   # log\nclasses = {}",
            quoted_list(classes)
        );
    }
}

/// `[zone.cache]`: what the block's `cache` sets, each with its line.
fn zone_cache(w: &mut String, c: &ZoneCacheOut) {
    if *c == ZoneCacheOut::default() {
        return;
    }
    let _ = writeln!(w, "\n[zone.cache]");
    if let Some(line) = c.off {
        let _ = writeln!(
            w,
            "enabled = false   # the block at line {line} has no `cache`: CoreDNS caches nothing there"
        );
    }
    for (key, value, why) in [
        ("servfail_ttl", c.servfail_ttl, "servfail"),
        ("stale_max_age", c.stale_max_age, "serve_stale"),
        (
            "stale_answer_timeout",
            c.stale_answer_timeout,
            "serve_stale immediate",
        ),
    ] {
        if let Some((d, line)) = value {
            let _ = writeln!(w, "{key} = {}   # {why}, line {line}", quote(&duration(d)));
        }
    }
    if let Some(((hits, percent), line)) = c.prefetch {
        let _ = writeln!(w, "prefetch_min_hits = {hits}   # prefetch, line {line}");
        let _ = writeln!(w, "prefetch_percent = {percent}");
    }
    if let Some(line) = c.no_success {
        let _ = writeln!(w, "success = false   # disable success, line {line}");
    }
    if let Some(line) = c.no_denial {
        let _ = writeln!(w, "denial = false   # disable denial, line {line}");
    }
}
