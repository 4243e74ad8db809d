//! Error codes a producer can receive, in a submit reply or in an action
//! result. Each code is stable and documented here and in docs/ERRORS.md.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A typed, documented error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    // --- admission (gateway replies; nothing was stored) ---
    /// The message is not valid MessagePack/JSON for a batch, or has unknown fields.
    Malformed,
    /// The message is larger than the configured limit.
    TooLarge,
    /// The batch has no actions.
    EmptyBatch,
    /// More actions than the configured limit.
    TooManyActions,
    /// The BMC address is not an IP address or hostname.
    InvalidAddress,
    /// A field has an invalid value (named in the message).
    InvalidField,
    /// Inline (or pre-sealed) credentials were sent to a deployment that
    /// refuses them (`--inline-credentials off`, the default).
    InlineCredentialsDisabled,
    /// A raw passthrough request that the deployment's raw policy denies
    /// (the message names the rule). Also an action result when a worker's
    /// own policy refuses it.
    RawNotAllowed,
    /// No batch with that id is known.
    NotFound,
    /// The batch names a machine the registry does not hold (at admission,
    /// or when the worker runs it after the machine was removed).
    MachineNotFound,
    /// The batch's target is not allowed: ad hoc targets are off or the
    /// address is outside the ranges the operator allows (checked again by
    /// the worker after name resolution), a named credential without a
    /// machine, producer TLS options that would weaken verification, or the
    /// address of a registered machine (use the machine). Also an action
    /// result: a tenant's user action on the BMC account the worker logs in
    /// to a registered machine with, or a static address that is another
    /// registered machine's.
    TargetForbidden,
    /// The request cannot be honoured in the batch's current state
    /// (e.g. cancelling a finished batch).
    Conflict,
    /// The gateway could not store the batch (NATS unavailable); retry.
    Unavailable,
    /// The target BMC already has as many batches queued as the deployment
    /// allows (`--max-queued-per-bmc`, enforced by JetStream itself); nothing
    /// was stored. Retry once some of them have run.
    BmcQueueFull,

    // --- execution (action results) ---
    /// The named credential is not in the worker's credentials file or bucket.
    UnknownCredential,
    /// The worker cannot open the batch's sealed credentials (no sealing key
    /// with that public key, or a corrupt or tampered box), or cannot read
    /// the credentials bucket.
    CredentialUnavailable,
    /// No provider for the requested protocol on this worker.
    UnsupportedProtocol,
    /// The BMC's provider does not implement this action.
    Unsupported,
    /// The BMC rejected the credentials.
    AuthFailed,
    /// The BMC authenticated us but refused the operation (privilege).
    PermissionDenied,
    /// No answer from the BMC (connection refused, no route, no reply).
    Unreachable,
    /// A single BMC call took longer than its timeout.
    Timeout,
    /// The BMC accepted a power change but the machine did not report the
    /// state it leads to within the settle timeout (`--power-settle-timeout`
    /// or the action's `settle`); the message says what it reported. Not
    /// retried: the command was accepted.
    NotReached,
    /// The batch deadline passed before this action could finish or start.
    DeadlineExceeded,
    /// The BMC answered with an error (completion code, HTTP status, WS-Man fault).
    BmcError,
    /// The BMC's answer could not be understood.
    ProtocolError,
    /// The target of the action does not exist on the BMC (e.g. updating a missing user).
    TargetNotFound,
    /// The worker stopped while this non-idempotent action was running; it
    /// may or may not have taken effect and was not run again.
    Interrupted,
    /// The worker did not call the BMC: its circuit breaker is open after
    /// repeated timeouts or unreachable errors, so the action failed at once
    /// instead of waiting for its deadline. The message says when the next
    /// probe is allowed; retry after that.
    CircuitOpen,
    /// The batch was cancelled before this action ran.
    Cancelled,
    /// The action was not run because an earlier one failed (`on_error: stop`).
    Skipped,
    /// The worker ran out of a local resource (file descriptors) while
    /// calling the BMC: not a BMC fault; the operator must raise the limit
    /// (retryable).
    WorkerExhausted,
    /// A firmware update was refused without anything sent: the operator
    /// does not allow firmware updates for the batch's tenant
    /// (`--allow-firmware-update` of the gateway at admission, of the
    /// worker before sending).
    FirmwareUpdateDisabled,
    /// A push update's image (`firmware_update.image_file`) cannot be used:
    /// no such file in the worker's `--firmware-image-dir`, a symbolic link
    /// leading out of it, not a regular file, larger than
    /// `--firmware-image-max-bytes`, its SHA-256 differs from the action's
    /// `sha256` (checked before anything is sent), or the file changed
    /// while it was sent (the upload is cut short). Not retried.
    FirmwareImageInvalid,
    /// The BMC's firmware update task ended without completing (`Exception`,
    /// `Killed`, `Cancelled`, or `Completed` with a critical status); the
    /// message carries the task's state and messages. Not retried.
    UpdateFailed,
    /// A bug or an unexpected condition in bmcfleet itself.
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        // serde's names, without allocating
        match self {
            ErrorCode::Malformed => "malformed",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::EmptyBatch => "empty_batch",
            ErrorCode::TooManyActions => "too_many_actions",
            ErrorCode::InvalidAddress => "invalid_address",
            ErrorCode::InvalidField => "invalid_field",
            ErrorCode::InlineCredentialsDisabled => "inline_credentials_disabled",
            ErrorCode::RawNotAllowed => "raw_not_allowed",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MachineNotFound => "machine_not_found",
            ErrorCode::TargetForbidden => "target_forbidden",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::BmcQueueFull => "bmc_queue_full",
            ErrorCode::UnknownCredential => "unknown_credential",
            ErrorCode::CredentialUnavailable => "credential_unavailable",
            ErrorCode::UnsupportedProtocol => "unsupported_protocol",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::AuthFailed => "auth_failed",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Unreachable => "unreachable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::NotReached => "not_reached",
            ErrorCode::DeadlineExceeded => "deadline_exceeded",
            ErrorCode::BmcError => "bmc_error",
            ErrorCode::ProtocolError => "protocol_error",
            ErrorCode::TargetNotFound => "target_not_found",
            ErrorCode::Interrupted => "interrupted",
            ErrorCode::CircuitOpen => "circuit_open",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Skipped => "skipped",
            ErrorCode::WorkerExhausted => "worker_exhausted",
            ErrorCode::FirmwareUpdateDisabled => "firmware_update_disabled",
            ErrorCode::FirmwareImageInvalid => "firmware_image_invalid",
            ErrorCode::UpdateFailed => "update_failed",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP-like status used in NATS micro error headers.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::Malformed
            | ErrorCode::EmptyBatch
            | ErrorCode::TooManyActions
            | ErrorCode::InvalidAddress
            | ErrorCode::InvalidField
            | ErrorCode::FirmwareImageInvalid => 400,
            ErrorCode::InlineCredentialsDisabled
            | ErrorCode::PermissionDenied
            | ErrorCode::RawNotAllowed
            | ErrorCode::TargetForbidden
            | ErrorCode::FirmwareUpdateDisabled => 403,
            ErrorCode::AuthFailed => 401,
            ErrorCode::NotFound
            | ErrorCode::TargetNotFound
            | ErrorCode::UnknownCredential
            | ErrorCode::MachineNotFound => 404,
            ErrorCode::Conflict => 409,
            ErrorCode::BmcQueueFull => 429,
            ErrorCode::TooLarge => 413,
            ErrorCode::Unsupported | ErrorCode::UnsupportedProtocol => 501,
            ErrorCode::Unavailable | ErrorCode::Unreachable | ErrorCode::CircuitOpen | ErrorCode::WorkerExhausted => {
                503
            }
            ErrorCode::Timeout | ErrorCode::DeadlineExceeded | ErrorCode::NotReached => 504,
            _ => 500,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as it travels: a code to match on and a message for humans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody { code, message: message.into() }
    }
}

impl fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// A library error: a kind to match on, what failed (for people), and the
/// error that caused it, kept whole as [`std::error::Error::source`]
/// (after nats.rs's `Error<Kind>`). Each module family names its own small
/// `Copy` kind enum and an alias (`raw_policy::Error`, `fru::Error`), so a
/// caller writes `match err.kind()` instead of reading the text.
///
/// The text is the context, then `: ` and the source's text when there is
/// a source (the context alone when there is none, the source's text alone
/// when the context is empty): the same words the `String` errors these
/// replace carried, so messages producers and operators see are unchanged.
#[derive(Debug, thiserror::Error)]
#[error("{}", shown(.context, .source.as_deref()))]
pub struct Error<K> {
    kind: K,
    context: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

fn shown(context: &str, source: Option<&(dyn std::error::Error + Send + Sync + 'static)>) -> String {
    match source {
        None => context.to_owned(),
        Some(s) if context.is_empty() => s.to_string(),
        Some(s) => format!("{context}: {s}"),
    }
}

impl<K: Copy> Error<K> {
    /// An error without a source.
    pub fn new(kind: K, context: impl Into<String>) -> Self {
        Error { kind, context: context.into(), source: None }
    }

    /// An error caused by `source`; `context` says what was being done
    /// (may be empty when the source says it all).
    pub fn with_source(
        kind: K,
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error { kind, context: context.into(), source: Some(source.into()) }
    }

    pub fn kind(&self) -> K {
        self.kind
    }

    /// What failed, without the source's text.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// The same error under another kind (a caller's view of a callee's
    /// error), keeping context and source.
    pub fn map_kind<L: Copy>(self, kind: impl FnOnce(K) -> L) -> Error<L> {
        Error { kind: kind(self.kind), context: self.context, source: self.source }
    }

    /// The same error with `prefix` (and `: `) before its context.
    pub fn context_before(mut self, prefix: impl std::fmt::Display) -> Self {
        self.context = if self.context.is_empty() { prefix.to_string() } else { format!("{prefix}: {}", self.context) };
        self
    }
}

/// Kinds of error a producer can be told about: each maps to its
/// documented [`ErrorCode`].
pub trait Coded: Copy {
    fn code(self) -> ErrorCode;
}

impl<K: Coded> Error<K> {
    /// The wire code of this error.
    pub fn code(&self) -> ErrorCode {
        self.kind.code()
    }
}

impl<K: Coded> From<Error<K>> for ErrorBody {
    fn from(e: Error<K>) -> Self {
        ErrorBody::new(e.code(), e.to_string())
    }
}

/// For the few callers that still carry errors as text (clap value
/// parsers, `schema::action`'s validators).
impl<K> From<Error<K>> for String {
    fn from(e: Error<K>) -> Self {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn circuit_open_is_a_documented_unavailable() {
        let c = ErrorCode::CircuitOpen;
        assert_eq!(c.as_str(), "circuit_open");
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"circuit_open\"");
        assert_eq!(c.status(), 503);
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Kind {
        Read,
    }

    #[test]
    fn an_error_shows_its_context_then_its_source_and_keeps_the_source() {
        use std::error::Error as _;
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Error::with_source(Kind::Read, "cannot read policy.txt", io());
        assert_eq!(e.kind(), Kind::Read);
        assert_eq!(e.to_string(), "cannot read policy.txt: no such file");
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("no such file"));
        assert!(e.source().unwrap().downcast_ref::<std::io::Error>().is_some(), "the source keeps its type");
        assert_eq!(Error::with_source(Kind::Read, "", io()).to_string(), "no such file");
        let plain = Error::new(Kind::Read, "empty");
        assert!(plain.source().is_none());
        assert_eq!(plain.context_before("rule `x`").to_string(), "rule `x`: empty");
        assert_eq!(String::from(Error::new(Kind::Read, "as text")), "as text");
    }
}
