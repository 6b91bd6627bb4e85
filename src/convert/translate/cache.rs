//! `cache`: its TTL caps become the zone's `max_ttl` / `negative_max_ttl`
//! / `min_ttl`, its capacity (in entries) the `[cache]` capacity (in
//! bytes, in `emit`), and `prefetch`, `serve_stale` and `servfail` the
//! `[cache]` settings, which nodens has once for every zone.

use std::time::Duration;

use super::super::corefile::{Directive, go_duration};
use super::block::{BlockOut, describe};
use super::{Findings, Plan};

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
            "prefetch" => prefetch(option, plan),
            "serve_stale" => {
                let age = match args.first() {
                    None => Some(Duration::from_secs(3600)),
                    Some(a) => go_duration(a),
                };
                match age {
                    Some(age) => set_once(
                        &mut plan.cache.stale_max_age,
                        age,
                        line,
                        "serve_stale",
                        &mut plan.untranslated,
                    ),
                    None => plan.untranslated.add(
                        line,
                        format!("cache {}: expected a duration", describe(option)),
                    ),
                }
                if args.get(1) == Some(&"immediate") {
                    plan.untranslated.add(
                        line,
                        "serve_stale immediate: nodens serves a stale answer only when every upstream failed (CoreDNS's `verify`)",
                    );
                }
            }
            "servfail" => match args.first().and_then(|a| go_duration(a)) {
                Some(ttl) => set_once(
                    &mut plan.cache.servfail_ttl,
                    ttl,
                    line,
                    "servfail",
                    &mut plan.untranslated,
                ),
                None => plan.untranslated.add(
                    line,
                    format!("cache {}: expected a duration", describe(option)),
                ),
            },
            _ => plan.untranslated.add(
                line,
                format!("cache option {}: no nodens equivalent", describe(option)),
            ),
        }
    }
    plan.cache.entries = plan.cache.entries.saturating_add(success + denial);
}

/// `prefetch AMOUNT [DURATION] [PERCENTAGE%]`.
fn prefetch(option: &Directive, plan: &mut Plan) {
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
    set_once(
        &mut plan.cache.prefetch,
        (hits, percent),
        line,
        "prefetch",
        &mut plan.untranslated,
    );
}

/// Sets a `[cache]` value that is one for the whole server; a block that
/// asks for another is listed.
fn set_once<T: PartialEq + Copy>(
    slot: &mut Option<(T, usize)>,
    value: T,
    line: usize,
    what: &str,
    untranslated: &mut Findings,
) {
    match slot {
        None => *slot = Some((value, line)),
        Some((v, _)) if *v == value => {}
        Some((_, first)) => untranslated.add(
            line,
            format!("cache {what} differs from the one at line {first}: nodens has one [cache] for every zone; line {first}'s is used"),
        ),
    }
}
