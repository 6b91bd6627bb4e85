//! What doctor reports: findings ranked by severity, rendered as text or
//! JSON.

use serde::Serialize;

/// How bad a finding is. `Critical` means DNS is failing or will fail under
/// load (lost queries, timeouts, a loop); `Warning` costs latency or load;
/// `Info` is context or a check that could not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

impl Severity {
    fn label(self) -> &'static str {
        match self {
            Severity::Critical => "CRITICAL",
            Severity::Warning => "WARNING",
            Severity::Info => "info",
        }
    }
}

/// One problem (or one note), with the numbers that show it and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A stable name to grep and to assert on, e.g. `search-list-tax`.
    pub id: &'static str,
    pub severity: Severity,
    /// One line: what is wrong.
    pub title: String,
    /// What was read or measured, one fact per line.
    pub evidence: Vec<String>,
    /// What to do about it (may span lines, e.g. a YAML snippet).
    pub fix: Option<String>,
}

impl Finding {
    pub fn new(id: &'static str, severity: Severity, title: impl Into<String>) -> Finding {
        Finding {
            id,
            severity,
            title: title.into(),
            evidence: Vec::new(),
            fix: None,
        }
    }

    pub fn evidence(mut self, line: impl Into<String>) -> Finding {
        self.evidence.push(line.into());
        self
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
}

/// A doctor run: the findings, and what was looked at to reach them (shown
/// before the findings, so that a clean report still says what it checked).
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Titled blocks of facts: the query walks, the probe figures, the node.
    pub sections: Vec<Section>,
    pub findings: Vec<Finding>,
}

#[derive(Debug, Serialize)]
pub struct Section {
    pub title: String,
    pub lines: Vec<String>,
}

impl Report {
    pub fn section(&mut self, title: impl Into<String>, lines: Vec<String>) {
        self.sections.push(Section {
            title: title.into(),
            lines,
        });
    }

    pub fn add(&mut self, findings: impl IntoIterator<Item = Finding>) {
        self.findings.extend(findings);
    }

    /// Most severe first; the order of the checks within a severity.
    pub fn rank(&mut self) {
        self.findings.sort_by_key(|f| f.severity);
    }

    pub fn has_critical(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity == Severity::Critical)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is always serializable")
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for section in &self.sections {
            out.push_str(&format!("== {}\n", section.title));
            for line in &section.lines {
                if line.is_empty() {
                    out.push('\n');
                } else {
                    out.push_str(&format!("   {line}\n"));
                }
            }
            out.push('\n');
        }
        let count = |s| self.findings.iter().filter(|f| f.severity == s).count();
        out.push_str(&format!(
            "== Findings: {} critical, {} warning, {} info\n",
            count(Severity::Critical),
            count(Severity::Warning),
            count(Severity::Info)
        ));
        for f in &self.findings {
            out.push_str(&format!(
                "\n[{}] {} ({})\n",
                f.severity.label(),
                f.title,
                f.id
            ));
            for line in &f.evidence {
                out.push_str(&format!("   - {line}\n"));
            }
            if let Some(fix) = &f.fix {
                out.push_str("   fix:\n");
                for line in fix.lines() {
                    out.push_str(&format!("     {line}\n"));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_are_ranked_most_severe_first_and_rendered_with_evidence() {
        let mut r = Report::default();
        r.add([
            Finding::new("b", Severity::Info, "note"),
            Finding::new("a", Severity::Critical, "broken")
                .evidence("3 of 5 lost")
                .fix("do this"),
        ]);
        r.rank();
        assert_eq!(r.findings[0].id, "a");
        assert!(r.has_critical());
        let text = r.to_text();
        assert!(text.contains("[CRITICAL] broken (a)\n   - 3 of 5 lost\n   fix:\n     do this\n"));
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["findings"][0]["severity"], "critical");
        assert_eq!(json["findings"][0]["evidence"][0], "3 of 5 lost");
    }
}
