//! `nodens trace NAME`: one name resolved the way the pod's resolver would,
//! every query printed with its answer code and latency. Exit 0 when the
//! name resolved, 1 when not, 2 when it cannot start on what it was given.

use std::path::PathBuf;

use nodens::{doctor, stub};

use super::doctor::resolv_and_servers;
use super::report::{Failure, Outcome};

#[derive(clap::Args)]
pub(super) struct TraceArgs {
    /// The name, as an application would give it to getaddrinfo.
    name: String,
    /// The resolv.conf whose search list, options and nameservers apply.
    #[arg(long, value_name = "FILE", default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Ask this server instead of resolv.conf's nameservers (IP or IP:PORT).
    #[arg(long, value_name = "ADDR")]
    server: Vec<String>,
    /// The client's resolver.
    #[arg(long, value_enum, default_value_t = stub::Stub::Glibc)]
    resolver: stub::Stub,
    /// getaddrinfo's family.
    #[arg(long, value_enum, default_value_t = stub::Family::Unspec)]
    family: stub::Family,
    /// Print the trace as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(args: TraceArgs) -> Result<Outcome, Failure> {
    let (resolv, servers) = resolv_and_servers(&args.resolv_conf, &args.server)?;
    let trace = doctor::trace(&resolv, &servers, args.resolver, args.family, &args.name);
    if args.json {
        println!("{}", trace.to_json());
    } else {
        print!("{}", trace.to_text());
    }
    Ok(Outcome::answer(trace.resolved()))
}
