//! Metric families with typed labels.
//!
//! A family's labels are a struct declared with `label_set!`: the label
//! names and their order are written once, next to the field names, so a
//! call site names each value and a wrong order cannot compile. Resolving a
//! child series (`get`) hashes its values and takes a lock; the request path
//! resolves its handles once and keeps them (see `serve::stats`).

use std::marker::PhantomData;

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};

use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

/// The labels of one metric family, in the order Prometheus sees them.
/// Implemented by `Labels<'static>`; a call site passes `Labels<'a>` (`At`)
/// borrowing its values.
pub trait LabelSet: 'static {
    const NAMES: &'static [&'static str];
    type At<'a>: LabelValues;
}

/// The values of one series, in [`LabelSet::NAMES`] order.
pub trait LabelValues {
    fn values(&self) -> impl AsRef<[&str]>;
}

/// A label value: a string, or a type that names itself (`Proto` → "udp").
pub(crate) trait LabelValue {
    fn label_value(&self) -> &str;
}

impl LabelValue for &str {
    fn label_value(&self) -> &str {
        self
    }
}

/// Declares label structs, one per metric family:
///
/// ```ignore
/// label_set! {
///     /// `coredns_dns_requests_total`.
///     pub struct RequestLabels { server = "server", proto: Proto = "proto", qtype = "type" }
/// }
/// ```
///
/// Each field is a label value, `&'a str` unless a type (anything
/// [`LabelValue`]) is given; the literal is the label's name in the
/// exposition, and the field order is the label order. The family of
/// `RequestLabels` is `Counters<RequestLabels<'static>>` (or `Gauges`,
/// `Histograms`).
macro_rules! label_set {
    ($($(#[$doc:meta])* $vis:vis struct $name:ident {
        $($field:ident $(: $ty:ty)? = $label:literal),+ $(,)?
    })+) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        $vis struct $name<'a> { $(pub $field: $crate::metrics::family::label_set!(@type 'a $($ty)?)),+ }

        impl $crate::metrics::family::LabelSet for $name<'static> {
            const NAMES: &'static [&'static str] = &[$($label),+];
            type At<'a> = $name<'a>;
        }

        impl $crate::metrics::family::LabelValues for $name<'_> {
            fn values(&self) -> impl AsRef<[&str]> {
                use $crate::metrics::family::LabelValue as _;
                [$(self.$field.label_value()),+]
            }
        }
    )+};
    (@type $lt:lifetime) => { &$lt str };
    (@type $lt:lifetime $ty:ty) => { $ty };
}
pub(crate) use label_set;

/// A Prometheus metric vector whose children are picked by a `L` label struct.
pub struct Family<L, B: MetricVecBuilder> {
    vec: MetricVec<B>,
    labels: PhantomData<fn(L)>,
}

impl<L: LabelSet, B: MetricVecBuilder + 'static> Family<L, B> {
    /// The child series for `labels`, created on first use.
    pub fn get(&self, labels: &L::At<'_>) -> B::M {
        self.vec.with_label_values(labels.values().as_ref())
    }

    /// Drops every child series: for a family whose label values come and
    /// go (the top-K workloads), so the exposition holds only the current.
    pub fn reset(&self) {
        self.vec.reset();
    }

    pub(super) fn collector(&self) -> Box<dyn Collector> {
        Box::new(self.vec.clone())
    }
}

pub(crate) type Counters<L> = Family<L, <IntCounterVec as VecOf>::Builder>;
pub(crate) type Gauges<L> = Family<L, <IntGaugeVec as VecOf>::Builder>;
pub(crate) type FloatGauges<L> = Family<L, <GaugeVec as VecOf>::Builder>;
pub(crate) type Histograms<L> = Family<L, <HistogramVec as VecOf>::Builder>;

/// Names the builder type behind each prometheus vector alias.
pub trait VecOf {
    type Builder: MetricVecBuilder;
}
impl<B: MetricVecBuilder> VecOf for MetricVec<B> {
    type Builder = B;
}

pub(super) fn counters<L: LabelSet>(name: &str, help: &str) -> Counters<L> {
    Family {
        vec: IntCounterVec::new(Opts::new(name, help), L::NAMES).expect("valid metric"),
        labels: PhantomData,
    }
}

pub(super) fn gauges<L: LabelSet>(name: &str, help: &str) -> Gauges<L> {
    Family {
        vec: IntGaugeVec::new(Opts::new(name, help), L::NAMES).expect("valid metric"),
        labels: PhantomData,
    }
}

pub(super) fn float_gauges<L: LabelSet>(name: &str, help: &str) -> FloatGauges<L> {
    Family {
        vec: GaugeVec::new(Opts::new(name, help), L::NAMES).expect("valid metric"),
        labels: PhantomData,
    }
}

pub(super) fn histograms<L: LabelSet>(name: &str, help: &str, buckets: Vec<f64>) -> Histograms<L> {
    let opts = HistogramOpts::new(name, help).buckets(buckets);
    Family {
        vec: HistogramVec::new(opts, L::NAMES).expect("valid metric"),
        labels: PhantomData,
    }
}
