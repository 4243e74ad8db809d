//! Virtual media: insert an image by URL, eject it.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, MediaKind, VirtualMediaOp};

#[async_trait]
pub trait VirtualMedia: Send {
    async fn insert_media(&mut self, ctx: &Ctx, url: &str, media: MediaKind) -> Result<()>;
    async fn eject_media(&mut self, ctx: &Ctx, media: MediaKind) -> Result<()>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::VirtualMedia(_))
}

pub(super) async fn perform(cap: &mut dyn VirtualMedia, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::VirtualMedia(op) = action else { unreachable!("dispatched by `handles`") };
    match op {
        VirtualMediaOp::Insert { url, media } => cap.insert_media(ctx, url, *media).await.map(|_| None),
        VirtualMediaOp::Eject { media } => cap.eject_media(ctx, *media).await.map(|_| None),
    }
}
