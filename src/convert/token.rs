//! What the Corefile reader (`corefile.rs`) and its `import` expansion
//! (`import.rs`) share: a token with its line, the braces that open and
//! close blocks, and the error that names a line.

/// One token and the line it starts on (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub text: String,
    pub line: usize,
    /// Written in quotes: never a brace, even if it reads `{`.
    pub(super) quoted: bool,
    /// The line the token ends on (a quoted token may span lines).
    pub(super) end_line: usize,
}

impl Token {
    /// The same token (line, quoting) with other text: a substituted value.
    pub(crate) fn with_text(&self, text: impl Into<String>) -> Token {
        Token {
            text: text.into(),
            ..self.clone()
        }
    }
}

/// Input that is not a Corefile, with the line at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub(crate) struct SyntaxError {
    pub line: usize,
    pub message: String,
}

pub(super) fn error<T>(line: usize, message: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError {
        line,
        message: message.into(),
    })
}

pub(super) fn is_open(t: &Token) -> bool {
    !t.quoted && t.text == "{"
}

pub(super) fn is_close(t: &Token) -> bool {
    !t.quoted && t.text == "}"
}
