//! Parameters and results of the BMC certificates capability: the HTTPS
//! certificate the BMC serves, and its replacement by one the operator
//! supplies.

use crate::secret::Secret;
use serde::{Deserialize, Serialize};

/// Replace the BMC's HTTPS certificate:
/// `{"bmc_cert_replace": {"certificate_pem": "-----BEGIN CERTIFICATE-----…",
/// "private_key_pem": "-----BEGIN PRIVATE KEY-----…"}}`. The private key is
/// a secret parameter: the gateway seals it to the workers' key before
/// anything is stored, logs and plans never show it. The certificate's
/// SHA-256 fingerprint is what the BMC must serve afterwards (read back on a
/// fresh connection pinned to it); a machine pinned by `tls.pin_sha256`
/// must already accept it (`tls.pin_sha256_next`, which `bmcctl bmc-cert
/// replace` sets first), else nothing is sent.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BmcCertReplace {
    /// The new certificate, PEM (the leaf first; its chain may follow).
    pub certificate_pem: String,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub private_key_pem: Secret,
}

impl std::fmt::Debug for BmcCertReplace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BmcCertReplace")
            .field("certificate_pem", &format_args!("[{} bytes]", self.certificate_pem.len()))
            .field("private_key_pem", &self.private_key_pem)
            .finish()
    }
}

impl BmcCertReplace {
    /// Largest PEM accepted for the certificate (a chain) or the key.
    pub const MAX_PEM: usize = 64 * 1024;

    /// Why the request is malformed, if it is (the PEM itself is parsed by
    /// the worker, which answers `invalid_field` before sending anything).
    pub fn validate(&self) -> Result<(), String> {
        if self.certificate_pem.len() > Self::MAX_PEM || self.private_key_pem.expose().len() > Self::MAX_PEM {
            return Err(format!("bmc_cert_replace: certificate and key are at most {} bytes each", Self::MAX_PEM));
        }
        if !self.certificate_pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err("bmc_cert_replace: certificate_pem holds no PEM CERTIFICATE block".into());
        }
        if !self.private_key_pem.expose().contains("PRIVATE KEY-----") {
            return Err("bmc_cert_replace: private_key_pem holds no PEM PRIVATE KEY block".into());
        }
        Ok(())
    }
}

/// A certificate as the BMC serves it.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BmcCertificate {
    /// Subject and issuer distinguished names (RFC 4514 text).
    pub subject: String,
    pub issuer: String,
    /// Validity, RFC 3339 (UTC).
    pub not_before: String,
    pub not_after: String,
    /// Unix seconds of `not_after` (for fleet state and alerts).
    pub not_after_unix: i64,
    /// SHA-256 of the certificate's DER encoding, lower-case hex: what
    /// `tls.pin_sha256` pins.
    pub sha256: String,
    /// The Redfish Certificate resource of the HTTPS service, where the BMC
    /// links one.
    pub uri: Option<String>,
    /// Where the certificate was read: `tls_handshake` (the certificate the
    /// BMC presented on the worker's connection), `sim`.
    pub source: String,
}
