//! `rewrite`, `dns64` and `forward ... { except }` against CoreDNS 1.13:
//! one Corefile block is run by a real CoreDNS (the reference) and, after
//! `nodens convert-corefile`, by nodens; both forward to the same upstream
//! CoreDNS, and every query gets the same rcode, answer set (owner names
//! included) and SOA presence from both, over UDP and TCP.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use support::*;

/// The upstream's `up.` zone: what the rewritten names and dns64 ask for.
const RECORDS: &str = "b 30 IN A 192.0.2.2\n\
                       www.target 30 IN A 192.0.2.3\n\
                       alias.target 30 IN CNAME www.target\n\
                       cached.target 30 IN A 192.0.2.8\n\
                       v4only 30 IN A 192.0.2.4\n\
                       both 30 IN A 192.0.2.5\n\
                       both 30 IN AAAA 2001:db8::5\n\
                       skip 30 IN A 192.0.2.6\n\
                       in.skip 30 IN A 192.0.2.7";

/// The block both servers run (CoreDNS adds `bind`, `log`, `errors`).
fn directives(upstream: SocketAddr) -> String {
    format!(
        "rewrite name exact a.src. b.up.\n  \
         rewrite name suffix .src2. .target.up. answer auto\n  \
         rewrite name regex (.*)\\.rx\\. {{1}}.target.up. answer auto\n  \
         dns64 {{\n    allow_ipv4\n  }}\n  \
         cache 30\n  \
         forward . {upstream} {{\n    except skip.up\n  }}"
    )
}

struct Pair {
    upstream: CoreDns,
    reference: CoreDns,
    nodens: Nodens,
    _dir: tempfile::TempDir,
}

/// The converted configuration of the block on `listen`, metrics on `metrics`.
fn converted(
    dir: &std::path::Path,
    block: &str,
    listen: SocketAddr,
    metrics: SocketAddr,
) -> String {
    let corefile = format!(
        ".:{port} {{\n  bind {ip}\n  {block}\n  prometheus {metrics}\n}}\n",
        port = listen.port(),
        ip = listen.ip(),
    );
    let path = dir.join("Corefile");
    std::fs::write(&path, corefile).unwrap();
    let Converted { toml, stderr, code } = convert_corefile(&path);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stderr.contains("rewrite"),
        "a rewrite left untranslated: {stderr}"
    );
    toml
}

fn start() -> Pair {
    start_with(directives)
}

/// The rules CoreDNS's README shows beside `answer auto`: `continue`
/// chains, prefix and substring matches, a suffix without `answer auto`
/// (the answer keeps the rewritten names), `answer name` and `answer
/// value`, and a type rewrite.
fn more_directives(upstream: SocketAddr) -> String {
    format!(
        "rewrite continue name prefix web. www.\n  \
         rewrite name substring .sub. .target.\n  \
         rewrite name suffix .noauto. .target.up.\n  \
         rewrite stop {{\n    \
           name regex (.*)\\.named\\. {{1}}.target.up.\n    \
           answer name (.*)\\.target\\.up\\. {{1}}.named.\n    \
           answer value (.*)\\.target\\.up\\. {{1}}.named.\n  \
         }}\n  \
         rewrite type TXT A\n  \
         cache 30\n  \
         forward . {upstream}"
    )
}

fn start_with(block_of: fn(SocketAddr) -> String) -> Pair {
    start_with_records(block_of, RECORDS)
}

fn start_with_records(block_of: fn(SocketAddr) -> String, records: &str) -> Pair {
    let net = Net::alloc();
    let upstream = CoreDns::start(net.upstream(0), &[("up.", zone_file("up.", records))]);
    let block = block_of(upstream.addr);
    let reference = CoreDns::start_with_blocks(
        net.upstream(1),
        &[("probe.", zone_file("probe.", ""))],
        &[(".", &block)],
    );
    let dir = tempfile::tempdir().unwrap();
    let toml = converted(dir.path(), &block, net.nodens(), net.metrics());
    let nodens = Nodens::start_toml(&toml);
    Pair {
        upstream,
        reference,
        nodens,
        _dir: dir,
    }
}

fn ask(server: SocketAddr, name: &str, rt: Rt, tcp: bool) -> Reply {
    let q = Q::new(name, rt);
    if tcp {
        tcp_query(server, &q)
    } else {
        udp_query(server, &q)
    }
}

fn has_soa(r: &Reply) -> bool {
    !r.answers_of(Rt::SOA).is_empty() || r.authority_set().iter().any(|s| s.contains(" SOA "))
}

impl Pair {
    /// Asks both over UDP and TCP; asserts they agree and that the reply's
    /// question is the one asked. Returns nodens's UDP reply.
    fn same(&self, name: &str, rt: Rt) -> Reply {
        let mut first = None;
        for tcp in [false, true] {
            let want = ask(self.reference.addr, name, rt, tcp);
            let got = ask(self.nodens.dns, name, rt, tcp);
            let how = format!("{name} {rt} over {}", if tcp { "TCP" } else { "UDP" });
            assert_eq!(got.rcode(), want.rcode(), "rcode of {how}");
            assert_eq!(got.answer_set(), want.answer_set(), "answers of {how}");
            assert_eq!(
                has_soa(&got),
                has_soa(&want),
                "SOA of {how}: {:?}",
                got.authority_set()
            );
            let asked = question_of(&got.raw).unwrap();
            assert_eq!(asked, (name.to_string(), rt), "question of {how}");
            first.get_or_insert(got);
        }
        first.unwrap()
    }
}

#[test]
fn name_rewrites_answer_with_the_names_asked() {
    needs!(Need::CoreDns);
    let p = start();
    let r = p.same("a.src.", Rt::A);
    assert_eq!(
        r.answer_set().into_iter().collect::<Vec<_>>(),
        ["a.src. IN A 192.0.2.2"]
    );
    let r = p.same("www.src2.", Rt::A);
    assert_eq!(r.a(), [ipv4("192.0.2.3")]);
    // A CNAME chain: owner and target both written back.
    let r = p.same("alias.src2.", Rt::A);
    assert!(
        r.answer_set().contains("alias.src2. IN CNAME www.src2."),
        "{:?}",
        r.answer_set()
    );
    assert!(
        r.answer_set().contains("www.src2. IN A 192.0.2.3"),
        "{:?}",
        r.answer_set()
    );
    let r = p.same("www.rx.", Rt::A);
    assert!(
        r.answer_set().contains("www.rx. IN A 192.0.2.3"),
        "{:?}",
        r.answer_set()
    );
    // A name the upstream has not: its NXDOMAIN and SOA come back under the
    // name asked.
    let r = p.same("nothere.src2.", Rt::A);
    assert_eq!(r.rcode(), rcode::NXDOMAIN);
}

#[test]
fn continue_prefix_substring_and_answer_rules_answer_as_coredns() {
    needs!(Need::CoreDns);
    let p = start_with(more_directives);
    // prefix (continue), then substring: no rule writes the answer back.
    let r = p.same("web.sub.up.", Rt::A);
    assert!(
        r.answer_set().contains("www.target.up. IN A 192.0.2.3"),
        "{:?}",
        r.answer_set()
    );
    // A suffix without `answer auto`: the CNAME chain as the upstream gave it.
    let r = p.same("alias.noauto.", Rt::A);
    assert!(
        r.answer_set()
            .contains("alias.target.up. IN CNAME www.target.up."),
        "{:?}",
        r.answer_set()
    );
    // `answer name` and `answer value`: owners and the CNAME target.
    let r = p.same("alias.named.", Rt::A);
    assert!(
        r.answer_set().contains("alias.named. IN CNAME www.named."),
        "{:?}",
        r.answer_set()
    );
    assert!(
        r.answer_set().contains("www.named. IN A 192.0.2.3"),
        "{:?}",
        r.answer_set()
    );
    // A type rewrite: a TXT question answered with the A records.
    let r = p.same("b.up.", Rt::TXT);
    assert!(
        r.answer_set().contains("b.up. IN A 192.0.2.2"),
        "{:?}",
        r.answer_set()
    );
    p.same("nothere.named.", Rt::A);
}

#[test]
fn a_rewritten_name_is_a_cache_hit_under_the_name_asked() {
    needs!(Need::CoreDns);
    let p = start();
    let first = udp_query(p.nodens.dns, &Q::new("cached.rx.", Rt::A));
    let second = udp_query(p.nodens.dns, &Q::new("cached.rx.", Rt::A));
    p.upstream.sync_log();
    assert_eq!(
        p.upstream.count_queries("cached.target.up.", "A"),
        1,
        "the second query is a cache hit"
    );
    for r in [&first, &second] {
        assert_eq!(
            question_of(&r.raw).unwrap(),
            ("cached.rx.".to_string(), Rt::A)
        );
        assert_eq!(
            r.answer_set().into_iter().collect::<Vec<_>>(),
            ["cached.rx. IN A 192.0.2.8"]
        );
    }
    // And CoreDNS answers the same.
    let want = udp_query(p.reference.addr, &Q::new("cached.rx.", Rt::A));
    assert_eq!(second.answer_set(), want.answer_set());
}

#[test]
fn dns64_synthesizes_only_where_there_is_no_aaaa() {
    needs!(Need::CoreDns);
    let p = start();
    let r = p.same("v4only.up.", Rt::AAAA);
    assert!(
        r.answer_set()
            .contains("v4only.up. IN AAAA 64:ff9b::c000:204"),
        "{:?}",
        r.answer_set()
    );
    let r = p.same("both.up.", Rt::AAAA);
    assert!(
        r.answer_set().contains("both.up. IN AAAA 2001:db8::5"),
        "{:?}",
        r.answer_set()
    );
    let r = p.same("nx.up.", Rt::AAAA);
    assert_eq!(r.rcode(), rcode::NXDOMAIN);
    // Through a rewrite too, and A questions are left alone.
    p.same("www.src2.", Rt::AAAA);
    p.same("v4only.up.", Rt::A);
    // The synthesis was cached: asked again, nothing goes upstream.
    p.upstream.sync_log();
    let before = p.upstream.count_queries("v4only.up.", "A");
    udp_query(p.nodens.dns, &Q::new("v4only.up.", Rt::AAAA));
    p.upstream.sync_log();
    assert_eq!(p.upstream.count_queries("v4only.up.", "A"), before);
}

#[test]
fn except_zones_are_not_forwarded() {
    needs!(Need::CoreDns);
    let p = start();
    let r = p.same("skip.up.", Rt::A);
    assert_eq!(r.rcode(), rcode::SERVFAIL, "CoreDNS 1.13's answer there");
    p.same("in.skip.up.", Rt::A);
    let r = p.same("b.up.", Rt::A);
    assert_eq!(r.a(), [ipv4("192.0.2.2")]);
    p.upstream.sync_log();
    assert_eq!(p.upstream.count_queries("skip.up.", "A"), 0);
    assert_eq!(p.upstream.count_queries("in.skip.up.", "A"), 0);
}

fn plain_config(net: &Net, upstream: SocketAddr) -> String {
    format!(
        "[server]\nlisten = [\"{}\"]\n[metrics]\nlisten = \"{}\"\n[cache]\nservfail_ttl = \"0s\"\n\
         [[zone]]\nname = \".\"\nupstreams = [\"{upstream}\"]\n",
        net.nodens(),
        net.metrics()
    )
}

#[test]
fn a_bad_regex_is_refused_at_its_line() {
    let net = Net::alloc();
    let text = format!(
        "{}\n[[zone.rewrite]]\nmatch = \"regex\"\nfrom = \"(unclosed\"\nto = \"b.up\"\n",
        plain_config(&net, net.upstream(0))
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodens.toml");
    std::fs::write(&path, &text).unwrap();
    let line = text.lines().position(|l| l.starts_with("from =")).unwrap() + 1;
    let out = Command::new(nodens_bin())
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let at = format!("{}:{line}:", path.display());
    assert!(stderr.contains(&at), "names {at}: {stderr}");
    assert!(stderr.contains("not a regular expression"), "{stderr}");
}

#[test]
fn reload_switches_a_rewrite_on() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let upstream = CoreDns::start(net.upstream(0), &[("up.", zone_file("up.", RECORDS))]);
    let plain = plain_config(&net, upstream.addr);
    let nodens = Nodens::start_toml(&plain);
    let r = udp_query(nodens.dns, &Q::new("a.src.", Rt::A));
    assert!(r.a().is_empty(), "no rewrite yet: {:?}", r.answer_set());
    nodens.reload(&format!(
        "{plain}\n[[zone.rewrite]]\nfrom = \"a.src\"\nto = \"b.up\"\n"
    ));
    let r = wait_until(Duration::from_secs(10), "the rewrite after SIGHUP", || {
        let r = udp_query(nodens.dns, &Q::new("a.src.", Rt::A));
        (!r.a().is_empty()).then_some(r)
    });
    assert_eq!(
        r.answer_set().into_iter().collect::<Vec<_>>(),
        ["a.src. IN A 192.0.2.2"]
    );
    // A bad file at reload keeps the rewrite in force.
    nodens.reload(&format!(
        "{plain}\n[[zone.rewrite]]\nmatch = \"regex\"\nfrom = \"(\"\nto = \"b.up\"\n"
    ));
    nodens.wait_metric("nodens_config_reloads_total", &[("result", "failure")], 1.0);
    let r = udp_query(nodens.dns, &Q::new("a.src.", Rt::A));
    assert_eq!(r.a(), [ipv4("192.0.2.2")]);
}

/// A zone that rewrites questions leaves the schema's local answers alone:
/// `db-0.db.old.svc.cluster.local` is the shape whose namespace (`old`)
/// nodens checks first, and that namespace does not exist upstream, but
/// the rewritten name (`...new.svc...`) does: CoreDNS answers it, and so
/// must nodens, instead of the NXDOMAIN the namespace check would give.
#[test]
fn a_rewriting_zone_makes_no_namespace_check_or_local_nxdomain() {
    needs!(Need::CoreDns);
    let net = Net::alloc();
    let upstream = CoreDns::start(
        net.upstream(0),
        &[(
            "cluster.local.",
            zone_file("cluster.local.", "db-0.db.new.svc 30 IN A 192.0.2.9"),
        )],
    );
    let block = format!(
        "rewrite name regex (.*)\\.old\\.svc\\.cluster\\.local\\. {{1}}.new.svc.cluster.local. answer auto\n  \
         cache 30\n  \
         forward . {}",
        upstream.addr
    );
    let reference = CoreDns::start_with_blocks(
        net.upstream(1),
        &[("probe.", zone_file("probe.", ""))],
        &[(".", &block)],
    );
    let dir = tempfile::tempdir().unwrap();
    let toml = converted(dir.path(), &block, net.nodens(), net.metrics());
    assert!(!toml.contains("[cluster]"), "{toml}");
    // Without speculation every such miss waits for its namespace check.
    let nodens = Nodens::start_toml(&format!("{toml}\n[cluster]\nspeculate = false\n"));
    let p = Pair {
        upstream,
        reference,
        nodens,
        _dir: dir,
    };
    // Twice: the second would meet a denial learned from the first.
    for _ in 0..2 {
        let r = p.same("db-0.db.old.svc.cluster.local.", Rt::A);
        assert_eq!(r.a(), [ipv4("192.0.2.9")]);
    }
    let r = p.same("x.y.gone.svc.cluster.local.", Rt::A);
    assert_eq!(r.rcode(), rcode::NXDOMAIN);
}

/// `count` A records of `<label>.up.`, each a different address.
fn many_addresses(label: &str, count: usize) -> String {
    (0..count)
        .map(|i| {
            format!(
                "{label} 30 IN A 10.{}.{}.{}\n",
                i >> 16,
                (i >> 8) & 255,
                i & 255
            )
        })
        .collect()
}

/// An upstream answer of 1,850 A records (about 30 KB over TCP, legal)
/// turned into AAAA records: written out whole, 98 KB, whose lengths and
/// offsets wrapped in the cache entry and whose first render panicked the
/// UDP worker; every worker died on its first hit for the name. Now the
/// owner names point at the question as CoreDNS's do, the answer is the
/// one CoreDNS gives (all 1,850 over TCP, TC over UDP), and an answer that
/// would not fit 65,535 bytes even so (2,400 records) is SERVFAIL, counted,
/// where CoreDNS writes nothing back over TCP.
#[test]
fn a_dns64_answer_of_thousands_of_records_fits_or_fails_and_no_worker_dies() {
    needs!(Need::CoreDns);
    let name = "thousands-of-addresses.up.";
    let huge = "even-more-thousands-of-addresses.up.";
    let records = format!(
        "{RECORDS}\n{}{}",
        many_addresses(name.trim_end_matches(".up."), 1_850),
        many_addresses(huge.trim_end_matches(".up."), 2_400)
    );
    let p = start_with_records(directives, &records);
    let want = ask(p.reference.addr, name, Rt::AAAA, true);
    assert_eq!(
        want.answers_of(Rt::AAAA).len(),
        1_850,
        "CoreDNS's synthesis"
    );
    // Over UDP first, as a pod asks: the miss, then hits of the entry.
    for i in 0..40 {
        let got = udp_query_timeout(
            p.nodens.dns,
            &Q::new(name, Rt::AAAA),
            Duration::from_secs(3),
        )
        .unwrap_or_else(|| panic!("UDP query {i} for {name} AAAA unanswered"));
        let want = ask(p.reference.addr, name, Rt::AAAA, false);
        assert_eq!(
            (got.rcode(), got.tc()),
            (want.rcode(), want.tc()),
            "query {i}"
        );
    }
    let got = ask(p.nodens.dns, name, Rt::AAAA, true);
    assert_eq!(got.rcode(), rcode::NOERROR);
    assert_eq!(got.answer_set(), want.answer_set());
    // Past 65,535 bytes: a clear error, over both transports, every time.
    for tcp in [true, false] {
        for _ in 0..5 {
            let got = ask(p.nodens.dns, huge, Rt::AAAA, tcp);
            assert_eq!(got.rcode(), rcode::SERVFAIL, "{huge} AAAA, tcp {tcp}");
        }
    }
    assert!(p.nodens.metric("nodens_rewrite_too_long_total", &[]) >= 1.0);
    // Every worker still reads its share of the queries.
    for i in 0..40 {
        let q = Q::new("v4only.up.", Rt::A);
        let got = udp_query_timeout(p.nodens.dns, &q, Duration::from_secs(2))
            .unwrap_or_else(|| panic!("UDP query {i} after the large answers unanswered"));
        assert_eq!(got.a(), [ipv4("192.0.2.4")]);
    }
    assert_eq!(p.nodens.metric("nodens_panics_total", &[]), 0.0);
    assert_eq!(p.nodens.metric("nodens_worker_restarts_total", &[]), 0.0);
}
