//! Fencing: a worker may act for a partition only while it holds the
//! partition's lease. The lease's local validity ends a safety margin
//! before the server can expire it, so an old owner always stops before a
//! new owner can start.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Shared between a partition's lanes and the lease keeper.
#[derive(Clone)]
pub struct Fence {
    base: Instant,
    /// Milliseconds after `base` until which the lease is known to be ours.
    valid_until_ms: Arc<AtomicU64>,
    /// Cancelled when the lease is lost: stop at once, even mid-action.
    pub lost: CancellationToken,
    /// Cancelled for a graceful hand-over: finish the current action, then stop.
    pub drain: CancellationToken,
}

impl Fence {
    pub fn new(valid_for: Duration) -> Self {
        let f = Fence {
            base: Instant::now(),
            valid_until_ms: Arc::new(AtomicU64::new(0)),
            lost: CancellationToken::new(),
            drain: CancellationToken::new(),
        };
        f.extend_from(Instant::now(), valid_for);
        f
    }

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

    /// Whether the lease is still (locally) valid.
    pub fn valid(&self) -> bool {
        let now = Instant::now().saturating_duration_since(self.base).as_millis() as u64;
        !self.lost.is_cancelled() && now < self.valid_until_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn validity_runs_out_without_renewal() {
        let f = Fence::new(Duration::from_secs(10));
        assert!(f.may_act());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(f.may_act());
        f.extend_from(Instant::now(), Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(f.may_act());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!f.may_act() && !f.valid());
        let g = Fence::new(Duration::from_secs(10));
        g.drain.cancel();
        assert!(!g.may_act() && g.valid());
    }
}
