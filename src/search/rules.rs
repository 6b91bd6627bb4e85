//! Which names under the cluster domain (and under configured cloud
//! suffixes) cannot exist, so that the search-list expansions a pod's
//! resolver sends for an external name are answered NXDOMAIN at once.
//!
//! The rules follow the Kubernetes DNS specification (kubernetes/dns
//! docs/specification.md) and what CoreDNS's `kubernetes` plugin answers
//! (`parseRequest` and `findServices`/`findPods` in plugin/kubernetes),
//! and are checked against it in tests/integration/cluster_schema.rs. Under the zone
//! `Z`, CoreDNS serves only:
//!
//! - `Z` itself, `dns-version.Z` (TXT) and `ns.dns.Z` (its own address);
//! - `svc.Z`, `<ns>.svc.Z`, `<svc>.<ns>.svc.Z`,
//!   `<endpoint>.<svc>.<ns>.svc.Z`, `_<port>._<proto>.<svc>.<ns>.svc.Z`;
//! - `pod.Z`, `<ns>.pod.Z`, `<a-b-c-d>.<ns>.pod.Z` (and, because the pod
//!   lookup ignores the labels left of the pod, up to two more labels).
//!
//! Everything else it answers NXDOMAIN, and so may nodens, without asking.
//! A rule errs towards forwarding: a name is ruled out only when no
//! configuration of the `kubernetes` plugin could answer it (but see
//! [`Rule::SvcPortShape`] and multicluster).

use super::names::{Label, labels_left_of, suffix_at};
use crate::wire::name::label_starts;

/// A reason a name cannot exist; the `rule` label of
/// `nodens_search_local_nxdomain_total`, and what `disable_rules` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The label left of the cluster domain is not `svc`, `pod`,
    /// `dns-version` or `dns`: `api.example.com.cluster.local`.
    ZoneChild,
    /// Below `dns-version.Z`, or below `dns.Z` other than `ns.dns.Z`.
    ReservedName,
    /// Five or more labels left of `svc` or `pod`.
    TooManyLabels,
    /// Four labels left of `svc` whose second is not a protocol (`tcp`,
    /// `udp`, `sctp`, with or without its underscore):
    /// `api.example.com.<ns>.svc.Z`. CoreDNS reads those four labels as
    /// port and protocol, and no Service port has another protocol. In a
    /// multicluster zone they may be `<endpoint>.<cluster-id>` instead:
    /// switch this rule off there.
    SvcPortShape,
    /// More labels left of a configured cloud suffix than its names have.
    CloudSuffix,
    /// At or below `<ns>.svc.Z` for a namespace the API's list does not
    /// hold (`namespaces_from_api`).
    UnknownNamespace,
}

impl Rule {
    pub const ALL: [Rule; 6] = [
        Rule::ZoneChild,
        Rule::ReservedName,
        Rule::TooManyLabels,
        Rule::SvcPortShape,
        Rule::CloudSuffix,
        Rule::UnknownNamespace,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Rule::ZoneChild => "zone_child",
            Rule::ReservedName => "reserved_name",
            Rule::TooManyLabels => "too_many_labels",
            Rule::SvcPortShape => "svc_port_shape",
            Rule::CloudSuffix => "cloud_suffix",
            Rule::UnknownNamespace => "unknown_namespace",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A cloud DNS suffix whose names have at most `max_labels` labels left of
/// it: AKS's `internal.cloudapp.net` (`<vm>.<vnet-id>.<region>`: 3), GCE's
/// `c.<project>.internal` (`<vm>.<zone>`: 2) and `google.internal`
/// (`metadata`: 1). A `*` label matches any one label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudSuffix {
    /// Labels left to right, lower case; `None` for `*`.
    labels: Vec<Option<Box<[u8]>>>,
    max_labels: usize,
}

impl CloudSuffix {
    /// `suffix` in text form ("c.*.internal"), already checked to be a name.
    pub fn new(suffix: &str, max_labels: usize) -> CloudSuffix {
        let labels = suffix
            .trim_end_matches('.')
            .split('.')
            .filter(|l| !l.is_empty())
            .map(|l| (l != "*").then(|| l.to_ascii_lowercase().into_bytes().into()))
            .collect();
        CloudSuffix { labels, max_labels }
    }

    /// Whether `name` may be under this suffix: whether its last label is
    /// the suffix's. Lets most names skip the list of their labels.
    fn may_hold(&self, name: &[u8]) -> bool {
        let Some(Some(last)) = self.labels.last() else {
            return true;
        };
        let last_at = label_starts(name).filter(|&at| name[at] != 0).last();
        last_at.is_some_and(|at| name[at + 1..=at + name[at] as usize] == **last)
    }

    /// How many of a name's `labels` (all of them, left to right) are left
    /// of this suffix, if the name is under it.
    fn labels_left(&self, labels: &[Label<'_>]) -> Option<usize> {
        if labels.len() <= self.labels.len() {
            return None;
        }
        let left = labels.len() - self.labels.len();
        let matches = self
            .labels
            .iter()
            .zip(&labels[left..])
            .all(|(want, have)| want.as_deref().is_none_or(|w| w == have.text));
        matches.then_some(left)
    }
}

/// Whether a label can be the protocol of `_<port>._<proto>`: what CoreDNS
/// matches against a Service port's protocol once it strips one underscore
/// (an empty one matches any).
fn is_protocol(label: &[u8]) -> bool {
    let protocol = label.strip_prefix(b"_").unwrap_or(label);
    [&b""[..], b"tcp", b"udp", b"sctp"].contains(&protocol)
}

/// The compiled `[cluster]` section: the rules in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRules {
    /// The cluster domain, lower-case wire form.
    domain: Box<[u8]>,
    local_nxdomain: bool,
    nxdomain_cut: bool,
    /// Bits of [`Rule`]s switched off.
    disabled: u8,
    /// Names (wire form) at and below which nothing is answered locally.
    exceptions: Vec<Box<[u8]>>,
    cloud_suffixes: Vec<CloudSuffix>,
    search: SearchPlan,
}

/// How the search-list expansions of a pod's lookup are worked ahead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchPlan {
    /// Ask for the namespace node of `X.<ns>.svc.Z` first when nothing is
    /// known of that namespace (see [`ClusterRules::namespace_to_check`]).
    pub namespace_check: bool,
    /// Resolve the later expansions as soon as the first arrives.
    pub speculate: bool,
    /// Watch the API's namespaces: names of a namespace it does not hold
    /// are NXDOMAIN ([`Rule::UnknownNamespace`]).
    pub namespaces_from_api: bool,
    /// Answer a verified pod's first expansion with its walk's end
    /// (`serve::autopath`).
    pub autopath: bool,
    /// The node's search domains the kubelet appends to the pods' list,
    /// in order (lower-case wire form).
    pub search_domains: Vec<Box<[u8]>>,
    /// Speculative upstream fetches in flight at most.
    pub max_speculations: usize,
}

/// A query shaped like the first search-list expansion of a pod's lookup:
/// `X.<ns>.svc.Z`, X of two labels or more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstExpansion {
    /// Where `<ns>.svc.Z` starts: X is the name before it.
    pub namespace_at: usize,
    /// X has three labels or more, so the name is no later expansion of
    /// another lookup (`api.example.com.svc.Z`, the second expansion of
    /// `api.example.com`, has the same shape as the first of `api.example`
    /// from namespace `com`).
    pub certain: bool,
}

impl ClusterRules {
    /// `domain` is the cluster domain in lower-case wire form.
    pub fn new(
        domain: Vec<u8>,
        local_nxdomain: bool,
        nxdomain_cut: bool,
        disabled: &[Rule],
        exceptions: Vec<Vec<u8>>,
        cloud_suffixes: Vec<CloudSuffix>,
    ) -> ClusterRules {
        ClusterRules {
            domain: domain.into(),
            local_nxdomain,
            nxdomain_cut,
            disabled: disabled.iter().fold(0, |bits, r| bits | r.bit()),
            exceptions: exceptions.into_iter().map(Into::into).collect(),
            cloud_suffixes,
            search: SearchPlan::default(),
        }
    }

    /// The same rules with `search` as the expansion plan.
    pub fn with_search(mut self, search: SearchPlan) -> ClusterRules {
        self.search = search;
        self
    }

    pub fn search(&self) -> &SearchPlan {
        &self.search
    }

    /// The schema position of `name`: `svc` or `pod`, and the labels left of it.
    fn under_kind<'a>(&self, name: &'a [u8]) -> Option<(&'static [u8], Vec<Label<'a>>)> {
        let mut labels = labels_left_of(name, &self.domain);
        let kind = labels.pop()?;
        let kind: &'static [u8] = match kind.text {
            b"svc" => b"svc",
            b"pod" => b"pod",
            _ => return None,
        };
        Some((kind, labels))
    }

    /// Where the namespace node (`<ns>.svc.Z`, `<ns>.pod.Z`) at or above
    /// `name` starts.
    pub fn namespace_node(&self, name: &[u8]) -> Option<usize> {
        let (_, left) = self.under_kind(name)?;
        left.last().map(|l| l.at)
    }

    /// Where `<ns>.svc.Z` starts in a name below it (`X.<ns>.svc.Z`).
    /// Allocates nothing: autopath asks it before the cache, for every
    /// query under the cluster domain.
    pub fn svc_namespace_node(&self, name: &[u8]) -> Option<usize> {
        let end = suffix_at(name, &self.domain)?;
        // The last three labels left of Z: X's last, <ns>, `svc`.
        let (mut x, mut ns, mut kind) = (None, None, None);
        for at in label_starts(name).take_while(|&at| at < end) {
            (x, ns, kind) = (ns, kind, Some(at));
        }
        let (ns, kind) = (ns?, kind?);
        (x.is_some() && &name[kind..end] == b"\x03svc").then_some(ns)
    }

    /// The namespace label of a name at or below `<ns>.svc.Z`, when the
    /// API's namespace list may decide it ([`Rule::UnknownNamespace`]).
    /// Only `svc`: with `pods insecure` CoreDNS answers pod names of any
    /// namespace.
    pub fn svc_namespace<'a>(&self, name: &'a [u8]) -> Option<&'a [u8]> {
        if !self.search.namespaces_from_api
            || !self.on(Rule::UnknownNamespace)
            || self.excepted(name)
        {
            return None;
        }
        match self.under_kind(name)? {
            (b"svc", left) => left.last().map(|l| l.text),
            _ => None,
        }
    }

    /// The namespace node to ask for before `name` itself: for
    /// `X.<ns>.svc.Z` with X of two labels or more, which is how the second
    /// search expansion of an external name looks (`api.example.com.svc.Z`
    /// asks for namespace `com`). One answer for the node settles every
    /// such name below it (RFC 8020); the caller skips namespaces it knows.
    pub fn namespace_to_check(&self, name: &[u8]) -> Option<usize> {
        if !(self.search.namespace_check && self.nxdomain_cut) || self.excepted(name) {
            return None;
        }
        match self.under_kind(name)? {
            (b"svc", left) if left.len() >= 3 => left.last().map(|l| l.at),
            _ => None,
        }
    }

    /// Whether `name` looks like the first search expansion of a lookup.
    pub fn first_expansion(&self, name: &[u8]) -> Option<FirstExpansion> {
        if !self.search.speculate {
            return None;
        }
        match self.under_kind(name)? {
            // `_<port>._<proto>.<svc>.<ns>.svc.Z` is an SRV name, not a search expansion.
            (b"svc", left) if left.len() == 4 && is_protocol(left[1].text) => None,
            (b"svc", left) if left.len() >= 3 => Some(FirstExpansion {
                namespace_at: left.last()?.at,
                certain: left.len() >= 4,
            }),
            _ => None,
        }
    }

    /// Whether any rule may concern `name` at all: it is at or below the
    /// cluster domain, or may be below a cloud suffix. Every other name (most
    /// upstream misses) skips the rules with this one test.
    pub fn in_scope(&self, name: &[u8]) -> bool {
        suffix_at(name, &self.domain).is_some()
            || self.cloud_suffixes.iter().any(|s| s.may_hold(name))
    }

    pub fn domain(&self) -> &[u8] {
        &self.domain
    }

    fn on(&self, rule: Rule) -> bool {
        self.local_nxdomain && self.disabled & rule.bit() == 0
    }

    pub(crate) fn excepted(&self, name: &[u8]) -> bool {
        self.exceptions.iter().any(|e| suffix_at(name, e).is_some())
    }

    /// The rule that rules `name` (lower-case wire form) out, if one does.
    pub fn cannot_exist(&self, name: &[u8]) -> Option<Rule> {
        if !self.local_nxdomain || self.excepted(name) {
            return None;
        }
        if suffix_at(name, &self.domain).is_some() {
            return self.cluster_rule(name).filter(|r| self.on(*r));
        }
        if self.on(Rule::CloudSuffix) && self.cloud_suffixes.iter().any(|s| s.may_hold(name)) {
            let labels = labels_left_of(name, b"\x00");
            let too_long =
                |s: &CloudSuffix| s.labels_left(&labels).is_some_and(|n| n > s.max_labels);
            if self.cloud_suffixes.iter().any(too_long) {
                return Some(Rule::CloudSuffix);
            }
        }
        None
    }

    /// The schema rules for a name at or below the cluster domain.
    fn cluster_rule(&self, name: &[u8]) -> Option<Rule> {
        let labels = labels_left_of(name, &self.domain);
        let (kind, left) = labels.split_last()?;
        match kind.text {
            b"svc" | b"pod" if left.len() >= 5 => Some(Rule::TooManyLabels),
            b"svc" if left.len() == 4 => (!is_protocol(left[1].text)).then_some(Rule::SvcPortShape),
            b"svc" | b"pod" => None,
            b"dns-version" => (!left.is_empty()).then_some(Rule::ReservedName),
            b"dns" => match left {
                [] => None,
                [only] if only.text == b"ns" => None,
                _ => Some(Rule::ReservedName),
            },
            _ => Some(Rule::ZoneChild),
        }
    }

    /// Whether a negative answer for `name` may teach the SOA that local
    /// answers carry: for the cluster domain, only the domain's own SOA;
    /// under a cloud suffix, the SOA of any zone above the name but the root.
    pub fn may_learn_soa(&self, name: &[u8], soa_owner: &[u8]) -> bool {
        if !self.local_nxdomain || soa_owner == b"\x00" {
            return false;
        }
        if suffix_at(name, &self.domain).is_some() {
            return soa_owner == &*self.domain;
        }
        let labels = labels_left_of(name, b"\x00");
        self.cloud_suffixes
            .iter()
            .any(|s| s.labels_left(&labels).is_some())
            && suffix_at(name, soa_owner).is_some()
    }

    /// Where in `name` the nodes start whose cached NXDOMAIN also denies
    /// `name` (RFC 8020): its namespace node (`<ns>.svc.Z`, `<ns>.pod.Z`)
    /// and service node (`<svc>.<ns>.svc.Z`), when `name` is below them.
    /// Only these: CoreDNS answers NXDOMAIN for some nodes that have names
    /// below them (`dns.Z` above `ns.dns.Z`, `_tcp.<svc>.<ns>.svc.Z` above
    /// the SRV names), so a cut anywhere else would deny names that exist.
    pub fn cut_points(&self, name: &[u8]) -> impl Iterator<Item = usize> {
        let mut points = [None, None];
        if self.nxdomain_cut && !self.excepted(name) && suffix_at(name, &self.domain).is_some() {
            let labels = labels_left_of(name, &self.domain);
            if let Some((kind, left)) = labels.split_last() {
                let n = left.len();
                if (kind.text == b"svc" || kind.text == b"pod") && n >= 2 {
                    points[0] = Some(left[n - 1].at);
                }
                if kind.text == b"svc" && n >= 3 {
                    points[1] = Some(left[n - 2].at);
                }
            }
        }
        points.into_iter().flatten()
    }

    /// Whether an NXDOMAIN for `name` is one [`ClusterRules::cut_points`]
    /// would use.
    pub fn is_cut_node(&self, name: &[u8]) -> bool {
        if !self.nxdomain_cut || suffix_at(name, &self.domain).is_none() || self.excepted(name) {
            return false;
        }
        let labels = labels_left_of(name, &self.domain);
        matches!(labels.split_last(), Some((kind, left))
            if (kind.text == b"svc" && (left.len() == 1 || left.len() == 2))
                || (kind.text == b"pod" && left.len() == 1))
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
