//! A broken rule of the configuration, before it is placed in the file's
//! text: each section's check returns one, and `config` turns it into a
//! `ConfigError` naming the line.

use std::ops::Range;

use super::position::Step::{self, Key};

/// A broken rule: where (a span of the text, or a path into it) and what.
#[derive(Debug)]
pub(crate) enum Invalid {
    At(Range<usize>, String),
    Key(Vec<Step<'static>>, String),
}

/// A broken rule about the key at `path` (from the file's root).
pub(crate) fn key(path: &[&'static str], message: impl Into<String>) -> Invalid {
    Invalid::Key(path.iter().map(|k| Key(k)).collect(), message.into())
}
