//! Wire messages between the `sim` provider and `bmc-sim`.

use bmcfleet_schema::{Action, ActionData, BatchId, ErrorBody, Secret};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    pub bmc: String,
    pub host: String,
    pub username: String,
    /// Sent over loopback to a simulator; `Debug` redacts it.
    pub password: Secret,
    pub call: Option<Call>,
    pub action: Option<Action>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub batch: BatchId,
    pub index: u32,
    pub delivery: u64,
    pub worker: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Ok(Option<ActionData>),
    Err(ErrorBody),
}
