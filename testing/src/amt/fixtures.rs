//! Locating and loading the captured AMT fixtures.
//!
//! The folder is `$BMCFLEET_FIXTURES` when set (a relative path is taken
//! from the workspace root, then from the current directory), else
//! `<workspace root>/testdata` (the repository's own fixtures). The workspace root is the nearest
//! ancestor of this crate's manifest directory holding `Cargo.lock`, so the
//! lookup works from any crate's tests and any current directory.

use super::HarnessError;
use std::path::{Path, PathBuf};

pub const ENV: &str = "BMCFLEET_FIXTURES";

/// The workspace root (nearest ancestor of this crate with a `Cargo.lock`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|a| a.join("Cargo.lock").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.join("../.."))
}

/// The fixtures folder (the one that holds `amt/`), or why there is none.
pub fn fixtures_root() -> Result<PathBuf, HarnessError> {
    let (candidates, origin) = match std::env::var_os(ENV) {
        Some(v) if !v.is_empty() => {
            let p = PathBuf::from(&v);
            let c = if p.is_absolute() {
                vec![p.clone()]
            } else {
                let mut c = vec![workspace_root().join(&p)];
                if let Ok(cwd) = std::env::current_dir() {
                    c.push(cwd.join(&p));
                }
                c
            };
            (c, format!("{ENV}={}", p.display()))
        }
        _ => (vec![workspace_root().join("testdata")], format!("the default (workspace root/testdata; {ENV} unset)")),
    };
    for c in &candidates {
        if c.join("amt").is_dir() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    Err(HarnessError::FixturesMissing(format!(
        "no amt/ fixtures folder at {} (from {origin}); set {ENV} to a fixtures folder that holds amt/",
        candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(" or ")
    )))
}

/// Every captured file the server answers with, read once at start.
#[derive(Clone, Debug)]
pub struct Fixtures {
    pub root: PathBuf,
    pub general_get: String,
    pub boot_capabilities_get: String,
    pub boot_setting_data_get: String,
    pub power_assoc_enumerate: String,
    pub power_assoc_pull: String,
    pub request_power_state_change: String,
    pub change_boot_order: String,
    pub set_boot_config_role: String,
    pub boot_source_pull: String,
    pub fault_destination_unreachable: String,
    /// Raw HTTP 401 of AMT 15 (its HTML body is reused for every challenge).
    pub http_401_amt15: Vec<u8>,
}

impl Fixtures {
    pub fn load(root: &Path) -> Result<Fixtures, HarnessError> {
        let amt = root.join("amt");
        let text = |rel: &str| -> Result<String, HarnessError> {
            let p = amt.join(rel);
            std::fs::read_to_string(&p).map_err(|e| HarnessError::FixtureFile(p.display().to_string(), e.to_string()))
        };
        let bytes = |rel: &str| -> Result<Vec<u8>, HarnessError> {
            let p = amt.join(rel);
            std::fs::read(&p).map_err(|e| HarnessError::FixtureFile(p.display().to_string(), e.to_string()))
        };
        Ok(Fixtures {
            root: root.to_path_buf(),
            general_get: text("wsman/amt/general/get.xml")?,
            boot_capabilities_get: text("wsman/amt/boot/capabilities/get.xml")?,
            boot_setting_data_get: text("wsman/amt/boot/settingdata/get.xml")?,
            power_assoc_enumerate: text("wsman/cim/associatedpower/managementservice/enumerate.xml")?,
            power_assoc_pull: text("wsman/cim/associatedpower/managementservice/pull.xml")?,
            request_power_state_change: text("wsman/cim/power/managementservice/requestpowerstatechange.xml")?,
            change_boot_order: text("wsman/cim/boot/configsetting/changebootorder.xml")?,
            set_boot_config_role: text("wsman/cim/boot/service/setbootconfigrole.xml")?,
            boot_source_pull: text("wsman/cim/boot/sourcesetting/pull.xml")?,
            fault_destination_unreachable: text("wsman/faults/DestinationUnreachable.xml")?,
            http_401_amt15: bytes("http/amt15-401-digest-challenge.http")?,
        })
    }

    /// A file under `amt/` (e.g. `http/amt15-400-chunked-fault-AlreadyExists.http`).
    pub fn read(&self, rel: &str) -> Result<Vec<u8>, HarnessError> {
        let p = self.root.join("amt").join(rel);
        std::fs::read(&p).map_err(|e| HarnessError::FixtureFile(p.display().to_string(), e.to_string()))
    }
}
