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

    /// A server config whose certificate can be swapped while it serves
    /// ([`ServedCert::replace`]: new handshakes present the new one).
    pub fn swappable_server_config(&self) -> Result<(Arc<rustls::ServerConfig>, Arc<ServedCert>), HarnessError> {
        let served = Arc::new(ServedCert(std::sync::RwLock::new(certified(&self.cert_pem, &self.key_pem)?)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(pki_err)?
            .with_no_client_auth()
            .with_cert_resolver(served.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok((Arc::new(config), served))
    }

    /// A self-signed certificate for 127.0.0.1 / localhost / ::1 with
    /// `common_name`, valid for `days` from now: (certificate PEM, key PEM).
    pub fn self_signed(common_name: &str, days: i64) -> Result<(String, String), HarnessError> {
        let mut leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()])
            .map_err(pki_err)?;
        leaf.distinguished_name.push(DnType::CommonName, common_name);
        leaf.not_before = time::OffsetDateTime::now_utc() - time::Duration::days(1);
        leaf.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(days);
        let key = KeyPair::generate().map_err(pki_err)?;
        let cert = leaf.self_signed(&key).map_err(pki_err)?;
        Ok((cert.pem(), key.serialize_pem()))
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

/// A certificate and key as rustls serves them; the key must match.
fn certified(cert_pem: &str, key_pem: &str) -> Result<Arc<rustls::sign::CertifiedKey>, HarnessError> {
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(pki_err)?;
    if certs.is_empty() {
        return Err(pki_err("no CERTIFICATE block"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| pki_err("no readable private key"))?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(certs, key, &provider).map(Arc::new).map_err(pki_err)
}

/// The certificate a harness server presents, swappable while it serves
/// (what a BMC's `CertificateService.ReplaceCertificate` does).
#[derive(Debug)]
pub struct ServedCert(std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>);

impl ServedCert {
    /// Serve `cert_pem` (leaf first) with `key_pem` from the next handshake
    /// on; an error (and nothing changed) when they do not parse or match.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<(), HarnessError> {
        let new = certified(cert_pem, key_pem)?;
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = new;
        Ok(())
    }

    /// The DER of the certificate served now.
    pub fn der(&self) -> Vec<u8> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).cert.first().map(|c| c.as_ref().to_vec()).unwrap_or_default()
    }
}

impl rustls::server::ResolvesServerCert for ServedCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}
