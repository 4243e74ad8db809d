//! The AMT's TLS certificate: read from the handshake of the session's own
//! connection (AMT over TLS, port 16993); nothing to read over plain HTTP.
//! Replacing it is not offered: AMT provisions its TLS certificate through
//! `AMT_PublicKeyManagementService` (key pair, certificate, and then
//! `AMT_TLSCredentialContext` / `AMT_TLSSettingData`), a multi-step change
//! bmcfleet does not drive; `unsupported`, nothing sent.

use crate::session::AmtSession;
use bmcfleet_provider::tls::describe_certificate;
use bmcfleet_provider::{BmcCertificates, Ctx, ProviderError, Result};
use bmcfleet_schema::{BmcCertReplace, BmcCertificate, ErrorCode};

#[async_trait::async_trait]
impl BmcCertificates for AmtSession {
    async fn bmc_certificate(&mut self, ctx: &Ctx) -> Result<BmcCertificate> {
        if !self.client.transport().is_tls() {
            return Err(ProviderError::new(
                ErrorCode::Unsupported,
                "the AMT is reached over plain HTTP: it presents no certificate (give the machine tls options and \
                 port 16993)",
            ));
        }
        // The connection may be new since the session opened: one read
        // makes sure the certificate noted is the one served now.
        self.client.get(ctx, "AMT_GeneralSettings", &[]).await.map_err(ProviderError::from)?;
        let der = self
            .client
            .transport()
            .served_certificate()
            .ok_or_else(|| ProviderError::new(ErrorCode::Internal, "no TLS handshake with the AMT was seen"))?;
        describe_certificate(&der, "tls_handshake")
            .map_err(|why| ProviderError::new(ErrorCode::ProtocolError, format!("the AMT's TLS certificate: {why}")))
    }

    async fn replace_bmc_certificate(&mut self, _ctx: &Ctx, _replace: &BmcCertReplace) -> Result<BmcCertificate> {
        Err(ProviderError::new(
            ErrorCode::Unsupported,
            "AMT provisions its TLS certificate through AMT_PublicKeyManagementService and \
             AMT_TLSCredentialContext, which bmcfleet does not drive; nothing was sent",
        )
        .not_sent())
    }
}
