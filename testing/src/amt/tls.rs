//! Test certificates: a throwaway CA and a server certificate it signs for
//! `127.0.0.1` and `localhost` (AMT's TLS port serves a provisioned cert
//! the same way).

use super::HarnessError;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;

pub struct TlsMaterial {
    /// PEM of the CA that signed the server certificate.
    pub ca_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

fn tls_err(e: impl std::fmt::Display) -> HarnessError {
    HarnessError::Tls(e.to_string())
}

fn new_ca(name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, HarnessError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    CertifiedIssuer::self_signed(params, KeyPair::generate().map_err(tls_err)?).map_err(tls_err)
}

/// A fresh CA with nothing signed by it: trusting it must not let a client
/// accept the fixture server (negative TLS tests).
pub fn unrelated_ca_pem() -> Result<String, HarnessError> {
    Ok(new_ca("bmcfleet unrelated test CA")?.pem())
}

pub fn generate() -> Result<TlsMaterial, HarnessError> {
    let ca = new_ca("bmcfleet test AMT provisioning CA")?;
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).map_err(tls_err)?;
    leaf.distinguished_name.push(DnType::CommonName, "Intel(R) AMT fixture server");
    let leaf_key = KeyPair::generate().map_err(tls_err)?;
    let leaf_cert = leaf.signed_by(&leaf_key, &ca).map_err(tls_err)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let server_config = rustls::ServerConfig::builder_with_provider(bmcfleet_provider::tls::crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_no_client_auth()
        .with_single_cert(vec![leaf_cert.der().clone(), ca.der().clone()], key)
        .map_err(tls_err)?;
    Ok(TlsMaterial { ca_pem: ca.pem(), server_config: Arc::new(server_config) })
}
