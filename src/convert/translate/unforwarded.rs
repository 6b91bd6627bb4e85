//! A server block without a `forward` nodens can translate makes no zone;
//! what nodens then does with its names depends on the other blocks: a
//! zone above them on the same addresses forwards them (to that zone's
//! upstreams), and with none they are REFUSED. Said once every block is
//! read.

use std::net::SocketAddr;

use super::keys::Keys;
use super::{Plan, ZoneOut};

/// One block's zones, each with the addresses it was served on.
#[derive(Debug)]
pub(super) struct Unforwarded {
    line: usize,
    zones: Vec<(String, Vec<SocketAddr>)>,
}

pub(super) fn block_without_forward(
    line: usize,
    keys: &Keys,
    listens: &[Vec<SocketAddr>],
    plan: &mut Plan,
) {
    plan.unforwarded.push(Unforwarded {
        line,
        zones: keys
            .zones
            .iter()
            .map(|(n, _)| n.clone())
            .zip(listens.iter().cloned())
            .collect(),
    });
}

/// Whether zone `zone` holds the name `name` (both as written: no dot at
/// the end, `.` for the root).
fn holds(zone: &str, name: &str) -> bool {
    zone == "."
        || name.eq_ignore_ascii_case(zone)
        || name
            .to_ascii_lowercase()
            .ends_with(&format!(".{}", zone.to_ascii_lowercase()))
}

/// The zone, of the translated ones, that nodens routes `name` to on
/// `listen`: the longest that holds it on one of those addresses.
fn enclosing<'p>(plan: &'p Plan, name: &str, listen: &[SocketAddr]) -> Option<&'p ZoneOut> {
    plan.zones
        .iter()
        .filter(|z| holds(&z.name, name) && z.listen.iter().any(|a| listen.contains(a)))
        .max_by_key(|z| if z.name == "." { 0 } else { z.name.len() + 1 })
}

pub(super) fn explain(plan: &mut Plan) {
    let blocks = std::mem::take(&mut plan.unforwarded);
    for block in &blocks {
        for (name, listen) in &block.zones {
            let message = match enclosing(plan, name, listen) {
                Some(zone) => format!(
                    "server block {name}: no `forward` nodens can translate; nodens forwards its names by zone {} (line {}) instead",
                    zone.name, zone.line
                ),
                None => format!(
                    "server block {name}: no `forward` nodens can translate, so no zone for it (nodens answers REFUSED there)"
                ),
            };
            plan.untranslated.add(block.line, message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[test]
    fn zones_hold_their_names() {
        assert!(holds(".", "a.example"));
        assert!(holds("example", "a.Example"));
        assert!(holds("example", "example"));
        assert!(!holds("example", "anexample"));
    }
}
