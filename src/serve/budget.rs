//! The budgets on the request path (`[budget]`, `admission::budget`): the
//! rate budget right after the allow list, before the packet is parsed (it
//! protects the node's CPU, so cache hits spend it too); the miss budget
//! where a miss would go upstream (it protects the cluster DNS, so a
//! namespace over it still gets its hits, and its stale answers).
//!
//! Whose budget: the namespace of the pod at the source address, from the
//! pod watch's map; an address the map does not hold (or all of them while
//! the map is not known) spends a budget of its own.

use std::net::IpAddr;
use std::time::Instant;

use super::hit::Request;
use super::metrics::ServeMetrics;
use super::{Job, Shared};
use crate::admission::Budgets;
use crate::admission::budget::BudgetAction;
use crate::admission::budget::{BudgetTicket, Spender};
use crate::answered::Source;
use crate::listen::Handled;
use crate::search::Clients;
use crate::wire::{build, rcode};

/// `f` with the spender the query from `client` is counted against.
#[inline]
fn with_spender<R>(clients: &Clients, client: IpAddr, f: impl FnOnce(Spender<'_>) -> R) -> R {
    clients.with_namespace(client, |ns| match ns {
        Some(ns) => f(Spender::Namespace(ns)),
        None => f(Spender::Address(client.to_canonical())),
    })
}

/// The rate budget: `None` when the query may go on; otherwise what to
/// do with the packet (nothing, or REFUSED with the question echoed).
pub(super) fn spend_query(
    budgets: &Budgets,
    clients: &Clients,
    metrics: &ServeMetrics,
    packet: &[u8],
    client: IpAddr,
    now: Instant,
    out: &mut Vec<u8>,
) -> Option<Handled<Job>> {
    let spent = with_spender(clients, client, |who| {
        budgets.spend_query(who, now, &metrics.budget_exceeded)
    });
    match spent {
        Ok(()) => None,
        Err(BudgetAction::Drop) => Some(Handled::Drop),
        Err(BudgetAction::Refuse) => Some(super::admit::refuse_packet(packet, out)),
    }
}

impl Shared {
    /// A place in the spender's misses in flight; `Ok(None)` when budgets
    /// are off or it has no miss budget.
    pub(super) fn take_miss_budget(
        &self,
        request: &Request<'_, '_>,
    ) -> Result<Option<BudgetTicket>, BudgetAction> {
        let Some(budgets) = &request.settings.budgets else {
            return Ok(None);
        };
        with_spender(&self.search.clients, request.client.ip(), |who| {
            budgets.take_miss(who, request.started, &self.metrics.budget_exceeded)
        })
    }

    /// A miss over its namespace's miss budget, with nothing stale to
    /// give: nothing, or REFUSED (counted and logged as a reply).
    pub(super) fn over_miss_budget(
        &self,
        request: &Request<'_, '_>,
        action: BudgetAction,
        out: &mut Vec<u8>,
    ) -> Handled<Job> {
        if action == BudgetAction::Drop {
            return Handled::Drop;
        }
        let query = request.query;
        build::reply_with_rcode(
            query.packet,
            rcode::REFUSED,
            Some(query.name_end + 4),
            query.edns,
            None,
            out,
        );
        let seconds = request.started.elapsed().as_secs_f64();
        let answered = request.answered(Source::Local, out);
        request.stats.reply(
            request.proto,
            rcode::REFUSED,
            false,
            out.len(),
            seconds,
            answered,
        );
        Handled::Reply
    }
}
