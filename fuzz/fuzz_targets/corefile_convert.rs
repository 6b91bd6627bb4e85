//! `convert::convert` (what `nodens convert-corefile` runs) on any UTF-8
//! text: never panics; an error names a line inside the text and is never
//! the converter's own output failing the configuration check (every value
//! it writes must pass the rules of `check-config`); an accepted Corefile
//! gives a configuration that `config::File::parse` accepts, with at least
//! one zone, and findings on lines of the text.
//!
//! Input: Corefile text. `{$VAR}` references resolve to `10.0.0.1` for `IP`
//! and nothing else; the installer's template variables get values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodens::config::File;
use nodens::convert::{Options, convert};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let options = Options {
        local_dns: Some("169.254.20.10".into()),
        dns_server: Some("10.96.0.10".into()),
        domain: Some("cluster.local".into()),
        ..Options::default()
    };
    let env = |name: &str| (name == "IP").then(|| "10.0.0.1".to_string());
    // Lines a finding may name: 1 to the line count, + 1 for an
    // unterminated last line.
    let lines = text.split('\n').count() + 1;
    match convert(text, &options, &env) {
        Err(e) => {
            assert!(!e.output_refused, "converted output refused by the check: {e}");
            assert!(!e.message.trim().is_empty(), "error without a message");
            if let Some(line) = e.line {
                assert!(line >= 1 && line <= lines, "error at line {line}: {e}");
            }
        }
        Ok(c) => {
            let file = File::parse(&c.toml).expect("checked before it was returned");
            assert!(!file.zones.is_empty(), "no zone");
            for f in c.untranslated.iter().chain(&c.notes) {
                assert!(!f.lines.is_empty(), "a finding without a line");
                for &line in &f.lines {
                    assert!(line >= 1 && line <= lines, "finding at line {line}: {}", f.message);
                }
            }
        }
    }
});
