//! Virtual media: insert an image by URL, eject it. A slot is chosen by
//! what it advertises it can do; an insert or eject that finds nothing to
//! do says so ([`NoChange`]) instead of reporting a change.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, MediaKind, NoChange, VirtualMediaOp};

#[async_trait]
pub trait VirtualMedia: Send {
    /// `Some` when nothing was done (the image is in already).
    async fn insert_media(&mut self, ctx: &Ctx, url: &str, media: MediaKind) -> Result<Option<NoChange>>;
    /// `Some` when nothing was done (no media of that kind is in).
    async fn eject_media(&mut self, ctx: &Ctx, media: MediaKind) -> Result<Option<NoChange>>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::VirtualMedia(_))
}

pub(super) async fn perform(cap: &mut dyn VirtualMedia, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::VirtualMedia(op) = action else { unreachable!("dispatched by `handles`") };
    let none = match op {
        VirtualMediaOp::Insert { url, media } => cap.insert_media(ctx, url, *media).await?,
        VirtualMediaOp::Eject { media } => cap.eject_media(ctx, *media).await?,
    };
    Ok(none.map(ActionData::NoChange))
}
