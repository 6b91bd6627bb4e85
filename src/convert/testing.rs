//! The converter's tests' shared helpers: convert a Corefile's text with
//! the default options, and ask what was listed or noted about a line.

use super::{Conversion, ConvertError, Options, convert};

pub(super) fn run(text: &str) -> Result<Conversion, ConvertError> {
    convert(text, &Options::default(), &|_| None)
}

pub(super) fn ok(text: &str) -> Conversion {
    run(text).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether something about `line` saying `words` was listed as not translated.
pub(super) fn listed(c: &Conversion, line: usize, words: &str) -> bool {
    c.untranslated
        .iter()
        .any(|f| f.lines.contains(&line) && f.message.contains(words))
}

/// Whether a note about `line` says `words`.
pub(super) fn noted(c: &Conversion, line: usize, words: &str) -> bool {
    c.notes
        .iter()
        .any(|f| f.lines.contains(&line) && f.message.contains(words))
}
