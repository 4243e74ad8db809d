//! Parameters of the BMC user accounts capability.

use crate::secret::Secret;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserRole {
    Admin,
    Operator,
    User,
    Callback,
    NoAccess,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserOp {
    List,
    Create(UserSpec),
    /// Changes an existing user; a missing user is an error, never a create.
    Update(UserUpdate),
    Delete {
        name: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    pub name: String,
    pub password: Secret,
    pub role: UserRole,
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserUpdate {
    pub name: String,
    pub password: Option<Secret>,
    pub role: Option<UserRole>,
    pub enabled: Option<bool>,
}
