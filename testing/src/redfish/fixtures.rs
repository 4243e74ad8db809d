//! Locating the shared fixtures (`../shared/fixtures` beside the workspace,
//! or `BMCFLEET_FIXTURES`), and skipping clearly when they are absent.

use super::env_flag;
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
        _ => workspace_root().join("..").join("shared").join("fixtures"),
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
            "the fixtures root {} does not exist (set BMCFLEET_FIXTURES to the shared fixtures directory)",
            root.display()
        ))
    } else {
        Err(format!("the Redfish mockup {} is not in the fixtures", dir.display()))
    }
}

/// For tests: the mockup directory, or `None` after printing why the test
/// skips. With `BMCFLEET_REQUIRE_FIXTURES=1` a missing mockup panics.
pub fn redfish_mockup_or_skip(vendor: &str, test: &str) -> Option<PathBuf> {
    match redfish_mockup(vendor) {
        Ok(p) => Some(p),
        Err(why) => {
            if env_flag("BMCFLEET_REQUIRE_FIXTURES") {
                panic!("{test}: {why} (BMCFLEET_REQUIRE_FIXTURES is set)");
            }
            eprintln!("SKIP {test}: {why}");
            None
        }
    }
}
