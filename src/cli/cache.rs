//! `nodens cache show|flush|dump`: the running server's cache, over its
//! control socket (`[server] control_socket`; docs/operations.md).

use std::path::PathBuf;

use nodens::control::{self, CachedEntry, FlushScope, Reply, Request};

use super::report::{Failure, Outcome};

/// Where the chart puts the control socket.
pub(super) const DEFAULT_SOCKET: &str = "/run/nodens/control.sock";

#[derive(clap::Args)]
pub(super) struct CacheArgs {
    #[command(subcommand)]
    action: CacheAction,
    /// The control socket of the nodens to ask.
    #[arg(long, global = true, value_name = "PATH", env = "NODENS_CONTROL_SOCKET", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Print nodens's reply lines (JSON) as they are.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum CacheAction {
    /// The cached entries of NAME (every type, or TYPE's), with their state,
    /// TTL left and records.
    Show {
        name: String,
        #[arg(value_name = "TYPE")]
        qtype: Option<String>,
    },
    /// Drop cached entries: of NAME, of a zone (--zone: the name and every
    /// name below it), or all (--all). Every worker sees it at once.
    Flush {
        #[arg(required_unless_present_any = ["zone", "all"], conflicts_with_all = ["zone", "all"])]
        name: Option<String>,
        #[arg(long, conflicts_with = "all")]
        zone: Option<String>,
        #[arg(long)]
        all: bool,
    },
    /// Every cached entry: name, type, state, TTL left, age.
    Dump,
}

pub(super) fn run(args: CacheArgs) -> Result<Outcome, Failure> {
    let request = match args.action {
        CacheAction::Show { name, qtype } => Request::CacheShow { name, qtype },
        CacheAction::Flush { name, zone, all } => Request::CacheFlush {
            scope: match (name, zone, all) {
                (Some(name), _, _) => FlushScope::Name(name),
                (_, Some(zone), _) => FlushScope::Zone(zone),
                _ => FlushScope::All,
            },
        },
        CacheAction::Dump => Request::CacheDump,
    };
    let client = control::connect(&args.socket).map_err(anyhow::Error::from)?;
    let replies = client.ask(&request).map_err(anyhow::Error::from)?;
    let detailed = matches!(request, Request::CacheShow { .. });
    for reply in &replies {
        if args.json {
            println!(
                "{}",
                serde_json::to_string(reply).expect("a reply serializes")
            );
            continue;
        }
        match reply {
            Reply::Entry(entry) => print_entry(entry, detailed),
            Reply::Done { entries } => println!("{entries} entries"),
            Reply::Flushed { scope, entries } => println!("flushed ({scope}): {entries} entries"),
            Reply::Top(_) | Reply::Error(_) | Reply::Probe { .. } | Reply::Status(_) => {}
        }
    }
    Ok(Outcome::Done)
}

fn print_entry(e: &CachedEntry, with_records: bool) {
    let mut flags = String::new();
    if e.view != 0 {
        flags.push_str(&format!(" view={}", e.view));
    }
    if e.dnssec_ok {
        flags.push_str(" +do");
    }
    if e.checking_disabled {
        flags.push_str(" +cd");
    }
    println!(
        "{} {} {} {} {} ttl={}s age={}s{flags}",
        printable(&e.name),
        e.class,
        e.qtype,
        e.kind,
        e.state,
        e.ttl_left,
        e.age
    );
    if with_records {
        for r in &e.records {
            println!("    {}", printable(r));
        }
    }
}

/// `text` with every control character written as a `\DDD` escape, as
/// DNS presentation format writes an unprintable byte: a cached name or
/// TXT record comes from whoever answered upstream, and must not reach the
/// operator's terminal as an escape sequence (cursor moves, a cleared
/// screen, a fake line).
pub(super) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\{b:03}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            super::printable("a\u{1b}[2J\u{7}b\u{85}c é"),
            "a\\027[2J\\007b\\194\\133c é"
        );
    }
}
