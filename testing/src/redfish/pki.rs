//! A throwaway CA and a server certificate for 127.0.0.1 / localhost / ::1.

use super::HarnessError;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A fresh test PKI: give `ca_pem` to clients (as `tls.ca_pem`), the
/// certificate and key to the server. Each instance is a different CA, so
/// one instance's clients do not trust another's servers.
#[derive(Clone)]
pub struct TestPki {
    pub ca_pem: String,
    pub cert_pem: String,
    /// PKCS#8 PEM (test material only).
    pub key_pem: String,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki").field("key_pem", &"[redacted]").finish_non_exhaustive()
    }
}

fn pki_err(e: impl std::fmt::Display) -> HarnessError {
    HarnessError::Pki(e.to_string())
}

impl TestPki {
    pub fn generate() -> Result<TestPki, HarnessError> {
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(pki_err)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "bmcfleet test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_key = KeyPair::generate().map_err(pki_err)?;
        let issuer = CertifiedIssuer::self_signed(ca, ca_key).map_err(pki_err)?;

        let mut leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()])
            .map_err(pki_err)?;
        leaf.distinguished_name.push(DnType::CommonName, "bmcfleet test BMC");
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let key = KeyPair::generate().map_err(pki_err)?;
        let cert = leaf.signed_by(&key, &issuer).map_err(pki_err)?;
        Ok(TestPki { ca_pem: issuer.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// A rustls server config (TLS 1.2 and 1.3, ring) presenting this certificate.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, HarnessError> {
        let certs =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(pki_err)?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(pki_err)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(pki_err)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(pki_err)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Write `cert.pem`, `key.pem` and `ca.pem` into `dir`; returns (cert, key).
    pub fn write_to(&self, dir: &Path) -> Result<(PathBuf, PathBuf), HarnessError> {
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(&cert, &self.cert_pem)
            .map_err(|e| HarnessError::io(format!("writing {}", cert.display()), e))?;
        std::fs::write(&key, &self.key_pem).map_err(|e| HarnessError::io(format!("writing {}", key.display()), e))?;
        std::fs::write(dir.join("ca.pem"), &self.ca_pem).map_err(|e| HarnessError::io("writing ca.pem", e))?;
        Ok((cert, key))
    }
}
