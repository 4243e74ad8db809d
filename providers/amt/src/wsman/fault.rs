//! SOAP faults and method return values.
//!
//! # Fault mapping
//!
//! | fault subcode                                   | bmcfleet code      | retryable |
//! |-------------------------------------------------|--------------------|-----------|
//! | `wsa:DestinationUnreachable`                    | `unreachable`      | no (AMT sends it for resources this firmware lacks) |
//! | `wsa:EndpointUnavailable`                       | `unreachable`      | yes       |
//! | `wsa:ActionNotSupported`, `wsman:UnsupportedFeature` | `unsupported` | no        |
//! | `wsman:AccessDenied`                            | `permission_denied`| no        |
//! | `wsman:TimedOut`, `wsen:TimedOut`               | `timeout`          | yes       |
//! | `wsman:Concurrency`, `wsman:QuotaLimit`         | `bmc_error`        | yes       |
//! | `wsa:MessageInformationHeaderRequired`, `wsa:InvalidMessageInformationHeader` | `protocol_error` | no |
//! | anything else (`wsman:AlreadyExists`, `wsman:InvalidSelectors`, `wsman:InvalidParameter`, `wxf:InvalidRepresentation`, `wsman:SchemaValidationError`, `wsen:InvalidEnumerationContext`, `wsman:InternalError`…) | `bmc_error` | no |
//!
//! The message carries AMT's own `s:Reason` text and `wsman:FaultDetail`.
//!
//! # Return values
//!
//! A method whose `ReturnValue` is not 0 fails with `bmc_error` (4096, "job
//! started", counts as success). Values are named from the CIM method
//! ValueMap and, where AMT reuses them as firmware status codes
//! (`PT_STATUS_*`), from the Intel AMT SDK.

use super::ns;
use crate::xml::Element;
use bmcfleet_schema::ErrorCode;
use std::fmt;

/// A `s:Fault` read from a response body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// `s:Code/s:Value`, resolved (`(namespace, local)`), or the raw text.
    pub code: QValue,
    /// `s:Code/s:Subcode/s:Value`, the WS-Man fault name.
    pub subcode: Option<QValue>,
    /// `s:Reason/s:Text`: AMT's own words.
    pub reason: String,
    /// `s:Detail` text (`wsman:FaultDetail` URI or free text), if any.
    pub detail: Option<String>,
}

/// A QName value from fault text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QValue {
    pub ns: Option<String>,
    pub local: String,
}

impl QValue {
    fn from_element(e: &Element) -> QValue {
        match &e.text_qname {
            Some((ns, local)) => QValue { ns: Some(ns.to_string()), local: local.clone() },
            None => {
                let t = e.text_trim();
                QValue { ns: None, local: t.rsplit(':').next().unwrap_or(t).to_owned() }
            }
        }
    }

    fn is(&self, ns: &str, local: &str) -> bool {
        self.local == local && self.ns.as_deref().is_none_or(|n| n == ns)
    }
}

impl fmt::Display for QValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = match self.ns.as_deref() {
            Some(ns::SOAP) => "s:",
            Some(ns::WSA) => "wsa:",
            Some(ns::WSMAN) => "wsman:",
            Some(ns::WSEN) => "wsen:",
            Some(ns::WXF) => "wxf:",
            _ => "",
        };
        write!(f, "{prefix}{}", self.local)
    }
}

impl Fault {
    pub fn from_element(fault: &Element) -> Fault {
        let code_el = fault.child(ns::SOAP, "Code");
        let code = code_el
            .and_then(|c| c.child(ns::SOAP, "Value"))
            .map(QValue::from_element)
            .unwrap_or(QValue { ns: None, local: "Unknown".into() });
        let subcode = code_el
            .and_then(|c| c.child(ns::SOAP, "Subcode"))
            .and_then(|s| s.child(ns::SOAP, "Value"))
            .map(QValue::from_element);
        let reason = fault
            .child(ns::SOAP, "Reason")
            .map(|r| {
                let texts: Vec<&str> =
                    r.children_local("Text").map(Element::text_trim).filter(|t| !t.is_empty()).collect();
                crate::error::clip(texts.join(" / "))
            })
            .unwrap_or_default();
        let detail = fault.child(ns::SOAP, "Detail").and_then(|d| {
            let mut parts = Vec::new();
            collect_text(d, &mut parts);
            (!parts.is_empty()).then(|| crate::error::clip(parts.join(" ")))
        });
        Fault { code, subcode, reason, detail }
    }

    /// The most specific fault name (subcode, else code).
    pub fn name(&self) -> &QValue {
        self.subcode.as_ref().unwrap_or(&self.code)
    }

    /// bmcfleet code and whether resending may succeed.
    pub fn classify(&self) -> (ErrorCode, bool) {
        let n = self.name();
        if n.is(ns::WSA, "DestinationUnreachable") {
            (ErrorCode::Unreachable, false)
        } else if n.is(ns::WSA, "EndpointUnavailable") {
            (ErrorCode::Unreachable, true)
        } else if n.is(ns::WSA, "ActionNotSupported") || n.is(ns::WSMAN, "UnsupportedFeature") {
            (ErrorCode::Unsupported, false)
        } else if n.is(ns::WSMAN, "AccessDenied") {
            (ErrorCode::PermissionDenied, false)
        } else if n.is(ns::WSMAN, "TimedOut") || n.is(ns::WSEN, "TimedOut") {
            (ErrorCode::Timeout, true)
        } else if n.is(ns::WSMAN, "Concurrency") || n.is(ns::WSMAN, "QuotaLimit") {
            (ErrorCode::BmcError, true)
        } else if n.is(ns::WSA, "MessageInformationHeaderRequired") || n.is(ns::WSA, "InvalidMessageInformationHeader")
        {
            (ErrorCode::ProtocolError, false)
        } else {
            (ErrorCode::BmcError, false)
        }
    }
}

fn collect_text(e: &Element, out: &mut Vec<String>) {
    let t = e.text_trim();
    if !t.is_empty() {
        out.push(t.to_owned());
    }
    for c in &e.children {
        collect_text(c, out);
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WS-Man fault {}", self.name())?;
        if self.subcode.is_some() {
            write!(f, " ({})", self.code)?;
        }
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        if let Some(d) = &self.detail {
            write!(f, " [detail: {d}]")?;
        }
        Ok(())
    }
}

/// A non-zero `ReturnValue` of an extrinsic method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReturnValue {
    /// `Class.Method`.
    pub method: String,
    pub value: u32,
}

impl ReturnValue {
    /// Values meaning the method was accepted.
    pub fn is_success(value: u32) -> bool {
        value == 0 || value == 4096
    }

    /// What the value means (CIM ValueMap, and AMT's `PT_STATUS_*` reuse).
    pub fn meaning(value: u32) -> &'static str {
        match value {
            0 => "Completed with No Error",
            1 => "Not Supported (AMT: PT_STATUS_INTERNAL_ERROR)",
            2 => {
                "Unknown or Unspecified Error (AMT: PT_STATUS_NOT_READY, the request is not valid in the current state)"
            }
            3 => "Cannot complete within Timeout Period",
            4 => "Failed",
            5 => "Invalid Parameter",
            6 => "In Use",
            16 => "AMT: PT_STATUS_NOT_PERMITTED",
            36 => "AMT: PT_STATUS_INVALID_PARAMETER",
            4096 => "Method Parameters Checked - Job Started",
            4097 => "Invalid State Transition",
            4098 => "Use of Timeout Parameter Not Supported",
            4099 => "Busy",
            _ => "see the Intel AMT SDK return status codes",
        }
    }

    pub fn retryable(&self) -> bool {
        matches!(self.value, 6 | 4099)
    }
}

impl fmt::Display for ReturnValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} returned ReturnValue {} ({})", self.method, self.value, Self::meaning(self.value))
    }
}
