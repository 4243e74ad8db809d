//! The one exponential backoff: `first`, doubled per retry, capped. Callers
//! add what is theirs on top (jitter for BMC retries; a fence or a deadline
//! that ends the waiting).

use std::time::Duration;

/// Capped exponential backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the first retry.
    pub first: Duration,
    /// No wait is longer.
    pub cap: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff { first, cap }
    }

    /// The wait before retry number `retry` (0 = the first retry):
    /// `first * 2^retry`, at most `cap`.
    pub fn delay(&self, retry: u32) -> Duration {
        self.first.saturating_mul(1u32 << retry.min(31)).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_stays_at_the_cap() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let ms: Vec<u128> = (0..8).map(|r| b.delay(r).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5), "no overflow");
        let big = Backoff::new(Duration::from_secs(10), Duration::from_secs(5));
        assert_eq!(big.delay(0), Duration::from_secs(5), "the cap wins over a larger first wait");
    }
}
