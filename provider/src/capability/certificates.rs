//! BMC certificates: the HTTPS certificate the BMC serves (from the TLS
//! handshake the provider does anyway), and its replacement by one the
//! operator supplies, verified by the fingerprint the BMC serves afterwards.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, BmcCertReplace, BmcCertificate};

#[async_trait]
pub trait BmcCertificates: Send {
    /// The certificate the BMC serves now.
    async fn bmc_certificate(&mut self, ctx: &Ctx) -> Result<BmcCertificate>;
    /// Install `replace` as the BMC's HTTPS certificate and answer the
    /// certificate the BMC serves afterwards (read on a fresh connection
    /// pinned to the new fingerprint); an error when it does not serve it.
    async fn replace_bmc_certificate(&mut self, ctx: &Ctx, replace: &BmcCertReplace) -> Result<BmcCertificate>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::BmcCertGet | Action::BmcCertReplace(_))
}

pub(super) async fn perform(cap: &mut dyn BmcCertificates, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    match action {
        Action::BmcCertGet => Ok(Some(ActionData::BmcCertificate(Box::new(cap.bmc_certificate(ctx).await?)))),
        Action::BmcCertReplace(r) => {
            Ok(Some(ActionData::BmcCertificate(Box::new(cap.replace_bmc_certificate(ctx, r).await?))))
        }
        _ => unreachable!("dispatched by `handles`"),
    }
}
