//! From HTTP statuses, transport failures and Redfish error bodies to the one
//! provider error type. Every mapping decision lives here so that the
//! ack/nak/term decision downstream comes from a single `match`.
//!
//! | HTTP / failure                    | code                | retryable |
//! |-----------------------------------|---------------------|-----------|
//! | 401                               | `auth_failed`       | no        |
//! | 403                               | `permission_denied` | no        |
//! | 404                               | `target_not_found`  | no        |
//! | 405, 501                          | `unsupported`       | no        |
//! | 400, 409, 412, 428, other 4xx     | `bmc_error`         | no        |
//! | 429, 5xx (but 501)                | `bmc_error`         | yes       |
//! | 3xx (redirects are not followed)  | `protocol_error`    | no        |
//! | body not JSON / too large         | `protocol_error`    | no        |
//! | TLS handshake / certificate       | `protocol_error` ("TLS ...") | no |
//! | connect refused (nothing sent)    | `unreachable`, `not_sent` | yes |
//! | connection reset after sending    | `unreachable`       | yes       |
//! | no answer in time                 | `timeout`           | yes       |
//!
//! Messages always carry the BMC's own words: `error.message` and every
//! `@Message.ExtendedInfo[].Message` of the body.

use bmcfleet_provider::{clip_message as clip, ProviderError};
use bmcfleet_schema::ErrorCode;
use reqwest::StatusCode;
use serde_json::Value;

pub(crate) fn err(code: ErrorCode, msg: impl Into<String>) -> ProviderError {
    ProviderError::new(code, clip(msg.into()))
}

pub(crate) fn unsupported(msg: impl Into<String>) -> ProviderError {
    ProviderError::unsupported_op(clip(msg.into()))
}

pub(crate) fn protocol(msg: impl Into<String>) -> ProviderError {
    err(ErrorCode::ProtocolError, msg)
}

pub(crate) fn invalid(msg: impl Into<String>) -> ProviderError {
    err(ErrorCode::InvalidField, msg)
}

/// The BMC's own explanation in a Redfish error (or success) body: the
/// `error.message` and every `@Message.ExtendedInfo` message, deduplicated.
/// Falls back to a printable snippet of a non-JSON body.
pub fn bmc_messages(body: &[u8]) -> Option<String> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return None;
    }
    let Ok(v) = crate::json::parse(body) else {
        let text: String = String::from_utf8_lossy(&body[..body.len().min(300)])
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let text = text.trim().to_owned();
        return (!text.is_empty()).then_some(text);
    };
    fn push(out: &mut Vec<String>, m: &str) {
        let m = m.trim();
        if !m.is_empty() && !out.iter().any(|o| o == m) {
            out.push(m.to_owned());
        }
    }
    // One extended-info entry: its Message, or (some BMCs send none) its
    // MessageId with the MessageArgs; either way the RelatedProperties it
    // names, which say which field of the request was refused.
    fn collect_info(out: &mut Vec<String>, info: &Value) {
        for item in info.as_array().into_iter().flatten() {
            let strings = |key: &str| -> Vec<String> {
                item.get(key)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|a| match a {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .take(8)
                    .collect()
            };
            let mut text =
                match (item.get("Message").and_then(Value::as_str), item.get("MessageId").and_then(Value::as_str)) {
                    (Some(m), _) if !m.trim().is_empty() => m.trim().to_owned(),
                    (_, Some(id)) => {
                        let args = strings("MessageArgs");
                        if args.is_empty() {
                            id.to_owned()
                        } else {
                            format!("{id} ({})", args.join(", "))
                        }
                    }
                    _ => continue,
                };
            let related = strings("RelatedProperties");
            if !related.is_empty() {
                text = format!("{text} [{}]", related.join(", "));
            }
            push(out, &text);
        }
    }
    let mut out: Vec<String> = Vec::new();
    if let Some(e) = v.get("error") {
        if let Some(m) = e.get("message").and_then(Value::as_str) {
            push(&mut out, m);
        }
        if let Some(info) = e.get("@Message.ExtendedInfo") {
            collect_info(&mut out, info);
        }
        if out.is_empty() {
            if let Some(c) = e.get("code").and_then(Value::as_str) {
                push(&mut out, c);
            }
        }
    }
    if let Some(info) = v.get("@Message.ExtendedInfo") {
        collect_info(&mut out, info);
    }
    // A Task body carries its outcome in Messages.
    for item in v.get("Messages").and_then(Value::as_array).into_iter().flatten() {
        if let Some(m) = item.get("Message").and_then(Value::as_str) {
            push(&mut out, m);
        }
    }
    (!out.is_empty()).then(|| out.join("; "))
}

/// Map a non-success HTTP status to a typed error carrying the BMC's words.
pub(crate) fn status_error(method: &str, path: &str, status: StatusCode, body: &[u8]) -> ProviderError {
    let reason = status.canonical_reason().unwrap_or("");
    let detail = bmc_messages(body).map(|m| format!(": {m}")).unwrap_or_default();
    let head = format!("{method} {path}: HTTP {} {reason}", status.as_u16());
    let n = status.as_u16();
    let (code, retryable, hint) = match n {
        401 => (ErrorCode::AuthFailed, false, " (the BMC rejected the credentials)"),
        403 => (ErrorCode::PermissionDenied, false, " (the account lacks the privilege)"),
        404 => (ErrorCode::TargetNotFound, false, ""),
        405 | 501 => (ErrorCode::Unsupported, false, " (the BMC does not implement this)"),
        409 => (ErrorCode::BmcError, false, " (conflict with the resource's current state)"),
        412 => (ErrorCode::BmcError, false, " (precondition failed: the resource changed; ETag mismatch)"),
        428 => (ErrorCode::BmcError, false, " (the BMC requires If-Match)"),
        429 => (ErrorCode::BmcError, true, " (the BMC is throttling requests)"),
        300..=399 => (ErrorCode::ProtocolError, false, " (bmcfleet does not follow redirects)"),
        500..=599 => (ErrorCode::BmcError, true, ""),
        _ => (ErrorCode::BmcError, false, ""),
    };
    err(code, format!("{head}{hint}{detail}")).with_retryable(retryable).with_status(n)
}

/// Map a reqwest transport failure (no HTTP status) to a typed error.
pub(crate) fn transport_error(
    bmc: &str,
    method: &str,
    path: &str,
    e: &reqwest::Error,
) -> (ProviderError, &'static str) {
    if let Some(io) = bmcfleet_provider::descriptor_exhaustion(e) {
        return (ProviderError::worker_exhausted(format_args!("connecting to {bmc}"), io), "worker_exhausted");
    }
    let chain = error_chain(e);
    if let Some(tls) = find_tls_error(e) {
        let hint = if matches!(tls, rustls::Error::InvalidCertificate(_)) {
            " (the BMC's certificate is not trusted: give its CA in bmc.tls.ca_pem, or opt in to bmc.tls.insecure)"
        } else {
            ""
        };
        return (
            err(ErrorCode::ProtocolError, format!("TLS handshake with {bmc} failed: {tls}{hint}"))
                .with_retryable(false),
            "tls_error",
        );
    }
    let lower = chain.to_ascii_lowercase();
    if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
        return (
            err(ErrorCode::ProtocolError, format!("TLS handshake with {bmc} failed: {chain}")).with_retryable(false),
            "tls_error",
        );
    }
    if e.is_timeout() {
        return (
            err(ErrorCode::Timeout, format!("{method} {path}: no answer from {bmc} in time ({chain})")),
            "timeout",
        );
    }
    if e.is_connect() {
        // No connection, so no request: safe to resend even a non-idempotent one.
        return (err(ErrorCode::Unreachable, format!("cannot connect to {bmc}: {chain}")).not_sent(), "unreachable");
    }
    if e.is_body() || e.is_decode() {
        return (
            err(ErrorCode::ProtocolError, format!("{method} {path}: reading the answer of {bmc} failed: {chain}")),
            "protocol_error",
        );
    }
    (err(ErrorCode::Unreachable, format!("{method} {path}: connection to {bmc} failed: {chain}")), "unreachable")
}

/// Every error in the chain, including the ones `io::Error` wraps (its
/// `source()` skips the wrapped error itself, and hyper nests io errors).
fn walk<'a>(e: &'a (dyn std::error::Error + 'static)) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut out = Vec::new();
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if out.len() > 32 {
            break;
        }
        out.push(err);
        cur = match err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    out
}

/// `a: b: c` for an error and its sources (reqwest nests hyper nests io).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for err in walk(e) {
        let s = err.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ")
}

fn find_tls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    walk(e).into_iter().find_map(|err| err.downcast_ref::<rustls::Error>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_error_and_extended_info() {
        let body = br#"{"error":{"code":"Base.1.0.GeneralError","message":"A general error has occurred.",
            "@Message.ExtendedInfo":[{"MessageId":"Base.1.0.PropertyValueNotInList","Message":"The value Red is not allowed"},
            {"MessageId":"Base.1.0.X","Message":"A general error has occurred."}]}}"#;
        assert_eq!(bmc_messages(body).unwrap(), "A general error has occurred.; The value Red is not allowed");
    }

    #[test]
    fn extended_info_without_text_keeps_its_arguments_and_properties() {
        // The shape iLO 5 answers a refused PATCH with: an id, its arguments, the property.
        let body = br##"{"error":{"code":"iLO.0.10.ExtendedInfo","message":"See @Message.ExtendedInfo for more information.",
            "@Message.ExtendedInfo":[{"MessageId":"Base.1.4.PropertyValueNotInList","MessageArgs":["Usb","BootSourceOverrideTarget"],
            "RelatedProperties":["#/Boot/BootSourceOverrideTarget"]},{"MessageId":"iLO.2.14.UnsupportedOperation"}]}}"##;
        assert_eq!(
            bmc_messages(body).unwrap(),
            "See @Message.ExtendedInfo for more information.; \
             Base.1.4.PropertyValueNotInList (Usb, BootSourceOverrideTarget) [#/Boot/BootSourceOverrideTarget]; \
             iLO.2.14.UnsupportedOperation"
        );
        let with_text = br##"{"@Message.ExtendedInfo":[{"MessageId":"Base.1.4.PropertyNotWritable","Message":"The property Enabled is read-only.",
            "MessageArgs":["Enabled"],"RelatedProperties":["#/Enabled"]}]}"##;
        assert_eq!(bmc_messages(with_text).unwrap(), "The property Enabled is read-only. [#/Enabled]");
    }

    #[test]
    fn non_json_body_is_quoted() {
        assert_eq!(bmc_messages(b"<html>oops</html>\n").unwrap(), "<html>oops</html>");
        assert_eq!(bmc_messages(b"  \n"), None);
    }

    #[test]
    fn status_mapping() {
        let e = status_error("GET", "/redfish/v1/x", StatusCode::UNAUTHORIZED, b"");
        assert_eq!(e.code, ErrorCode::AuthFailed);
        assert!(!e.retryable);
        let e = status_error("POST", "/x", StatusCode::SERVICE_UNAVAILABLE, br#"{"error":{"message":"busy"}}"#);
        assert_eq!(e.code, ErrorCode::BmcError);
        assert!(e.retryable);
        assert!(e.message.contains("busy"), "{}", e.message);
        let e = status_error("POST", "/x", StatusCode::NOT_IMPLEMENTED, b"");
        assert_eq!(e.code, ErrorCode::Unsupported);
        let e = status_error("PATCH", "/x", StatusCode::PRECONDITION_FAILED, b"");
        assert_eq!(e.code, ErrorCode::BmcError);
        assert!(e.message.contains("412"));
        let e = status_error("GET", "/x", StatusCode::TEMPORARY_REDIRECT, b"");
        assert_eq!(e.code, ErrorCode::ProtocolError);
    }

    #[test]
    fn clip_respects_char_boundaries() {
        let long = "é".repeat(2000);
        let e = err(ErrorCode::BmcError, long);
        assert!(e.message.len() <= bmcfleet_provider::MAX_ERROR_MESSAGE + 3);
    }
}
