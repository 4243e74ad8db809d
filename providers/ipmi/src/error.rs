//! Errors: IPMI completion codes and transport failures, mapped to the wire
//! [`ErrorCode`]s a producer sees.
//!
//! | completion code | meaning (IPMI 2.0 table 5-2)                 | [`ErrorCode`]        |
//! |-----------------|-----------------------------------------------|----------------------|
//! | `0xC0`          | node busy                                     | `bmc_error` (retryable) |
//! | `0xC1`          | invalid command                               | `unsupported`        |
//! | `0xC2`          | command invalid for given LUN                 | `unsupported`        |
//! | `0xC3`          | timeout while processing command              | `bmc_error` (retryable) |
//! | `0xC6`..`0xC9`, `0xCC` | request truncated / bad length / out of range / invalid field | `invalid_field` |
//! | `0xCB`          | requested sensor, data or record not present  | `target_not_found`   |
//! | `0xCD`, `0xD6`  | illegal for this record type / sub-function disabled | `unsupported` |
//! | `0xD4`          | insufficient privilege level                  | `permission_denied`  |
//! | `0xD1`, `0xD2`, `0xCE`, `0xC5`, `0xD0` | transient BMC state        | `bmc_error` (retryable) |
//! | `0x80`..`0xBE`  | command-specific (overridden per command)     | `bmc_error` unless the command maps it |
//! | anything else   | OEM / unspecified                             | `bmc_error`          |
//!
//! Every message names the command, its netfn/cmd and the spec meaning, so
//! a result reads `IPMI Chassis Control (netfn 0x00 cmd 0x02) failed: completion code 0xC1 (invalid command)`.

use bmcfleet_provider::ProviderError;
use bmcfleet_schema::ErrorCode;
use std::fmt;

/// What went wrong below the command layer (session setup or the exchange).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportErrorKind {
    /// The BMC rejected the user name or password (RAKP failure).
    AuthFailed,
    /// Nothing answered: connection refused, no route, or no reply to the
    /// session handshake.
    Unreachable,
    /// An established session stopped answering a request.
    Timeout,
    /// The caller's deadline passed.
    DeadlineExceeded,
    /// The BMC answered with something we could not understand.
    Protocol,
    /// The BMC refused something the session needs (cipher suite, IPMI 2.0,
    /// privilege level).
    Unsupported,
    /// The BMC refused the privilege level the session needs.
    PermissionDenied,
    /// The BMC is temporarily out of session slots or otherwise busy.
    Busy,
    /// This worker ran out of file descriptors (from the typed I/O error of
    /// the socket it could not make): nothing was sent.
    WorkerExhausted,
    /// The transport is closed or its worker thread is gone.
    Closed,
    /// A bug: the IPMI library panicked (caught), or an invariant broke.
    Internal,
}

/// A transport failure. Messages never contain secrets.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    pub kind: TransportErrorKind,
    pub message: String,
    /// The request certainly never left this machine (the session could
    /// not be established, or the deadline had passed before sending), so
    /// even a non-idempotent one may be resent.
    pub not_sent: bool,
}

impl TransportError {
    pub fn new(kind: TransportErrorKind, message: impl Into<String>) -> Self {
        TransportError { kind, message: message.into(), not_sent: false }
    }

    /// Mark the error as raised before the request was sent.
    pub fn not_sent(mut self) -> Self {
        self.not_sent = true;
        self
    }

    /// Whether the session that produced this error must be dropped
    /// (the worker should reconnect).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self.kind,
            TransportErrorKind::Unreachable
                | TransportErrorKind::Timeout
                | TransportErrorKind::Protocol
                | TransportErrorKind::Closed
                | TransportErrorKind::Internal
        )
    }
}

impl From<TransportError> for ProviderError {
    fn from(e: TransportError) -> Self {
        let code = match e.kind {
            TransportErrorKind::AuthFailed => ErrorCode::AuthFailed,
            TransportErrorKind::Unreachable => ErrorCode::Unreachable,
            TransportErrorKind::Timeout => ErrorCode::Timeout,
            TransportErrorKind::DeadlineExceeded => ErrorCode::DeadlineExceeded,
            TransportErrorKind::Protocol => ErrorCode::ProtocolError,
            TransportErrorKind::Unsupported => ErrorCode::Unsupported,
            TransportErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
            TransportErrorKind::Busy => ErrorCode::BmcError,
            TransportErrorKind::WorkerExhausted => ErrorCode::WorkerExhausted,
            TransportErrorKind::Closed | TransportErrorKind::Internal => ErrorCode::Internal,
        };
        let retryable = matches!(
            e.kind,
            TransportErrorKind::Unreachable
                | TransportErrorKind::Timeout
                | TransportErrorKind::Busy
                | TransportErrorKind::WorkerExhausted
        );
        ProviderError::new(code, e.message).with_retryable(retryable).with_not_sent(e.not_sent)
    }
}

/// The spec's meaning of a generic completion code (IPMI 2.0 table 5-2).
pub fn completion_code_meaning(cc: u8) -> &'static str {
    match cc {
        0x00 => "command completed normally",
        0xC0 => "node busy",
        0xC1 => "invalid command",
        0xC2 => "command invalid for given LUN",
        0xC3 => "timeout while processing command",
        0xC4 => "out of space",
        0xC5 => "reservation canceled or invalid reservation ID",
        0xC6 => "request data truncated",
        0xC7 => "request data length invalid",
        0xC8 => "request data field length limit exceeded",
        0xC9 => "parameter out of range",
        0xCA => "cannot return number of requested data bytes",
        0xCB => "requested sensor, data, or record not present",
        0xCC => "invalid data field in request",
        0xCD => "command illegal for specified sensor or record type",
        0xCE => "command response could not be provided",
        0xCF => "cannot execute duplicated request",
        0xD0 => "SDR repository in update mode",
        0xD1 => "device in firmware update mode",
        0xD2 => "BMC initialization or initialization agent in progress",
        0xD3 => "destination unavailable",
        0xD4 => "insufficient privilege level",
        0xD5 => "command or request parameter not supported in present state",
        0xD6 => "command sub-function has been disabled or is unavailable",
        0xFF => "unspecified error",
        0x01..=0x7E => "OEM completion code",
        0x80..=0xBE => "command-specific completion code",
        _ => "reserved completion code",
    }
}

/// The wire code and retryability of a generic completion code.
pub fn completion_code_class(cc: u8) -> (ErrorCode, bool) {
    match cc {
        0xC1 | 0xC2 | 0xCD | 0xD6 => (ErrorCode::Unsupported, false),
        0xC6 | 0xC7 | 0xC8 | 0xC9 | 0xCC => (ErrorCode::InvalidField, false),
        0xCB => (ErrorCode::TargetNotFound, false),
        0xD4 => (ErrorCode::PermissionDenied, false),
        0xC0 | 0xC3 | 0xC5 | 0xCE | 0xD0 | 0xD1 | 0xD2 => (ErrorCode::BmcError, true),
        _ => (ErrorCode::BmcError, false),
    }
}

/// A command-specific completion code (0x80..=0xBE) with its own meaning.
#[derive(Clone, Copy, Debug)]
pub struct SpecificCode {
    pub cc: u8,
    pub code: ErrorCode,
    pub meaning: &'static str,
}

/// Identifies an IPMI command in messages and spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandId {
    pub name: &'static str,
    pub netfn: u8,
    pub cmd: u8,
}

impl fmt::Display for CommandId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IPMI {} (netfn 0x{:02X} cmd 0x{:02X})", self.name, self.netfn, self.cmd)
    }
}

/// The provider error for a non-zero completion code of `command`.
pub fn completion_code_error(command: CommandId, cc: u8, specific: &[SpecificCode]) -> ProviderError {
    if let Some(s) = specific.iter().find(|s| s.cc == cc) {
        return ProviderError::new(s.code, format!("{command} failed: completion code 0x{cc:02X} ({})", s.meaning));
    }
    let (code, retryable) = completion_code_class(cc);
    ProviderError::new(code, format!("{command} failed: completion code 0x{cc:02X} ({})", completion_code_meaning(cc)))
        .with_retryable(retryable)
}

/// A socket this worker could not make: `WorkerExhausted` when it is out of
/// descriptors, else `Unreachable` (`what` says for which BMC and why).
pub(crate) fn socket_error(what: impl std::fmt::Display, e: &std::io::Error) -> TransportError {
    if bmcfleet_provider::is_descriptor_exhaustion(e) {
        return TransportError::new(
            TransportErrorKind::WorkerExhausted,
            format!(
                "{what}: the worker ran out of file descriptors (not a BMC fault; raise its open-files limit): {e}"
            ),
        )
        .not_sent();
    }
    TransportError::new(TransportErrorKind::Unreachable, format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CMD: CommandId = CommandId { name: "Chassis Control", netfn: 0x00, cmd: 0x02 };

    #[test]
    fn documented_mapping() {
        let cases = [
            (0xC1, ErrorCode::Unsupported),
            (0xD4, ErrorCode::PermissionDenied),
            (0xCB, ErrorCode::TargetNotFound),
            (0xCC, ErrorCode::InvalidField),
            (0xC7, ErrorCode::InvalidField),
            (0xC0, ErrorCode::BmcError),
            (0xFF, ErrorCode::BmcError),
            (0x85, ErrorCode::BmcError),
            (0x12, ErrorCode::BmcError),
        ];
        for (cc, code) in cases {
            assert_eq!(completion_code_error(CMD, cc, &[]).code, code, "cc 0x{cc:02X}");
        }
    }

    #[test]
    fn message_names_command_and_meaning() {
        let e = completion_code_error(CMD, 0xC1, &[]);
        assert_eq!(
            e.message,
            "IPMI Chassis Control (netfn 0x00 cmd 0x02) failed: completion code 0xC1 (invalid command)"
        );
        assert!(!e.retryable);
        assert!(completion_code_error(CMD, 0xC0, &[]).retryable);
    }

    #[test]
    fn specific_codes_override() {
        let specific = [SpecificCode { cc: 0x80, code: ErrorCode::Unsupported, meaning: "parameter not supported" }];
        let e = completion_code_error(CMD, 0x80, &specific);
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("parameter not supported"));
        assert_eq!(completion_code_error(CMD, 0x81, &specific).code, ErrorCode::BmcError);
    }

    #[test]
    fn transport_errors_map_to_wire_codes() {
        let e: ProviderError = TransportError::new(TransportErrorKind::AuthFailed, "x").into();
        assert_eq!(e.code, ErrorCode::AuthFailed);
        assert!(!e.retryable);
        let e: ProviderError = TransportError::new(TransportErrorKind::Unreachable, "x").into();
        assert_eq!(e.code, ErrorCode::Unreachable);
        assert!(e.retryable);
        let e: ProviderError = TransportError::new(TransportErrorKind::Timeout, "x").into();
        assert_eq!(e.code, ErrorCode::Timeout);
    }
}
