//! Parameters of the virtual media capability.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    #[default]
    Cd,
    Usb,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VirtualMediaOp {
    Insert {
        url: String,
        #[serde(default)]
        media: MediaKind,
    },
    Eject {
        #[serde(default)]
        media: MediaKind,
    },
}
