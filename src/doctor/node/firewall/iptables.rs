//! The iptables side: `*-save` listings, their NOTRACK rules and the
//! jumps that reach them.

use super::*;

/// Both families of one iptables flavour; IPv6 is optional (a node
/// without ip6tables still has its IPv4 rules read).
pub(super) fn read_iptables(backend: Backend, v4: &str, v6: &str) -> Ruleset {
    let listing = run(v4, &[]).map(|text| {
        let mut listing = parse_iptables_save(backend, &text);
        if let Ok(text6) = run(v6, &[]) {
            let six = parse_iptables_save(backend, &text6);
            listing.notrack.extend(six.notrack);
            listing.chains.extend(six.chains);
        }
        listing
    });
    Ruleset { backend, listing }
}

/// Parses `iptables-save` output: every chain's name, and the NOTRACK
/// rules of the raw table with the built-in hooks that reach them.
pub(crate) fn parse_iptables_save(backend: Backend, text: &str) -> Listing {
    let mut listing = Listing::default();
    let mut table = String::new();
    // The raw table's rules, as (chain, words).
    let mut raw: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
        } else if let Some(c) = line.strip_prefix(':') {
            let chain = c.split_whitespace().next().unwrap_or_default();
            listing.chains.insert(format!("{table} {chain}"));
        } else if let Some(rule) = line.strip_prefix("-A ")
            && table == "raw"
        {
            let words = split_words(rule);
            if let Some((chain, rest)) = words.split_first() {
                raw.push((chain.clone(), rest.to_vec()));
            }
        }
    }
    let edges: Vec<(String, String)> = raw
        .iter()
        .filter_map(|(chain, words)| Some((chain.clone(), target_of(words)?.to_string())))
        .collect();
    let roots = [("PREROUTING", Hook::Prerouting), ("OUTPUT", Hook::Output)];
    let reach = reachability(&roots.map(|(c, h)| (c.to_string(), h)), &edges);
    for (chain, words) in &raw {
        let Some(hooks) = reach.get(chain) else {
            continue;
        };
        if let Some(mut rule) = iptables_notrack(backend, words) {
            rule.chain = format!("raw {chain}");
            rule.hooks = hooks.clone();
            listing.notrack.push(rule);
        }
    }
    listing
}

/// The `-j`/`-g` target of a rule's words.
fn target_of(words: &[String]) -> Option<&str> {
    let i = words.iter().position(|w| w == "-j" || w == "-g")?;
    words.get(i + 1).map(String::as_str)
}

/// The rule if it is a NOTRACK (`-j NOTRACK`, `-j CT --notrack`).
fn iptables_notrack(backend: Backend, words: &[String]) -> Option<NotrackRule> {
    let notrack = match target_of(words)? {
        "NOTRACK" => true,
        "CT" => words.iter().any(|w| w == "--notrack"),
        _ => false,
    };
    if !notrack {
        return None;
    }
    let after = |flags: &[&str]| -> Vec<&str> {
        words
            .windows(2)
            .filter(|w| flags.contains(&w[0].as_str()))
            .map(|w| w[1].as_str())
            .collect()
    };
    let nets =
        |flag: &str| -> Vec<IpNet> { after(&[flag]).into_iter().filter_map(parse_net).collect() };
    let ports = |flags: &[&str]| -> Vec<u16> {
        after(flags)
            .into_iter()
            .flat_map(|v| {
                v.split(',')
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u16>>()
            })
            .collect()
    };
    let comment = after(&["--comment"]).first().map(|c| c.to_string());
    Some(NotrackRule {
        backend,
        chain: String::new(),
        hooks: BTreeSet::new(),
        daddr: nets("-d"),
        saddr: nets("-s"),
        dport: ports(&["--dport", "--dports"]),
        sport: ports(&["--sport", "--sports"]),
        comment,
    })
}

/// Splits an iptables-save rule into words, a `"..."` (with `\"` escapes)
/// being one word without its quotes.
pub fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let (mut in_word, mut quoted) = (false, false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            '\\' if quoted => cur.extend(chars.next()),
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}
