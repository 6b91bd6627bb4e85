//! A parser for the Prometheus text format nodens exports, and sums over
//! the series that carry given labels.

/// One sample of the Prometheus text format.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
}

pub fn parse_metrics(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_sample)
        .collect()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (name, labels, rest) = match line.find('{') {
        Some(i) if line[..i].find(' ').is_none() => {
            let (labels, rest) = parse_labels(&line[i + 1..])?;
            (line[..i].to_string(), labels, rest)
        }
        _ => {
            let (n, rest) = line.split_once(' ')?;
            (n.to_string(), Vec::new(), rest)
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the labels and what follows the `}`.
fn parse_labels(s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    loop {
        while i < b.len() && (b[i] == b',' || b[i] == b' ') {
            i += 1;
        }
        if i < b.len() && b[i] == b'}' {
            return Some((labels, &s[i + 1..]));
        }
        let eq = s[i..].find('=')? + i;
        let key = s[i..eq].trim().to_string();
        i = eq + 1;
        if b.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        let mut val = String::new();
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' && i + 1 < b.len() {
                val.push(match b[i + 1] {
                    b'n' => '\n',
                    c => c as char,
                });
                i += 2;
            } else {
                let ch = s[i..].chars().next()?;
                val.push(ch);
                i += ch.len_utf8();
            }
        }
        i += 1;
        labels.push((key, val));
    }
}

/// The sum over every series of `name` whose labels include all of `labels`
/// (0 if there is none), so tests assert only the labels they care about.
pub fn sum_metric(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// True if `/metrics` has a series `name` with all of `labels`.
pub fn has_series(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> bool {
    samples
        .iter()
        .any(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
}
