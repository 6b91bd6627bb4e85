//! `nodens convert-corefile`: a NodeLocal DNSCache Corefile in, a nodens
//! configuration out (stdout or `-o`), and on stderr, with its line, what
//! had no translation. Exit 0 when converted, 1 on an error (nothing
//! written), 2 with `--strict` when something was not translated. The
//! conversion is the library's (`nodens::convert`); this file reads,
//! writes and lists.

use std::io::{Read, Write};
use std::path::PathBuf;

use nodens::convert;

use super::report::{Failure, Outcome};

#[derive(clap::Args)]
pub(super) struct ConvertArgs {
    /// The Corefile (`-` for stdin), e.g. the node-local-dns ConfigMap's.
    file: PathBuf,
    /// Write the configuration here instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The value of __PILLAR__LOCAL__DNS__ (the node-local address, e.g. 169.254.20.10).
    #[arg(long, value_name = "IP")]
    local_dns: Option<String>,
    /// The value of __PILLAR__DNS__SERVER__ (the kube-dns Service IP; "" in IPVS mode).
    #[arg(long, value_name = "IP")]
    dns_server: Option<String>,
    /// The value of __PILLAR__DNS__DOMAIN__ (e.g. cluster.local).
    #[arg(long, value_name = "DOMAIN")]
    domain: Option<String>,
    /// The Service __PILLAR__CLUSTER__DNS__ stands for (node-cache's -upstreamsvc).
    #[arg(long, value_name = "NAME", default_value = "kube-dns-upstream")]
    upstream_service: String,
    /// The resolv.conf __PILLAR__UPSTREAM__SERVERS__ stands for.
    #[arg(long, value_name = "PATH", default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Write [server] handover_socket = PATH (the Helm chart's upgrades hand
    /// over on /run/nodens/handover.sock).
    #[arg(long, value_name = "PATH")]
    handover_socket: Option<PathBuf>,
    /// Also write what the Helm chart's pods expect of a configOverride: the
    /// handover socket (/run/nodens/handover.sock), run_as_user = 65353 and
    /// the probe server on 127.0.0.1:9254.
    #[arg(long)]
    for_chart: bool,
    /// Exit 2 when something was not translated (the configuration is still written).
    #[arg(long)]
    strict: bool,
}

pub(super) fn run(args: ConvertArgs) -> Result<Outcome, Failure> {
    let stdin = args.file.as_os_str() == "-";
    let name = if stdin {
        "<stdin>".to_string()
    } else {
        args.file.display().to_string()
    };
    let mut text = String::new();
    let read = if stdin {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(&args.file).map(|t| text = t)
    };
    read.map_err(|e| Failure::new(format!("{name}: cannot read: {e}")))?;
    let options = convert::Options {
        local_dns: args.local_dns,
        dns_server: args.dns_server,
        domain: args.domain,
        upstream_service: args.upstream_service,
        resolv_conf: args.resolv_conf,
        handover_socket: args.handover_socket,
        for_chart: args.for_chart,
        source_name: name.clone(),
        // CoreDNS reads a relative import from the Corefile's directory.
        import_dir: Some(match args.file.parent() {
            Some(dir) if !stdin && !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        }),
    };
    let conversion =
        convert::convert(&text, &options, &|v| std::env::var(v).ok()).map_err(|e| {
            Failure::new(match e.line {
                Some(line) => format!("{name}:{line}: {}", e.message),
                None => format!("{name}: {}", e.message),
            })
        })?;
    let written = match &args.output {
        Some(path) => std::fs::write(path, &conversion.toml),
        None => std::io::stdout().write_all(conversion.toml.as_bytes()),
    };
    written.map_err(|e| {
        let to = args
            .output
            .as_ref()
            .map_or("stdout".into(), |p| p.display().to_string());
        Failure::new(format!("cannot write {to}: {e}"))
    })?;
    for (kind, findings) in [
        ("not translated", &conversion.untranslated),
        ("note", &conversion.notes),
    ] {
        for f in findings {
            eprintln!(
                "{name}:{}: {kind}: {}{}",
                f.lines[0],
                f.message,
                also(&f.lines[1..])
            );
        }
    }
    if args.strict && !conversion.untranslated.is_empty() {
        return Ok(Outcome::Incomplete);
    }
    Ok(Outcome::Done)
}

/// The other lines a finding is about: ` (also line 7)`, ` (also lines 7, 9)`.
fn also(lines: &[usize]) -> String {
    match lines {
        [] => String::new(),
        [one] => format!(" (also line {one})"),
        more => format!(
            " (also lines {})",
            more.iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
