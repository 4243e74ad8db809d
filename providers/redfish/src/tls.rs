//! TLS client configuration per BMC.
//!
//! Verification is on by default against the host's trust store. A target
//! may bring its own CA bundle (`tls.ca_pem`: then *only* those CAs are
//! trusted for that BMC, which is what a private BMC PKI wants), or opt in
//! to `tls.insecure` (no certificate check at all; handshake signatures are
//! still verified), or pin the BMC's certificate (`tls.pin_sha256`: exactly
//! that certificate, whoever issued it). The crypto provider (ring) is passed explicitly: nothing
//! depends on a process-wide default provider.

use crate::error::invalid;
use bmcfleet_provider::tls::{
    accept_any_certificate, crypto_provider, pinned_certificate, recording, ServedCertificate,
};
use bmcfleet_provider::ProviderError;
use bmcfleet_schema::TlsOptions;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use std::sync::{Arc, OnceLock};

/// The host's trust store, loaded once per connector (not per BMC).
#[derive(Debug, Default)]
pub(crate) struct SystemRoots(OnceLock<Arc<RootCertStore>>);

impl SystemRoots {
    fn get(&self) -> Arc<RootCertStore> {
        self.0
            .get_or_init(|| {
                let found = rustls_native_certs::load_native_certs();
                if !found.errors.is_empty() {
                    tracing::warn!(errors = found.errors.len(), "Some system CA certificates could not be loaded.");
                }
                let mut store = RootCertStore::empty();
                let (added, ignored) = store.add_parsable_certificates(found.certs);
                tracing::debug!(added, ignored, "Loaded the system trust store.");
                Arc::new(store)
            })
            .clone()
    }
}

/// Parse a PEM bundle into a root store; at least one certificate is required.
pub(crate) fn roots_from_pem(pem: &str) -> Result<RootCertStore, ProviderError> {
    let mut store = RootCertStore::empty();
    let mut n = 0usize;
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let cert = cert.map_err(|e| invalid(format!("bmc.tls.ca_pem is not valid PEM: {e}")))?;
        store
            .add(cert)
            .map_err(|e| invalid(format!("bmc.tls.ca_pem holds a certificate that cannot be a trust anchor: {e}")))?;
        n += 1;
    }
    if n == 0 {
        return Err(invalid("bmc.tls.ca_pem contains no CERTIFICATE block"));
    }
    Ok(store)
}

/// The client config for a BMC with `opts`; every certificate the BMC
/// presents is noted in `seen` (what `bmc_cert_get` answers).
pub(crate) fn client_config(
    opts: &TlsOptions,
    system: &SystemRoots,
    seen: Arc<ServedCertificate>,
) -> Result<ClientConfig, ProviderError> {
    let provider = crypto_provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| invalid(format!("TLS setup failed: {e}")))?;
    let pins = opts.pins().map_err(invalid)?;
    let verifier = if !pins.is_empty() {
        pinned_certificate(&provider, &pins)
    } else if opts.insecure {
        if opts.ca_pem.is_some() {
            tracing::warn!("bmc.tls.insecure is set: bmc.tls.ca_pem is ignored and the certificate is not checked.");
        }
        accept_any_certificate(&provider)
    } else {
        let roots = match &opts.ca_pem {
            Some(pem) => Arc::new(roots_from_pem(pem)?),
            None => system.get(),
        };
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| invalid(format!("TLS setup failed: {e}")))?
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
    fn empty_or_bad_pem_is_refused() {
        assert!(roots_from_pem("").is_err());
        assert!(roots_from_pem("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n").is_err());
    }

    #[test]
    fn insecure_config_builds() {
        let opts = TlsOptions { insecure: true, ca_pem: None, pin_sha256: None, allow_plain_http: false };
        assert!(client_config(&opts, &SystemRoots::default(), Default::default()).is_ok());
    }
}
