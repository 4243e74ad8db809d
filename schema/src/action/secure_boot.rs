//! Parameters of the UEFI secure boot capability.

use serde::{Deserialize, Serialize};

/// Enable or disable UEFI secure boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecureBootSet {
    pub enabled: bool,
}

/// Redfish `SecureBoot.ResetKeys` reset types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum SecureBootResetKeys {
    ResetAllKeysToDefault,
    DeleteAllKeys,
    DeletePk,
}

impl SecureBootResetKeys {
    /// The Redfish `ResetKeysType`.
    pub fn redfish(self) -> &'static str {
        match self {
            SecureBootResetKeys::ResetAllKeysToDefault => "ResetAllKeysToDefault",
            SecureBootResetKeys::DeleteAllKeys => "DeleteAllKeys",
            SecureBootResetKeys::DeletePk => "DeletePK",
        }
    }
}
