//! `nodens convert-corefile`: a NodeLocal DNSCache Corefile in, a nodens
//! configuration out, and the list of what had no translation.
//!
//! A cluster that moves from node-local-dns to nodens has its settings in a
//! Corefile (the node-local-dns ConfigMap). Reading it by hand invites two
//! mistakes: missing a plugin someone added (`rewrite`, `hosts`), and
//! carrying over a setting whose meaning differs. So the converter
//! translates only what has an equivalent, names the line of everything
//! else, and checks its output with the same rules as `check-config`.
//!
//! The steps, one module each: [`corefile`] reads the syntax, [`pillars`]
//! fills in the installer's template variables, [`translate`] maps the
//! plugins to nodens settings, [`emit`] writes the TOML.

pub mod corefile;
mod emit;
mod pillars;
mod translate;

use std::fmt;
use std::path::PathBuf;

use crate::config::File;

/// What the Corefile does not say and the converter needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// `__PILLAR__LOCAL__DNS__`: the node-local address (169.254.20.10).
    pub local_dns: Option<String>,
    /// `__PILLAR__DNS__SERVER__`: the kube-dns Service IP; empty in IPVS mode.
    pub dns_server: Option<String>,
    /// `__PILLAR__DNS__DOMAIN__`: the cluster domain (cluster.local).
    pub domain: Option<String>,
    /// The Service `__PILLAR__CLUSTER__DNS__` stands for (node-cache's
    /// `-upstreamsvc`, `kube-dns-upstream` in the Kubernetes manifest).
    pub upstream_service: String,
    /// The resolv.conf `__PILLAR__UPSTREAM__SERVERS__` stands for.
    pub resolv_conf: PathBuf,
    /// Shown in the header of the output.
    pub source_name: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            local_dns: None,
            dns_server: None,
            domain: None,
            upstream_service: "kube-dns-upstream".into(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            source_name: "Corefile".into(),
        }
    }
}

/// Something about the Corefile the user should read, with its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Every line it is about, in order (one finding for `reload` in four blocks).
    pub lines: Vec<usize>,
    pub message: String,
}

/// The result: the configuration text, what was left out, and notes on
/// what was translated but behaves differently.
#[derive(Debug, Clone)]
pub struct Conversion {
    pub toml: String,
    /// Plugins and options with no nodens equivalent: not in the output.
    pub untranslated: Vec<Finding>,
    /// Translated or deliberately dropped, but worth knowing.
    pub notes: Vec<Finding>,
}

/// Why there is no output: the input cannot be read as a Corefile, a
/// template variable has no value, or what it says cannot be expressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertError {
    pub line: Option<usize>,
    pub message: String,
}

impl ConvertError {
    fn at(line: usize, message: impl Into<String>) -> Self {
        ConvertError {
            line: Some(line),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConvertError {}

/// Converts Corefile text. `env` answers the Corefile's `{$VAR}` references.
pub fn convert(
    text: &str,
    options: &Options,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Conversion, ConvertError> {
    let mut parsed = corefile::parse(text, env).map_err(|e| ConvertError::at(e.line, e.message))?;
    pillars::substitute(&mut parsed, options)?;
    let plan = translate::translate(&parsed, options)?;
    let toml = emit::emit(&plan, options);
    // The same parse and rules as `check-config`, short of what belongs to
    // the node that will run it (the Service's environment variables and
    // its resolv.conf): a conversion that fails them is a converter bug.
    File::parse(&toml).map_err(|e| ConvertError {
        line: None,
        message: format!("the converted configuration does not pass the check ({e}):\n{toml}"),
    })?;
    Ok(Conversion {
        toml,
        untranslated: plan.untranslated.into_findings(),
        notes: plan.notes.into_findings(),
    })
}
