//! Users: the user slots of the LAN channel (name, password, access, enable).

use crate::cmd::{self, PasswordOp, UserAccess};
use crate::session::{invalid, protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, ProviderError, Result, Users};
use bmcfleet_schema::{ErrorCode, UserInfo, UserRole, UserSpec, UserUpdate};

impl<T: Transport> IpmiSession<T> {
    async fn user_access(&mut self, ctx: &Ctx, channel: u8, id: u8) -> Result<UserAccess> {
        let data = self.exec(ctx, &cmd::GET_USER_ACCESS, cmd::encode_get_user_access(channel, id)).await?;
        cmd::decode_user_access(&data).ok_or_else(|| protocol(cmd::GET_USER_ACCESS.id, "response too short"))
    }

    /// Every slot's name (`None` where the BMC refuses to name the slot),
    /// from id 2 (id 1 is the fixed anonymous user) to the BMC's maximum.
    async fn user_names(&mut self, ctx: &Ctx, channel: u8) -> Result<Vec<(u8, Option<String>)>> {
        let max = self.user_access(ctx, channel, 1).await?.max_users;
        let mut names = Vec::with_capacity(usize::from(max));
        for id in 2..=max {
            match self.exec(ctx, &cmd::GET_USER_NAME, vec![id]).await {
                Ok(data) => names.push((id, Some(cmd::decode_user_name(&data)))),
                Err(e) if matches!(e.code, ErrorCode::InvalidField | ErrorCode::TargetNotFound) => {
                    names.push((id, None))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(names)
    }

    /// The slot named `name`. Two slots of one name (a BMC lets a raw Set
    /// User Name write one twice): which one is meant is not guessed,
    /// `conflict`, nothing changed.
    async fn find_user(&mut self, ctx: &Ctx, channel: u8, name: &str) -> Result<Option<u8>> {
        let names = self.user_names(ctx, channel).await?;
        let ids: Vec<u8> = names.into_iter().filter(|(_, n)| n.as_deref() == Some(name)).map(|(id, _)| id).collect();
        match ids.as_slice() {
            [] => Ok(None),
            [id] => Ok(Some(*id)),
            several => Err(ProviderError::new(
                ErrorCode::Conflict,
                format!(
                    "slots {} of this BMC are all named {name:?}: which one is meant is not known; nothing was changed",
                    several.iter().map(u8::to_string).collect::<Vec<_>>().join(", ")
                ),
            )),
        }
    }

    async fn user_info(&mut self, ctx: &Ctx, channel: u8, id: u8, name: String) -> Result<UserInfo> {
        let access = self.user_access(ctx, channel, id).await?;
        Ok(UserInfo {
            id: id.to_string(),
            name,
            role: cmd::privilege_role(access.privilege),
            enabled: access.is_enabled(),
        })
    }

    /// A slot as it reads back after a change (a completion code 0 alone is
    /// not the change): named `name`, with `privilege` and `enabled` where
    /// the change set them; `bmc_error` naming what differs.
    async fn verify_slot(
        &mut self,
        ctx: &Ctx,
        channel: u8,
        id: u8,
        name: &str,
        privilege: Option<u8>,
        enabled: Option<bool>,
    ) -> Result<UserInfo> {
        let read = cmd::decode_user_name(&self.exec(ctx, &cmd::GET_USER_NAME, vec![id]).await?);
        let access = self.user_access(ctx, channel, id).await?;
        let mut differs = Vec::new();
        if read != name {
            differs.push("another name".to_owned());
        }
        if let Some(want) = privilege.filter(|p| access.privilege & 0x0F != *p) {
            differs.push(format!("privilege 0x{:X}, not 0x{want:X}", access.privilege & 0x0F));
        }
        if let Some(want) = enabled.filter(|e| access.is_enabled() != *e) {
            differs.push(if want { "disabled" } else { "enabled" }.to_owned());
        }
        if !differs.is_empty() {
            return Err(ProviderError::new(
                ErrorCode::BmcError,
                format!(
                    "{}: the BMC accepted the change of user {name:?} (slot {id}) but the slot reads back {}",
                    self.bmc,
                    differs.join(", ")
                ),
            ));
        }
        Ok(UserInfo {
            id: id.to_string(),
            name: read,
            role: cmd::privilege_role(access.privilege),
            enabled: access.is_enabled(),
        })
    }

    async fn set_enabled(&mut self, ctx: &Ctx, channel: u8, id: u8, privilege: u8, enabled: bool) -> Result<()> {
        self.exec(ctx, &cmd::SET_USER_ACCESS, cmd::encode_set_user_access(channel, id, privilege, enabled)).await?;
        let op = if enabled { PasswordOp::Enable } else { PasswordOp::Disable };
        self.exec(ctx, &cmd::SET_USER_PASSWORD, cmd::encode_set_user_password(id, op, None)).await?;
        Ok(())
    }

    /// The writes after Set User Name (the caller's first).
    async fn create_in_slot(&mut self, ctx: &Ctx, channel: u8, id: u8, spec: &UserSpec) -> Result<()> {
        self.exec(
            ctx,
            &cmd::SET_USER_PASSWORD,
            cmd::encode_set_user_password(id, PasswordOp::Set, Some(spec.password.expose())),
        )
        .await?;
        self.set_enabled(ctx, channel, id, cmd::role_privilege(spec.role), spec.enabled).await
    }

    /// A create failed after its first write reached the BMC: clear the slot again.
    async fn clear_after_failed_create(&mut self, ctx: &Ctx, channel: u8, id: u8) {
        if let Err(cleanup) = self.clear_slot(ctx, channel, id).await {
            tracing::warn!(bmc = %self.bmc, slot = id, error = %cleanup, "Could not clear a half-created user slot.");
        }
    }

    async fn clear_slot(&mut self, ctx: &Ctx, channel: u8, id: u8) -> Result<()> {
        self.exec(ctx, &cmd::SET_USER_PASSWORD, cmd::encode_set_user_password(id, PasswordOp::Disable, None)).await?;
        self.exec(
            ctx,
            &cmd::SET_USER_ACCESS,
            cmd::encode_set_user_access(channel, id, cmd::role_privilege(UserRole::NoAccess), false),
        )
        .await?;
        self.exec(ctx, &cmd::SET_USER_NAME, cmd::encode_set_user_name(id, "")).await?;
        Ok(())
    }
}

#[async_trait]
impl<T: Transport> Users for IpmiSession<T> {
    /// Get User Access (app 0x44) for the slot count, then Get User Name
    /// (app 0x46) and Get User Access for every named slot.
    async fn list_users(&mut self, ctx: &Ctx) -> Result<Vec<UserInfo>> {
        let channel = self.channel(ctx).await?;
        let mut users = Vec::new();
        for (id, name) in self.user_names(ctx, channel).await? {
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                users.push(self.user_info(ctx, channel, id, name).await?);
            }
        }
        Ok(users)
    }

    /// Picks the first slot without a name, then Set User Name (app 0x45),
    /// Set User Password (app 0x47, set), Set User Access (app 0x43:
    /// privilege, IPMI messaging) and Set User Password (enable/disable).
    /// A failure part-way clears the slot again.
    async fn create_user(&mut self, ctx: &Ctx, spec: &UserSpec) -> Result<UserInfo> {
        cmd::validate_user_name(&spec.name).map_err(invalid)?;
        cmd::validate_password(spec.password.expose()).map_err(invalid)?;
        let channel = self.channel(ctx).await?;
        let names = self.user_names(ctx, channel).await?;
        if let Some((id, _)) = names.iter().find(|(_, n)| n.as_deref() == Some(spec.name.as_str())) {
            return Err(ProviderError::new(
                ErrorCode::Conflict,
                format!("a user named {:?} already exists in slot {id}", spec.name),
            ));
        }
        let id = names.iter().find(|(_, n)| n.as_deref() == Some("")).map(|(id, _)| *id).ok_or_else(|| {
            ProviderError::new(ErrorCode::BmcError, format!("no free user slot (all {} slots are named)", names.len()))
        })?;
        // The slot's first write. Refused before it left (a privilege the
        // session lacks): nothing was written, so there is nothing to clear.
        match self.exec(ctx, &cmd::SET_USER_NAME, cmd::encode_set_user_name(id, &spec.name)).await {
            Err(e) if e.not_sent => return Err(e),
            Err(e) => {
                self.clear_after_failed_create(ctx, channel, id).await;
                return Err(e);
            }
            Ok(_) => {}
        }
        let made = match self.create_in_slot(ctx, channel, id, spec).await {
            Ok(()) => {
                self.verify_slot(ctx, channel, id, &spec.name, Some(cmd::role_privilege(spec.role)), Some(spec.enabled))
                    .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = made {
            self.clear_after_failed_create(ctx, channel, id).await;
            return Err(e);
        }
        made
    }

    /// Finds the user by name (TargetNotFound when missing: never creates),
    /// then changes only what the update names.
    async fn update_user(&mut self, ctx: &Ctx, update: &UserUpdate) -> Result<UserInfo> {
        if let Some(pw) = &update.password {
            cmd::validate_password(pw.expose()).map_err(invalid)?;
        }
        let channel = self.channel(ctx).await?;
        let id = self.find_user(ctx, channel, &update.name).await?.ok_or_else(|| {
            ProviderError::new(ErrorCode::TargetNotFound, format!("no user named {:?} on the BMC", update.name))
        })?;
        if let Some(pw) = &update.password {
            self.exec(
                ctx,
                &cmd::SET_USER_PASSWORD,
                cmd::encode_set_user_password(id, PasswordOp::Set, Some(pw.expose())),
            )
            .await?;
        }
        let (mut privilege, mut enabled) = (None, None);
        if update.role.is_some() || update.enabled.is_some() {
            let current = self.user_access(ctx, channel, id).await?;
            let p = match update.role {
                Some(role) => cmd::role_privilege(role),
                None if cmd::privilege_role(current.privilege).is_some() => current.privilege,
                None => cmd::role_privilege(UserRole::NoAccess),
            };
            let e = update.enabled.unwrap_or_else(|| current.is_enabled());
            self.set_enabled(ctx, channel, id, p, e).await?;
            (privilege, enabled) = (update.role.map(|_| p), update.enabled);
        }
        self.verify_slot(ctx, channel, id, &update.name, privilege, enabled).await
    }

    /// Disable (Set User Password, disable), privilege No Access with IPMI
    /// messaging off (Set User Access), and an empty name (Set User Name):
    /// the slot is free again.
    async fn delete_user(&mut self, ctx: &Ctx, name: &str) -> Result<()> {
        let channel = self.channel(ctx).await?;
        let id = self.find_user(ctx, channel, name).await?.ok_or_else(|| {
            ProviderError::new(ErrorCode::TargetNotFound, format!("no user named {name:?} on the BMC"))
        })?;
        self.clear_slot(ctx, channel, id).await?;
        // Gone when no slot is named so any more, not when the BMC said 0.
        if self.find_user(ctx, channel, name).await?.is_some() {
            return Err(ProviderError::new(
                ErrorCode::BmcError,
                format!(
                    "{}: the BMC accepted the removal of user {name:?} (slot {id}) but a slot is still named so",
                    self.bmc
                ),
            ));
        }
        Ok(())
    }
}
