//! `import`, as CoreDNS (Caddy v1) reads it: a snippet `(name) { ... }`
//! defined at the top level is inlined, token for token, wherever a line
//! says `import name`; any other `import PATTERN` inlines the files the
//! pattern names (a `*` or `?` in the file name matches as a shell glob,
//! in name order). Both work at the top level (server blocks) and inside a
//! block (directives). Done on the lines of tokens, before they are read as
//! blocks, so everything after sees a Corefile without imports; the
//! inlined tokens keep the lines they were written on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::token::{SyntaxError, Token, is_close, is_open};

/// Imports within imports, at most: deeper is taken for a cycle.
const MAX_DEPTH: usize = 10;

/// What reads the files a pattern names: their lines of tokens.
pub(super) type Load<'a> = dyn Fn(&str, usize) -> Result<Vec<Vec<Token>>, SyntaxError> + 'a;

/// The lines with every snippet definition taken out and every `import`
/// replaced by what it names.
pub(super) fn expand(
    lines: Vec<Vec<Token>>,
    load: &Load<'_>,
) -> Result<Vec<Vec<Token>>, SyntaxError> {
    let mut snippets = HashMap::new();
    let lines = take_snippets(lines, &mut snippets)?;
    let mut out = Vec::with_capacity(lines.len());
    inline(lines, &mut snippets, load, 0, &mut out)?;
    Ok(out)
}

/// The name of a snippet a line opens (`(name) {` at the top level).
fn snippet_name(line: &[Token]) -> Option<&str> {
    match line {
        [name, open] if is_open(open) => name
            .text
            .strip_prefix('(')
            .and_then(|n| n.strip_suffix(')'))
            .filter(|n| !n.is_empty()),
        _ => None,
    }
}

/// Moves the top-level snippet definitions of `lines` into `snippets`.
fn take_snippets(
    lines: Vec<Vec<Token>>,
    snippets: &mut HashMap<String, Vec<Vec<Token>>>,
) -> Result<Vec<Vec<Token>>, SyntaxError> {
    let mut kept = Vec::with_capacity(lines.len());
    let mut depth = 0usize;
    let mut lines = lines.into_iter();
    while let Some(line) = lines.next() {
        let name = (depth == 0).then(|| snippet_name(&line)).flatten();
        let Some(name) = name.map(str::to_string) else {
            depth = depth_after(depth, &line);
            kept.push(line);
            continue;
        };
        let opened_at = line[0].line;
        let mut body = Vec::new();
        let mut inner = 1usize;
        loop {
            let Some(mut l) = lines.next() else {
                return Err(SyntaxError {
                    line: opened_at,
                    message: format!("snippet ({name}) is never closed"),
                });
            };
            inner = depth_after(inner, &l);
            if inner == 0 {
                // The `}` that closes the snippet, alone or after a directive.
                l.pop();
                if !l.is_empty() {
                    body.push(l);
                }
                break;
            }
            body.push(l);
        }
        snippets.insert(name, body);
    }
    Ok(kept)
}

/// The block depth after `line`, starting at `depth`.
fn depth_after(depth: usize, line: &[Token]) -> usize {
    line.iter().fold(depth, |d, t| {
        if is_open(t) {
            d + 1
        } else if is_close(t) {
            d.saturating_sub(1)
        } else {
            d
        }
    })
}

fn inline(
    lines: Vec<Vec<Token>>,
    snippets: &mut HashMap<String, Vec<Vec<Token>>>,
    load: &Load<'_>,
    depth: usize,
    out: &mut Vec<Vec<Token>>,
) -> Result<(), SyntaxError> {
    for line in lines {
        let import = match line.as_slice() {
            [word, what, rest @ ..]
                if word.text == "import" && !is_open(what) && !is_close(what) =>
            {
                Some((word.line, what.text.clone(), rest.to_vec()))
            }
            _ => None,
        };
        let Some((at, what, rest)) = import else {
            out.push(line);
            continue;
        };
        if depth >= MAX_DEPTH {
            return Err(SyntaxError {
                line: at,
                message: format!(
                    "import {what}: imports nested more than {MAX_DEPTH} deep (a cycle?)"
                ),
            });
        }
        if let Some(t) = rest.iter().find(|t| !is_close(t)) {
            return Err(SyntaxError {
                line: at,
                message: format!(
                    "import {what} {}: arguments to an import are not supported",
                    t.text
                ),
            });
        }
        let body = match snippets.get(&what) {
            Some(body) => body.clone(),
            None => {
                let loaded = load(&what, at)?;
                take_snippets(loaded, snippets)?
            }
        };
        inline(body, snippets, load, depth + 1, out)?;
        // A `}` after the import closes the enclosing block.
        if let Some(close) = rest.into_iter().next() {
            out.push(vec![close]);
        }
    }
    Ok(())
}

/// A directory an import's pattern names that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("import {pattern}: cannot read {}: {error}", dir.display())]
pub(super) struct UnreadDir {
    pattern: String,
    dir: PathBuf,
    error: std::io::Error,
}

/// The files `pattern` names, relative to `dir`: the file itself, or with
/// a `*` or `?` in its file name, every file of its directory that matches
/// (none is no error, as in CoreDNS), in name order.
pub(super) fn files(dir: &Path, pattern: &str) -> Result<Vec<PathBuf>, UnreadDir> {
    let path = dir.join(pattern);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains(['*', '?']) {
        return Ok(vec![path]);
    }
    let parent = path.parent().unwrap_or(dir);
    // Go's filepath.Glob, which CoreDNS uses, finds nothing in a directory
    // that does not exist, and that is no error either.
    let entries = match std::fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(UnreadDir {
                pattern: pattern.to_string(),
                dir: parent.to_owned(),
                error,
            });
        }
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file() && glob_match(&name, &e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

/// A shell glob of one file name: `*` any run of characters, `?` one.
fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer match with one backtrack point.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*", "a.conf"));
        assert!(glob_match("*.conf", "a.conf"));
        assert!(!glob_match("*.conf", "a.confx"));
        assert!(glob_match("a?c*", "abcdef"));
        assert!(!glob_match("a?c", "ac"));
    }
}
