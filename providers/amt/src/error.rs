//! The provider's error type and its mapping to [`ProviderError`].
//!
//! Every failure is one [`AmtError`] variant; [`AmtError::code`] and
//! [`AmtError::retryable`] decide the wire code and whether the worker may
//! resend, in one place.

use crate::wsman::{Fault, ReturnValue};
use bmcfleet_provider::ProviderError;
use bmcfleet_schema::ErrorCode;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AmtError {
    /// A SOAP fault, with AMT's own reason text.
    #[error("{0}")]
    Fault(Box<Fault>),
    /// A method answered with a non-zero `ReturnValue`.
    #[error("{0}")]
    ReturnValue(ReturnValue),
    /// The BMC refused our credentials (a 401 after a fresh challenge).
    #[error("HTTP Digest authentication failed: {0}")]
    AuthFailed(String),
    /// A non-2xx answer that is not a SOAP fault.
    #[error("the BMC answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// No connection could be made (refused, no route): nothing was sent.
    #[error("cannot connect to the BMC: {0}")]
    ConnectFailed(String),
    /// The connection failed after it was made (reset, closed mid-answer):
    /// the BMC may have received the request.
    #[error("cannot reach the BMC: {0}")]
    Unreachable(String),
    /// The TLS handshake failed (untrusted certificate, name mismatch, no common cipher).
    #[error("TLS with the BMC failed: {0}")]
    Tls(String),
    /// A call did not complete before the action deadline.
    #[error("{0}")]
    Timeout(String),
    /// The deadline had passed before the call could start.
    #[error("the action deadline passed before the BMC call started")]
    DeadlineExceeded,
    /// The answer could not be understood (malformed XML, missing elements).
    #[error("unexpected answer from the BMC: {0}")]
    Protocol(String),
    /// The target's options cannot be honoured (e.g. bad CA PEM, TLS port without trust settings).
    #[error("{0}")]
    Config(String),
    /// The worker's send gate refused the request: nothing was sent (see
    /// `bmcfleet_provider::SendGate`).
    #[error("{0}")]
    Fenced(ProviderError),
    /// This worker ran out of file descriptors before the request left
    /// (from the typed I/O error, never from the BMC's text).
    #[error("the worker ran out of file descriptors (not a BMC fault; raise its open-files limit): {0}")]
    WorkerExhausted(String),
    /// AMT does not offer this operation.
    #[error("{0}")]
    Unsupported(String),
    /// The operation is not possible in the host's current state.
    #[error("{0}")]
    InvalidState(String),
}

impl AmtError {
    pub fn code(&self) -> ErrorCode {
        match self {
            AmtError::Fault(f) => f.classify().0,
            AmtError::ReturnValue(_) => ErrorCode::BmcError,
            AmtError::AuthFailed(_) => ErrorCode::AuthFailed,
            AmtError::Http { status: 403, .. } => ErrorCode::PermissionDenied,
            AmtError::Http { .. } => ErrorCode::BmcError,
            AmtError::ConnectFailed(_) | AmtError::Unreachable(_) => ErrorCode::Unreachable,
            AmtError::WorkerExhausted(_) => ErrorCode::WorkerExhausted,
            // No dedicated wire code for TLS failures (yet): the BMC's
            // answer could not be accepted.
            AmtError::Tls(_) => ErrorCode::ProtocolError,
            AmtError::Timeout(_) => ErrorCode::Timeout,
            AmtError::DeadlineExceeded => ErrorCode::DeadlineExceeded,
            AmtError::Protocol(_) => ErrorCode::ProtocolError,
            AmtError::Config(_) => ErrorCode::InvalidField,
            AmtError::Unsupported(_) => ErrorCode::Unsupported,
            AmtError::InvalidState(_) => ErrorCode::BmcError,
            AmtError::Fenced(e) => e.code,
        }
    }

    /// Whether sending the same request again may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            AmtError::Fault(f) => f.classify().1,
            AmtError::ReturnValue(r) => r.retryable(),
            AmtError::Http { status, .. } => matches!(status, 502..=504),
            AmtError::ConnectFailed(_)
            | AmtError::Unreachable(_)
            | AmtError::Timeout(_)
            | AmtError::WorkerExhausted(_) => true,
            AmtError::AuthFailed(_)
            | AmtError::Tls(_)
            | AmtError::DeadlineExceeded
            | AmtError::Protocol(_)
            | AmtError::Config(_)
            | AmtError::Unsupported(_)
            | AmtError::InvalidState(_)
            | AmtError::Fenced(_) => false,
        }
    }

    /// Whether the session should be dropped and a new one opened.
    pub fn breaks_session(&self) -> bool {
        matches!(
            self,
            AmtError::ConnectFailed(_)
                | AmtError::Unreachable(_)
                | AmtError::Tls(_)
                | AmtError::Timeout(_)
                | AmtError::AuthFailed(_)
        )
    }

    /// Whether the request certainly never reached the BMC (so even a
    /// non-idempotent one may be resent).
    pub fn not_sent(&self) -> bool {
        matches!(self, AmtError::ConnectFailed(_) | AmtError::WorkerExhausted(_) | AmtError::Fenced(_))
    }
}

/// AMT's text in an error (a fault's reason and detail) comes from the BMC
/// and can be as long as its whole answer: it is clipped like every provider's.
pub(crate) use bmcfleet_provider::clip_message as clip;

impl From<AmtError> for ProviderError {
    fn from(e: AmtError) -> Self {
        ProviderError::new(e.code(), clip(e.to_string())).with_retryable(e.retryable()).with_not_sent(e.not_sent())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_retry() {
        let e: ProviderError = AmtError::AuthFailed("401".into()).into();
        assert_eq!((e.code, e.retryable), (ErrorCode::AuthFailed, false));
        let e: ProviderError = AmtError::Timeout("slow".into()).into();
        assert_eq!((e.code, e.retryable), (ErrorCode::Timeout, true));
        let e: ProviderError = AmtError::ReturnValue(ReturnValue { method: "X.Y".into(), value: 2 }).into();
        assert_eq!(e.code, ErrorCode::BmcError);
        assert!(e.message.contains("X.Y returned ReturnValue 2"), "{}", e.message);
        let e: ProviderError = AmtError::Http { status: 403, message: "no".into() }.into();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        // Only a connection that was never made proves the request was not sent.
        let e: ProviderError = AmtError::ConnectFailed("refused".into()).into();
        assert_eq!((e.code, e.retryable, e.not_sent), (ErrorCode::Unreachable, true, true));
        let e: ProviderError = AmtError::Unreachable("reset".into()).into();
        assert_eq!((e.code, e.retryable, e.not_sent), (ErrorCode::Unreachable, true, false));
        let e: ProviderError = AmtError::Timeout("slow".into()).into();
        assert!(!e.not_sent);
    }
}
