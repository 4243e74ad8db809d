//! TLS pieces every HTTPS provider shares (Redfish, AMT): the crypto
//! provider, passed explicitly (ring; never a process-wide default), the one
//! verifier for a target's explicit `tls.insecure` opt-in, and the one for a
//! pinned certificate (`tls.pin_sha256`).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::{Arc, Mutex};

/// The crypto provider of every BMC TLS connection.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `tls.insecure`: any certificate, any name. The handshake signatures are
/// still checked with `provider`'s algorithms, so the session keys belong to
/// whoever holds the key of the certificate the BMC presented.
pub fn accept_any_certificate(provider: &CryptoProvider) -> Arc<dyn ServerCertVerifier> {
    Arc::new(Verifier { check: Check::Any, algorithms: provider.signature_verification_algorithms })
}

/// `tls.pin_sha256`: exactly a certificate whose DER encoding has one of
/// these SHA-256 digests (any issuer, any name: the pin is the trust; two
/// while a certificate is being replaced), with the handshake signatures
/// checked as always.
pub fn pinned_certificate(provider: &CryptoProvider, sha256: &[[u8; 32]]) -> Arc<dyn ServerCertVerifier> {
    Arc::new(Verifier { check: Check::Pinned(sha256.to_vec()), algorithms: provider.signature_verification_algorithms })
}

#[derive(Debug)]
enum Check {
    Any,
    Pinned(Vec<[u8; 32]>),
}

#[derive(Debug)]
struct Verifier {
    check: Check,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.check {
            Check::Any => Ok(ServerCertVerified::assertion()),
            Check::Pinned(want) => {
                let got = sha256(end_entity.as_ref());
                // Not secret, but compared without an early exit anyway.
                let same = |w: &[u8; 32]| got.iter().zip(w.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
                if want.iter().fold(false, |any, w| any | same(w)) {
                    Ok(ServerCertVerified::assertion())
                } else {
                    Err(rustls::Error::General("the BMC's certificate does not match tls.pin_sha256".into()))
                }
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Discovery: any certificate, any name, like [`accept_any_certificate`],
/// keeping the certificate presented (its SHA-256 is what `tls.pin_sha256`
/// of a proposed machine record takes): [`recording`] around
/// [`accept_any_certificate`]. Nothing is trusted by it: discovery only
/// reads an unauthenticated answer and never sends a credential.
pub fn recording_certificate(provider: &CryptoProvider) -> (Arc<dyn ServerCertVerifier>, CertificateRecord) {
    let seen = Arc::new(ServedCertificate::default());
    (recording(accept_any_certificate(provider), seen.clone()), CertificateRecord(seen))
}

/// The certificate a [`recording_certificate`] verifier saw last.
#[derive(Clone, Debug, Default)]
pub struct CertificateRecord(Arc<ServedCertificate>);

impl CertificateRecord {
    /// The SHA-256 of the end-entity certificate's DER encoding, once a handshake got that far.
    pub fn sha256(&self) -> Option<[u8; 32]> {
        self.0.get().map(|der| sha256(&der))
    }

    /// [`CertificateRecord::sha256`] as 64 lowercase hex digits.
    pub fn sha256_hex(&self) -> Option<String> {
        self.sha256().map(|d| d.iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// The end-entity certificate a BMC presented on the last handshake of a
/// client whose verifier is [`recording`] (DER).
#[derive(Debug, Default)]
pub struct ServedCertificate(Mutex<Option<Vec<u8>>>);

impl ServedCertificate {
    /// The DER of the certificate last presented, if any handshake happened.
    pub fn get(&self) -> Option<Vec<u8>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// `inner`, noting in `seen` each certificate the BMC presents (before
/// `inner` judges it: a rejected one is noted too, so an error can name it).
pub fn recording(inner: Arc<dyn ServerCertVerifier>, seen: Arc<ServedCertificate>) -> Arc<dyn ServerCertVerifier> {
    Arc::new(Recording { inner, seen })
}

#[derive(Debug)]
struct Recording {
    inner: Arc<dyn ServerCertVerifier>,
    seen: Arc<ServedCertificate>,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.seen.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(end_entity.as_ref().to_vec());
        self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

/// SHA-256 of a certificate's DER encoding.
pub fn sha256(der: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(der).into()
}

/// Longest subject or issuer text kept (a BMC's certificate is untrusted input).
const MAX_NAME: usize = 512;

/// Subject, issuer, validity and fingerprint of a DER certificate.
pub fn describe_certificate(der: &[u8], source: &str) -> Result<bmcfleet_schema::BmcCertificate, String> {
    use time::format_description::well_known::Rfc3339;
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let validity = cert.validity();
    let when = |t: &x509_parser::time::ASN1Time| t.to_datetime().format(&Rfc3339).unwrap_or_else(|_| t.to_string());
    let clip = |s: String| s.chars().filter(|c| !c.is_control()).take(MAX_NAME).collect::<String>();
    Ok(bmcfleet_schema::BmcCertificate {
        subject: clip(cert.subject().to_string()),
        issuer: clip(cert.issuer().to_string()),
        not_before: when(&validity.not_before),
        not_after: when(&validity.not_after),
        not_after_unix: validity.not_after.timestamp(),
        sha256: crate::hex(&sha256(der)),
        uri: None,
        source: source.into(),
    })
}

/// The DER of the first `CERTIFICATE` block of a PEM text (the leaf of a chain).
pub fn first_certificate(pem: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    match CertificateDer::pem_slice_iter(pem.as_bytes()).next() {
        Some(Ok(der)) => Ok(der.as_ref().to_vec()),
        Some(Err(e)) => Err(format!("the certificate is not valid PEM: {e}")),
        None => Err("the certificate PEM holds no CERTIFICATE block".into()),
    }
}

/// Whether a PEM text holds a private key rustls can read (PKCS#8, PKCS#1
/// or SEC1). The error never quotes the key.
pub fn check_private_key(pem: &str) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map(|_| ())
        .map_err(|_| "the private key PEM holds no readable PRIVATE KEY block".into())
}
