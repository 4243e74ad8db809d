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

#[derive(Debug)]
enum Check {
    Any,
    Pinned([u8; 32]),
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
