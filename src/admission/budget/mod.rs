//! Per-namespace budgets (`[budget]`): a token bucket of queries a second
//! and a count of cache misses in flight for each namespace of the node's
//! pods, and for each address that is no known pod, so that one noisy
//! workload is slowed and its neighbours keep their latency.
//!
//! Memory is bounded whatever the number of namespaces and clients: a
//! fixed table of sets of a few slots each, as `rate.rs` (a flood from
//! spoofed sources only evicts idle slots). A namespace takes a slot with
//! its shared name from the pod map (a reference count, no copy); a new
//! owner evicts the set's least recently used slot with no miss in flight,
//! so a miss's ticket always gives back to the owner that took it. When
//! every slot of a set has misses in flight (four owners colliding while
//! busy) the newcomer is let through unbudgeted: a budget never refuses a
//! client for another's sake.
//!
//! A query over budget is the cheap path: a counter whose series the slot
//! resolved at its first excess, no allocation, and one log line a minute
//! at most.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use prometheus::IntCounter;

pub(crate) mod config;

use crate::log_limit::LogLimiter;
use crate::metrics::{Counters, label_set};
pub use config::{BudgetAction, BudgetConfig, BudgetLimits, BudgetPlan, NamespaceBudgetConfig};

/// Sets in the table (a power of two) and slots in a set.
const SETS: usize = 1024;
const WAYS: usize = 4;

/// The `namespace` label of clients that are no known pod: one series for
/// them all, never one per address.
pub(crate) const UNKNOWN: &str = "";

label_set! {
    /// `nodens_budget_exceeded_total`.
    pub(crate) struct BudgetLabels { namespace = "namespace", budget = "budget", action = "action" }
}

/// Which budget a query went over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    Rate,
    Misses,
}

impl Budget {
    fn name(self) -> &'static str {
        match self {
            Budget::Rate => "rate",
            Budget::Misses => "misses",
        }
    }
}

/// Whose budget a query spends.
#[derive(Clone, Copy)]
pub(crate) enum Spender<'a> {
    /// A pod of this namespace (its shared name from the pod map).
    Namespace(&'a Arc<str>),
    /// A client that is no known pod.
    Address(IpAddr),
}

#[derive(Clone, Default)]
enum Owner {
    #[default]
    Free,
    Namespace(Arc<str>),
    Address(IpAddr),
}

impl Owner {
    fn is(&self, spender: Spender<'_>) -> bool {
        match (self, spender) {
            (Owner::Namespace(a), Spender::Namespace(b)) => Arc::ptr_eq(a, b) || **a == **b,
            (Owner::Address(a), Spender::Address(b)) => *a == b,
            _ => false,
        }
    }
}

struct Slot {
    owner: Owner,
    limits: BudgetLimits,
    tokens: f64,
    at: Instant,
    /// The series of this owner's excesses, resolved at the first one.
    exceeded: [Option<IntCounter>; 2],
}

pub(crate) struct Budgets {
    plan: BudgetPlan,
    sets: Box<[Mutex<[Slot; WAYS]>]>,
    /// Misses in flight per slot (`set * WAYS + way`), outside the lock so
    /// a ticket gives back without taking it.
    in_flight: Box<[AtomicU32]>,
    hasher: ahash::RandomState,
    log: LogLimiter,
}

/// A miss's place in its owner's budget, given back when the miss ends.
pub(crate) struct BudgetTicket {
    budgets: Arc<Budgets>,
    slot: u32,
}

impl Drop for BudgetTicket {
    fn drop(&mut self) {
        self.budgets.in_flight[self.slot as usize].fetch_sub(1, Ordering::AcqRel);
    }
}

impl Budgets {
    pub(crate) fn new(plan: &BudgetPlan) -> Budgets {
        let now = Instant::now();
        Budgets {
            plan: plan.clone(),
            sets: (0..SETS)
                .map(|_| {
                    Mutex::new(std::array::from_fn(|_| Slot {
                        owner: Owner::Free,
                        limits: BudgetLimits::default(),
                        tokens: 0.0,
                        at: now,
                        exceeded: [None, None],
                    }))
                })
                .collect(),
            in_flight: (0..SETS * WAYS).map(|_| AtomicU32::new(0)).collect(),
            hasher: ahash::RandomState::new(),
            log: LogLimiter::new(Duration::from_secs(60)),
        }
    }

    fn limits_of(&self, spender: Spender<'_>) -> BudgetLimits {
        match spender {
            Spender::Namespace(ns) => self
                .plan
                .namespaces
                .iter()
                .find(|(name, _)| name.as_str() == &**ns)
                .map_or(self.plan.default, |(_, l)| *l),
            Spender::Address(_) => self.plan.default,
        }
    }

    /// Runs `f` on the spender's slot (taking one if it has none) with the
    /// slot's index; `None` when the set has no slot to give.
    fn with_slot<R>(
        &self,
        spender: Spender<'_>,
        now: Instant,
        f: impl FnOnce(&mut Slot, usize) -> R,
    ) -> Option<R> {
        let hash = match spender {
            Spender::Namespace(ns) => self.hasher.hash_one(&**ns),
            Spender::Address(ip) => self.hasher.hash_one(ip),
        };
        let set = hash as usize & (SETS - 1);
        let mut slots = crate::lock::lock(&self.sets[set]);
        let index = |way: usize| set * WAYS + way;
        if let Some(way) = slots.iter().position(|s| s.owner.is(spender)) {
            return Some(f(&mut slots[way], index(way)));
        }
        let way = (0..WAYS)
            .filter(|&w| self.in_flight[index(w)].load(Ordering::Acquire) == 0)
            .min_by_key(|&w| match slots[w].owner {
                Owner::Free => None,
                _ => Some(slots[w].at),
            })?;
        let limits = self.limits_of(spender);
        slots[way] = Slot {
            owner: match spender {
                Spender::Namespace(ns) => Owner::Namespace(Arc::clone(ns)),
                Spender::Address(ip) => Owner::Address(ip),
            },
            limits,
            tokens: f64::from(limits.burst.max(1)),
            at: now,
            exceeded: [None, None],
        };
        Some(f(&mut slots[way], index(way)))
    }

    /// Takes a query from the spender's rate budget; `Err` when it has
    /// none left (counted).
    pub(crate) fn spend_query(
        &self,
        spender: Spender<'_>,
        now: Instant,
        metrics: &Counters<BudgetLabels<'static>>,
    ) -> Result<(), BudgetAction> {
        let allowed = self.with_slot(spender, now, |slot, _| {
            let rate = slot.limits.per_second;
            if rate == 0 {
                return true;
            }
            let elapsed = now.saturating_duration_since(slot.at).as_secs_f64();
            let burst = f64::from(slot.limits.burst.max(1));
            slot.tokens = (slot.tokens + elapsed * f64::from(rate)).min(burst);
            slot.at = now;
            if slot.tokens >= 1.0 {
                slot.tokens -= 1.0;
                true
            } else {
                self.exceeded(slot, spender, Budget::Rate, metrics);
                false
            }
        });
        match allowed {
            Some(false) => Err(self.plan.action),
            _ => Ok(()),
        }
    }

    /// A place among the spender's misses in flight: `Ok(None)` when it
    /// has no miss budget, `Err` when it is full (counted).
    pub(crate) fn take_miss(
        self: &Arc<Self>,
        spender: Spender<'_>,
        now: Instant,
        metrics: &Counters<BudgetLabels<'static>>,
    ) -> Result<Option<BudgetTicket>, BudgetAction> {
        let taken = self.with_slot(spender, now, |slot, index| {
            let max = slot.limits.misses_in_flight;
            if max == 0 {
                return Ok(None);
            }
            let count = &self.in_flight[index];
            // Under the set's lock: only tickets (which decrement) race.
            if count.load(Ordering::Acquire) >= max {
                self.exceeded(slot, spender, Budget::Misses, metrics);
                return Err(self.plan.action);
            }
            count.fetch_add(1, Ordering::AcqRel);
            Ok(Some(BudgetTicket {
                budgets: Arc::clone(self),
                slot: index as u32,
            }))
        });
        taken.unwrap_or(Ok(None))
    }

    /// Counts an excess under the owner's series, and logs one a minute.
    fn exceeded(
        &self,
        slot: &mut Slot,
        spender: Spender<'_>,
        budget: Budget,
        metrics: &Counters<BudgetLabels<'static>>,
    ) {
        let counter = slot.exceeded[budget as usize].get_or_insert_with(|| {
            let namespace = match spender {
                Spender::Namespace(ns) => &**ns,
                Spender::Address(_) => UNKNOWN,
            };
            metrics.get(&BudgetLabels {
                namespace,
                budget: budget.name(),
                action: self.plan.action.name(),
            })
        });
        counter.inc();
        if let Some(suppressed) = self.log.allow() {
            match spender {
                Spender::Namespace(ns) => tracing::warn!(
                    namespace = &**ns,
                    budget = budget.name(),
                    suppressed,
                    "namespace over its DNS budget"
                ),
                Spender::Address(ip) => tracing::warn!(
                    client = %ip,
                    budget = budget.name(),
                    suppressed,
                    "client (no known pod) over its DNS budget"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::metrics::Registry;

    fn budgets(text: &str) -> Arc<Budgets> {
        Arc::new(Budgets::new(&Config::parse(text).unwrap().budget.unwrap()))
    }

    fn family() -> Counters<BudgetLabels<'static>> {
        Registry::new().counters("nodens_budget_exceeded_total", "test")
    }

    fn count(f: &Counters<BudgetLabels<'static>>, ns: &str, budget: &str) -> u64 {
        f.get(&BudgetLabels {
            namespace: ns,
            budget,
            action: "refuse",
        })
        .get()
    }

    #[test]
    fn a_namespace_is_limited_not_its_neighbour() {
        let b = budgets(
            "[budget]\nqueries_per_second = 10\nburst = 20\naction = \"refuse\"\n\
             [[budget.namespace]]\nname = \"quiet\"\nqueries_per_second = 0\n",
        );
        let m = family();
        let (noisy, quiet): (Arc<str>, Arc<str>) = ("noisy".into(), "quiet".into());
        let t0 = Instant::now();
        let ok = (0..100)
            .filter(|_| b.spend_query(Spender::Namespace(&noisy), t0, &m).is_ok())
            .count();
        assert_eq!(ok, 20, "a burst, then nothing");
        // Another Arc of the same name is the same namespace.
        let again: Arc<str> = "noisy".into();
        assert!(b.spend_query(Spender::Namespace(&again), t0, &m).is_err());
        assert!(
            (0..1000).all(|_| b.spend_query(Spender::Namespace(&quiet), t0, &m).is_ok()),
            "an unlimited namespace"
        );
        let later = t0 + Duration::from_millis(500);
        let ok = (0..100)
            .filter(|_| b.spend_query(Spender::Namespace(&noisy), later, &m).is_ok())
            .count();
        assert_eq!(ok, 5, "refilled at 10/s for half a second");
        assert_eq!(count(&m, "noisy", "rate"), 81 + 95);
        assert_eq!(count(&m, "quiet", "rate"), 0);
    }

    #[test]
    fn unknown_clients_by_address_under_one_label() {
        let b = budgets("[budget]\nqueries_per_second = 5\naction = \"refuse\"\n");
        let m = family();
        let t0 = Instant::now();
        for last in 1..=3u8 {
            let ip = IpAddr::from([10, 0, 0, last]);
            let ok = (0..10)
                .filter(|_| b.spend_query(Spender::Address(ip), t0, &m).is_ok())
                .count();
            assert_eq!(ok, 5, "each address its own bucket");
        }
        assert_eq!(count(&m, UNKNOWN, "rate"), 15);
    }

    #[test]
    fn miss_tickets_come_back() {
        let b = budgets("[budget]\nmisses_in_flight = 2\naction = \"refuse\"\n");
        let m = family();
        let ns: Arc<str> = "batch".into();
        let t0 = Instant::now();
        let one = b.take_miss(Spender::Namespace(&ns), t0, &m).unwrap();
        let two = b.take_miss(Spender::Namespace(&ns), t0, &m).unwrap();
        assert!(one.is_some() && two.is_some());
        assert!(b.take_miss(Spender::Namespace(&ns), t0, &m).is_err());
        assert!(
            b.spend_query(Spender::Namespace(&ns), t0, &m).is_ok(),
            "no rate budget"
        );
        drop(one);
        assert!(
            b.take_miss(Spender::Namespace(&ns), t0, &m)
                .unwrap()
                .is_some()
        );
        assert_eq!(count(&m, "batch", "misses"), 1);
    }

    #[test]
    fn the_table_is_small() {
        let bytes = SETS * std::mem::size_of::<Mutex<[Slot; WAYS]>>()
            + SETS * WAYS * std::mem::size_of::<AtomicU32>();
        println!("budget table: {} KiB", bytes / 1024);
        assert!(bytes <= 512 * 1024, "{bytes} bytes");
    }

    #[test]
    fn memory_is_bounded_and_busy_slots_stay() {
        let b = budgets("[budget]\nmisses_in_flight = 1\n");
        let m = family();
        let t0 = Instant::now();
        let ns: Arc<str> = "busy".into();
        let held = b.take_miss(Spender::Namespace(&ns), t0, &m).unwrap();
        // A flood of addresses evicts idle slots only.
        for i in 0..100_000u32 {
            let ip = IpAddr::from(i.to_be_bytes());
            let _ = b.take_miss(Spender::Address(ip), t0, &m);
        }
        assert!(b.take_miss(Spender::Namespace(&ns), t0, &m).is_err());
        drop(held);
        assert!(
            b.take_miss(Spender::Namespace(&ns), t0, &m)
                .unwrap()
                .is_some()
        );
    }
}
