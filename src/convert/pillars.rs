//! The `__PILLAR__...__` variables of the NodeLocal DNSCache template.
//!
//! Three are the installer's (`sed` in the documented install, or a chart):
//! the link-local address, the kube-dns Service IP and the cluster domain.
//! A Corefile that still has them is the template itself; their values come
//! from flags, and a missing flag is an error naming the line. The other two
//! node-cache fills in at each start, so a cluster's ConfigMap keeps them:
//! `__PILLAR__CLUSTER__DNS__` (the IP of its `-upstreamsvc` Service) and
//! `__PILLAR__UPSTREAM__SERVERS__` (`/etc/resolv.conf`, or the kube-dns
//! ConfigMap's `upstreamNameservers`). Those stay in the tokens here and
//! `forward`'s translation turns them into nodens' own mechanisms.

use super::corefile::{Corefile, Directive, Token};
use super::{ConvertError, Options};

pub(super) const CLUSTER_DNS: &str = "__PILLAR__CLUSTER__DNS__";
pub(super) const UPSTREAM_SERVERS: &str = "__PILLAR__UPSTREAM__SERVERS__";
const LOCAL_DNS: &str = "__PILLAR__LOCAL__DNS__";
const DNS_SERVER: &str = "__PILLAR__DNS__SERVER__";
const DNS_DOMAIN: &str = "__PILLAR__DNS__DOMAIN__";

/// Substitutes the installer's pillars in every token, from the options.
pub(super) fn substitute(corefile: &mut Corefile, options: &Options) -> Result<(), ConvertError> {
    let values = [
        (LOCAL_DNS, options.local_dns.as_deref(), "--local-dns IP"),
        (DNS_SERVER, options.dns_server.as_deref(), "--dns-server IP"),
        (DNS_DOMAIN, options.domain.as_deref(), "--domain DOMAIN"),
    ];
    // Every pillar without a value, with its first line, so that one run
    // names every flag to pass.
    let missing: std::cell::RefCell<Vec<(usize, &str, &str)>> = Default::default();
    let substitute_token = |t: &Token| -> Result<Vec<Token>, ConvertError> {
        let mut text = t.text.clone();
        let mut changed = false;
        for (pillar, value, flag) in values {
            if !text.contains(pillar) {
                continue;
            }
            let Some(value) = value else {
                let mut missing = missing.borrow_mut();
                if !missing.iter().any(|(_, p, _)| *p == pillar) {
                    missing.push((t.line, pillar, flag));
                }
                continue;
            };
            text = text.replace(pillar, value);
            changed = true;
        }
        let unknown = [
            LOCAL_DNS,
            DNS_SERVER,
            DNS_DOMAIN,
            CLUSTER_DNS,
            UPSTREAM_SERVERS,
        ]
        .iter()
        .fold(text.clone(), |rest, known| rest.replace(known, " "));
        if let Some(rest) = unknown.find("__PILLAR__").map(|i| &unknown[i..]) {
            let name = rest.split_whitespace().next().unwrap_or(rest);
            return Err(ConvertError::at(
                t.line,
                format!("`{name}` is not a NodeLocal DNSCache variable this converter knows"),
            ));
        }
        if !changed {
            return Ok(vec![t.clone()]);
        }
        // An empty value (`--dns-server ""`, kube-proxy in IPVS mode)
        // removes the argument, as the installer's `sed` leaves nothing; a
        // list (`--local-dns 169.254.20.10,fd00::10`) gives one per address,
        // as node-cache's `-localip`.
        Ok(text
            .split([' ', ','])
            .filter(|s| !s.is_empty())
            .map(|s| t.with_text(s))
            .collect())
    };
    let substitute_all = |tokens: &mut Vec<Token>| -> Result<(), ConvertError> {
        let mut out = Vec::with_capacity(tokens.len());
        for t in tokens.iter() {
            out.extend(substitute_token(t)?);
        }
        *tokens = out;
        Ok(())
    };
    fn walk(
        directives: &mut [Directive],
        f: &dyn Fn(&mut Vec<Token>) -> Result<(), ConvertError>,
    ) -> Result<(), ConvertError> {
        for d in directives {
            f(&mut d.args)?;
            if let Some(block) = &mut d.block {
                walk(block, f)?;
            }
        }
        Ok(())
    }
    for block in &mut corefile.blocks {
        let line = block.line();
        substitute_all(&mut block.keys)?;
        if block.keys.is_empty() {
            return Err(ConvertError::at(
                line,
                "the server block's keys are empty after substitution",
            ));
        }
        walk(&mut block.directives, &substitute_all)?;
    }
    let missing = missing.into_inner();
    if let Some(((line, pillar, flag), others)) = missing.split_first() {
        let mut message = format!("{pillar} is not substituted: pass {flag}");
        for (line, pillar, flag) in others {
            message.push_str(&format!("; {pillar} (line {line}): pass {flag}"));
        }
        return Err(ConvertError::at(*line, message));
    }
    Ok(())
}
