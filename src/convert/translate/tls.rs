//! `forward` to `tls://` destinations (DNS over TLS, RFC 7858): the zone's
//! `transport = "tls"` and `[zone.tls]`, from the destinations and the
//! `tls` and `tls_servername` options.
//!
//! CoreDNS's meaning, which the translation keeps (plugin/forward's
//! setup.go and README): a `tls://` address without a port is on 853;
//! `tls` and `tls_servername` configure the `tls://` destinations of their
//! `forward` and do nothing for plain ones; `force_tcp` and `prefer_udp` do
//! nothing for `tls://` ones (every exchange with them is TCP with TLS).
//! Without `tls_servername` Go checks the certificate against the address
//! it dialled, the upstream's IP, which is what nodens does without
//! `server_name`. CoreDNS 1.13.2 added a name per destination,
//! `tls://9.9.9.9%dns.quad9.net[:port]`, which it refuses together with
//! `tls_servername`.
//!
//! What one zone of nodens cannot say is listed and the `forward` left
//! out rather than guessed at: `tls://` and plain destinations in one
//! `forward` (CoreDNS speaks TLS to some and plain DNS to the others;
//! nodens has one transport per zone), different names per destination
//! (one `server_name` per zone), and DNS over TLS on port 53, which
//! `check-config` refuses as a likely mistake that would leave the zone
//! without upstreams.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use super::super::ConvertError;
use super::super::corefile::{Directive, Token};
use super::Plan;
use super::block_out::{BlockOut, describe};

/// The port of DNS over TLS (RFC 7858), CoreDNS's default for `tls://`.
const TLS_PORT: u16 = 853;

/// A zone's `[zone.tls]`, with the paths as the Corefile wrote them.
/// Zones that share an upstream must have equal ones (one pool per server).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TlsOut {
    pub(crate) server_name: Option<String>,
    /// `tls CA` or `tls CERT KEY CA`; unset: the system's roots.
    pub(crate) ca: Option<String>,
    /// `tls CERT KEY [CA]`: the client certificate and its key.
    pub(crate) client: Option<(String, String)>,
}

impl TlsOut {
    /// `transport = "tls"`: a key of the zone's own table.
    pub(crate) fn write_keys(&self, w: &mut String) {
        let _ = writeln!(w, "transport = \"tls\"   # forward to tls:// destinations");
    }

    /// `[zone.tls]`, when it has something to say.
    pub(crate) fn write_table(&self, w: &mut String, forward_line: usize) {
        if *self == TlsOut::default() {
            return;
        }
        let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
        let _ = writeln!(w, "\n[zone.tls]   # forward, line {forward_line}");
        if let Some(name) = &self.server_name {
            let _ = writeln!(w, "server_name = {}", quote(name));
        }
        if let Some(ca) = &self.ca {
            let _ = writeln!(w, "ca = {}", quote(ca));
        }
        if let Some((cert, key)) = &self.client {
            let _ = writeln!(w, "cert = {}\nkey = {}", quote(cert), quote(key));
        }
    }
}

/// What a block's `forward` options say about TLS, kept until the whole
/// `forward` is read: only then is it known whether they apply.
#[derive(Debug, Default)]
pub(super) struct TlsOptions {
    /// `tls_servername NAME`, quoted, with its line (the last one wins, as in CoreDNS).
    server_name: Option<(String, String, usize)>,
    /// `tls [CERT KEY] [CA]`, quoted, with its line (the last one wins).
    files: Option<(TlsOut, String, usize)>,
    /// `force_tcp` and `prefer_udp`, quoted, with their lines.
    transport: Vec<(String, usize)>,
}

/// What the `tls://` destinations of a `forward` say: the name their
/// `%NAME` suffixes give, one for all or none.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TlsDestinations {
    name: Option<String>,
}

/// `tls://IP[:port]`, `tls://IP%NAME[:port]`, `tls://[IPv6]:port`: the
/// address (port 853 unless written) and the name, if any; `None` for
/// another destination.
pub(super) fn destination(t: &Token) -> Result<Option<(SocketAddr, Option<String>)>, ConvertError> {
    let Some(rest) = t.text.strip_prefix("tls://") else {
        return Ok(None);
    };
    let (host, name) = split_name(rest);
    let addr = host
        .parse::<SocketAddr>()
        .ok()
        .or_else(|| {
            let ip = host.trim_start_matches('[').trim_end_matches(']');
            ip.parse::<IpAddr>()
                .ok()
                .map(|ip| SocketAddr::new(ip, TLS_PORT))
        })
        .ok_or_else(|| {
            ConvertError::at(
                t.line,
                format!(
                    "forward to `{}`: not an IP address (host names are not translated)",
                    t.text
                ),
            )
        })?;
    Ok(Some((addr, name.filter(|n| !n.is_empty()))))
}

/// CoreDNS's split of `HOST%NAME[:port]` into `HOST[:port]` and `NAME`
/// (setup.go's splitZone): the name runs from the last `%` to the last
/// `:` after it; a bracketed IPv6 address gets its `]` back.
fn split_name(text: &str) -> (String, Option<String>) {
    let Some((host, after)) = text.rsplit_once('%') else {
        return (text.to_string(), None);
    };
    let mut host = host.to_string();
    if host.starts_with('[') {
        host.push(']');
    }
    let name = match after.rsplit_once(':') {
        Some((name, port)) => {
            let _ = write!(host, ":{port}");
            name.trim_end_matches(']')
        }
        None => after,
    };
    (host, Some(name.to_string()))
}

/// The `tls://` destinations of one `forward` as one zone's: `None`, and
/// the forward listed, when nodens cannot say them in one zone (another
/// name per destination, port 53).
pub(super) fn destinations(
    tls: &[(SocketAddr, Option<String>)],
    line: usize,
    plan: &mut Plan,
) -> Option<TlsDestinations> {
    if let Some((addr, _)) = tls.iter().find(|(a, _)| a.port() == 53) {
        plan.untranslated.add(
            line,
            format!("forward to tls://{addr}: nodens refuses DNS over TLS on port 53 (its port is 853); this forward is not translated"),
        );
        return None;
    }
    let name = tls[0].1.clone();
    if tls.iter().any(|(_, n)| *n != name) {
        plan.untranslated.add(
            line,
            "forward to tls:// destinations with different %NAMEs (or some without): nodens checks one server_name per zone; this forward is not translated, make a server block per name",
        );
        return None;
    }
    Some(TlsDestinations { name })
}

/// `tls` and `tls_servername` (kept in `out` until the forward is read);
/// `false` for another option.
pub(super) fn option(option: &Directive, out: &mut BlockOut, plan: &mut Plan) -> bool {
    let line = option.line();
    let args = option.arg_texts();
    let quoted = describe(option);
    match (option.name.text.as_str(), args.as_slice()) {
        ("tls_servername", [name]) => {
            out.tls_options.server_name = Some((name.to_string(), quoted, line))
        }
        // CoreDNS's arities: no client certificate and the system's roots,
        // a CA, a client certificate and key, all three.
        ("tls", files) if files.len() <= 3 => {
            let owned = |i: usize| files.get(i).map(|s| s.to_string());
            let tls = match files.len() {
                1 => TlsOut { ca: owned(0), ..TlsOut::default() },
                n => TlsOut {
                    ca: owned(2),
                    client: (n >= 2).then(|| (files[0].to_string(), files[1].to_string())),
                    ..TlsOut::default()
                },
            };
            out.tls_options.files = Some((tls, quoted, line));
        }
        ("tls_servername" | "tls", _) => plan.untranslated.add(
            line,
            format!("forward {quoted}: CoreDNS takes `tls_servername NAME` and `tls [CERT KEY] [CA]`; refused there, left out here"),
        ),
        ("force_tcp" | "prefer_udp", _) => {
            out.tls_options.transport.push((quoted, line));
            return false;
        }
        _ => return false,
    }
    true
}

/// Once the `forward` is read: its zone's TLS (`out.tls`) when its
/// destinations are `tls://`; otherwise the TLS options are listed, since
/// they did nothing in CoreDNS either.
pub(super) fn settle(
    destinations: Option<TlsDestinations>,
    forward_line: usize,
    out: &mut BlockOut,
    plan: &mut Plan,
) -> Result<(), ConvertError> {
    let options = std::mem::take(&mut out.tls_options);
    let Some(destinations) = destinations else {
        let unused = options.server_name.iter().map(|(_, q, l)| (q, *l));
        for (quoted, line) in unused.chain(options.files.iter().map(|(_, q, l)| (q, *l))) {
            plan.untranslated.add(
                line,
                format!("forward {quoted}: no effect without tls:// destinations (CoreDNS applies it to those only); left out"),
            );
        }
        return Ok(());
    };
    for (quoted, line) in &options.transport {
        plan.notes.add(
            *line,
            format!("forward {quoted}: no effect on tls:// destinations, in CoreDNS as in nodens: transport = \"tls\" sends every query over TLS, which is TCP"),
        );
    }
    out.force_tcp = false;
    let (mut tls, files_line) = match options.files {
        Some((tls, _, line)) => (tls, Some(line)),
        None => (TlsOut::default(), None),
    };
    tls.server_name = match (options.server_name, destinations.name) {
        (Some((_, _, line)), Some(name)) => {
            return Err(ConvertError::at(
                line,
                format!(
                    "tls_servername and tls://...%{name}: CoreDNS refuses a forward that sets both"
                ),
            ));
        }
        (Some((name, _, _)), None) => Some(name),
        (None, name) => name,
    };
    notes(&tls, forward_line, files_line, plan);
    out.tls = Some(tls);
    Ok(())
}

/// What works differently: where the files and the roots come from, and
/// the name the certificates must carry.
fn notes(tls: &TlsOut, forward_line: usize, files_line: Option<usize>, plan: &mut Plan) {
    if tls.server_name.is_none() {
        plan.notes.add(
            forward_line,
            "forward tls:// without tls_servername: each upstream's certificate must carry its IP address, as CoreDNS checked it; [zone.tls] server_name sets the name",
        );
    }
    if tls.ca.is_none() {
        plan.notes.add(
            files_line.unwrap_or(forward_line),
            "forward tls:// without a CA file: the system's roots, as in CoreDNS; nodens's image carries none, so mount a bundle and set [zone.tls] ca (check-config fails without roots)",
        );
    }
    let files = tls
        .ca
        .iter()
        .chain(tls.client.iter().flat_map(|(c, k)| [c, k]));
    let files: Vec<&String> = files.collect();
    if let (Some(line), false) = (files_line, files.is_empty()) {
        let relative = files.iter().any(|f| !f.starts_with('/'));
        plan.notes.add(
            line,
            format!(
                "forward tls: nodens reads these files when it loads its configuration (start, SIGHUP): mount them in its pod at the same paths{}",
                if relative { "; a relative path is read from nodens's working directory, so write absolute ones" } else { "" }
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> Token {
        Token {
            text: text.into(),
            line: 1,
            quoted: false,
            end_line: 1,
        }
    }

    fn dest(text: &str) -> Option<(SocketAddr, Option<String>)> {
        destination(&token(text)).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn destinations_take_port_853_and_coredns_names() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let named = |s: &str| Some("dns.quad9.net".to_string()).filter(|_| !s.is_empty());
        for (text, addr, name) in [
            ("tls://9.9.9.9", "9.9.9.9:853", ""),
            ("tls://149.112.112.112:8853", "149.112.112.112:8853", ""),
            ("tls://2620:fe::fe", "[2620:fe::fe]:853", ""),
            ("tls://[2620:fe::fe]:10853", "[2620:fe::fe]:10853", ""),
            ("tls://9.9.9.9%dns.quad9.net", "9.9.9.9:853", "y"),
            ("tls://9.9.9.9%dns.quad9.net:10853", "9.9.9.9:10853", "y"),
            (
                "tls://[2620:fe::fe%dns.quad9.net]:10853",
                "[2620:fe::fe]:10853",
                "y",
            ),
        ] {
            assert_eq!(dest(text), Some((a(addr), named(name))), "{text}");
        }
        assert_eq!(dest("9.9.9.9"), None);
        assert_eq!(dest("dns://9.9.9.9"), None);
        let e = destination(&token("tls://dns.quad9.net")).unwrap_err();
        assert!(e.message.contains("not an IP address"), "{e}");
    }
}
