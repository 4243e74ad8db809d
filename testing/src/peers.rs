//! Third-party peer programs the tests drive (ipmitool, FreeIPMI,
//! prometheus, `script`, a Python with packages): found, or the test skips
//! with a note on stderr, unless `BMCFLEET_REQUIRE_PEERS=1` makes a missing
//! peer a failure (scripts/test.sh sets it).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Whether `BMCFLEET_REQUIRE_PEERS` asks for every peer (`1`, `true`,
/// `yes` or `on`).
pub fn required() -> bool {
    std::env::var("BMCFLEET_REQUIRE_PEERS")
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// `found`, or for a missing peer `None` with a note on stderr (the test
/// skips); with [`required`] a missing peer panics instead. `missing` says
/// what is missing, `install` how to get it.
pub fn or_skip<T>(found: Option<T>, missing: &str, install: &str) -> Option<T> {
    if found.is_none() {
        assert!(!required(), "{missing} and BMCFLEET_REQUIRE_PEERS=1 ({install})");
        eprintln!("SKIP: {missing}, test skipped ({install})");
    }
    found
}

/// The first file `name` in a directory of `$PATH`, then of `also`.
pub fn find_program(name: &str, also: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(also.iter().map(PathBuf::from));
    dirs.map(|d| d.join(name)).find(|p| p.is_file())
}

/// The program `name` from `$PATH` or `also`, or `None` (skip) as
/// [`or_skip`] says.
pub fn program(name: &str, also: &[&str], install: &str) -> Option<PathBuf> {
    or_skip(find_program(name, also), &format!("{name} is not installed"), install)
}

/// The first of `candidates` that runs `-c "import MODULES"` (`modules`
/// comma-separated) successfully: a Python interpreter with those packages.
pub fn python_with(candidates: impl IntoIterator<Item = PathBuf>, modules: &str) -> Option<PathBuf> {
    candidates.into_iter().find(|c| {
        Command::new(c)
            .args(["-c", &format!("import {modules}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}
