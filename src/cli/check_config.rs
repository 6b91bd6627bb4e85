//! `nodens check-config FILE`: the configuration checked as `serve` would
//! load it, without serving. Exit 0 and `FILE: OK`, or exit 1 with the
//! error and its line.

use std::path::Path;

use nodens::config::Config;

use super::report::{Failure, Outcome};

pub(super) fn run(file: &Path) -> Result<Outcome, Failure> {
    Config::load(file).map_err(Failure::new)?;
    println!("{}: OK", file.display());
    Ok(Outcome::Done)
}
