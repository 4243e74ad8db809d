//! TLS pieces every HTTPS provider shares (Redfish, AMT): the crypto
//! provider, passed explicitly (ring; never a process-wide default), the one
//! verifier for a target's explicit `tls.insecure` opt-in, and the one for a
//! pinned certificate (`tls.pin_sha256`).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

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

/// `tls.pin_sha256`: exactly the certificate whose DER encoding has this
/// SHA-256 digest (any issuer, any name: the pin is the trust), with the
/// handshake signatures checked as always.
pub fn pinned_certificate(provider: &CryptoProvider, sha256: [u8; 32]) -> Arc<dyn ServerCertVerifier> {
    Arc::new(Verifier { check: Check::Pinned(sha256), algorithms: provider.signature_verification_algorithms })
}

/// Discovery: any certificate, any name, like [`accept_any_certificate`],
/// keeping the SHA-256 of the certificate presented (what `tls.pin_sha256`
/// of a proposed machine record takes). Nothing is trusted by it: discovery
/// only reads an unauthenticated answer and never sends a credential.
pub fn recording_certificate(provider: &CryptoProvider) -> (Arc<dyn ServerCertVerifier>, CertificateRecord) {
    let record = CertificateRecord::default();
    let verifier =
        Verifier { check: Check::Record(record.clone()), algorithms: provider.signature_verification_algorithms };
    (Arc::new(verifier), record)
}

/// The certificate a [`recording_certificate`] verifier saw last.
#[derive(Clone, Debug, Default)]
pub struct CertificateRecord(Arc<std::sync::Mutex<Option<[u8; 32]>>>);

impl CertificateRecord {
    /// The SHA-256 of the end-entity certificate's DER encoding, once a handshake got that far.
    pub fn sha256(&self) -> Option<[u8; 32]> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`CertificateRecord::sha256`] as 64 lowercase hex digits.
    pub fn sha256_hex(&self) -> Option<String> {
        self.sha256().map(|d| d.iter().map(|b| format!("{b:02x}")).collect())
    }
}

#[derive(Debug)]
enum Check {
    Any,
    Pinned([u8; 32]),
    Record(CertificateRecord),
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
            Check::Record(record) => {
                use sha2::Digest;
                *record.0.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(sha2::Sha256::digest(end_entity.as_ref()).into());
                Ok(ServerCertVerified::assertion())
            }
            Check::Pinned(want) => {
                use sha2::Digest;
                let got: [u8; 32] = sha2::Sha256::digest(end_entity.as_ref()).into();
                // Not secret, but compared without an early exit anyway.
                if got.iter().zip(want.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0 {
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
