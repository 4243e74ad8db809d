//! Locating the test fixtures: `testdata/` in the workspace (captured
//! vendor data, with its SOURCES.md and licences), or `BMCFLEET_FIXTURES`.
//! They are part of the repository, so a missing one fails the test.

use std::path::{Path, PathBuf};

/// The workspace root: the nearest ancestor of this crate whose
/// `Cargo.toml` declares `[workspace]`.
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in here.ancestors() {
        let manifest = dir.join("Cargo.toml");
        if std::fs::read_to_string(&manifest).is_ok_and(|s| s.contains("[workspace]")) {
            return dir.to_path_buf();
        }
    }
    here.to_path_buf()
}

/// The fixtures root, whether or not it exists.
pub fn fixtures_root() -> PathBuf {
    match std::env::var_os("BMCFLEET_FIXTURES") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            if p.is_absolute() {
                p
            } else {
                workspace_root().join(p)
            }
        }
        _ => workspace_root().join("testdata"),
    }
}

/// `<fixtures>/redfish/<vendor>` if it exists, else why not.
pub fn redfish_mockup(vendor: &str) -> Result<PathBuf, String> {
    let root = fixtures_root();
    let dir = root.join("redfish").join(vendor);
    if dir.is_dir() {
        Ok(dir.canonicalize().unwrap_or(dir))
    } else if !root.is_dir() {
        Err(format!(
            "the fixtures root {} does not exist (the repository's testdata/, or BMCFLEET_FIXTURES)",
            root.display()
        ))
    } else {
        Err(format!("the Redfish mockup {} is not in the fixtures", dir.display()))
    }
}

/// For tests: the mockup directory of `vendor`; panics, saying why, when it
/// is missing (the fixtures are part of the repository).
pub fn mockup_dir(vendor: &str) -> PathBuf {
    redfish_mockup(vendor).unwrap_or_else(|why| panic!("{why}"))
}
