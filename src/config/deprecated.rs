//! Deprecated keys: a key renamed keeps working under its old name, with a
//! warning, for at least one minor release before the old name goes
//! (CHANGELOG.md, "How nodens is versioned"). [`KEYS`] is the one table of
//! them. The load renames each old key the file writes to its replacement
//! in the parse tree, before any section reads it: a feature's section knows
//! only the new name, the old one loads exactly as the new one does, and
//! every later error about the value still names the line the file wrote.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// A renamed key: the table it lives in, its old and new names, and when
/// the old name goes.
#[derive(Debug, PartialEq, Eq)]
pub struct Deprecated {
    /// The table, as docs/configuration.md writes it: `[server]`,
    /// `[zone.pool]`, `[[zone]]`.
    pub section: &'static str,
    pub old: &'static str,
    pub new: &'static str,
    /// The release that deprecated it.
    pub since: &'static str,
    /// The first release that may remove it.
    pub removed_in: &'static str,
}

/// Every deprecated key (docs/configuration.md, "Deprecated keys").
pub const KEYS: &[Deprecated] = &[
    // "in flight" is `in_flight` everywhere else (`max_misses_in_flight`
    // beside it, `[[zone]] max_misses_in_flight`, `[budget]
    // misses_in_flight`).
    Deprecated {
        section: "[server]",
        old: "tcp_max_inflight",
        new: "tcp_max_in_flight",
        since: "0.2.0",
        removed_in: "0.4.0",
    },
    Deprecated {
        section: "[zone.pool]",
        old: "max_inflight",
        new: "max_in_flight",
        since: "0.2.0",
        removed_in: "0.4.0",
    },
];

impl Deprecated {
    /// The keys leading to the section's tables: `["zone", "pool"]`.
    fn path(&self) -> impl Iterator<Item = &'static str> {
        self.section
            .trim_matches(|c| c == '[' || c == ']')
            .split('.')
    }
}

/// A deprecated key a configuration file writes: the warning that names
/// its line, the key, its replacement and when it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deprecation {
    pub file: Option<PathBuf>,
    /// 1-based line and column of the old key.
    pub position: (usize, usize),
    pub key: &'static Deprecated,
}

impl fmt::Display for Deprecation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}:", file.display())?;
        }
        let (line, col) = self.position;
        let k = self.key;
        write!(
            f,
            "{line}:{col}: `{} {}` is deprecated since {} and will be removed in {}: write `{}` instead",
            k.section, k.old, k.since, k.removed_in, k.new
        )
    }
}

/// An old key found and renamed, at the span of its name.
pub(super) struct Renamed {
    pub(super) span: Range<usize>,
    pub(super) key: &'static Deprecated,
}

/// Renames, in `root`, every old key of `keys` to its replacement, keeping
/// its span; what it renamed, in file order. An old key written beside its
/// replacement is an error: the span of the old key and the message.
pub(super) fn rename(
    root: &mut DeTable<'_>,
    keys: impl IntoIterator<Item = &'static Deprecated>,
) -> Result<Vec<Renamed>, (Range<usize>, String)> {
    let mut renamed = Vec::new();
    for key in keys {
        let path: Vec<&str> = key.path().collect();
        each_table(root, &path, &mut |table| {
            let Some((old, value)) = table.remove_entry(key.old) else {
                return Ok(());
            };
            if table.contains_key(key.new) {
                return Err((
                    old.span(),
                    format!(
                        "`{} {}` and `{}` are the same key, the first its deprecated name: keep `{}` alone",
                        key.section, key.old, key.new, key.new
                    ),
                ));
            }
            let span = old.span();
            table.insert(Spanned::new(span.clone(), Cow::Borrowed(key.new)), value);
            renamed.push(Renamed { span, key });
            Ok(())
        })?;
    }
    renamed.sort_by_key(|r| r.span.start);
    Ok(renamed)
}

type Visit<'v, 'i> = dyn FnMut(&mut DeTable<'i>) -> Result<(), (Range<usize>, String)> + 'v;

/// Calls `visit` on each table at `path` (every element of an array of
/// tables on the way).
fn each_table<'i>(
    table: &mut DeTable<'i>,
    path: &[&str],
    visit: &mut Visit<'_, 'i>,
) -> Result<(), (Range<usize>, String)> {
    let Some((first, rest)) = path.split_first() else {
        return visit(table);
    };
    let Some(value) = table.get_mut(*first) else {
        return Ok(());
    };
    match value.get_mut() {
        DeValue::Table(inner) => each_table(inner, rest, visit),
        DeValue::Array(items) => {
            for item in items.iter_mut() {
                if let DeValue::Table(inner) = item.get_mut() {
                    each_table(inner, rest, visit)?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, File};

    /// A table of the tests' own, for the mechanism whatever [`KEYS`] holds.
    const TEST_KEYS: &[Deprecated] = &[
        Deprecated {
            section: "[server]",
            old: "misses_at_once",
            new: "max_misses_in_flight",
            since: "0.2.0",
            removed_in: "0.3.0",
        },
        Deprecated {
            section: "[[zone]]",
            old: "timeout",
            new: "upstream_timeout",
            since: "0.2.0",
            removed_in: "0.4.0",
        },
    ];

    const ZONES: &str = "[[zone]]\nname = \"a.\"\nupstreams = [\"127.0.0.2\"]\n";

    #[test]
    fn an_old_key_loads_as_its_replacement_with_a_warning() {
        let text = format!(
            "[server]\nworkers = 1\nmisses_at_once = 77\n\n{ZONES}timeout = \"3s\"\n\n\
             [[zone]]\nname = \"b.\"\nupstreams = [\"127.0.0.3\"]\n  timeout = \"5s\"\n"
        );
        let new = format!(
            "[server]\nworkers = 1\nmax_misses_in_flight = 77\n\n{ZONES}upstream_timeout = \"3s\"\n\n\
             [[zone]]\nname = \"b.\"\nupstreams = [\"127.0.0.3\"]\nupstream_timeout = \"5s\"\n"
        );
        let old = File::parse_with(&text, TEST_KEYS).unwrap();
        let same = File::parse_with(&new, TEST_KEYS).unwrap();
        assert_eq!(old.server.max_misses_in_flight, 77);
        assert_eq!(
            format!("{:?}", old.compile().unwrap().zones),
            format!("{:?}", same.compile().unwrap().zones)
        );
        assert!(same.deprecated.is_empty());
        let warnings: Vec<String> = old.deprecated.iter().map(ToString::to_string).collect();
        assert_eq!(
            warnings,
            [
                "3:1: `[server] misses_at_once` is deprecated since 0.2.0 and will be removed in 0.3.0: write `max_misses_in_flight` instead",
                "8:1: `[[zone]] timeout` is deprecated since 0.2.0 and will be removed in 0.4.0: write `upstream_timeout` instead",
                "13:3: `[[zone]] timeout` is deprecated since 0.2.0 and will be removed in 0.4.0: write `upstream_timeout` instead",
            ]
        );
        // Without the table the old names are unknown keys, as ever.
        let e = File::parse_with(&text, &[]).unwrap_err();
        assert_eq!(e.position, Some((3, 1)), "{e}");
        assert!(e.message.contains("unknown field `misses_at_once`"), "{e}");
    }

    #[test]
    fn both_names_given_is_an_error_naming_the_old_key() {
        let text = format!("{ZONES}upstream_timeout = \"3s\"\ntimeout = \"3s\"\n");
        let e = File::parse_with(&text, TEST_KEYS).unwrap_err();
        assert_eq!(e.position, Some((5, 1)), "{e}");
        assert!(
            e.message
                .contains("`[[zone]] timeout` and `upstream_timeout` are the same key"),
            "{e}"
        );
        // An inline table and a dotted key are the same tables.
        let inline = "server = { misses_at_once = 3, max_misses_in_flight = 3 }\n";
        let e = File::parse_with(inline, TEST_KEYS).unwrap_err();
        assert_eq!(e.position, Some((1, 12)), "{e}");
        let dotted = "server.misses_at_once = 3\nserver.max_misses_in_flight = 3\n";
        assert_eq!(
            File::parse_with(dotted, TEST_KEYS).unwrap_err().position,
            Some((1, 8))
        );
    }

    #[test]
    fn a_rule_broken_under_the_old_name_names_its_line() {
        let text = format!("[server]\nworkers = 1\nmisses_at_once = 0\n\n{ZONES}");
        let e = File::parse_with(&text, TEST_KEYS).unwrap_err();
        assert_eq!(e.position, Some((3, 1)), "{e}");
        assert!(e.message.contains("max_misses_in_flight"), "{e}");
        let e = File::parse_with(&format!("{ZONES}timeout = \"0s\"\n"), TEST_KEYS).unwrap_err();
        assert_eq!(e.position, Some((4, 1)), "{e}");
        // A value of the wrong type under the old name: serde's error, at the value.
        let e = File::parse_with("[server]\nmisses_at_once = \"x\"\n", TEST_KEYS).unwrap_err();
        assert_eq!(e.position, Some((2, 18)), "{e}");
    }

    #[test]
    fn the_products_keys_load_as_their_replacements() {
        let old = "[server]\ntcp_max_inflight = 9\n\n\
                   [[zone]]\nname = \"a.\"\nupstreams = [\"127.0.0.2\"]\npool = { max_inflight = 3 }\n";
        let new = old.replace("max_inflight", "max_in_flight");
        let (old, new) = (Config::parse(old).unwrap(), Config::parse(&new).unwrap());
        assert_eq!(old.server.tcp.max_in_flight, 9);
        assert_eq!(old.zones[0].upstream.pool.max_in_flight, 3);
        assert_eq!(format!("{:?}", old.zones), format!("{:?}", new.zones));
        let keys: Vec<_> = old
            .deprecated
            .iter()
            .map(|d| (d.position, d.key.old))
            .collect();
        assert_eq!(
            keys,
            [((2, 1), "tcp_max_inflight"), ((7, 10), "max_inflight")]
        );
        assert!(new.deprecated.is_empty());
    }

    #[test]
    fn the_table_is_consistent_with_the_version_and_the_docs() {
        let version = |v: &str| -> (u64, u64, u64) {
            let n: Vec<u64> = v.split('.').map(|p| p.parse().unwrap()).collect();
            (n[0], n[1], n[2])
        };
        let now = version(env!("CARGO_PKG_VERSION"));
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
        )
        .unwrap();
        for k in KEYS {
            let (since, gone) = (version(k.since), version(k.removed_in));
            assert!(
                gone > since && (gone.0, gone.1) != (since.0, since.1),
                "{k:?}: a deprecated key works for at least a minor release"
            );
            assert!(
                now < gone,
                "{k:?}: version {now:?} is the one that removes it: remove the old name and this row"
            );
            let row = format!(
                "| `{}` | `{}` | `{}` | {} | {} |",
                k.section, k.old, k.new, k.since, k.removed_in
            );
            assert!(
                docs.contains(&row),
                "docs/configuration.md, Deprecated keys: no row {row}"
            );
            assert_ne!(k.old, k.new);
            assert!(k.section.starts_with('[') && k.section.ends_with(']'));
        }
    }
}
