//! BMC user accounts.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, UserInfo, UserOp, UserSpec, UserUpdate};

#[async_trait]
pub trait Users: Send {
    async fn list_users(&mut self, ctx: &Ctx) -> Result<Vec<UserInfo>>;
    async fn create_user(&mut self, ctx: &Ctx, spec: &UserSpec) -> Result<UserInfo>;
    /// Must fail with [`bmcfleet_schema::ErrorCode::TargetNotFound`] when the user does not exist.
    async fn update_user(&mut self, ctx: &Ctx, update: &UserUpdate) -> Result<UserInfo>;
    /// Must fail with [`bmcfleet_schema::ErrorCode::TargetNotFound`] when the user does not exist.
    async fn delete_user(&mut self, ctx: &Ctx, name: &str) -> Result<()>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::User(_))
}

pub(super) async fn perform(cap: &mut dyn Users, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::User(op) = action else { unreachable!("dispatched by `handles`") };
    Ok(match op {
        UserOp::List => Some(ActionData::Users(cap.list_users(ctx).await?)),
        UserOp::Create(spec) => Some(ActionData::Users(vec![cap.create_user(ctx, spec).await?])),
        UserOp::Update(u) => Some(ActionData::Users(vec![cap.update_user(ctx, u).await?])),
        UserOp::Delete { name } => {
            cap.delete_user(ctx, name).await?;
            None
        }
    })
}
