//! Protecting BMCs and lanes from each other: bounded retries with backoff,
//! a per-BMC circuit breaker and a per-BMC minimum interval between calls.
//!
//! All state here belongs to one BMC lane ([`BmcGuard`], held next to the
//! lane's session): there is no worker-wide or fleet-wide state, so a failing
//! BMC can only slow down its own lane.
//!
//! - [`RetryPolicy`]: which failures are retried (retryable errors only; a
//!   non-idempotent action only when the request provably never left) and
//!   how long to wait before each retry (capped exponential backoff with
//!   jitter). The caller never waits past the action's deadline.
//! - [`Breaker`]: after `threshold` consecutive calls without an answer
//!   (timeouts, unreachable) or answered only after `slow_call` or longer,
//!   the breaker opens for `cooldown`; actions then fail at once with
//!   `circuit_open`. After the cooldown one call (the probe, without
//!   retries) decides: a prompt answer closes it, silence or slowness reopens
//!   it. Prompt answers, errors included (auth failures, BMC errors), count
//!   as health. Counting slow calls keeps a BMC that does answer, but
//!   consistently too slowly, from holding its lane (and its queue's share of
//!   the partition) for hours.
//! - [`Pacer`]: at least `min_interval` between the starts of two calls to
//!   the same BMC (retries included).

use bmcfleet_provider::ProviderError;
use bmcfleet_schema::{Action, ErrorCode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::time::Duration;
use tokio::time::Instant;

/// Longest wait between two attempts, whatever the base backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The resilience settings of a worker (from its flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Extra attempts after the first (0: no retries).
    pub retry_max: u32,
    /// Wait before the first retry; doubled for each further one (capped at [`MAX_BACKOFF`]).
    pub retry_backoff: Duration,
    /// Consecutive no-answer failures that open a BMC's breaker (0: never).
    pub breaker_threshold: u32,
    /// How long an open breaker fails actions fast before one probe may run.
    pub breaker_cooldown: Duration,
    /// A call answered only after this long counts towards opening the
    /// breaker like one without an answer (0: off).
    pub slow_call: Duration,
    /// Minimum time between the starts of two calls to one BMC (0: off).
    pub min_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retry_max: 2,
            retry_backoff: Duration::from_millis(200),
            breaker_threshold: 5,
            breaker_cooldown: Duration::from_secs(30),
            slow_call: Duration::from_secs(30),
            min_interval: Duration::from_millis(50),
        }
    }
}

/// Whether a failure was the BMC not answering (as opposed to an answer,
/// even an error one). Only these trip the breaker.
pub fn no_answer(e: &ProviderError) -> bool {
    matches!(e.code, ErrorCode::Timeout | ErrorCode::Unreachable | ErrorCode::DeadlineExceeded)
}

/// Which failures are retried, and after how long.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub max: u32,
    pub backoff: Duration,
}

impl RetryPolicy {
    /// Whether `action`, having failed with `e` on attempt `attempt` (0 = the
    /// first), may be sent again. Never for answers that will not change
    /// (auth, permission, unsupported, validation: `retryable` is false for
    /// them), and never for a non-idempotent action that may have reached the BMC.
    pub fn should_retry(&self, action: &Action, e: &ProviderError, attempt: u32) -> bool {
        attempt < self.max && e.retryable && (action.is_idempotent() || e.not_sent)
    }

    /// Wait before retry number `retry` (1 = the first retry): exponential
    /// from `backoff`, capped at [`MAX_BACKOFF`], with "equal jitter" (a
    /// uniform draw in the upper half) so lanes that failed together do not
    /// retry together. `unit` is a uniform number in [0, 1).
    pub fn delay(&self, retry: u32, unit: f64) -> Duration {
        let capped = bmcfleet_common::backoff::Backoff::new(self.backoff, MAX_BACKOFF.max(self.backoff))
            .delay(retry.saturating_sub(1));
        capped / 2 + capped.mul_f64(unit.clamp(0.0, 1.0) / 2.0)
    }
}

/// A uniform number in [0, 1) for jitter (no RNG dependency needed: the
/// standard library's randomly keyed hasher, fed the time).
pub fn jitter_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// State of one BMC's circuit breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls flow; consecutive no-answer failures are counted.
    Closed,
    /// Calls fail fast until the instant passes.
    Open { until: Instant },
    /// The cooldown passed: the next call is the one probe.
    HalfOpen,
}

/// What [`Breaker::admit`] allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// An ordinary call (retries allowed).
    Call,
    /// The half-open probe: one attempt, no retries.
    Probe,
    /// Fail fast: the breaker is open until this instant.
    Refused { until: Instant },
}

/// A change of breaker state worth logging and counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Opened,
    Reopened,
    Closed,
}

/// Metrics a breaker updates.
#[derive(Clone, Debug, Default)]
pub struct BreakerMetrics {
    /// Breakers of this worker that are not closed right now.
    pub open: Gauge,
    /// Times a breaker opened (including reopening after a failed probe).
    pub opened: Counter,
}

/// One BMC's circuit breaker.
#[derive(Debug)]
pub struct Breaker {
    threshold: u32,
    cooldown: Duration,
    slow_call: Duration,
    failures: u32,
    state: BreakerState,
    /// The failure that opened it (for the fast-fail message).
    last_error: Option<String>,
    metrics: BreakerMetrics,
}

impl Breaker {
    pub fn new(threshold: u32, cooldown: Duration, metrics: BreakerMetrics) -> Breaker {
        Breaker {
            threshold,
            cooldown,
            slow_call: Duration::ZERO,
            failures: 0,
            state: BreakerState::Closed,
            last_error: None,
            metrics,
        }
    }

    /// Count calls that took `slow_call` or longer like unanswered ones (zero: off).
    pub fn with_slow_call(mut self, slow_call: Duration) -> Breaker {
        self.slow_call = slow_call;
        self
    }

    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// May a call start now?
    pub fn admit(&mut self, now: Instant) -> Admission {
        match self.state {
            BreakerState::Closed => Admission::Call,
            BreakerState::Open { until } if now < until => Admission::Refused { until },
            BreakerState::Open { .. } | BreakerState::HalfOpen => {
                self.state = BreakerState::HalfOpen;
                Admission::Probe
            }
        }
    }

    /// Record the outcome of a call that took `took`: `Ok` or an error that
    /// is an answer close the breaker when prompt; a no-answer failure or a
    /// slow call counts towards opening it.
    pub fn record(&mut self, now: Instant, outcome: Result<(), &ProviderError>, took: Duration) -> Option<Transition> {
        let failure = match outcome {
            Err(e) if no_answer(e) => Some(e.to_string()),
            _ if !self.slow_call.is_zero() && took >= self.slow_call => Some(format!(
                "answered only after {} (the slow-call threshold is {})",
                bmcfleet_schema::duration::format(Duration::from_millis(took.as_millis() as u64)),
                bmcfleet_schema::duration::format(self.slow_call)
            )),
            _ => None,
        };
        match failure {
            Some(why) => {
                self.failures = self.failures.saturating_add(1);
                let was = self.state;
                match was {
                    BreakerState::HalfOpen => {
                        self.open(now, why);
                        Some(Transition::Reopened)
                    }
                    BreakerState::Closed if self.threshold > 0 && self.failures >= self.threshold => {
                        self.metrics.open.inc();
                        self.open(now, why);
                        Some(Transition::Opened)
                    }
                    _ => None,
                }
            }
            None => {
                self.failures = 0;
                let was = std::mem::replace(&mut self.state, BreakerState::Closed);
                self.last_error = None;
                (was != BreakerState::Closed).then(|| {
                    self.metrics.open.dec();
                    Transition::Closed
                })
            }
        }
    }

    fn open(&mut self, now: Instant, why: String) {
        self.metrics.opened.inc();
        self.state = BreakerState::Open { until: now + self.cooldown };
        self.last_error = Some(why);
    }

    /// The error of an action refused while open.
    pub fn refusal(&self, until: Instant, now: Instant) -> ProviderError {
        let left = until.saturating_duration_since(now);
        ProviderError::new(
            ErrorCode::CircuitOpen,
            format!(
                "not sent: this BMC's circuit breaker is open after {} consecutive calls without an answer \
                 or answered too slowly (last: {}); the next call may probe it in {}",
                self.failures,
                self.last_error.as_deref().unwrap_or("unknown"),
                bmcfleet_schema::duration::format(Duration::from_millis((left.as_millis() as u64).max(1)))
            ),
        )
        .not_sent()
    }
}

impl Drop for Breaker {
    /// A lane dropped with its breaker open no longer counts as open.
    fn drop(&mut self) {
        if self.state != BreakerState::Closed {
            self.metrics.open.dec();
        }
    }
}

/// Minimum interval between the starts of two calls to one BMC.
#[derive(Debug, Default)]
pub struct Pacer {
    min_interval: Duration,
    last_start: Option<Instant>,
}

impl Pacer {
    pub fn new(min_interval: Duration) -> Pacer {
        Pacer { min_interval, last_start: None }
    }

    /// The earliest instant the next call may start.
    pub fn next_start(&self) -> Option<Instant> {
        self.last_start.map(|t| t + self.min_interval).filter(|_| !self.min_interval.is_zero())
    }

    /// Record that a call starts now.
    pub fn started(&mut self, now: Instant) {
        self.last_start = Some(now);
    }

    /// When the last call started, if one did.
    pub fn last_start(&self) -> Option<Instant> {
        self.last_start
    }
}

/// Everything a lane keeps about its BMC besides the session.
#[derive(Debug)]
pub struct BmcGuard {
    pub breaker: Breaker,
    pub pacer: Pacer,
}

impl BmcGuard {
    pub fn new(settings: &Settings, metrics: BreakerMetrics) -> BmcGuard {
        BmcGuard {
            breaker: Breaker::new(settings.breaker_threshold, settings.breaker_cooldown, metrics)
                .with_slow_call(settings.slow_call),
            pacer: Pacer::new(settings.min_interval),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::{PowerOp, UserOp, UserSpec};

    fn err(code: ErrorCode) -> ProviderError {
        ProviderError::new(code, "x")
    }

    #[test]
    fn only_retryable_errors_are_retried_and_non_idempotent_ones_only_when_unsent() {
        let p = RetryPolicy { max: 2, backoff: Duration::from_millis(100) };
        let on = Action::Power(PowerOp::On);
        let cycle = Action::Power(PowerOp::Cycle);
        let create = Action::User(UserOp::Create(UserSpec {
            name: "u".into(),
            password: "p".into(),
            role: bmcfleet_schema::UserRole::Admin,
            enabled: true,
        }));
        assert!(p.should_retry(&on, &err(ErrorCode::Timeout), 0));
        assert!(p.should_retry(&on, &err(ErrorCode::BmcError).with_retryable(true), 1));
        assert!(!p.should_retry(&on, &err(ErrorCode::Timeout), 2), "bounded by max");
        for code in [
            ErrorCode::AuthFailed,
            ErrorCode::PermissionDenied,
            ErrorCode::Unsupported,
            ErrorCode::InvalidField,
            ErrorCode::BmcError,
        ] {
            assert!(!p.should_retry(&on, &err(code), 0), "{code} is not retried");
        }
        // An auth failure stays final even if a provider marked it oddly as unsent.
        assert!(!p.should_retry(&cycle, &err(ErrorCode::AuthFailed).not_sent(), 0));
        assert!(!p.should_retry(&cycle, &err(ErrorCode::Timeout), 0), "may have reached the BMC");
        assert!(!p.should_retry(&create, &err(ErrorCode::Unreachable), 0));
        assert!(p.should_retry(&cycle, &err(ErrorCode::Unreachable).not_sent(), 0), "never sent: safe");
        assert!(!RetryPolicy { max: 0, ..p }.should_retry(&on, &err(ErrorCode::Timeout), 0));
    }

    #[test]
    fn backoff_is_exponential_capped_and_jittered_in_the_upper_half() {
        let p = RetryPolicy { max: 10, backoff: Duration::from_millis(200) };
        assert_eq!(p.delay(1, 0.0), Duration::from_millis(100));
        assert_eq!(p.delay(1, 1.0), Duration::from_millis(200));
        assert_eq!(p.delay(2, 1.0), Duration::from_millis(400));
        assert_eq!(p.delay(3, 0.5), Duration::from_millis(600));
        assert_eq!(p.delay(20, 1.0), MAX_BACKOFF);
        assert_eq!(p.delay(20, 0.0), MAX_BACKOFF / 2);
        for _ in 0..100 {
            let u = jitter_unit();
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }

    #[test]
    fn breaker_opens_after_consecutive_silences_and_a_probe_decides() {
        let m = BreakerMetrics::default();
        let mut b = Breaker::new(3, Duration::from_secs(30), m.clone());
        let t0 = Instant::now();
        let timeout = err(ErrorCode::Timeout);
        assert_eq!(b.admit(t0), Admission::Call);
        assert_eq!(b.record(t0, Err(&timeout), Duration::ZERO), None);
        assert_eq!(b.record(t0, Err(&timeout), Duration::ZERO), None);
        // An answer (even an error) resets the count.
        assert_eq!(b.record(t0, Err(&err(ErrorCode::BmcError)), Duration::ZERO), None);
        assert_eq!(b.record(t0, Err(&timeout), Duration::ZERO), None);
        assert_eq!(b.record(t0, Err(&err(ErrorCode::Unreachable)), Duration::ZERO), None);
        assert_eq!(b.record(t0, Err(&timeout), Duration::ZERO), Some(Transition::Opened));
        assert_eq!((m.open.get(), m.opened.get()), (1, 1));
        let until = t0 + Duration::from_secs(30);
        assert_eq!(b.admit(t0 + Duration::from_secs(29)), Admission::Refused { until });
        let refusal = b.refusal(until, t0);
        assert_eq!(refusal.code, ErrorCode::CircuitOpen);
        assert!(refusal.not_sent && refusal.message.contains("3 consecutive"), "{}", refusal.message);
        // After the cooldown: one probe; silence reopens.
        let t1 = t0 + Duration::from_secs(30);
        assert_eq!(b.admit(t1), Admission::Probe);
        assert_eq!(b.record(t1, Err(&timeout), Duration::ZERO), Some(Transition::Reopened));
        assert!(matches!(b.admit(t1), Admission::Refused { .. }));
        assert_eq!((m.open.get(), m.opened.get()), (1, 2));
        // An answer to the next probe closes it.
        let t2 = t1 + Duration::from_secs(30);
        assert_eq!(b.admit(t2), Admission::Probe);
        assert_eq!(b.record(t2, Ok(()), Duration::ZERO), Some(Transition::Closed));
        assert_eq!(b.admit(t2), Admission::Call);
        assert_eq!(m.open.get(), 0);
    }

    #[test]
    fn auth_failures_never_trip_the_breaker_and_threshold_zero_disables_it() {
        let mut b = Breaker::new(1, Duration::from_secs(1), BreakerMetrics::default());
        let now = Instant::now();
        for _ in 0..10 {
            assert_eq!(b.record(now, Err(&err(ErrorCode::AuthFailed)), Duration::ZERO), None);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        let mut off = Breaker::new(0, Duration::from_secs(1), BreakerMetrics::default());
        for _ in 0..100 {
            assert_eq!(off.record(now, Err(&err(ErrorCode::Timeout)), Duration::ZERO), None);
        }
        assert_eq!(off.admit(now), Admission::Call);
    }

    #[test]
    fn consistently_slow_answers_open_the_breaker_like_silence() {
        let slow = Duration::from_secs(10);
        let mut b = Breaker::new(3, Duration::from_secs(30), BreakerMetrics::default()).with_slow_call(slow);
        let t0 = Instant::now();
        assert_eq!(b.record(t0, Ok(()), slow), None);
        // A prompt answer in between resets the count.
        assert_eq!(b.record(t0, Ok(()), slow - Duration::from_millis(1)), None);
        assert_eq!(b.record(t0, Ok(()), slow), None);
        assert_eq!(
            b.record(t0, Err(&err(ErrorCode::BmcError)), Duration::from_secs(11)),
            None,
            "a slow error answer counts too"
        );
        assert_eq!(b.record(t0, Err(&err(ErrorCode::Timeout)), Duration::from_secs(1)), Some(Transition::Opened));
        let until = t0 + Duration::from_secs(30);
        let refusal = b.refusal(until, t0);
        assert_eq!(refusal.code, ErrorCode::CircuitOpen);
        // A slow probe reopens it; a prompt one closes it.
        assert_eq!(b.admit(until), Admission::Probe);
        assert_eq!(b.record(until, Ok(()), Duration::from_secs(12)), Some(Transition::Reopened));
        assert!(
            b.refusal(until + Duration::from_secs(30), until).message.contains("answered only after 12s"),
            "{}",
            b.refusal(until, until).message
        );
        let t2 = until + Duration::from_secs(30);
        assert_eq!(b.admit(t2), Admission::Probe);
        assert_eq!(b.record(t2, Ok(()), Duration::from_millis(5)), Some(Transition::Closed));
        // Off (zero): slowness is never counted.
        let mut off = Breaker::new(1, Duration::from_secs(1), BreakerMetrics::default());
        assert_eq!(off.record(t0, Ok(()), Duration::from_secs(3600)), None);
    }

    #[test]
    fn dropping_an_open_breaker_releases_the_gauge() {
        let m = BreakerMetrics::default();
        let mut b = Breaker::new(1, Duration::from_secs(1), m.clone());
        b.record(Instant::now(), Err(&err(ErrorCode::Unreachable)), Duration::ZERO);
        assert_eq!(m.open.get(), 1);
        drop(b);
        assert_eq!(m.open.get(), 0);
    }

    #[test]
    fn pacer_spaces_starts() {
        let mut p = Pacer::new(Duration::from_millis(200));
        assert_eq!(p.next_start(), None);
        let t = Instant::now();
        p.started(t);
        assert_eq!(p.next_start(), Some(t + Duration::from_millis(200)));
        let mut off = Pacer::new(Duration::ZERO);
        off.started(t);
        assert_eq!(off.next_start(), None);
    }
}
