//! `nft list table` and `iptables-save` output, parsed into tables,
//! chains and rules, counters taken out, so two listings compare equal
//! whatever the traffic.

use super::rules::ipt_words;

// ---- nft ---------------------------------------------------------------------------

/// One chain of an nft table: its hook and priority (from the `type` line)
/// and its rules, counters taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftChain {
    pub name: String,
    pub hook: Option<String>,
    pub priority: Option<String>,
    pub rules: Vec<String>,
}

/// A table as `nft list table` prints it.
#[derive(Debug, Clone)]
pub struct NftTable {
    pub text: String,
    pub chains: Vec<NftChain>,
}

/// A rule with its counter (`counter packets N bytes M`) taken out and
/// whitespace collapsed, so two listings compare equal whatever the traffic.
pub fn strip_counters(rule: &str) -> String {
    let t: Vec<&str> = rule.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] == "counter" {
            i += 1;
            while i + 1 < t.len() && (t[i] == "packets" || t[i] == "bytes") {
                i += 2;
            }
            continue;
        }
        out.push(t[i]);
        i += 1;
    }
    out.join(" ")
}

impl NftTable {
    pub fn parse(text: &str) -> NftTable {
        let mut chains = Vec::new();
        let mut cur: Option<NftChain> = None;
        // Depth of the blocks opened inside the table (chains, sets, ...).
        let mut depth = 0usize;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if line.starts_with("table ") {
                continue;
            }
            if line == "}" {
                if depth == 1
                    && let Some(c) = cur.take()
                {
                    chains.push(c);
                }
                depth = depth.saturating_sub(1);
                continue;
            }
            if line.ends_with('{') {
                depth += 1;
                if depth == 1
                    && let Some(name) = line
                        .strip_prefix("chain ")
                        .map(|r| r.trim_end_matches('{').trim())
                {
                    cur = Some(NftChain {
                        name: name.to_string(),
                        hook: None,
                        priority: None,
                        rules: Vec::new(),
                    });
                }
                continue;
            }
            let Some(c) = cur.as_mut() else { continue };
            if depth != 1 {
                continue;
            }
            if line.starts_with("type ") {
                let t: Vec<&str> = line
                    .split(|ch: char| ch.is_whitespace() || ch == ';')
                    .filter(|w| !w.is_empty())
                    .collect();
                let after = |k: &str| {
                    t.iter()
                        .position(|w| *w == k)
                        .and_then(|i| t.get(i + 1))
                        .map(|s| s.to_string())
                };
                c.hook = after("hook");
                c.priority = after("priority");
                continue;
            }
            if line.starts_with("policy ") {
                continue;
            }
            c.rules.push(strip_counters(line));
        }
        NftTable {
            text: text.to_string(),
            chains,
        }
    }

    pub fn chain(&self, name: &str) -> Option<&NftChain> {
        self.chains.iter().find(|c| c.name == name)
    }

    /// The listing with counters taken out: what must not change across a restart.
    pub fn canonical(&self) -> Vec<String> {
        let mut v = Vec::new();
        for c in &self.chains {
            v.push(format!(
                "chain {} hook {:?} priority {:?}",
                c.name, c.hook, c.priority
            ));
            for r in &c.rules {
                v.push(format!("  {r}"));
            }
        }
        v
    }
}

// ---- iptables ----------------------------------------------------------------------

/// One table of `iptables-save` output.
#[derive(Debug, Clone, Default)]
pub struct IptTable {
    pub name: String,
    /// The chains declared (`:NAME POLICY [p:b]`).
    pub chains: Vec<String>,
    /// The rules in order, as (chain, the rest of the `-A CHAIN` line).
    pub rules: Vec<(String, String)>,
}

/// `iptables-save` output, by table.
#[derive(Debug, Clone, Default)]
pub struct IptSave {
    pub text: String,
    pub tables: Vec<IptTable>,
}

impl IptSave {
    pub fn parse(text: &str) -> IptSave {
        let mut s = IptSave {
            text: text.to_string(),
            tables: Vec::new(),
        };
        for line in text.lines().map(str::trim) {
            if let Some(t) = line.strip_prefix('*') {
                s.tables.push(IptTable {
                    name: t.to_string(),
                    ..IptTable::default()
                });
            } else if let Some(c) = line.strip_prefix(':') {
                if let Some(t) = s.tables.last_mut() {
                    t.chains
                        .push(c.split_whitespace().next().unwrap_or("").to_string());
                }
            } else if let Some(r) = line.strip_prefix("-A ")
                && let Some(t) = s.tables.last_mut()
            {
                let (chain, rest) = r.split_once(' ').unwrap_or((r, ""));
                t.rules.push((chain.to_string(), rest.trim().to_string()));
            }
        }
        s
    }

    fn table(&self, table: &str) -> Option<&IptTable> {
        self.tables.iter().find(|t| t.name == table)
    }

    pub fn has_chain(&self, table: &str, chain: &str) -> bool {
        self.table(table)
            .is_some_and(|t| t.chains.iter().any(|c| c == chain))
    }

    /// The rules of `chain` in `table` (the part after `-A CHAIN`).
    pub fn rules(&self, table: &str, chain: &str) -> Vec<String> {
        self.table(table)
            .map(|t| {
                t.rules
                    .iter()
                    .filter(|(c, _)| c == chain)
                    .map(|(_, r)| r.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The rules of `chain` that jump to `target`.
    pub fn jumps(&self, table: &str, chain: &str, target: &str) -> Vec<String> {
        self.rules(table, chain)
            .into_iter()
            .filter(|r| {
                ipt_words(r)
                    .windows(2)
                    .any(|w| (w[0] == "-j" || w[0] == "-g") && w[1] == target)
            })
            .collect()
    }

    /// Every line that is nodens's (mentions NODENS or the nodens comment),
    /// prefixed by its table, counters left out: what must not change
    /// across a restart.
    pub fn nodens_lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut table = String::new();
        for line in self.text.lines().map(str::trim) {
            if let Some(t) = line.strip_prefix('*') {
                table = t.to_string();
            } else if line.starts_with('#') {
                continue;
            } else if line.contains("NODENS") || line.contains("nodens") {
                let line = match line.strip_prefix(':') {
                    // ":CHAIN POLICY [p:b]": the counters are not nodens's.
                    Some(c) => format!(":{}", c.split_whitespace().next().unwrap_or("")),
                    None => line.to_string(),
                };
                v.push(format!("*{table} {line}"));
            }
        }
        v
    }
}
