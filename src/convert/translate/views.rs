//! Blocks on different addresses or ports become views: each zone keeps
//! the addresses its block serves it on (`[[zone]] listen`), as CoreDNS
//! answers a query only from the blocks of the address it arrived on. A
//! zone on every address of the output needs no `listen`, so a Corefile
//! whose blocks all share their addresses converts as before.

use std::net::SocketAddr;

use super::super::ConvertError;
use super::Plan;

/// Every address a plain-DNS block serves must be in the output's
/// `listen`: one that drops out is an address where CoreDNS answered and
/// nodens would not even listen.
pub(super) fn no_address_dropped(plan: &Plan) -> Result<(), ConvertError> {
    match plan.served.iter().find(|(a, _)| !plan.listen.contains(a)) {
        Some((addr, line)) => Err(ConvertError::at(
            *line,
            format!(
                "this block serves {addr}, and no block nodens can translate does: the converted \
                 configuration would not listen there at all; give the block a `forward`, or \
                 remove it (or its `bind {}`) if {addr} is not needed",
                addr.ip()
            ),
        )),
        None => Ok(()),
    }
}

/// Clears the `listen` of zones served on every address; says so when
/// views remain. Views need at most `MAX_VIEWS` listen addresses.
pub(super) fn keep_only_views(plan: &mut Plan) -> Result<(), ConvertError> {
    let all = plan.listen.clone();
    let mut first_view = None;
    for zone in &mut plan.zones {
        if same_set(&zone.listen, &all) {
            zone.listen.clear();
        } else if first_view.is_none() {
            first_view = Some(zone.line);
        }
    }
    if let Some(line) = first_view
        && plan.listen.len() > crate::upstream::MAX_VIEWS
    {
        return Err(ConvertError::at(
            line,
            format!(
                "blocks on different addresses become views, and views allow at most {} listen addresses; this Corefile has {}",
                crate::upstream::MAX_VIEWS,
                plan.listen.len()
            ),
        ));
    }
    if let Some(line) = first_view {
        plan.notes.add(
            line,
            "blocks on different addresses or ports: each zone is served only on its block's addresses (`listen` of its [[zone]], a view), as CoreDNS answers from the blocks of the address a query arrives on",
        );
    }
    Ok(())
}

fn same_set(a: &[SocketAddr], b: &[SocketAddr]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}
