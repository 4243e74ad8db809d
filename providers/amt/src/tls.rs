//! rustls client configuration for AMT's TLS port (16993).
//!
//! The crypto provider is chosen here (ring), never taken from a
//! process-wide default. Trust is per BMC:
//! - `tls.ca_pem`: only the given CA certificates are trusted (AMT certs are
//!   issued by the operator's provisioning CA, never by public roots);
//! - `tls.insecure`: no verification at all (explicit opt-in; handshake
//!   signatures are still checked so the session key is bound to the cert
//!   the BMC presented).

use crate::error::AmtError;
use bmcfleet_provider::tls::{
    accept_any_certificate, crypto_provider, pinned_certificate, recording, ServedCertificate,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use std::sync::Arc;

/// How the BMC's certificate is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Trust only these CA certificates (PEM).
    CaPem(String),
    /// Accept any certificate (explicit opt-in).
    Insecure,
    /// Exactly the certificate with this SHA-256 fingerprint.
    Pinned(Vec<[u8; 32]>),
    /// Plain HTTP: no certificate is ever presented. The config built for it
    /// trusts nothing, so a misrouted https URL cannot succeed.
    Nothing,
}

/// A client config for `trust`, HTTP/1.1 only (AMT speaks nothing else);
/// every certificate the AMT presents is noted in `seen` (`bmc_cert_get`).
pub fn client_config(trust: &Trust, seen: Arc<ServedCertificate>) -> Result<ClientConfig, AmtError> {
    let provider = crypto_provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| AmtError::Config(format!("TLS setup: {e}")))?;
    let verifier = match trust {
        Trust::CaPem(pem) => {
            let mut roots = RootCertStore::empty();
            let mut n = 0;
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| AmtError::Config(format!("tls.ca_pem is not valid PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| AmtError::Config(format!("tls.ca_pem holds an unusable certificate: {e}")))?;
                n += 1;
            }
            if n == 0 {
                return Err(AmtError::Config("tls.ca_pem holds no CERTIFICATE block".into()));
            }
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| AmtError::Config(format!("TLS setup: {e}")))?
        }
        Trust::Pinned(sha256) => pinned_certificate(&provider, sha256),
        Trust::Insecure => accept_any_certificate(&provider),
        Trust::Nothing => {
            let mut config = builder.with_root_certificates(RootCertStore::empty()).with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            return Ok(config);
        }
    };
    let mut config =
        builder.dangerous().with_custom_certificate_verifier(recording(verifier, seen)).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_ca_pem_is_a_config_error() {
        for pem in ["", "hello", "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"] {
            assert!(
                matches!(client_config(&Trust::CaPem(pem.into()), Default::default()), Err(AmtError::Config(_))),
                "{pem:?}"
            );
        }
        client_config(&Trust::Insecure, Default::default()).unwrap();
        client_config(&Trust::Nothing, Default::default()).unwrap();
    }
}
