//! Parameters of the BIOS settings capability.

use serde::{Deserialize, Serialize};

/// BIOS attributes to set, by their registry names; values are strings,
/// numbers or booleans.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BiosSet {
    pub attributes: std::collections::BTreeMap<String, serde_json::Value>,
}
