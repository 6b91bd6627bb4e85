//! The converter on blocks per address and port (views), `import`, the
//! loop check of a wildcard listener, dropped addresses, the cluster domain
//! and what nodens does with a block without `forward`.

use super::testing::{ok, run};
use super::*;

/// The converted file, read back as nodens reads it.
fn file(c: &Conversion) -> File {
    File::parse(&c.toml).unwrap_or_else(|e| panic!("{e}\n{}", c.toml))
}

fn listens(f: &File, name: &str) -> Vec<Vec<String>> {
    f.zones
        .iter()
        .filter(|z| z.name.get_ref().0 == name)
        .map(|z| z.listen.iter().map(|a| a.get_ref().0.to_string()).collect())
        .collect()
}

#[test]
fn blocks_on_different_binds_become_views() {
    let c = ok(
        ".:53 {\n  bind 127.0.0.1\n  cache\n  forward . 127.0.0.1:5300\n}\n\
                .:53 {\n  bind 127.0.0.2\n  cache\n  forward . 127.0.0.1:5301\n}\n",
    );
    let f = file(&c);
    assert_eq!(
        listens(&f, "."),
        [
            vec!["127.0.0.1:53".to_string()],
            vec!["127.0.0.2:53".to_string()]
        ],
        "{}",
        c.toml
    );
    assert!(
        !c.untranslated.iter().any(|u| u.message.contains("union")),
        "{:?}",
        c.untranslated
    );
    assert!(
        c.notes.iter().any(|n| n.message.contains("view")),
        "{:?}",
        c.notes
    );
}

#[test]
fn keys_on_different_ports_become_views() {
    let c = ok(
        "cluster.local:53 in-addr.arpa:5353 {\n  bind 127.0.0.1\n  cache\n  forward . 127.0.0.1:5300\n}\n",
    );
    let f = file(&c);
    assert_eq!(
        listens(&f, "cluster.local."),
        [vec!["127.0.0.1:53".to_string()]]
    );
    assert_eq!(
        listens(&f, "in-addr.arpa."),
        [vec!["127.0.0.1:5353".to_string()]]
    );
    let listen: Vec<_> = f
        .server
        .listen
        .iter()
        .map(|a| a.get_ref().0.to_string())
        .collect();
    assert_eq!(listen, ["127.0.0.1:53", "127.0.0.1:5353"]);
}

#[test]
fn blocks_on_the_same_addresses_need_no_view() {
    let c = ok(
        "a.:53 {\n  bind 127.0.0.1\n  cache\n  forward . 127.0.0.1:5300\n}\n\
                .:53 {\n  bind 127.0.0.1\n  cache\n  forward . 127.0.0.1:5301\n}\n",
    );
    assert!(
        !c.toml.contains("listen = [\"127.0.0.1:53\"]   # a view"),
        "{}",
        c.toml
    );
    assert!(file(&c).zones.iter().all(|z| z.listen.is_empty()));
}

#[test]
fn snippets_are_inlined_where_imported() {
    let c = ok(
        "(common) {\n  cache 30\n  forward . 127.0.0.1:5300 {\n    force_tcp\n  }\n}\n\
                .:53 {\n  bind 127.0.0.1\n  import common\n}\n",
    );
    let f = file(&c);
    assert_eq!(f.zones.len(), 1, "{}", c.toml);
    assert_eq!(f.zones[0].transport, crate::config::Transport::ForceTcp);
    assert!(c.untranslated.is_empty(), "{:?}", c.untranslated);
}

#[test]
fn file_imports_are_read_relative_to_the_corefile() {
    let dir = std::env::temp_dir().join(format!("nodens-import-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("blocks")).unwrap();
    std::fs::write(
        dir.join("blocks/a.conf"),
        "example.:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:5301\n}\n",
    )
    .unwrap();
    std::fs::write(dir.join("plugins"), "cache 30\nforward . 127.0.0.1:5300\n").unwrap();
    let options = Options {
        import_dir: Some(dir.clone()),
        ..Options::default()
    };
    let text = ".:53 {\n  bind 127.0.0.1\n  import plugins\n}\nimport blocks/*.conf\n";
    let c = convert(text, &options, &|_| None).unwrap_or_else(|e| panic!("{e}"));
    let f = file(&c);
    let names: Vec<&str> = f
        .zones
        .iter()
        .map(|z| z.name.get_ref().0.as_str())
        .collect();
    assert_eq!(names, [".", "example."], "{}", c.toml);
    let e = convert(
        ".:53 {\n  bind 127.0.0.1\n  import nothing-here\n}\n",
        &options,
        &|_| None,
    )
    .unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("cannot read"), "{e}");
    // A glob in a directory that does not exist matches nothing, as in CoreDNS.
    let c = convert(
        "import gone/*\n.:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.2\n}\n",
        &options,
        &|_| None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(file(&c).zones.len(), 1, "{}", c.toml);
    std::fs::remove_dir_all(dir).unwrap();
    // Without a directory (the library called on text alone) a file import
    // is an error at its line, not a stop elsewhere.
    let e = run(".:53 {\n  import common\n}\n").unwrap_err();
    assert_eq!(e.line, Some(2), "{e}");
}

#[test]
fn an_import_cycle_is_an_error() {
    let e = run("(a) {\n  import b\n}\n(b) {\n  import a\n}\n.:53 {\n  import a\n}\n").unwrap_err();
    assert!(e.message.contains("nested"), "{e}");
}

#[test]
fn a_wildcard_listener_does_not_loop_to_a_cluster_ip() {
    for text in [
        ".:53 {\n  cache\n  forward . 10.96.0.10\n}\n",
        ".:53 {\n  bind 0.0.0.0\n  cache\n  forward . 10.96.0.10\n}\n",
    ] {
        let c = ok(text);
        assert!(c.toml.contains("10.96.0.10:53"), "{}", c.toml);
    }
    // Loopback on the same port still loops.
    let e = run(".:53 {\n  forward . 127.0.0.1\n}\n").unwrap_err();
    assert!(e.message.contains("forwarding loop"), "{e}");
}

#[test]
fn check_config_lets_a_wildcard_listener_forward_to_a_cluster_ip() {
    let text = "[server]\nlisten = [\"0.0.0.0:53\"]\n[[zone]]\nname = \".\"\nupstreams = [\"10.96.0.10\"]\n";
    crate::config::Config::parse(text).unwrap_or_else(|e| panic!("{e}"));
    let looped = text.replace("10.96.0.10", "127.0.0.1");
    let e = crate::config::Config::parse(&looped).unwrap_err();
    assert!(e.to_string().contains("forwarding loop"), "{e}");
}

#[test]
fn an_address_that_drops_out_is_an_error() {
    let e = run(".:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:5300\n}\n\
                 example.:53 {\n  bind 127.0.0.9\n  hosts\n}\n")
    .unwrap_err();
    assert_eq!(e.line, Some(5), "{e}");
    assert!(e.message.contains("127.0.0.9:53"), "{e}");
}

#[test]
fn the_cluster_domain_comes_from_the_block_that_forwards_to_the_cluster_dns() {
    let c = ok(
        "k8s.example:53 {\n  bind 169.254.20.10\n  cache\n  forward . __PILLAR__CLUSTER__DNS__\n}\n\
                .:53 {\n  bind 169.254.20.10\n  cache\n  forward . __PILLAR__UPSTREAM__SERVERS__\n}\n",
    );
    assert_eq!(
        file(&c).cluster.domain.get_ref().0,
        "k8s.example.",
        "{}",
        c.toml
    );
    let options = Options {
        dns_server: Some("10.0.0.10".into()),
        ..Options::default()
    };
    let c = convert(
        "corp.internal:53 {\n  bind 169.254.20.10\n  forward . 10.0.0.10\n}\n\
         .:53 {\n  bind 169.254.20.10\n  forward . 9.9.9.9\n}\n",
        &options,
        &|_| None,
    )
    .unwrap();
    assert_eq!(
        file(&c).cluster.domain.get_ref().0,
        "corp.internal.",
        "{}",
        c.toml
    );
}

#[test]
fn a_block_without_forward_under_a_forwarded_zone_is_forwarded_not_refused() {
    let c = ok(".:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:5300\n}\n\
                example.:53 {\n  bind 127.0.0.1\n  hosts\n}\n");
    let finding = c
        .untranslated
        .iter()
        .find(|f| f.lines.contains(&5) && f.message.contains("no `forward`"))
        .unwrap_or_else(|| panic!("{:?}", c.untranslated));
    assert!(!finding.message.contains("REFUSED"), "{finding:?}");
    assert!(
        finding.message.contains("by zone . (line 1)"),
        "{finding:?}"
    );
    let c = ok("a.:53 {\n  bind 127.0.0.1\n  forward . 127.0.0.1:5300\n}\n\
                example.:53 {\n  bind 127.0.0.1\n  hosts\n}\n");
    assert!(
        c.untranslated
            .iter()
            .any(|f| f.lines.contains(&5) && f.message.contains("REFUSED")),
        "{:?}",
        c.untranslated
    );
}
