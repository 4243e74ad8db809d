//! The `console.log` endpoint's request and reply (docs/CONSOLE.md): a
//! machine's stored console output, one bounded page at a time, for the
//! machine's tenant (and operators) without any JetStream access of theirs.

use serde::{Deserialize, Serialize};

/// Most bytes of output one page carries unless the request asks for fewer.
pub const CONSOLE_LOG_PAGE_BYTES: u32 = 64 * 1024;
/// Most bytes of output one page may carry (base64 and a full page of
/// headers still fit NATS's default 1 MiB message).
pub const CONSOLE_LOG_MAX_PAGE_BYTES: u32 = 256 * 1024;
/// Most messages (output chunks and markers) one page carries.
pub const CONSOLE_LOG_MAX_ENTRIES: usize = 1024;

/// Request body of `console.log`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleLogRequest {
    /// The registered machine's name.
    pub machine: String,
    /// Continue after this position (a page's `next`); wins over `since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// How far back to start (a duration: `10m`, `2h`); default: the
    /// oldest output the console stream still holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Most output bytes in this page (default [`CONSOLE_LOG_PAGE_BYTES`],
    /// at most [`CONSOLE_LOG_MAX_PAGE_BYTES`]); a page holds at least one
    /// message whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u32>,
}

/// One stored message of a machine's console: host output or a marker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleEntry {
    /// Its position (the console stream's sequence; pass a page's last as `after`).
    pub position: u64,
    /// RFC 3339 time it was stored.
    pub time: String,
    /// The SOL session that produced it (`Bmc-Console-Session`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Its number in the session (`Bmc-Console-Seq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// A marker (`Bmc-Console-Event`): `started`, `takeover`, `ended`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The marker's reason (`Bmc-Console-Reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Output bytes lost right before this one (`Bmc-Console-Lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    /// A failover's gap bound in bytes (`Bmc-Console-Gap-Bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_bytes: Option<u64>,
    /// The host's output, base64 (standard alphabet, padded); empty for a marker.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data: String,
}

/// Reply of `console.log`: one page of a machine's stored console.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleLogPage {
    pub machine: String,
    /// Oldest first.
    pub entries: Vec<ConsoleEntry>,
    /// Pass as `after` for the next page (the last entry's position, or
    /// the request's `after` when the page is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    /// Whether more was stored after this page when it was read.
    #[serde(default)]
    pub more: bool,
}
