//! Users: `AccountService.Accounts`.
//!
//! Two kinds of account services exist in the field:
//! - **collections** (DMTF, HPE iLO, Supermicro, OpenBMC): `POST` creates
//!   an account, `DELETE` removes it;
//! - **fixed slots** (Dell iDRAC: 16, Lenovo XCC: 12): every slot always
//!   exists, empty ones have `UserName: ""`; an account is created by
//!   PATCHing a name into an empty slot and removed by emptying it.
//!
//! A collection that lists empty slots is treated as slot-based; slot `1`
//! is skipped while another is free (on IPMI-backed BMCs account 1 is the
//! reserved anonymous user). Update never creates: a missing user is
//! `target_not_found`.

use crate::error::{err, invalid, unsupported};
use crate::json::{link, members, str_of};
use crate::session::RedfishSession;
use crate::transport::Resource;
use bmcfleet_provider::{Ctx, Result, Users};
use bmcfleet_schema::{ErrorCode, UserInfo, UserRole, UserSpec, UserUpdate};
use reqwest::StatusCode;
use serde_json::{json, Map, Value};

pub(crate) fn role_id(role: UserRole) -> Result<&'static str> {
    Ok(match role {
        UserRole::Admin => "Administrator",
        UserRole::Operator => "Operator",
        UserRole::User => "ReadOnly",
        UserRole::NoAccess => "NoAccess",
        UserRole::Callback => {
            return Err(unsupported("Redfish has no `callback` role (it is an IPMI privilege level)"))
        }
    })
}

pub(crate) fn role_of(role_id: &str) -> Option<UserRole> {
    Some(match role_id {
        "Administrator" => UserRole::Admin,
        "Operator" => UserRole::Operator,
        "ReadOnly" | "ReadOnlyUser" => UserRole::User,
        "NoAccess" | "None" => UserRole::NoAccess,
        _ => return None,
    })
}

/// One account slot as read from the BMC.
#[derive(Clone, Debug)]
pub(crate) struct Account {
    pub resource: Resource,
    pub id: String,
    pub user_name: String,
}

impl Account {
    pub(crate) fn from(resource: Resource) -> Account {
        let id = str_of(&resource.body, "Id")
            .map(str::to_owned)
            .unwrap_or_else(|| crate::json::last_segment(&resource.path).to_owned());
        let user_name = str_of(&resource.body, "UserName").unwrap_or("").to_owned();
        Account { resource, id, user_name }
    }

    pub(crate) fn is_empty_slot(&self) -> bool {
        self.user_name.trim().is_empty()
    }

    pub(crate) fn info(&self) -> UserInfo {
        UserInfo {
            id: self.id.clone(),
            name: self.user_name.clone(),
            role: str_of(&self.resource.body, "RoleId").and_then(role_of),
            // Absent: this BMC's accounts have no such switch; they are enabled.
            enabled: self.resource.body.get("Enabled").and_then(Value::as_bool).unwrap_or(true),
        }
    }
}

/// Whether this BMC's accounts have an `Enabled` property at all (some,
/// e.g. Nokia's, have none: every account is enabled). Without it the
/// property is never sent, and a disabled account cannot be asked for.
pub(crate) fn models_enabled(accounts: &[Account]) -> bool {
    accounts.is_empty() || accounts.iter().any(|a| a.resource.body.get("Enabled").is_some())
}

/// `enabled` as this BMC can take it: `Some` to send, `None` to leave out.
fn enabled_field(accounts: &[Account], enabled: Option<bool>) -> Result<Option<bool>> {
    match enabled {
        Some(false) if !models_enabled(accounts) => Err(unsupported(
            "this BMC's accounts have no Enabled property: an account cannot be disabled (remove it instead)",
        )),
        Some(_) if !models_enabled(accounts) => Ok(None),
        other => Ok(other),
    }
}

/// The empty slot to fill: lowest numeric id, slot 1 only as a last resort.
pub(crate) fn pick_slot(accounts: &[Account]) -> Option<&Account> {
    let mut empty: Vec<&Account> = accounts.iter().filter(|a| a.is_empty_slot()).collect();
    empty.sort_by_key(|a| (a.id == "1", a.id.parse::<u64>().unwrap_or(u64::MAX), a.id.clone()));
    empty.first().copied()
}

/// An account changed with `body` reads back as asked: named `name`, with
/// the role and the enabled state `body` sent (the password cannot be read
/// back). A BMC's acknowledgement alone is not the change: `bmc_error`
/// naming what differs.
fn verify(info: UserInfo, path: &str, name: &str, body: &Value) -> Result<UserInfo> {
    let mut differs = Vec::new();
    if info.name != name {
        differs.push("another user name".to_owned());
    }
    // A read-back without a role we know (no RoleId, as older firmware
    // whose privileges are OEM, or a vendor's own role name) cannot be
    // compared; one naming another standard role is the change not made.
    if let Some(want) = body.get("RoleId").and_then(Value::as_str) {
        if info.role.is_some() && info.role != role_of(want) {
            differs.push(format!("a role other than {want}"));
        }
    }
    if let Some(want) = body.get("Enabled").and_then(Value::as_bool) {
        if info.enabled != want {
            differs.push(if want { "disabled" } else { "enabled" }.to_owned());
        }
    }
    if differs.is_empty() {
        return Ok(info);
    }
    Err(err(
        ErrorCode::BmcError,
        format!("the BMC accepted the change of user `{name}` but {path} reads back {}", differs.join(", ")),
    ))
}

fn account_body(
    name: Option<&str>,
    password: Option<&str>,
    role: Option<UserRole>,
    enabled: Option<bool>,
) -> Result<Value> {
    let mut m = Map::new();
    if let Some(n) = name {
        m.insert("UserName".into(), json!(n));
    }
    if let Some(p) = password {
        m.insert("Password".into(), json!(p));
    }
    if let Some(r) = role {
        m.insert("RoleId".into(), json!(role_id(r)?));
    }
    if let Some(e) = enabled {
        m.insert("Enabled".into(), json!(e));
    }
    Ok(Value::Object(m))
}

impl RedfishSession {
    async fn accounts_path(&mut self, ctx: &Ctx) -> Result<String> {
        let svc = self
            .service
            .root
            .account_service
            .clone()
            .ok_or_else(|| unsupported("the BMC has no AccountService: users cannot be managed over Redfish"))?;
        let r = self.transport.get_linked(ctx, &svc, "its AccountService").await?;
        link(&r.body, "Accounts").ok_or_else(|| unsupported("the AccountService links no Accounts collection"))
    }

    async fn accounts(&mut self, ctx: &Ctx) -> Result<(String, Vec<Account>)> {
        let path = self.accounts_path(ctx).await?;
        let coll = self.transport.get_linked(ctx, &path, "an Accounts collection").await?;
        let mut out = Vec::new();
        let start = self.transport.received();
        for m in members(&coll.body) {
            match self.transport.get(ctx, &m).await {
                Ok(r) => out.push(Account::from(r)),
                Err(e) if e.code == ErrorCode::TargetNotFound => {
                    tracing::debug!(bmc = %self.transport.bmc(), member = %m, "Listed account is gone; skipped.");
                }
                Err(e) => return Err(e),
            }
            self.transport.kept_within(start, &format!("the accounts of {path}"))?;
        }
        Ok((path, out))
    }

    async fn find_account(&mut self, ctx: &Ctx, name: &str) -> Result<(String, Vec<Account>, Account)> {
        let (path, accounts) = self.accounts(ctx).await?;
        let named: Vec<&Account> = accounts.iter().filter(|a| !a.is_empty_slot() && a.user_name == name).collect();
        let found = match named.as_slice() {
            [one] => (*one).clone(),
            [] => return Err(err(ErrorCode::TargetNotFound, format!("no user `{name}` on this BMC"))),
            // Which one is meant is not guessed: nothing is changed.
            several => {
                return Err(err(
                    ErrorCode::Conflict,
                    format!(
                        "{} accounts of this BMC are named `{name}` ({}): which one is meant is not known; \
                         nothing was changed",
                        several.len(),
                        several.iter().map(|a| a.resource.path.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ))
            }
        };
        Ok((path, accounts, found))
    }

    /// After a removal: no account is named `name` any more (a BMC's
    /// acknowledgement alone is not the removal).
    async fn gone(&mut self, ctx: &Ctx, name: &str, path: &str) -> Result<()> {
        match self.find_account(ctx, name).await {
            Err(e) if e.code == ErrorCode::TargetNotFound => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Err(err(
                ErrorCode::BmcError,
                format!("the BMC accepted the removal of user `{name}` but the accounts still list it ({path})"),
            )),
        }
    }

    /// The account at `path` read back until it is as `body` asked
    /// ([`verify`]; [`Transport::read_back`] settles a moment for a BMC
    /// that applies a change late).
    async fn read_back(&mut self, ctx: &Ctx, path: &str, name: &str, body: &Value) -> Result<UserInfo> {
        let r = self
            .transport
            .read_back(ctx, path, |r| verify(Account::from(r.clone()).info(), path, name, body).is_ok())
            .await?;
        verify(Account::from(r).info(), path, name, body)
    }
}

#[async_trait::async_trait]
impl Users for RedfishSession {
    async fn list_users(&mut self, ctx: &Ctx) -> Result<Vec<UserInfo>> {
        let (_, accounts) = self.accounts(ctx).await?;
        Ok(accounts.iter().filter(|a| !a.is_empty_slot()).map(Account::info).collect())
    }

    async fn create_user(&mut self, ctx: &Ctx, spec: &UserSpec) -> Result<UserInfo> {
        let (coll, accounts) = self.accounts(ctx).await?;
        if let Some(a) = accounts.iter().find(|a| !a.is_empty_slot() && a.user_name == spec.name) {
            return Err(err(
                ErrorCode::Conflict,
                format!("user `{}` already exists (account {}); use a user update to change it", spec.name, a.id),
            ));
        }
        let enabled = enabled_field(&accounts, Some(spec.enabled))?;
        let body = account_body(Some(&spec.name), Some(spec.password.expose()), Some(spec.role), enabled)?;
        if let Some(slot) = pick_slot(&accounts).cloned() {
            tracing::info!(bmc = %self.transport.bmc(), slot = %slot.id, "Creating a user in an empty account slot.");
            let path = slot.resource.path.clone();
            self.patch_with_etag(ctx, slot.resource, &body).await?;
            return self.read_back(ctx, &path, &spec.name, &body).await;
        }
        tracing::info!(bmc = %self.transport.bmc(), "Creating a user in the Accounts collection.");
        let reply = self.transport.post(ctx, &coll, &body).await.map_err(|e| {
            if e.code == ErrorCode::Unsupported {
                err(
                    ErrorCode::BmcError,
                    format!("the BMC has no free account slot and refuses new accounts: {}", e.message),
                )
            } else {
                e
            }
        })?;
        let created = reply.location().or_else(|| {
            reply
                .json(&reqwest::Method::POST, &coll)
                .ok()
                .and_then(|v| str_of(&v, "@odata.id").map(crate::json::norm_path))
        });
        match created {
            Some(path) => self.read_back(ctx, &path, &spec.name, &body).await,
            None => {
                let (_, _, a) = self.find_account(ctx, &spec.name).await?;
                let path = a.resource.path.clone();
                verify(a.info(), &path, &spec.name, &body)
            }
        }
    }

    async fn update_user(&mut self, ctx: &Ctx, update: &UserUpdate) -> Result<UserInfo> {
        let (_, accounts, account) = self.find_account(ctx, &update.name).await?;
        let enabled = enabled_field(&accounts, update.enabled)?;
        let body = account_body(None, update.password.as_ref().map(|p| p.expose()), update.role, enabled)?;
        if body.as_object().is_some_and(Map::is_empty) {
            if update.enabled.is_some() {
                // `enabled: true` where every account is enabled: already so.
                return Ok(account.info());
            }
            return Err(invalid("the user update changes nothing"));
        }
        let path = account.resource.path.clone();
        self.patch_with_etag(ctx, account.resource, &body).await?;
        self.read_back(ctx, &path, &update.name, &body).await
    }

    async fn delete_user(&mut self, ctx: &Ctx, name: &str) -> Result<()> {
        if name == self.transport.username() {
            return Err(invalid(format!("refusing to delete `{name}`: it is the account bmcfleet uses for this BMC")));
        }
        let (_, accounts, account) = self.find_account(ctx, name).await?;
        let slot_based = accounts.iter().any(Account::is_empty_slot);
        let path = account.resource.path.clone();
        if !slot_based {
            let reply = self.transport.exchange(ctx, reqwest::Method::DELETE, &path, None, None).await?;
            if !matches!(reply.status, StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED) {
                self.transport.complete(ctx, &reqwest::Method::DELETE, &path, reply).await?;
                return self.gone(ctx, name, &path).await;
            }
            tracing::debug!(bmc = %self.transport.bmc(), "DELETE refused; emptying the account slot instead.");
        }
        let clear =
            if models_enabled(&accounts) { json!({"UserName": "", "Enabled": false}) } else { json!({"UserName": ""}) };
        self.patch_with_etag(ctx, account.resource, &clear).await?;
        self.gone(ctx, name, &path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acct(id: &str, name: &str) -> Account {
        Account::from(Resource {
            path: format!("/redfish/v1/AccountService/Accounts/{id}"),
            body: json!({"Id": id, "UserName": name, "Enabled": !name.is_empty(), "RoleId": "Administrator"}),
            etag: None,
        })
    }

    #[test]
    fn picks_lowest_free_slot_but_not_slot_one() {
        let dell = vec![acct("1", ""), acct("2", "root"), acct("10", ""), acct("3", "")];
        assert_eq!(pick_slot(&dell).unwrap().id, "3");
        let only_one = vec![acct("1", ""), acct("2", "root")];
        assert_eq!(pick_slot(&only_one).unwrap().id, "1");
        assert!(pick_slot(&[acct("2", "root")]).is_none());
    }

    #[test]
    fn roles_round_trip() {
        for r in [UserRole::Admin, UserRole::Operator, UserRole::User, UserRole::NoAccess] {
            assert_eq!(role_of(role_id(r).unwrap()), Some(r));
        }
        assert_eq!(role_id(UserRole::Callback).unwrap_err().code, ErrorCode::Unsupported);
    }

    #[test]
    fn update_body_has_only_given_fields() {
        let b = account_body(None, None, Some(UserRole::Operator), None).unwrap();
        assert_eq!(b, json!({"RoleId": "Operator"}));
    }
}
