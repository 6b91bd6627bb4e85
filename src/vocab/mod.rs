//! The configuration's shared vocabulary: the typed values every section is
//! written in (zone names, addresses, durations), where a key is in the
//! file's text, and the broken rule a section's check reports. A leaf: each
//! feature's configuration section builds on it, and `config` assembles the
//! sections, so neither the features nor this module import `config`.

pub(crate) mod inputs;
pub(crate) mod invalid;
pub(crate) mod position;
pub(crate) mod values;

pub(crate) use inputs::Inputs;
pub(crate) use invalid::{Invalid, key};
pub(crate) use values::is_dns_label;
pub use values::{BadValue, DnsAddr, HttpListen, LogFilter, ZoneName};
