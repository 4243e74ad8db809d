//! UEFI secure boot: read, enable/disable, reset the keys.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, SecureBootResetKeys, SecureBootState};

#[async_trait]
pub trait SecureBoot: Send {
    async fn secure_boot(&mut self, ctx: &Ctx) -> Result<SecureBootState>;
    async fn set_secure_boot(&mut self, ctx: &Ctx, enabled: bool) -> Result<SecureBootState>;
    async fn reset_secure_boot_keys(&mut self, ctx: &Ctx, kind: SecureBootResetKeys) -> Result<()>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::SecureBootGet | Action::SecureBootSet(_) | Action::SecureBootResetKeys(_))
}

pub(super) async fn perform(cap: &mut dyn SecureBoot, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    match action {
        Action::SecureBootGet => Ok(Some(ActionData::SecureBoot(cap.secure_boot(ctx).await?))),
        Action::SecureBootSet(s) => Ok(Some(ActionData::SecureBoot(cap.set_secure_boot(ctx, s.enabled).await?))),
        Action::SecureBootResetKeys(k) => cap.reset_secure_boot_keys(ctx, *k).await.map(|_| None),
        _ => unreachable!("dispatched by `handles`"),
    }
}
