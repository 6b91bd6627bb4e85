//! `config::File::parse` (parse and check) on any UTF-8 text, then
//! `config::Config::parse` (which also compiles) when every zone lists its
//! upstreams, so that no fuzzed path is ever read as a resolv.conf: never panics; an error has a
//! message and, when it names a position, a line and column inside the
//! text; an accepted configuration satisfies what the rest of nodens
//! relies on without checking (listen addresses, zones, TTL clamps that
//! `u32::clamp` would panic on).
//!
//! Input: the text of a configuration file (non-UTF-8 inputs are skipped:
//! `Config::load` rejects them before parsing).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodens::config::{Config, File};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match File::parse(text) {
        Err(e) => {
            assert!(!e.message.trim().is_empty(), "error without a message");
            assert!(e.file.is_none());
            if let Some((line, col)) = e.position {
                let lines: Vec<&str> = text.split('\n').collect();
                assert!(
                    line >= 1 && line <= lines.len() + 1,
                    "error at line {line} of a {}-line text: {e}",
                    lines.len()
                );
                assert!(col >= 1, "column 0: {e}");
                if let Some(l) = lines.get(line - 1) {
                    assert!(
                        col <= l.len() + 1,
                        "column {col} of a {}-byte line: {e}",
                        l.len()
                    );
                }
            }
            // What check-config prints.
            let shown = e.to_string();
            assert!(shown.contains(e.message.as_str()));
        }
        Ok(config) => {
            assert!(!config.server.listen.is_empty(), "no listen address");
            assert!(config.server.max_udp_payload >= 512);
            assert!(config.server.tcp_max_connections >= 1 && config.server.tcp_max_in_flight >= 1);
            assert!(!config.server.query_timeout.is_zero());
            assert!(config.cache.prefetch_percent <= 100);
            assert!(!config.zones.is_empty(), "no zone");
            let addrs = listen_addrs(&config);
            for (i, a) in addrs.iter().enumerate() {
                assert!(!addrs[..i].contains(a), "listen address {a} twice");
            }
            for (i, z) in config.zones.iter().enumerate() {
                let name = &z.name.get_ref().0;
                assert!(name.ends_with('.'), "zone name {name:?} is not absolute");
                assert!(
                    !config.zones[..i]
                        .iter()
                        .any(|o| &o.name.get_ref().0 == name),
                    "zone {name} twice"
                );
                // The cache clamps TTLs with u32::clamp(min, max), which
                // panics if min > max, after converting to whole seconds.
                let secs = |d: std::time::Duration| d.as_secs().min(u32::MAX.into()) as u32;
                assert!(
                    secs(z.min_ttl) <= secs(z.max_ttl),
                    "zone {name}: min_ttl > max_ttl"
                );
                assert!(!z.upstream_timeout.is_zero());
                assert!(z.pool.max_connections >= 1 && z.pool.max_in_flight >= 1);
                for up in &z.upstreams {
                    let up = up.get_ref().0;
                    // A wildcard listener loops to this host's addresses only
                    // (read from its interfaces); loopback is always one.
                    let held = up.ip().is_loopback() || up.ip().is_unspecified();
                    assert!(
                        !addrs.iter().any(|l| l.port() == up.port()
                            && (l.ip() == up.ip() || l.ip().is_unspecified() && held)),
                        "upstream {up} is a listen address"
                    );
                }
            }
            // Parsing is a function of the text.
            let again = File::parse(text).expect("second parse of the same text failed");
            assert_eq!(listen_addrs(&again), addrs);
            assert_eq!(again.zones.len(), config.zones.len());
            if config.zones.iter().all(|z| !z.upstreams.is_empty()) {
                compiled(text, &config);
            }
        }
    }
});

fn listen_addrs(file: &File) -> Vec<std::net::SocketAddr> {
    file.server.listen.iter().map(|a| a.get_ref().0).collect()
}

/// Compiling a checked file: it fails only on the shared-upstream rule, with
/// a position inside the text; the compiled zones are the file's, in order.
fn compiled(text: &str, file: &File) {
    match Config::parse(text) {
        Err(e) => {
            assert!(
                e.message.contains("must agree"),
                "unexpected compile error: {e}"
            );
            if let Some((line, _)) = e.position {
                assert!(line >= 1 && line <= text.split('\n').count(), "{e}");
            }
        }
        Ok(config) => {
            assert_eq!(config.listen, listen_addrs(file));
            assert_eq!(config.zones.len(), file.zones.len());
            for (plan, zone) in config.zones.iter().zip(&file.zones) {
                assert_eq!(plan.name, zone.name.get_ref().0);
                assert!(plan.ttl.min_ttl <= plan.ttl.max_ttl);
                let listed: Vec<_> = zone.upstreams.iter().map(|u| u.get_ref().0).collect();
                assert_eq!(plan.upstreams, listed);
            }
        }
    }
}
