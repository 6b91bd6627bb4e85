//! `nodens check-config FILE`: the configuration checked as `serve` would
//! load it, without serving. Exit 0 and `FILE: OK`, or exit 1 with the
//! error and its line. A valid file's deprecated keys are warnings, one a
//! line on stderr before the `OK`, each with its line and replacement; the
//! exit status stays 0.

use std::path::Path;

use nodens::config::Config;

use super::report::{Failure, Outcome};

pub(super) fn run(file: &Path) -> Result<Outcome, Failure> {
    let config = Config::load(file).map_err(Failure::new)?;
    for deprecated in &config.deprecated {
        eprintln!("{deprecated}");
    }
    println!("{}: OK", file.display());
    Ok(Outcome::Done)
}
