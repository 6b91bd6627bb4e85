//! What a block's `rewrite`, `dns64` and `forward ... except` become, kept
//! with each of its zones and written after the zone's own keys.

use std::fmt::Write as _;

/// A zone's rules as TOML bodies, each with the Corefile line it comes from.
#[derive(Debug, Clone, Default)]
pub(crate) struct RulesOut {
    /// `except` names, as written in the output.
    pub(crate) except: Vec<String>,
    /// `[[zone.rewrite]]` bodies, in the order written.
    pub(crate) rewrites: Vec<(String, usize)>,
    /// The `[zone.dns64]` body.
    pub(crate) dns64: Option<(String, usize)>,
}

impl RulesOut {
    /// `except = [...]`: a key of the zone's own table, so written before
    /// any `[zone.*]` table.
    pub(crate) fn write_keys(&self, w: &mut String) {
        if !self.except.is_empty() {
            let names: Vec<String> = self
                .except
                .iter()
                .map(|n| toml::Value::String(n.clone()).to_string())
                .collect();
            let _ = writeln!(w, "except = [{}]   # forward ... except", names.join(", "));
        }
    }

    /// `[zone.dns64]` and each `[[zone.rewrite]]`.
    pub(crate) fn write_tables(&self, w: &mut String) {
        if let Some((body, line)) = &self.dns64 {
            let _ = write!(w, "\n[zone.dns64]   # line {line}\n{body}");
        }
        for (body, line) in &self.rewrites {
            let _ = write!(w, "\n[[zone.rewrite]]   # line {line}\n{body}");
        }
    }
}
