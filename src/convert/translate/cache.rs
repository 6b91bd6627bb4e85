//! `cache`: its TTL caps become the zone's `max_ttl` / `negative_max_ttl`
//! / `min_ttl`, its capacity (in entries) the `[cache]` capacity (in
//! bytes, in `emit`: one cache for every zone, the sum of the blocks'),
//! and `prefetch`, `serve_stale`, `servfail` and `disable` the block's
//! zones' `[zone.cache]`. A block without `cache` gets `[zone.cache]
//! enabled = false` (block.rs).

use std::time::Duration;

use super::super::corefile::{Directive, go_duration};
use super::Plan;
use super::block_out::{BlockOut, describe};

/// CoreDNS's cache capacity when `success` or `denial` gives none (entries).
const COREDNS_CACHE_ENTRIES: u64 = 9984;

/// `cache [TTL] [ZONES...] { success | denial | prefetch | serve_stale | servfail ... }`.
pub(super) fn cache(d: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = d.line();
    out.cached = true;
    let args = d.arg_texts();
    if let Some(ttl) = args.first() {
        match ttl.parse::<u32>() {
            Ok(secs) => {
                let secs = u64::from(secs);
                out.max_ttl = Some(Duration::from_secs(secs));
                out.negative_max_ttl = Some(Duration::from_secs(secs));
                if args.len() > 1 {
                    plan.untranslated
                        .add(line, "cache ZONES: nodens caches every zone it forwards");
                }
            }
            Err(_) => plan
                .untranslated
                .add(line, "cache ZONES: nodens caches every zone it forwards"),
        }
    }
    let mut success = COREDNS_CACHE_ENTRIES;
    let mut denial = COREDNS_CACHE_ENTRIES;
    for option in d.block.iter().flatten() {
        let line = option.line();
        let args = option.arg_texts();
        let seconds = |i: usize| {
            args.get(i)
                .and_then(|a| a.parse::<u32>().ok())
                .map(|s| Duration::from_secs(s.into()))
        };
        match option.name.text.as_str() {
            "success" => {
                success = args
                    .first()
                    .and_then(|a| a.parse::<u32>().ok())
                    .map_or(success, u64::from);
                if let Some(ttl) = seconds(1) {
                    out.max_ttl = Some(ttl);
                }
                if let Some(min) = seconds(2) {
                    out.min_ttl = Some(min);
                }
            }
            "denial" => {
                denial = args
                    .first()
                    .and_then(|a| a.parse::<u32>().ok())
                    .map_or(denial, u64::from);
                if let Some(ttl) = seconds(1) {
                    out.negative_max_ttl = Some(ttl);
                }
                if args.len() > 2 {
                    plan.untranslated.add(
                        line,
                        "cache denial MINTTL: nodens has no lower clamp for negative answers (they keep the SOA's TTL up to negative_max_ttl)",
                    );
                }
            }
            "prefetch" => prefetch(option, out, plan),
            "serve_stale" => serve_stale(option, out, plan),
            "servfail" => match args.first().and_then(|a| go_duration(a)) {
                Some(ttl) => out.cache.servfail_ttl = Some((ttl, line)),
                None => plan.untranslated.add(
                    line,
                    format!("cache {}: expected a duration", describe(option)),
                ),
            },
            "disable" if args.len() == 1 && args[0] == "success" => {
                out.cache.no_success = Some(line)
            }
            "disable" if args.len() == 1 && args[0] == "denial" => out.cache.no_denial = Some(line),
            "disable" => plan.untranslated.add(
                line,
                format!(
                    "cache {}: nodens disables success or denial for a whole block's zones, not for ZONES within it",
                    describe(option)
                ),
            ),
            _ => plan.untranslated.add(
                line,
                format!("cache option {}: no nodens equivalent", describe(option)),
            ),
        }
    }
    plan.cache.entries = plan.cache.entries.saturating_add(success + denial);
}

/// `serve_stale [DURATION] [REFRESH_MODE]`: how long past expiry, and
/// `immediate` (CoreDNS's default: the stale answer at once, the refresh
/// behind) or `verify` (the upstream first; nodens waits for it up to
/// `stale_answer_timeout`).
fn serve_stale(option: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = option.line();
    let args = option.arg_texts();
    let age = match args.first() {
        None => Some(Duration::from_secs(3600)),
        Some(a) => go_duration(a),
    };
    let Some(age) = age else {
        plan.untranslated.add(
            line,
            format!("cache {}: expected a duration", describe(option)),
        );
        return;
    };
    out.cache.stale_max_age = Some((age, line));
    match args.get(1).copied() {
        None | Some("immediate") => out.cache.stale_answer_timeout = Some((Duration::ZERO, line)),
        Some("verify") => plan.notes.add(
            line,
            "serve_stale verify: nodens asks the upstream first and serves the stale answer if none came within stale_answer_timeout (1 s), the refresh going on behind",
        ),
        Some(other) => plan.untranslated.add(
            line,
            format!("cache serve_stale `{other}`: expected immediate or verify"),
        ),
    }
}

/// `prefetch AMOUNT [DURATION] [PERCENTAGE%]`.
fn prefetch(option: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    let line = option.line();
    let args = option.arg_texts();
    let Some(hits) = args.first().and_then(|a| a.parse::<u32>().ok()) else {
        plan.untranslated.add(
            line,
            format!("cache {}: expected a number of hits", describe(option)),
        );
        return;
    };
    let mut percent = 10u8;
    for a in &args[1..] {
        if let Some(p) = a.strip_suffix('%').and_then(|p| p.parse::<u8>().ok()) {
            percent = p.min(100);
        } else if go_duration(a).is_some() {
            plan.notes.add(
                line,
                "prefetch DURATION: nodens counts an entry's hits over its whole life, not per window",
            );
        } else {
            plan.untranslated.add(
                line,
                format!(
                    "cache {}: `{a}` is neither a duration nor a percentage",
                    describe(option)
                ),
            );
        }
    }
    out.cache.prefetch = Some(((hits, percent), line));
}
