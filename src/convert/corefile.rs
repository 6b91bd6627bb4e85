//! A reader for Corefiles: the Caddyfile syntax CoreDNS (and so node-cache)
//! reads, written here because no maintained Rust crate parses it. Only the
//! syntax: server blocks with their keys, directives with their arguments and
//! nested blocks, quotes, comments and environment references. What the
//! directives mean is `convert`'s business.
//!
//! The rules follow Caddy v1's lexer, which CoreDNS uses: tokens are split
//! on white space; `"` quotes a token (which may span lines, `\"` inside);
//! `#` outside quotes starts a comment to the end of the line; a `{` that
//! ends a line opens a block and a `}` token closes one; `{$VAR}` and
//! `{%VAR%}` are replaced by the environment variable inside any token.
//! Every error names the line it is about; nothing here panics on input.

pub(crate) use super::token::{SyntaxError, Token};
use super::token::{error, is_close, is_open};

/// A directive (`forward . 10.0.0.10 { force_tcp }`) or a line inside a
/// directive's block (`force_tcp`): a name, arguments, and an optional block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Directive {
    pub name: Token,
    pub args: Vec<Token>,
    /// The lines of its `{ ... }`, if it has one.
    pub block: Option<Vec<Directive>>,
}

impl Directive {
    pub(crate) fn line(&self) -> usize {
        self.name.line
    }

    /// The arguments as text.
    pub(crate) fn arg_texts(&self) -> Vec<&str> {
        self.args.iter().map(|t| t.text.as_str()).collect()
    }
}

/// A server block: its keys (`cluster.local:53`, `.:53`) and directives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerBlock {
    pub keys: Vec<Token>,
    pub directives: Vec<Directive>,
}

impl ServerBlock {
    pub(crate) fn line(&self) -> usize {
        self.keys.first().map_or(0, |k| k.line)
    }
}

/// A parsed Corefile: its server blocks in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Corefile {
    pub blocks: Vec<ServerBlock>,
}

#[cfg(test)]
/// Parses Corefile text; `env` gives the value of `{$VAR}` references (an
/// unset variable is an error: CoreDNS would put an empty string there,
/// which for a conversion only hides a mistake).
pub(crate) fn parse(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Corefile, SyntaxError> {
    parse_importing(text, env, None)
}

/// [`parse`], with `import`s of files read relative to `dir` (`None`:
/// a file import is an error; snippets work either way).
pub(crate) fn parse_importing(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    dir: Option<&std::path::Path>,
) -> Result<Corefile, SyntaxError> {
    let lines_of = |text: &str| -> Result<Vec<Vec<Token>>, SyntaxError> {
        let mut tokens = lex(text)?;
        for t in &mut tokens {
            t.text = expand_env(&t.text, t.line, env)?;
        }
        Ok(split_lines(tokens))
    };
    let load = |pattern: &str, line: usize| -> Result<Vec<Vec<Token>>, SyntaxError> {
        let fail = |message: String| SyntaxError { line, message };
        let Some(dir) = dir else {
            return Err(fail(format!(
                "import {pattern}: no snippet ({pattern}) and no directory to read files from"
            )));
        };
        let mut lines = Vec::new();
        for path in super::import::files(dir, pattern).map_err(|e| fail(e.to_string()))? {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                fail(format!(
                    "import {pattern}: cannot read {}: {e}",
                    path.display()
                ))
            })?;
            // An error inside an imported file is reported at the import.
            let imported = lines_of(&text).map_err(|e| {
                fail(format!(
                    "import {pattern}: {}, line {}: {}",
                    path.display(),
                    e.line,
                    e.message
                ))
            })?;
            lines.extend(imported);
        }
        Ok(lines)
    };
    let lines = super::import::expand(lines_of(text)?, &load)?;
    Parser { lines, at: 0 }.corefile()
}

/// Splits the text into tokens.
fn lex(text: &str) -> Result<Vec<Token>, SyntaxError> {
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c == '\n' {
            line += 1;
            chars.next();
        } else if c.is_whitespace() {
            chars.next();
        } else if c == '#' {
            while chars.next_if(|&c| c != '\n').is_some() {}
        } else if c == '"' {
            chars.next();
            let start = line;
            let mut value = String::new();
            loop {
                match chars.next() {
                    None => return error(start, "a quote opened here is never closed"),
                    Some('"') => break,
                    Some('\\') if chars.peek() == Some(&'"') => {
                        chars.next();
                        value.push('"');
                    }
                    Some(c) => {
                        if c == '\n' {
                            line += 1;
                        }
                        value.push(c);
                    }
                }
            }
            tokens.push(Token {
                text: value,
                line: start,
                quoted: true,
                end_line: line,
            });
        } else {
            let mut value = String::new();
            while let Some(c) = chars.next_if(|&c| !c.is_whitespace() && c != '#') {
                value.push(c);
            }
            tokens.push(Token {
                text: value,
                line,
                quoted: false,
                end_line: line,
            });
        }
    }
    Ok(tokens)
}

/// Replaces `{$VAR}` and `{%VAR%}` (Caddy v1's two spellings).
fn expand_env(
    text: &str,
    line: usize,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, SyntaxError> {
    let mut out = String::new();
    let mut rest = text;
    loop {
        let next = [("{$", "}"), ("{%", "%}")]
            .iter()
            .filter_map(|&(open, close)| rest.find(open).map(|i| (i, open, close)))
            .min_by_key(|&(i, _, _)| i);
        let Some((i, open, close)) = next else {
            out.push_str(rest);
            return Ok(out);
        };
        out.push_str(&rest[..i]);
        let after = &rest[i + open.len()..];
        let Some(end) = after.find(close) else {
            return error(line, format!("`{open}` without a closing `{close}`"));
        };
        let name = &after[..end];
        if name.is_empty() {
            return error(line, format!("`{open}{close}` names no variable"));
        }
        match env(name) {
            Some(value) => out.push_str(&value),
            None => {
                return error(
                    line,
                    format!(
                        "environment variable {name} is not set (referenced as {open}{name}{close})"
                    ),
                );
            }
        }
        rest = &after[end + close.len()..];
    }
}

/// Groups tokens by the line they start on: a token belongs to the
/// previous one's line unless it starts after that token ended.
fn split_lines(tokens: Vec<Token>) -> Vec<Vec<Token>> {
    let mut lines: Vec<Vec<Token>> = Vec::new();
    let mut last_end = 0;
    for t in tokens {
        let end = t.end_line;
        match lines.last_mut() {
            Some(current) if t.line == last_end => current.push(t),
            _ => lines.push(vec![t]),
        }
        last_end = end;
    }
    lines
}

struct Parser {
    lines: Vec<Vec<Token>>,
    at: usize,
}

impl Parser {
    fn corefile(mut self) -> Result<Corefile, SyntaxError> {
        let mut blocks = Vec::new();
        while self.at < self.lines.len() {
            blocks.push(self.server_block(blocks.is_empty())?);
        }
        Ok(Corefile { blocks })
    }

    /// Keys (continued on the next line after a trailing comma), then a
    /// `{ ... }`, or, for a file that is one block, every following line.
    fn server_block(&mut self, first: bool) -> Result<ServerBlock, SyntaxError> {
        let start = self.lines[self.at][0].line;
        let mut keys = Vec::new();
        let opened = loop {
            let Some(line) = self.lines.get(self.at).cloned() else {
                return error(start, "server block keys without a block");
            };
            self.at += 1;
            let mut opened = false;
            for (i, t) in line.iter().enumerate() {
                if is_open(t) {
                    if i + 1 != line.len() {
                        return error(t.line, "`{` must end its line");
                    }
                    opened = true;
                } else if is_close(t) {
                    return error(t.line, "`}` without a block to close");
                } else {
                    keys.extend(t.text.split(',').filter(|k| !k.is_empty()).map(|k| Token {
                        text: k.to_string(),
                        ..t.clone()
                    }));
                }
            }
            let continued = line.last().is_some_and(|t| t.text.ends_with(','));
            if opened || !continued {
                break opened;
            }
        };
        if keys.is_empty() {
            return error(start, "a block with no server keys (zone and port)");
        }
        let directives = if opened {
            self.body(start)?
        } else if first {
            // A file that is one server block may leave out the braces.
            let body = self.body_to_end()?;
            if self.at < self.lines.len() {
                return error(
                    self.lines[self.at][0].line,
                    "a second server block: without braces the whole file is one block",
                );
            }
            body
        } else {
            return error(start, "server keys not followed by `{`");
        };
        Ok(ServerBlock { keys, directives })
    }

    /// Directives up to the `}` that closes the block opened on `opened_at`.
    fn body(&mut self, opened_at: usize) -> Result<Vec<Directive>, SyntaxError> {
        let mut directives = Vec::new();
        loop {
            let Some(line) = self.lines.get(self.at).cloned() else {
                return error(opened_at, "the block opened here is never closed");
            };
            self.at += 1;
            if let Some((directive, closed)) = self.directive(line)? {
                directives.push(directive);
                if closed {
                    return Ok(directives);
                }
            } else {
                return Ok(directives);
            }
        }
    }

    /// Every remaining line, for a file without braces; stops at nothing.
    fn body_to_end(&mut self) -> Result<Vec<Directive>, SyntaxError> {
        let mut directives = Vec::new();
        while let Some(line) = self.lines.get(self.at).cloned() {
            self.at += 1;
            match self.directive(line)? {
                Some((d, false)) => directives.push(d),
                _ => {
                    return error(
                        self.lines[self.at - 1][0].line,
                        "`}` without a block to close",
                    );
                }
            }
        }
        Ok(directives)
    }

    /// One line as a directive. `None` if the line is a lone `}` (the block
    /// ends); `Some((d, true))` if the line ended with a `}` that closes the
    /// enclosing block after `d`.
    fn directive(&mut self, line: Vec<Token>) -> Result<Option<(Directive, bool)>, SyntaxError> {
        let mut tokens = line.into_iter();
        let name = tokens.next().expect("lines are never empty");
        if is_close(&name) {
            if let Some(t) = tokens.next() {
                return error(t.line, format!("`{}` after a closing `}}`", t.text));
            }
            return Ok(None);
        }
        if is_open(&name) {
            return error(name.line, "a block `{` with no directive before it");
        }
        let mut args = Vec::new();
        let mut block = None;
        let mut closes = false;
        let rest: Vec<Token> = tokens.collect();
        for (i, t) in rest.iter().enumerate() {
            let last = i + 1 == rest.len();
            if is_open(t) {
                if !last {
                    return error(t.line, "`{` must end its line");
                }
                block = Some(self.body(t.line)?);
            } else if is_close(t) {
                if !last {
                    return error(t.line, "`}` must end its line");
                }
                closes = true;
            } else {
                args.push(t.clone());
            }
        }
        Ok(Some((Directive { name, args, block }, closes)))
    }
}

/// A Go duration (`30s`, `1m30s`, `1.5s`, `500ms`), as CoreDNS's plugins
/// read them; a bare number is not one.
pub(crate) fn go_duration(text: &str) -> Option<std::time::Duration> {
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    if rest == "0" {
        return Some(std::time::Duration::ZERO);
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * scale;
    }
    // Go's durations are int64 nanoseconds: nothing longer parses there.
    (total <= i64::MAX as f64 / 1e9)
        .then(|| std::time::Duration::try_from_secs_f64(total).ok())
        .flatten()
}

#[cfg(test)]
#[path = "corefile_tests.rs"]
mod tests;
