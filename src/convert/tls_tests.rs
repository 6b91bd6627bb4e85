//! The converter on `forward` to `tls://` destinations: the zones it
//! writes (`transport = "tls"`, `[zone.tls]`) pass `check-config`'s
//! compile, which reads the certificate files; `tls`'s arities; what one
//! zone cannot say (plain and `tls://` mixed, one name per destination,
//! port 53) and TLS options without `tls://` are listed; zones sharing a
//! TLS upstream agree on its settings.

use super::testing::{listed, noted, ok, run};
use super::*;

/// A self-signed certificate (a CA, `dns.example`) and its key, made once
/// with openssl for these tests: compiling `[zone.tls]` reads and checks
/// them, and no TLS session is ever made with them.
const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBqzCCAVGgAwIBAgIUbCWtBdb591wtoshO9iECFOZtdsYwCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTbm9kZW5zIGNvbnZlcnQgdGVzdDAgFw0yNjExMzAxMzI3MDZa
GA8yMTI2MTEwNjEzMjcwNlowHjEcMBoGA1UEAwwTbm9kZW5zIGNvbnZlcnQgdGVz
dDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABNGx8hilkOAME/ar+H+VB2iUvhQg
2EksfKiJDBIV3jIqHTlZxIq7aSCxebjIGEAwI8WBzG+WPzgZ/fBjPRHeVVejazBp
MB0GA1UdDgQWBBRXdaoAVYQFTm0toNxs7DpqilbFFjAfBgNVHSMEGDAWgBRXdaoA
VYQFTm0toNxs7DpqilbFFjAPBgNVHRMBAf8EBTADAQH/MBYGA1UdEQQPMA2CC2Ru
cy5leGFtcGxlMAoGCCqGSM49BAMCA0gAMEUCIFTNPz5mh5etXRBEK4LViyrh6Tih
8QBL2xSGdMTys1kaAiEAqHdKXYqZ6ZAaSq0CbL3yDgowpu0FgILHopHfdj91Qwc=
-----END CERTIFICATE-----
";
const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgEqp2Ov7rl+TBWZNC
wi2SBnLo+GfVDnIubSIbZ8YaqdGhRANCAATRsfIYpZDgDBP2q/h/lQdolL4UINhJ
LHyoiQwSFd4yKh05WcSKu2kgsXm4yBhAMCPFgcxvlj84Gf3wYz0R3lVX
-----END PRIVATE KEY-----
";

/// `ca.pem` (the certificate as a root), `cert.pem` and `key.pem` in a
/// directory of their own.
struct Pki {
    _dir: tempfile::TempDir,
    ca: String,
    cert: String,
    key: String,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (ca, cert, key) = (
        write("ca.pem", CERT),
        write("cert.pem", CERT),
        write("key.pem", KEY),
    );
    Pki {
        _dir: dir,
        ca,
        cert,
        key,
    }
}

/// The `[[zone]]` tables of the output, by name.
fn zone(c: &Conversion, name: &str) -> toml::Table {
    let t: toml::Table = c.toml.parse().unwrap();
    let zones = t["zone"].as_array().unwrap();
    let zone = zones.iter().find(|z| z["name"].as_str() == Some(name));
    zone.and_then(|z| z.as_table().cloned())
        .unwrap_or_else(|| panic!("no zone {name}:\n{}", c.toml))
}

/// `[zone.tls]`'s keys and values, sorted.
fn tls_keys(zone: &toml::Table) -> Vec<(String, String)> {
    let Some(tls) = zone.get("tls").and_then(toml::Value::as_table) else {
        return Vec::new();
    };
    let mut keys: Vec<(String, String)> = tls
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    keys.sort();
    keys
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn tls_forwards_become_tls_zones_that_check_config_accepts() {
    let p = pki();
    let c = ok(&format!(
        ".:53 {{\n  bind 127.0.0.1\n  forward . tls://9.9.9.9 tls://149.112.112.112:8853 {{\n    tls_servername dns.quad9.net\n    tls {} {} {}\n  }}\n}}\n",
        p.cert, p.key, p.ca
    ));
    assert!(c.untranslated.is_empty(), "{:?}", c.untranslated);
    let root = zone(&c, ".");
    let upstreams: Vec<&str> = root["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    assert_eq!(upstreams, ["9.9.9.9:853", "149.112.112.112:8853"]);
    assert_eq!(root["transport"].as_str(), Some("tls"), "{}", c.toml);
    assert_eq!(
        tls_keys(&root),
        pairs(&[
            ("ca", &p.ca),
            ("cert", &p.cert),
            ("key", &p.key),
            ("server_name", "dns.quad9.net"),
        ])
    );
    assert!(noted(&c, 5, "mount them"), "{:?}", c.notes);
    // check-config's compile: the files read, the name and ports accepted.
    let config =
        crate::config::Config::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
    assert_eq!(config.zones[0].upstreams.len(), 2);
}

/// `tls`, `tls CA`, `tls CERT KEY`, `tls CERT KEY CA`, as CoreDNS reads them.
#[test]
fn each_tls_arity_sets_its_keys() {
    let p = pki();
    let cases: [(String, Vec<(String, String)>); 4] = [
        (String::new(), vec![]),
        (format!(" {}", p.ca), pairs(&[("ca", &p.ca)])),
        (
            format!(" {} {}", p.cert, p.key),
            pairs(&[("cert", &p.cert), ("key", &p.key)]),
        ),
        (
            format!(" {} {} {}", p.cert, p.key, p.ca),
            pairs(&[("ca", &p.ca), ("cert", &p.cert), ("key", &p.key)]),
        ),
    ];
    for (args, keys) in cases {
        let c = ok(&format!(
            ".:53 {{\n  bind 127.0.0.1\n  forward . tls://9.9.9.9 {{\n    tls{args}\n  }}\n}}\n"
        ));
        let root = zone(&c, ".");
        assert_eq!(root["transport"].as_str(), Some("tls"), "{}", c.toml);
        assert_eq!(tls_keys(&root), keys, "tls{args}:\n{}", c.toml);
        assert!(noted(&c, 3, "its IP address"), "{:?}", c.notes);
        let system_roots = !keys.iter().any(|(k, _)| k == "ca");
        assert_eq!(
            noted(&c, 4, "system's roots"),
            system_roots,
            "{:?}",
            c.notes
        );
        if !system_roots {
            crate::config::Config::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
        }
    }
    let c = ok(".:53 {\n  forward . tls://9.9.9.9 {\n    tls a b c d\n  }\n}\n");
    assert!(listed(&c, 3, "CoreDNS takes"), "{:?}", c.untranslated);
}

/// CoreDNS speaks TLS to the `tls://` destinations of a mixed `forward`
/// and plain DNS to the others; a nodens zone has one transport.
#[test]
fn mixed_tls_and_plain_destinations_are_listed() {
    let c = ok(
        ".:53 {\n  bind 127.0.0.1\n  forward . tls://9.9.9.9 10.0.0.1\n}\n\
                a.:53 {\n  bind 127.0.0.1\n  forward . 10.0.0.2\n}\n",
    );
    assert!(
        listed(&c, 3, "mixes tls:// and plain"),
        "{:?}",
        c.untranslated
    );
    assert!(!c.toml.contains("9.9.9.9"), "{}", c.toml);
    assert!(!c.toml.contains("transport"), "{}", c.toml);
}

#[test]
fn tls_options_without_tls_destinations_are_listed() {
    let c = ok(
        ".:53 {\n  bind 127.0.0.1\n  forward . 10.0.0.1 {\n    tls_servername dns.example\n    tls /etc/ca.pem\n    force_tcp\n  }\n}\n",
    );
    for line in [4, 5] {
        assert!(
            listed(&c, line, "no effect without tls://"),
            "{:?}",
            c.untranslated
        );
    }
    let root = zone(&c, ".");
    assert_eq!(root["transport"].as_str(), Some("force_tcp"), "{}", c.toml);
    assert!(root.get("tls").is_none(), "{}", c.toml);
    crate::config::Config::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
}

/// `force_tcp` / `prefer_udp` do nothing for `tls://` in CoreDNS: a note,
/// and the zone stays over TLS.
#[test]
fn force_tcp_on_tls_destinations_is_a_note() {
    let c = ok(".:53 {\n  bind 127.0.0.1\n  forward . tls://9.9.9.9 {\n    force_tcp\n  }\n}\n");
    assert!(noted(&c, 4, "no effect on tls://"), "{:?}", c.notes);
    assert_eq!(
        zone(&c, ".")["transport"].as_str(),
        Some("tls"),
        "{}",
        c.toml
    );
}

/// CoreDNS 1.13.2's `tls://IP%NAME`: one name for all is `server_name`;
/// with `tls_servername` too CoreDNS refuses the forward; different names
/// do not fit one zone. Port 53 and other schemes are listed.
#[test]
fn names_per_destination_and_what_one_zone_cannot_say() {
    let c = ok(
        ".:53 {\n  bind 127.0.0.1\n  forward . tls://9.9.9.9%dns.quad9.net tls://149.112.112.112%dns.quad9.net:8853\n}\n",
    );
    assert_eq!(
        tls_keys(&zone(&c, ".")),
        pairs(&[("server_name", "dns.quad9.net")])
    );
    let e = run(".:53 {\n  forward . tls://9.9.9.9%dns.quad9.net {\n    tls_servername dns.quad9.net\n  }\n}\n")
        .unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    let fallback = "a.:53 {\n  bind 127.0.0.1\n  forward . 10.0.0.2\n}\n";
    for (forward, words) in [
        (
            "tls://9.9.9.9%a.example tls://149.112.112.112%b.example",
            "different %NAMEs",
        ),
        (
            "tls://9.9.9.9%a.example tls://149.112.112.112",
            "different %NAMEs",
        ),
        ("tls://9.9.9.9:53", "port 53"),
        ("https://9.9.9.9", "plain DNS and DNS over TLS"),
    ] {
        let c = ok(&format!(
            "{fallback}.:53 {{\n  bind 127.0.0.1\n  forward . {forward}\n}}\n"
        ));
        assert!(listed(&c, 7, words), "{forward}: {:?}", c.untranslated);
        assert!(!c.toml.contains("9.9.9.9"), "{}", c.toml);
    }
}

/// One server, one pool: a zone asking for another server name for the
/// same upstream gets the first zone's, and is listed; TLS and plain to
/// the same server is an error.
#[test]
fn zones_sharing_a_tls_upstream_agree_on_its_settings() {
    let p = pki();
    let c = ok(&format!(
        "a.:53 {{\n  bind 127.0.0.1\n  forward . tls://9.9.9.9 {{\n    tls_servername a.example\n    tls {ca}\n  }}\n}}\n\
         b.:53 {{\n  bind 127.0.0.1\n  forward . tls://9.9.9.9 {{\n    tls_servername b.example\n    tls {ca}\n  }}\n}}\n",
        ca = p.ca
    ));
    assert!(
        listed(&c, 8, "tls_servername / tls"),
        "{:?}",
        c.untranslated
    );
    assert!(listed(&c, 8, "one pool per server"), "{:?}", c.untranslated);
    for name in ["a", "b"] {
        let keys = tls_keys(&zone(&c, name));
        assert_eq!(
            keys,
            pairs(&[("ca", &p.ca), ("server_name", "a.example")]),
            "{}",
            c.toml
        );
    }
    crate::config::Config::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml));
    let e = run("a.:53 {\n  forward . tls://9.9.9.9\n}\nb.:53 {\n  forward . 9.9.9.9:853\n}\n")
        .unwrap_err();
    assert_eq!(e.line, Some(5), "{e}");
    assert!(e.message.contains("TLS or plain"), "{e}");
}
