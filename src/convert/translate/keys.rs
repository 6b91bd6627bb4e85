//! A server block's keys: `[dns://]zone[:port]`, one or several, and the
//! reverse zones CoreDNS writes as networks (`10.0.0.0/8`). A block whose
//! keys nodens cannot serve is listed and left out; keys that cannot be a
//! zone at all are an error.

use std::net::Ipv4Addr;

use super::super::ConvertError;
use super::super::corefile::ServerBlock;
use super::Plan;
use crate::config::ZoneName;

/// One server block's zones and port, from its keys.
pub(super) struct Keys {
    pub(super) zones: Vec<(String, usize)>,
    /// The port of each zone's key, in the order of `zones`: CoreDNS
    /// serves each key on its own port, so one block may be on several.
    pub(super) ports: Vec<u16>,
}

/// `[dns://]zone[:port]` keys; `None` (and a finding) for a block whose
/// keys nodens cannot serve (another scheme, a reverse CIDR off the octet
/// boundary).
pub(super) fn keys(block: &ServerBlock, plan: &mut Plan) -> Result<Option<Keys>, ConvertError> {
    let mut zones = Vec::new();
    let mut ports = Vec::new();
    for key in &block.keys {
        let mut text = key.text.as_str();
        if let Some((scheme, rest)) = text.split_once("://") {
            if !scheme.eq_ignore_ascii_case("dns") {
                plan.untranslated.add(
                    key.line,
                    format!("server block `{}`: nodens serves plain DNS only (not {scheme}://); block not translated", key.text),
                );
                return Ok(None);
            }
            text = rest;
        }
        let (name, key_port) = match text.rsplit_once(':') {
            Some((name, p)) if !name.contains(':') || name.ends_with(']') => {
                let p: u16 = p.parse().map_err(|_| {
                    ConvertError::at(key.line, format!("`{}`: `{p}` is not a port", key.text))
                })?;
                (name, p)
            }
            _ => (text, 53),
        };
        let name = if name.contains('/') {
            match reverse_zone(name) {
                Some(z) => z,
                None => {
                    plan.untranslated.add(
                        key.line,
                        format!("server block `{}`: only IPv4 networks on an octet boundary (/8, /16, /24) become in-addr.arpa zones; block not translated", key.text),
                    );
                    return Ok(None);
                }
            }
        } else {
            name.to_string()
        };
        let normal: ZoneName = name
            .parse()
            .map_err(|e| ConvertError::at(key.line, format!("`{}`: {e}", key.text)))?;
        let shown = match normal.0.trim_end_matches('.') {
            "" => ".".to_string(),
            n => n.to_string(),
        };
        // A name with bytes nodens writes as `\DDD` escapes does not read
        // back as a zone name: refuse it here rather than write it.
        if shown.parse::<ZoneName>().ok().as_ref() != Some(&normal) {
            return Err(ConvertError::at(
                key.line,
                format!(
                    "`{}`: not a zone name nodens can write (`{shown}`)",
                    key.text
                ),
            ));
        }
        zones.push((shown, key.line));
        ports.push(key_port);
    }
    Ok(Some(Keys { zones, ports }))
}

/// `10.0.0.0/8` → `10.in-addr.arpa`.
fn reverse_zone(cidr: &str) -> Option<String> {
    let (ip, len) = cidr.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    if len % 8 != 0 || len > 32 {
        return None;
    }
    let octets = ip.octets();
    let kept = usize::from(len / 8);
    if octets[kept..].iter().any(|&o| o != 0) {
        return None;
    }
    let mut labels: Vec<String> = octets[..kept].iter().rev().map(|o| o.to_string()).collect();
    labels.push("in-addr.arpa".into());
    Some(labels.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_zones_from_networks() {
        assert_eq!(
            reverse_zone("10.0.0.0/8").as_deref(),
            Some("10.in-addr.arpa")
        );
        assert_eq!(
            reverse_zone("172.16.0.0/16").as_deref(),
            Some("16.172.in-addr.arpa")
        );
        assert_eq!(reverse_zone("10.1.0.0/12"), None);
        assert_eq!(reverse_zone("10.1.0.0/8"), None);
        assert_eq!(reverse_zone("fd00::/8"), None);
    }
}
