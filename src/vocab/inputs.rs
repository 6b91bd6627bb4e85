//! What a compile step reads that other parties edit (the kube-dns
//! ConfigMap, hosts files), and what a start skipped of it.
//!
//! At a start a bad input of that kind must not keep DNS from starting: it
//! is skipped, and said (`Config::skipped`, a metric). A reload and
//! `check-config` are strict: the input is an error naming it.

use std::cell::RefCell;

#[derive(Debug, Default, Clone)]
pub(crate) struct Inputs {
    lenient: bool,
    skipped: RefCell<Vec<String>>,
}

impl Inputs {
    /// `lenient`: a start's compile, which skips a bad input.
    pub(crate) fn new(lenient: bool) -> Inputs {
        Inputs {
            lenient,
            skipped: RefCell::default(),
        }
    }

    /// Whether a bad input is skipped (and said with [`Inputs::skip`])
    /// rather than an error.
    pub(crate) fn lenient(&self) -> bool {
        self.lenient
    }

    /// Records that a bad input was skipped, and why.
    pub(crate) fn skip(&self, why: String) {
        self.skipped.borrow_mut().push(why);
    }

    /// What was skipped, in order; empties the list.
    pub(crate) fn take_skipped(&self) -> Vec<String> {
        self.skipped.take()
    }
}
