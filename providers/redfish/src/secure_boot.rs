//! UEFI secure boot: the ComputerSystem's `SecureBoot` resource
//! (`SecureBootEnable`, PATCHed; `SecureBoot.ResetKeys` action).

use crate::discovery::{action_info_values, action_of, required_unsent};
use crate::error::{invalid, unsupported};
use crate::json::{link, string_of};
use crate::session::RedfishSession;
use bmcfleet_provider::{Ctx, Result, SecureBoot};
use bmcfleet_schema::{SecureBootResetKeys, SecureBootState};
use serde_json::{json, Value};

pub(crate) fn state(v: &Value) -> SecureBootState {
    SecureBootState {
        enabled: v.get("SecureBootEnable").and_then(Value::as_bool).unwrap_or(false),
        current_boot: string_of(v, "SecureBootCurrentBoot"),
        mode: string_of(v, "SecureBootMode"),
    }
}

impl RedfishSession {
    async fn secure_boot_resource(&mut self, ctx: &Ctx) -> Result<crate::transport::Resource> {
        let system = self.transport.get(ctx, &self.service.system.path.clone()).await?;
        let path = link(&system.body, "SecureBoot")
            .ok_or_else(|| unsupported("the ComputerSystem links no SecureBoot resource"))?;
        self.transport.get_linked(ctx, &path, "SecureBoot").await
    }
}

#[async_trait::async_trait]
impl SecureBoot for RedfishSession {
    async fn secure_boot(&mut self, ctx: &Ctx) -> Result<SecureBootState> {
        Ok(state(&self.secure_boot_resource(ctx).await?.body))
    }

    async fn set_secure_boot(&mut self, ctx: &Ctx, enabled: bool) -> Result<SecureBootState> {
        let r = self.secure_boot_resource(ctx).await?;
        let path = r.path.clone();
        if r.body.get("SecureBootEnable").and_then(Value::as_bool) != Some(enabled) {
            self.patch_with_etag(ctx, r, &json!({"SecureBootEnable": enabled})).await?;
        }
        // Done when SecureBootEnable reads back as asked (it is the setting
        // for the next boot), not when the BMC acknowledges the PATCH.
        let after = state(&self.transport.read_back(ctx, &path, |r| state(&r.body).enabled == enabled).await?.body);
        if after.enabled != enabled {
            return Err(crate::error::err(
                bmcfleet_schema::ErrorCode::BmcError,
                format!("the BMC accepted SecureBootEnable {enabled} but {path} reads back {}", after.enabled),
            ));
        }
        Ok(after)
    }

    async fn reset_secure_boot_keys(&mut self, ctx: &Ctx, kind: SecureBootResetKeys) -> Result<()> {
        let r = self.secure_boot_resource(ctx).await?;
        let (target, _, info) = action_of(&r.body, "#SecureBoot.ResetKeys")
            .ok_or_else(|| unsupported("the SecureBoot resource offers no SecureBoot.ResetKeys"))?;
        // The values the BMC advertises: inline, else in its ActionInfo.
        // Keys are only ever reset in a way the BMC says it offers.
        let mut allowed = crate::json::allowable(&r.body["Actions"]["#SecureBoot.ResetKeys"], "ResetKeysType");
        if let Some(info) = info {
            let info = self.transport.get(ctx, &info).await?.body;
            let required = required_unsent(&info, &["ResetKeysType"]);
            if !required.is_empty() {
                return Err(unsupported(format!(
                    "SecureBoot.ResetKeys requires {} (its @Redfish.ActionInfo), which bmcfleet does not send; \
                     nothing was sent",
                    required.join(", ")
                )));
            }
            allowed = allowed.or_else(|| action_info_values(&info, "ResetKeysType"));
        }
        let Some(list) = allowed else {
            return Err(unsupported(
                "the BMC does not advertise which ResetKeysType values SecureBoot.ResetKeys accepts \
                 (no @Redfish.AllowableValues, no ActionInfo listing them); nothing was sent",
            ));
        };
        if !list.iter().any(|x| x == kind.redfish()) {
            return Err(invalid(format!(
                "the BMC does not offer ResetKeysType {} (it offers {}); nothing was sent",
                kind.redfish(),
                if list.is_empty() { "none".to_owned() } else { list.join(", ") }
            )));
        }
        self.transport.post(ctx, &target, &json!({"ResetKeysType": kind.redfish()})).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secure_boot_state_decodes() {
        let s = state(
            &json!({"SecureBootEnable": true, "SecureBootCurrentBoot": "Enabled", "SecureBootMode": "DeployedMode"}),
        );
        assert_eq!(
            s,
            SecureBootState { enabled: true, current_boot: Some("Enabled".into()), mode: Some("DeployedMode".into()) }
        );
        assert_eq!(state(&json!({})), SecureBootState::default());
        assert_eq!(SecureBootResetKeys::DeletePk.redfish(), "DeletePK");
    }
}
