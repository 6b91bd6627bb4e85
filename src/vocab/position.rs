//! Where a key is in the file text, so that a check on a value that parsed
//! fine (a zero timeout, a duplicate) can still name its line.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One step of a path into the document: a table key or an array index.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The file text with its parse tree; no tree if the text does not parse
/// (then nothing is located, and errors carry no position).
pub(crate) struct Document<'t> {
    text: &'t str,
    root: Option<Spanned<DeTable<'t>>>,
}

impl<'t> Document<'t> {
    #[cfg(test)]
    pub(crate) fn new(text: &'t str) -> Document<'t> {
        Document::with_tree(text, DeTable::parse(text).ok())
    }

    /// The text with a tree parsed from it (and perhaps changed since, its
    /// spans kept: the configuration's deprecated keys renamed).
    pub(crate) fn with_tree(text: &'t str, root: Option<Spanned<DeTable<'t>>>) -> Document<'t> {
        Document { text, root }
    }

    /// The span of the deepest step of `path` that the file has: the key
    /// itself if written, else its table (a value left at its default is
    /// pointed at through the table it would live in).
    pub(crate) fn locate(&self, path: &[Step<'_>]) -> Option<Range<usize>> {
        let root = self.root.as_ref()?;
        let mut found = None;
        let mut table = root.get_ref();
        let mut array = None;
        for step in path {
            let value: &Spanned<DeValue<'_>> = match (*step, array) {
                (Step::Key(key), None) => {
                    let Some((k, v)) = table.iter().find(|(k, _)| k.get_ref().as_ref() == key)
                    else {
                        return found;
                    };
                    found = Some(k.span());
                    v
                }
                (Step::Index(i), Some(items)) => {
                    let items: &[Spanned<DeValue<'_>>] = items;
                    let Some(v) = items.get(i) else {
                        return found;
                    };
                    found = Some(v.span());
                    v
                }
                _ => return found,
            };
            array = None;
            match value.get_ref() {
                DeValue::Table(t) => table = t,
                DeValue::Array(a) => array = Some(a),
                _ => {}
            }
        }
        found
    }

    /// 1-based line and column of a byte offset.
    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        line_col(self.text, offset)
    }
}

/// 1-based line and column of a byte offset in `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}
