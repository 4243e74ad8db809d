//! WS-Management (DMTF DSP0226) SOAP 1.2 messages as Intel AMT speaks them.
//!
//! - [`ns`]: namespace URIs, resource URIs and action URIs.
//! - [`request`]: envelope building ([`Request`]) with the `quick-xml` writer.
//! - [`response`]: envelope reading ([`Envelope`]), pull items, `ReturnValue`.
//! - [`fault`]: SOAP faults and method return values, and what they mean.
//! - `client`: the WS-Man client (spans, faults, Enumerate/Pull, Invoke).

pub(crate) mod client;
pub mod fault;
pub mod request;
pub mod response;

pub use fault::{Fault, ReturnValue};
pub use request::{Body, Epr, Param, Request};
pub use response::Envelope;

/// Namespace, resource and action URIs.
pub mod ns {
    pub const SOAP: &str = "http://www.w3.org/2003/05/soap-envelope";
    pub const WSA: &str = "http://schemas.xmlsoap.org/ws/2004/08/addressing";
    pub const WSMAN: &str = "http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd";
    pub const WSEN: &str = "http://schemas.xmlsoap.org/ws/2004/09/enumeration";
    pub const WXF: &str = "http://schemas.xmlsoap.org/ws/2004/09/transfer";
    pub const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

    /// `wsa:Address` of every reply-to and endpoint reference we send.
    pub const ANONYMOUS: &str = "http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous";

    pub const ACTION_GET: &str = "http://schemas.xmlsoap.org/ws/2004/09/transfer/Get";
    pub const ACTION_PUT: &str = "http://schemas.xmlsoap.org/ws/2004/09/transfer/Put";
    pub const ACTION_ENUMERATE: &str = "http://schemas.xmlsoap.org/ws/2004/09/enumeration/Enumerate";
    pub const ACTION_PULL: &str = "http://schemas.xmlsoap.org/ws/2004/09/enumeration/Pull";

    pub const CIM: &str = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/";
    pub const AMT: &str = "http://intel.com/wbem/wscim/1/amt-schema/1/";

    /// Resource URI of a CIM class (`CIM_…`).
    pub fn cim(class: &str) -> String {
        format!("{CIM}{class}")
    }

    /// Resource URI of an Intel AMT class (`AMT_…`).
    pub fn amt(class: &str) -> String {
        format!("{AMT}{class}")
    }

    /// Resource URI of a class named `CIM_…` or `AMT_…`.
    pub fn class_uri(class: &str) -> String {
        if class.starts_with("AMT_") {
            amt(class)
        } else {
            cim(class)
        }
    }

    /// Action URI of an extrinsic method: `<resource URI>/<method>`.
    pub fn method_action(resource_uri: &str, method: &str) -> String {
        format!("{resource_uri}/{method}")
    }
}

/// Well-known AMT instance names (fixed by the firmware).
pub mod names {
    /// `CIM_ComputerSystem.Name` of the host AMT manages.
    pub const MANAGED_SYSTEM: &str = "ManagedSystem";
    pub const POWER_SERVICE: &str = "Intel(r) AMT Power Management Service";
    pub const BOOT_SERVICE: &str = "Intel(r) AMT Boot Service";
    pub const AMT_SYSTEM: &str = "Intel(r) AMT";
    pub const BOOT_CONFIG: &str = "Intel(r) AMT: Boot Configuration 0";
    pub const BOOT_SETTING_DATA: &str = "Intel(r) AMT:BootSettingData 0";
    pub const SOURCE_PXE: &str = "Intel(r) AMT: Force PXE Boot";
    pub const SOURCE_HDD: &str = "Intel(r) AMT: Force Hard-drive Boot";
    pub const SOURCE_CD: &str = "Intel(r) AMT: Force CD/DVD Boot";
}
