//! `[budget]`: how many queries a second and how many cache misses in
//! flight each namespace of the node's pods may use (an address of its
//! own for a client that is no known pod), so that one workload's retry
//! storm or crawler slows itself, not its neighbours. Off unless a limit
//! is set; `[[budget.namespace]]` overrides the limits of one namespace.
//!
//! Every bad value names its line: types and the action through serde,
//! the rules between values here.

use std::collections::HashSet;

use serde::Deserialize;
use toml::Spanned;

use crate::vocab::{Invalid, key};

/// `[budget]` as written.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Queries a second a namespace (or unknown address) may send, cache
    /// hits included; 0: no rate budget.
    pub queries_per_second: u32,
    /// Queries it may send at once above its rate; unset: the rate.
    pub burst: Option<Spanned<u32>>,
    /// Cache misses it may have waiting on upstreams at once; 0: no
    /// miss budget.
    pub misses_in_flight: u32,
    /// What a query over budget gets.
    pub action: BudgetAction,
    /// Per-namespace limits, over the ones above.
    #[serde(rename = "namespace")]
    pub namespaces: Vec<NamespaceBudgetConfig>,
}

/// `[[budget.namespace]]`: one namespace's limits; a key left out is
/// the `[budget]` one (0: no limit for this namespace).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceBudgetConfig {
    pub name: Spanned<String>,
    pub queries_per_second: Option<u32>,
    pub burst: Option<Spanned<u32>>,
    pub misses_in_flight: Option<u32>,
}

/// What a query over its budget gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetAction {
    /// No answer (the client retries later, as after a loss).
    #[default]
    Drop,
    /// REFUSED (the client stops at once, or tries its next server).
    Refuse,
}

impl BudgetAction {
    /// The metric label.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BudgetAction::Drop => "drop",
            BudgetAction::Refuse => "refuse",
        }
    }
}

/// The limits of one namespace or address; 0 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetLimits {
    pub per_second: u32,
    pub burst: u32,
    pub misses_in_flight: u32,
}

/// `[budget]` compiled: present only when some limit is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetPlan {
    /// Of every namespace not listed, and of each unknown address.
    pub default: BudgetLimits,
    /// Namespaces with limits of their own (lower case).
    pub namespaces: Vec<(String, BudgetLimits)>,
    pub action: BudgetAction,
}

/// A Kubernetes namespace name: an RFC 1123 label.
fn namespace_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// The burst that goes with a rate: as written, else the rate; a burst
/// without a rate means nothing.
fn burst_of(per_second: u32, burst: Option<&Spanned<u32>>, what: &str) -> Result<u32, Invalid> {
    match burst {
        Some(b) if per_second == 0 && *b.get_ref() > 0 => Err(Invalid::At(
            b.span(),
            format!("{what}.burst: a burst needs queries_per_second"),
        )),
        Some(b) if *b.get_ref() > 0 => Ok(*b.get_ref()),
        _ => Ok(per_second),
    }
}

impl BudgetConfig {
    /// The plan, or `None` when no limit is set (budgets off).
    pub(crate) fn compile(&self) -> Result<Option<BudgetPlan>, Invalid> {
        let default = BudgetLimits {
            per_second: self.queries_per_second,
            burst: burst_of(self.queries_per_second, self.burst.as_ref(), "budget")?,
            misses_in_flight: self.misses_in_flight,
        };
        let mut seen = HashSet::new();
        let mut namespaces = Vec::with_capacity(self.namespaces.len());
        for ns in &self.namespaces {
            let name = ns.name.get_ref();
            if !namespace_name(name) {
                return Err(Invalid::At(
                    ns.name.span(),
                    format!(
                        "budget.namespace.name: `{name}` is not a namespace name (lower-case letters, digits and `-`, at most 63)"
                    ),
                ));
            }
            if !seen.insert(name.as_str()) {
                return Err(Invalid::At(
                    ns.name.span(),
                    format!("budget.namespace.name: `{name}` is listed twice"),
                ));
            }
            if ns.queries_per_second.is_none()
                && ns.burst.is_none()
                && ns.misses_in_flight.is_none()
            {
                return Err(Invalid::At(
                    ns.name.span(),
                    format!(
                        "budget.namespace `{name}`: sets no limit (queries_per_second, burst or misses_in_flight)"
                    ),
                ));
            }
            let per_second = ns.queries_per_second.unwrap_or(default.per_second);
            let burst = match (&ns.burst, ns.queries_per_second) {
                (Some(_), _) => burst_of(per_second, ns.burst.as_ref(), "budget.namespace")?,
                (None, Some(rate)) => rate,
                (None, None) => default.burst,
            };
            let limits = BudgetLimits {
                per_second,
                burst,
                misses_in_flight: ns.misses_in_flight.unwrap_or(default.misses_in_flight),
            };
            namespaces.push((name.clone(), limits));
        }
        let any = |l: &BudgetLimits| l.per_second > 0 || l.misses_in_flight > 0;
        if !any(&default) && !namespaces.iter().any(|(_, l)| any(l)) {
            if self.action != BudgetAction::default() {
                return Err(key(
                    &["budget", "action"],
                    "budget.action: no budget is set (queries_per_second or misses_in_flight)",
                ));
            }
            return Ok(None);
        }
        Ok(Some(BudgetPlan {
            default,
            namespaces,
            action: self.action,
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn plan(text: &str) -> Option<super::BudgetPlan> {
        Config::parse(text).unwrap().budget
    }

    fn error(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn off_by_default() {
        assert_eq!(plan(""), None);
        assert_eq!(plan("[budget]\n"), None);
    }

    #[test]
    fn namespace_overrides_fall_back_to_the_default() {
        let p = plan(
            "[budget]\nqueries_per_second = 1000\nburst = 2000\nmisses_in_flight = 50\n\
             action = \"refuse\"\n\
             [[budget.namespace]]\nname = \"batch\"\nqueries_per_second = 100\n\
             [[budget.namespace]]\nname = \"kube-system\"\nqueries_per_second = 0\nmisses_in_flight = 0\n\
             [[budget.namespace]]\nname = \"web\"\nmisses_in_flight = 5\n",
        )
        .unwrap();
        assert_eq!(p.action, super::BudgetAction::Refuse);
        assert_eq!(p.default.burst, 2000);
        let get = |n: &str| p.namespaces.iter().find(|(k, _)| k == n).unwrap().1;
        assert_eq!((get("batch").per_second, get("batch").burst), (100, 100));
        assert_eq!(get("batch").misses_in_flight, 50);
        assert_eq!(get("kube-system").per_second, 0);
        assert_eq!(get("kube-system").misses_in_flight, 0);
        assert_eq!((get("web").per_second, get("web").burst), (1000, 2000));
        assert_eq!(get("web").misses_in_flight, 5);
    }

    #[test]
    fn bad_values_name_their_line() {
        let e = error("[budget]\nqueries_per_second = -5\n");
        assert!(e.starts_with("2:"), "{e}");
        let e = error("[budget]\nqueries_per_second = 10\naction = \"reject\"\n");
        assert!(e.starts_with("3:") && e.contains("drop"), "{e}");
        let e = error("[budget]\nburst = 10\n");
        assert!(
            e.starts_with("2:") && e.contains("needs queries_per_second"),
            "{e}"
        );
        let e = error(
            "[budget]\nqueries_per_second = 10\n\n[[budget.namespace]]\nname = \"Team_A\"\nqueries_per_second = 1\n",
        );
        assert!(
            e.starts_with("5:") && e.contains("not a namespace name"),
            "{e}"
        );
        let e = error(
            "[budget]\nmisses_in_flight = 10\n[[budget.namespace]]\nname = \"a\"\nmisses_in_flight = 1\n\
             [[budget.namespace]]\nname = \"a\"\nmisses_in_flight = 2\n",
        );
        assert!(e.starts_with("7:") && e.contains("listed twice"), "{e}");
        let e = error("[budget]\nmisses_in_flight = 10\n[[budget.namespace]]\nname = \"a\"\n");
        assert!(e.starts_with("4:") && e.contains("sets no limit"), "{e}");
        let e = error("[budget]\nqueries_per_second = 10\nmisses = 3\n");
        assert!(e.starts_with("3:") && e.contains("unknown field"), "{e}");
        let e = error("[budget]\naction = \"refuse\"\n");
        assert!(e.starts_with("2:") && e.contains("no budget is set"), "{e}");
    }
}
