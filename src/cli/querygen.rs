//! `nodens querygen`: names expanded through a pod's resolv.conf into
//! dnsperf input, in the order its resolver sends the queries. Exit 0, or 1
//! when a file cannot be read or a line is wrong.

use std::io::{Read, Write};
use std::path::PathBuf;

use nodens::stub;

use super::report::{Failure, Outcome};

#[derive(clap::Args)]
pub(super) struct QuerygenArgs {
    /// The names, one per line with an optional type; stdin when absent or `-`.
    names: Option<PathBuf>,
    /// The resolv.conf whose search list, ndots and options apply.
    #[arg(long, value_name = "FILE", default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// The client's resolver.
    #[arg(long, value_enum, default_value_t = stub::Stub::Glibc)]
    resolver: stub::Stub,
    /// getaddrinfo's family for lines without a type.
    #[arg(long, value_enum, default_value_t = stub::Family::Unspec)]
    family: stub::Family,
}

pub(super) fn run(args: QuerygenArgs) -> Result<Outcome, Failure> {
    let resolv_conf = std::fs::read_to_string(&args.resolv_conf)
        .map(|text| stub::StubConfig::parse(&text))
        .map_err(|e| Failure::new(format!("{}: cannot read: {e}", args.resolv_conf.display())))?;
    let (source, read) = match args.names.as_ref().filter(|p| p.as_os_str() != "-") {
        Some(path) => (path.display().to_string(), std::fs::read_to_string(path)),
        None => {
            let mut text = String::new();
            let read = std::io::stdin().read_to_string(&mut text).map(|_| text);
            ("<stdin>".to_string(), read)
        }
    };
    let names = read.map_err(|e| Failure::new(format!("{source}: cannot read: {e}")))?;
    let options = stub::querygen::Options {
        stub: args.resolver,
        family: args.family,
        config: resolv_conf,
    };
    let lines = stub::querygen::generate(&names, &source, &options).map_err(Failure::new)?;
    std::io::stdout()
        .write_all(lines.as_bytes())
        .map_err(|e| Failure::new(format!("cannot write stdout: {e}")))?;
    Ok(Outcome::Done)
}
