//! Unit tests of `convert::corefile`.

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse_ok(text: &str) -> Corefile {
    parse(text, &no_env).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(text: &str) -> SyntaxError {
    parse(text, &no_env).expect_err("should not parse")
}

#[test]
fn blocks_directives_and_nested_blocks() {
    let c = parse_ok(
        "# head\ncluster.local:53 in-addr.arpa:53 {\n  errors\n  cache {\n    success 9984 30 # cap ttl\n  }\n  forward . 10.0.0.10 {\n    force_tcp\n  }\n}\n.:53 {\n  forward . /etc/resolv.conf\n}\n",
    );
    assert_eq!(c.blocks.len(), 2);
    let b = &c.blocks[0];
    let keys: Vec<&str> = b.keys.iter().map(|k| k.text.as_str()).collect();
    assert_eq!(keys, ["cluster.local:53", "in-addr.arpa:53"]);
    assert_eq!(b.line(), 2);
    assert_eq!(b.directives.len(), 3);
    let cache = &b.directives[1];
    assert_eq!(cache.name.text, "cache");
    assert_eq!(cache.line(), 4);
    let inner = cache.block.as_ref().unwrap();
    assert_eq!(inner[0].name.text, "success");
    assert_eq!(inner[0].arg_texts(), ["9984", "30"]);
    assert_eq!(inner[0].line(), 5);
    let fwd = &b.directives[2];
    assert_eq!(fwd.arg_texts(), [".", "10.0.0.10"]);
    assert_eq!(fwd.block.as_ref().unwrap()[0].name.text, "force_tcp");
    assert_eq!(c.blocks[1].directives[0].line(), 12);
}

#[test]
fn quotes_comments_and_commas() {
    let c = parse_ok(
        "a.:53,\nb.:53 {\n  hosts \"x # not a comment\" \"two\nlines\" {\n  }\n  log#comment\n}\n",
    );
    let keys: Vec<&str> = c.blocks[0].keys.iter().map(|k| k.text.as_str()).collect();
    assert_eq!(keys, ["a.:53", "b.:53"]);
    let d = &c.blocks[0].directives;
    assert_eq!(d[0].arg_texts(), ["x # not a comment", "two\nlines"]);
    assert_eq!(d[0].block.as_ref().map(Vec::len), Some(0));
    assert_eq!(d[1].name.text, "log");
    assert_eq!(d[1].line(), 6);
}

#[test]
fn a_quoted_brace_is_an_argument() {
    let c = parse_ok(".:53 {\n  template \"{\" x\n}\n");
    assert_eq!(c.blocks[0].directives[0].arg_texts(), ["{", "x"]);
}

#[test]
fn environment_references() {
    let env = |name: &str| (name == "DOMAIN").then(|| "cluster.local".to_string());
    let c = parse("{$DOMAIN}:53 {\n  bind {%DOMAIN%}x\n}\n", &env).unwrap();
    assert_eq!(c.blocks[0].keys[0].text, "cluster.local:53");
    assert_eq!(c.blocks[0].directives[0].args[0].text, "cluster.localx");
    let e = parse(".:53 {\n  bind {$NOPE}\n}\n", &env).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("NOPE"), "{e}");
    assert_eq!(
        parse(".:53 {\n\n bind {$DOMAIN\n}\n", &env)
            .unwrap_err()
            .line,
        3
    );
}

#[test]
fn one_block_without_braces() {
    let c = parse_ok(".:53\nforward . 10.0.0.1\ncache 30\n");
    assert_eq!(c.blocks.len(), 1);
    assert_eq!(c.blocks[0].directives.len(), 2);
    assert_eq!(c.blocks[0].directives[1].line(), 3);
}

#[test]
fn bad_input_names_the_line() {
    let cases: &[(&str, usize)] = &[
        (".:53 {\n  errors\n", 1),
        (".:53 {\n  cache {\n    success 1\n}\n", 1),
        (".:53 {\n}\n}\n", 3),
        (".:53 {\n  bind \"10.0.0.1\n}\n", 2),
        (".:53 { errors\n}\n", 1),
        (".:53 {\n  forward . { force_tcp\n  }\n}\n", 2),
        (".:53 {\n  {\n  }\n}\n", 2),
        (".:53 {\n  errors } log\n}\n", 2),
        ("{\n}\n", 1),
        (".:53 {\n}\nx.:53\n", 3),
        (".:53\nerrors\n}\n", 3),
    ];
    for (text, line) in cases {
        let e = parse_err(text);
        assert_eq!(e.line, *line, "{text:?}: {e}");
    }
}

#[test]
fn no_input_panics() {
    // Every prefix of a real Corefile, and some noise: an error or a
    // parse, never a panic.
    let text = include_str!("../../tests/fixtures/corefile/nodelocaldns-template.Corefile");
    for end in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
        let _ = parse(&text[..end], &no_env);
    }
    for noise in [
        "}",
        "{",
        "\"",
        "{$",
        "{$}",
        "#",
        "a {\n{\n",
        "\u{0}{\n}",
        "a\"b",
    ] {
        let _ = parse(noise, &no_env);
    }
}

#[test]
fn go_durations() {
    use std::time::Duration;
    assert_eq!(go_duration("30s"), Some(Duration::from_secs(30)));
    assert_eq!(go_duration("1m30s"), Some(Duration::from_secs(90)));
    assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
    assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(go_duration("2h"), Some(Duration::from_secs(7200)));
    assert_eq!(go_duration("0"), Some(Duration::ZERO));
    assert_eq!(go_duration("30"), None);
    assert_eq!(go_duration("s"), None);
    assert_eq!(go_duration("1d"), None);
    assert_eq!(go_duration("3000000h"), None);
    assert_eq!(go_duration(""), None);
}
