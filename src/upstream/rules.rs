//! A zone's rules around [`forward`]: names it does not forward (`except`),
//! the question rewritten on its way out and the answer written back
//! (`rewrite`), AAAA synthesized from A (`dns64`).
//!
//! This is the one place a miss, a prefetch, a stale refresh, a
//! speculation or a coalesced fetch asks upstream (`serve/miss.rs`
//! `ask_upstream`), so every one of them sees the same rules; the cache is
//! keyed by the client's question and never by a rewritten one. A zone
//! without rules does not come here: its cost there is one branch on a
//! miss, none on a hit.

use std::sync::Arc;

use prometheus::IntCounter;
use tokio::time::Instant;

use super::Zone;
use super::forward::{Forwarded, forward};
use crate::cache::Key;
use crate::log_limit::LogLimiter;
use crate::rewrite::dns64::Dns64;
use crate::rewrite::message::{Message, wire_from_text};
use crate::rewrite::{Rewrites, Rewritten};
use crate::wire::{class, name, response, rtype};

/// What a zone does beyond forwarding; `None` on a zone without any.
#[derive(Debug, Clone, Default)]
pub(crate) struct ZoneRules {
    /// Wire names (lower case) at and below which the zone forwards
    /// nothing: CoreDNS's `forward ... { except }`, SERVFAIL there as
    /// CoreDNS with no plugin after `forward` answers.
    pub(crate) except: Vec<Vec<u8>>,
    pub(crate) rewrites: Rewrites,
    pub(crate) dns64: Option<Dns64>,
}

impl ZoneRules {
    /// `None` when there is nothing to do beyond forwarding.
    pub(crate) fn some(self) -> Option<Arc<ZoneRules>> {
        let empty = self.except.is_empty() && self.rewrites.0.is_empty() && self.dns64.is_none();
        (!empty).then(|| Arc::new(self))
    }

    /// Whether the zone rewrites questions.
    pub(crate) fn rewrites(&self) -> bool {
        !self.rewrites.0.is_empty()
    }

    fn excepted(&self, wire: &[u8]) -> bool {
        self.except.iter().any(|zone| {
            wire.len() >= zone.len()
                && wire.ends_with(zone)
                && name::label_starts(wire).any(|s| s == wire.len() - zone.len())
        })
    }
}

/// [`forward`] for a zone with rules. `None`, as from `forward`, when no
/// usable answer came (or the name is excepted, or a rewrite made a name
/// that is not one: CoreDNS's SERVFAIL).
pub(crate) async fn forward_with_rules(
    zone: &Zone,
    rules: &ZoneRules,
    key: &Key,
    deadline: Instant,
) -> Option<Forwarded> {
    let Some(dns64) = &rules.dns64 else {
        return ask(zone, rules, key, deadline).await;
    };
    if key.qtype() != rtype::AAAA || key.qclass() != class::IN {
        return ask(zone, rules, key, deadline).await;
    }
    let aaaa = ask(zone, rules, key, deadline).await?;
    let Some(parsed) = Message::parse(&aaaa.msg) else {
        return Some(aaaa);
    };
    if !dns64.wanted(&parsed) {
        return Some(aaaa);
    }
    let a_key = Key::from_parts(key.name(), rtype::A, class::IN, key.flags());
    let a = ask(zone, rules, &a_key, deadline).await?;
    finish(zone, synthesized(dns64, &parsed, &a.msg)?, a.received)
}

/// The dns64 answer made of the AAAA answer `aaaa` and the A answer `a`:
/// `None` when `a` is not a message, `Some(None)` when the synthesis would
/// be longer than a DNS message.
fn synthesized(dns64: &Dns64, aaaa: &Message, a: &[u8]) -> Option<Option<Vec<u8>>> {
    Some(dns64.synthesize(aaaa, Message::parse(a)?).encode())
}

/// The upstream's `answer` to the rewritten question, with the client's
/// `question` and its names written back: `None` when it is not a
/// message, `Some(None)` when the result would be longer than one.
fn written_back(
    answer: &[u8],
    question: Vec<u8>,
    rewritten: &Rewritten,
) -> Option<Option<Vec<u8>>> {
    let mut msg = Message::parse(answer)?;
    msg.question = question;
    write_back(&mut msg, rewritten);
    Some(msg.encode())
}

/// For the `rewrite_answers` fuzz target: what the rules make of arbitrary
/// upstream answers, as a miss would ask. `answer` is the upstream's answer
/// to `a.b.up.` for the client's `a.b.fuzz. A` (a suffix rule with `answer
/// auto`, whose write-back makes every name two bytes longer), and, with
/// `a`, the AAAA and A answers of a dns64 synthesis whose prefix length
/// and `translate_all` come from `params`. Each is `None` when the rules
/// make no answer of it (SERVFAIL), else the message the cache is offered.
pub fn fuzz_rebuild(params: u8, answer: &[u8], a: &[u8]) -> [Option<Vec<u8>>; 2] {
    use crate::rewrite::{NameMatch, Next, Rewrites, Rule};
    let rules = Rewrites(vec![Rule::Name {
        matcher: NameMatch::Suffix(".fuzz.".into()),
        to: ".up.".into(),
        auto: true,
        answers: Vec::new(),
        next: Next::Stop,
    }]);
    let rewritten = rules
        .apply("a.b.fuzz.", rtype::A, class::IN)
        .expect("the suffix rule matches");
    let question = [&b"\x01a\x01b\x04fuzz\x00"[..], &[0, 1, 0, 1]].concat();
    let back = written_back(answer, question, &rewritten).flatten();
    let dns64 = Dns64 {
        prefix: "64:ff9b::".parse().expect("an IPv6 prefix"),
        prefix_len: [32, 40, 48, 56, 64, 96][usize::from(params % 6)],
        translate_all: params & 0x80 != 0,
    };
    let synthesis = Message::parse(answer)
        .filter(|aaaa| dns64.wanted(aaaa))
        .and_then(|aaaa| synthesized(&dns64, &aaaa, a))
        .flatten();
    [back, synthesis]
}

/// One question to the zone's upstreams, rewritten if a rule says so.
async fn ask(zone: &Zone, rules: &ZoneRules, key: &Key, deadline: Instant) -> Option<Forwarded> {
    let rewritten = if rules.rewrites.0.is_empty() {
        None
    } else {
        let text = name::to_text(key.name());
        rules.rewrites.apply(&text, key.qtype(), key.qclass())
    };
    let Some(rewritten) = rewritten else {
        if rules.excepted(key.name()) {
            return None;
        }
        return forward(zone, key, deadline).await;
    };
    let Some(wire) = wire_from_text(&rewritten.name) else {
        tracing::debug!(name = %rewritten.name, "rewrite made a name that is not a domain name");
        return None;
    };
    let wire = wire.to_ascii_lowercase();
    if rules.excepted(&wire) {
        return None;
    }
    let sent = Key::from_parts(&wire, rewritten.qtype, rewritten.qclass, key.flags());
    let answer = forward(zone, &sent, deadline).await?;
    let msg = written_back(&answer.msg, key.question(), &rewritten)?;
    finish(zone, msg, answer.received)
}

/// The answer's names mapped back as the rules that matched say: owner
/// names, then the names records point at. The OPT record is left alone.
fn write_back(msg: &mut Message, rewritten: &Rewritten) {
    for record in msg.sections.iter_mut().flatten() {
        if record.rtype == rtype::OPT {
            continue;
        }
        let owner = name::to_text(&record.owner);
        if let Some(new) = rewritten.write_back(&owner, false)
            && let Some(wire) = wire_from_text(&new)
        {
            record.owner = wire;
        }
        let value = record.value().map(name::to_text);
        if let Some(value) = value
            && let Some(new) = rewritten.write_back(&value, true)
            && let Some(wire) = wire_from_text(&new)
        {
            record.set_value(&wire);
        }
    }
}

/// The answers too long to rebuild: counted, and a warning a minute at
/// most (the request path's, in its upstream metrics).
pub(crate) struct TooLong {
    count: IntCounter,
    log: LogLimiter,
}

impl TooLong {
    pub(crate) fn new(count: IntCounter) -> TooLong {
        TooLong {
            count,
            log: LogLimiter::new(std::time::Duration::from_secs(60)),
        }
    }

    fn happened(&self) {
        self.count.inc();
        if let Some(suppressed) = self.log.allow() {
            tracing::warn!(
                suppressed,
                "a rewritten or dns64 answer would be longer than 65,535 bytes: SERVFAIL"
            );
        }
    }
}

/// The rebuilt answer, or `None` (SERVFAIL to the client, as for no answer)
/// when it would not be a DNS message: longer than 65,535 bytes. CoreDNS,
/// whose answers compress the same owner names, writes nothing back over
/// TCP then (miekg/dns refuses to send it); a clear error is better.
fn finish(zone: &Zone, msg: Option<Vec<u8>>, received: std::time::Instant) -> Option<Forwarded> {
    let Some(msg) = msg else {
        zone.metrics.rewrite_too_long.happened();
        return None;
    };
    let layout = response::layout(&msg).ok()?;
    Some(Forwarded {
        msg,
        layout,
        received,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn except_covers_the_zone_and_below_only() {
        let rules = ZoneRules {
            except: vec![name::from_text("example.org").unwrap()],
            ..ZoneRules::default()
        };
        let wire = |n: &str| name::from_text(n).unwrap();
        assert!(rules.excepted(&wire("example.org")));
        assert!(rules.excepted(&wire("a.b.example.org")));
        assert!(!rules.excepted(&wire("xexample.org")));
        assert!(!rules.excepted(&wire("example.com")));
    }
}
