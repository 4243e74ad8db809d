//! Fencing: a worker may act for a partition only while it holds the
//! partition's lease. The lease's local validity ends a safety margin
//! before the server can expire it, so an old owner always stops before a
//! new owner can start.
//!
//! Validity is time on the monotonic clock, so it runs out while a process
//! is frozen (SIGSTOP, a VM pause) or cut off from NATS, with no help from
//! a lease round trip. That only protects what asks it *at the moment it
//! acts*: every request to a BMC asks right before it leaves (the
//! executor's send gate, through `bmcfleet_provider::Ctx::sending`), and so
//! does every status write and event. What no client-side check can close
//! is the instant between the check and the socket write: a process frozen
//! exactly there sends that one request when it resumes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Shared between a partition's lanes and the lease keeper: one allocation
/// per lease, so a clone (each lane, each action, each BMC session's send
/// gate) is one reference count.
#[derive(Clone, Debug)]
pub struct Fence(Arc<FenceState>);

/// What a [`Fence`] shares.
#[derive(Debug)]
pub struct FenceState {
    base: Instant,
    /// Milliseconds after `base` until which the lease is known to be ours.
    valid_until_ms: AtomicU64,
    /// Cancelled when the lease is lost: stop at once, even mid-action.
    pub lost: CancellationToken,
    /// Cancelled for a graceful hand-over: finish the current action, then stop.
    pub drain: CancellationToken,
}

impl std::ops::Deref for Fence {
    type Target = FenceState;

    fn deref(&self) -> &FenceState {
        &self.0
    }
}

impl Fence {
    /// A fence for a lease whose acquiring request was sent at `sent_at`
    /// and holds for `valid_for` from then (not from when the answer came).
    pub fn new(sent_at: Instant, valid_for: Duration) -> Self {
        let f = Fence(Arc::new(FenceState {
            base: sent_at,
            valid_until_ms: AtomicU64::new(0),
            lost: CancellationToken::new(),
            drain: CancellationToken::new(),
        }));
        f.extend_from(sent_at, valid_for);
        f
    }

    /// The fence as a send gate: a poll's requests (no status record to
    /// write), and what a BMC session sends on its own between actions
    /// (keep-alives, retransmits, logout; [`bmcfleet_provider::SendGate::for_session`]).
    /// The gate is the fence itself: nothing is allocated per session.
    pub fn gate(&self) -> Arc<dyn bmcfleet_provider::SendGate> {
        self.0.clone()
    }
}

impl FenceState {
    /// Record a renewal sent at `sent_at` that holds for `valid_for`.
    pub fn extend_from(&self, sent_at: Instant, valid_for: Duration) {
        let ms = (sent_at + valid_for).saturating_duration_since(self.base).as_millis() as u64;
        self.valid_until_ms.fetch_max(ms, Ordering::SeqCst);
    }

    /// Whether a new action may start.
    pub fn may_act(&self) -> bool {
        if self.lost.is_cancelled() || self.drain.is_cancelled() {
            return false;
        }
        let now = Instant::now().saturating_duration_since(self.base).as_millis() as u64;
        now < self.valid_until_ms.load(Ordering::SeqCst)
    }

    /// Whether the lease is still (locally) valid: asked immediately before
    /// anything leaves for a BMC, the status record or the events stream.
    pub fn valid(&self) -> bool {
        let now = Instant::now().saturating_duration_since(self.base).as_millis() as u64;
        !self.lost.is_cancelled() && now < self.valid_until_ms.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl bmcfleet_provider::SendGate for FenceState {
    async fn admit(&self, _for_action: bool) -> bmcfleet_provider::Result<()> {
        if self.valid() {
            Ok(())
        } else {
            Err(bmcfleet_provider::ProviderError::new(
                bmcfleet_schema::ErrorCode::Interrupted,
                "this worker no longer holds the lease of the machine's partition; nothing was sent",
            )
            .not_sent())
        }
    }

    fn holds(&self) -> bool {
        self.valid()
    }

    fn for_session(self: Arc<Self>) -> Arc<dyn bmcfleet_provider::SendGate> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn validity_runs_out_without_renewal() {
        let f = Fence::new(Instant::now(), Duration::from_secs(10));
        assert!(f.may_act());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(f.may_act());
        f.extend_from(Instant::now(), Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(f.may_act());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!f.may_act() && !f.valid());
        let g = Fence::new(Instant::now(), Duration::from_secs(10));
        g.drain.cancel();
        assert!(!g.may_act() && g.valid());
    }

    #[tokio::test(start_paused = true)]
    async fn a_fence_gate_admits_and_holds_only_while_the_lease_is_valid() {
        use bmcfleet_provider::SendGate;
        let fence = Fence::new(Instant::now(), Duration::from_secs(10));
        let gate = fence.gate();
        let session = gate.clone().for_session();
        // One shared object, not one per session: a gate costs a reference count.
        let at = |g: &Arc<dyn SendGate>| Arc::as_ptr(g) as *const ();
        assert!(at(&session) == at(&gate) && at(&fence.gate()) == Arc::as_ptr(&fence.0) as *const ());
        assert!(gate.admit(true).await.is_ok() && session.holds());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!session.holds(), "the session's gate follows the fence");
        let refused = gate.admit(false).await.unwrap_err();
        assert!(refused.not_sent && refused.code == bmcfleet_schema::ErrorCode::Interrupted, "{refused:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn validity_counts_from_when_the_lease_request_was_sent() {
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(3)).await; // a slow answer
        let f = Fence::new(sent, Duration::from_secs(10));
        tokio::time::advance(Duration::from_millis(6_999)).await;
        assert!(f.valid());
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(!f.valid(), "10 s after the request was sent, not after the answer");
    }
}
