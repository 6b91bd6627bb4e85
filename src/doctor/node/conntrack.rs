//! Conntrack: the kernel's per-CPU statistics (`insert_failed` and `drop`
//! count DNS packets lost to the UDP conntrack race) and how full the
//! table is.

use std::collections::BTreeMap;
use std::path::Path;

use super::Out;
use crate::doctor::{Finding, Severity};

/// The statistics summed over the CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    pub(crate) insert_failed: u64,
    pub(crate) drop: u64,
    pub(crate) early_drop: u64,
    /// `clashres`: clashes the kernel resolved (5.x and later).
    pub(crate) clash_resolve: Option<u64>,
    pub(crate) cpus: usize,
}

/// Sums `/proc/net/stat/nf_conntrack`: a header of field names, then one
/// line of hex numbers per CPU. `None` when the text has no such header.
pub(crate) fn parse_stat(text: &str) -> Option<Stats> {
    let mut lines = text.lines();
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    if !names.contains(&"insert_failed") {
        return None;
    }
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    let mut cpus = 0;
    for line in lines.filter(|l| !l.trim().is_empty()) {
        cpus += 1;
        for (name, value) in names.iter().zip(line.split_whitespace()) {
            let value = u64::from_str_radix(value, 16).ok()?;
            *sums.entry(name).or_default() += value;
        }
    }
    let field = |name| sums.get(name).copied().unwrap_or(0);
    Some(Stats {
        insert_failed: field("insert_failed"),
        drop: field("drop"),
        early_drop: field("early_drop"),
        clash_resolve: sums.get("clashres").copied(),
        cpus,
    })
}

/// Reads the statistics and the table's fill; adds facts and findings.
/// Returns the statistics when they could be read.
pub(super) fn check(proc_root: &Path, out: &mut Out) -> Option<Stats> {
    let stats = check_stats(proc_root, out);
    check_table(proc_root, out);
    stats
}

fn check_stats(proc_root: &Path, out: &mut Out) -> Option<Stats> {
    let path = proc_root.join("net/stat/nf_conntrack");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            out.fact(format!(
                "conntrack statistics: not read ({}: {e}; nf_conntrack not loaded?)",
                path.display()
            ));
            return None;
        }
    };
    let Some(stats) = parse_stat(&text) else {
        out.fact(format!(
            "conntrack statistics: {} has no insert_failed column",
            path.display()
        ));
        return None;
    };
    let clash = stats
        .clash_resolve
        .map_or(String::new(), |c| format!(" clash_resolve={c}"));
    let numbers = format!(
        "insert_failed={} drop={} early_drop={}{clash}",
        stats.insert_failed, stats.drop, stats.early_drop
    );
    out.fact(format!(
        "conntrack statistics ({} CPUs): {numbers}",
        stats.cpus
    ));
    if stats.insert_failed > 0 || stats.drop > 0 {
        out.finding(insert_failed_finding(&path, &numbers));
    }
    Some(stats)
}

fn insert_failed_finding(path: &Path, numbers: &str) -> Finding {
    Finding::new(
        "conntrack-insert-failed",
        Severity::Critical,
        "conntrack dropped packets: UDP DNS queries are being lost (the conntrack insert race)",
    )
    .evidence(format!(
        "{}: {numbers} (summed over CPUs, since boot)",
        path.display()
    ))
    .evidence(
        "two queries of one socket (A and AAAA, sent together by glibc and musl) race for \
         one conntrack entry; the loser is dropped and the client waits for its timeout (5 s)",
    )
    .fix(
        "Take DNS out of conntrack: run a node cache (nodens with [node] setup = true, or \
         node-local-dns) whose raw-table NOTRACK rules cover its addresses.\n\
         Until then, for glibc pods, a workaround in the pod spec:\n\
         \x20 dnsConfig:\n\
         \x20   options:\n\
         \x20     - name: single-request-reopen",
    )
}

fn check_table(proc_root: &Path, out: &mut Out) {
    let dir = proc_root.join("sys/net/netfilter");
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let (Some(count), Some(max)) = (read("nf_conntrack_count"), read("nf_conntrack_max")) else {
        out.fact(format!(
            "conntrack table: not read ({}/nf_conntrack_count, _max)",
            dir.display()
        ));
        return;
    };
    let percent = if max == 0 {
        0.0
    } else {
        count as f64 * 100.0 / max as f64
    };
    let line = format!("conntrack table: {count} of {max} entries ({percent:.1} %)");
    out.fact(line.clone());
    if percent > 90.0 {
        out.finding(
            Finding::new(
                "conntrack-table-full",
                Severity::Warning,
                "the conntrack table is over 90 % full: new connections (and DNS queries) will be dropped",
            )
            .evidence(line)
            .fix(
                "Raise net.netfilter.nf_conntrack_max (kube-proxy: --conntrack-max-per-core), \
                 and take DNS out of conntrack with a node cache's NOTRACK rules.",
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 6.x kernel's file on a 2-CPU node, with drops on the second CPU.
    const FIXTURE: &str = "\
entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
0000002a  00000003 00000016 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000 000000c7  00000000 00000000 00000000 00000000
0000002a  00000010 00000027 00000000 00000000 00000000 00000000 00000000 00000000 0000000f 00000002 00000001 000000c7  00000000 00000000 00000000 00000000
";

    #[test]
    fn sums_each_field_over_the_cpus() {
        let stats = parse_stat(FIXTURE).unwrap();
        assert_eq!(
            stats,
            Stats {
                insert_failed: 16,
                drop: 2,
                early_drop: 1,
                clash_resolve: Some(19),
                cpus: 2,
            }
        );
    }

    #[test]
    fn an_older_kernel_has_no_clash_resolve() {
        let text = "entries searched found new invalid ignore delete delete_list insert insert_failed drop early_drop icmp_error expect_new expect_create expect_delete search_restart\n\
            00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n";
        let stats = parse_stat(text).unwrap();
        assert_eq!(stats.clash_resolve, None);
        assert_eq!((stats.insert_failed, stats.cpus), (0, 1));
    }

    #[test]
    fn text_without_the_header_is_refused() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("0000 0000\n"), None);
        assert_eq!(parse_stat("entries insert_failed\nzz 00\n"), None);
    }
}
