//! The one guarded path every BMC call of a lane takes: a batch's actions
//! ([`crate::executor`]) and the fleet-state polls ([`crate::state`]) alike.
//!
//! [`guarded`] wraps the caller's attempt (session set-up and the BMC
//! requests) in, in this order:
//! 1. the lane's circuit breaker ([`crate::guard::Breaker`]): an open one
//!    fails the call at once with `circuit_open`; after its cooldown the
//!    call is the one probe (no retries);
//! 2. pacing ([`crate::guard::Pacer`]): at least `--bmc-min-interval`
//!    between the starts of two calls to the BMC, whatever they are for
//!    (retries included); a wait that would pass the deadline fails the
//!    call `timeout`, nothing sent;
//! 3. the fence ([`Fencing`]): asked after every wait, right before the
//!    attempt; the send gate in the attempt's `Ctx` then asks it again
//!    before each request. A refusal ends the call (never retried);
//! 4. the attempt, whose outcome (and time, unless it watched a long BMC
//!    task) feeds the breaker; a worker out of a local resource
//!    (`worker_exhausted`) never does;
//! 5. retries of a batch action's retryable failures ([`RetryPolicy`]:
//!    bounded, with jittered backoff, never past the deadline, a
//!    non-idempotent action only when nothing left). A poll is not
//!    retried: the next poll is its retry.
//!
//! What is judged here is the same for both callers; what differs is
//! [`Purpose`]: which failures are retried, and which metrics count.

use crate::guard::{self, Admission, BmcGuard, RetryPolicy, Transition};
use crate::session::SessionSlot;
use crate::Shared;
use bmcfleet_provider::ProviderError;
use bmcfleet_schema::{Action, BmcKey, ErrorCode};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// What a guarded call is for.
#[derive(Clone, Copy, Debug)]
pub enum Purpose<'a> {
    /// One action of a batch: retried per the worker's [`RetryPolicy`]
    /// (its idempotence decides what may be sent again); its refusals and
    /// retries are counted in `breaker_rejections` and `bmc_retries`.
    Action(&'a Action),
    /// A fleet-state poll: one attempt; its outcome is counted by `polls`.
    Poll,
}

impl Purpose<'_> {
    /// Name for logs: the action's kind, or `poll`.
    fn what(&self) -> &'static str {
        match self {
            Purpose::Action(a) => a.kind(),
            Purpose::Poll => "poll",
        }
    }

    /// Whether the attempt's time counts towards the breaker's slow-call
    /// threshold: not for an action that watches a long BMC task (its time
    /// is the task's, not a slow answer).
    fn timed(&self) -> bool {
        !matches!(self, Purpose::Action(a) if a.watches_task())
    }
}

/// One guarded call to a lane's BMC.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// The BMC (logs).
    pub bmc: &'a BmcKey,
    pub purpose: Purpose<'a>,
    /// The protocol for metrics while the slot has no session (`auto` before discovery).
    pub protocol: &'a str,
    /// No wait of this path lasts past it (the attempt's `Ctx` has the same).
    pub deadline: Instant,
}

/// The fence as the guarded path asks it.
pub trait Fencing {
    /// May an attempt start now? Asked after every wait (pacing, backoff),
    /// right before the attempt; `Err` (nothing sent) ends the call.
    fn admit(&self) -> Result<(), ProviderError>;
    /// Whether the gate refused a request of the attempt: the call ends
    /// with its error, without a retry.
    fn refused(&self) -> bool;
}

/// A poll's fence: the lease alone.
impl Fencing for crate::fence::Fence {
    fn admit(&self) -> Result<(), ProviderError> {
        if self.valid() {
            return Ok(());
        }
        Err(ProviderError::new(
            ErrorCode::Interrupted,
            "this worker no longer holds the lease of the machine's partition; nothing was sent",
        )
        .not_sent())
    }

    fn refused(&self) -> bool {
        !self.valid()
    }
}

/// One attempt of a guarded call: what the caller sends, given the lane's
/// session slot and the retry number (0 first).
pub trait Attempt {
    type Output;
    fn attempt<'s>(
        &'s mut self,
        slot: &'s mut SessionSlot,
        retry: u32,
    ) -> impl Future<Output = Result<Self::Output, ProviderError>> + Send + 's;
}

/// The metrics label of a lane's calls: the provider of its session, else
/// the call's protocol (no session yet, e.g. `auto` before discovery).
pub fn protocol_label(slot: &SessionSlot, protocol: &str) -> crate::metrics::ProtocolLabels {
    crate::metrics::ProtocolLabels { protocol: slot.provider().unwrap_or(protocol).to_owned() }
}

/// Run `attempt` under the lane's breaker, pacer, fence and retry policy:
/// see the module doc.
pub async fn guarded<A: Attempt>(
    shared: &Shared,
    guard: &mut BmcGuard,
    slot: &mut SessionSlot,
    call: Call<'_>,
    fencing: &impl Fencing,
    mut attempt: A,
) -> Result<A::Output, ProviderError> {
    let Call { bmc, purpose, protocol, deadline } = call;
    let settings = &shared.guard;
    let policy = RetryPolicy { max: settings.retry_max, backoff: settings.retry_backoff };
    let mut retry = 0u32;
    loop {
        let now = Instant::now();
        let probe = match guard.breaker.admit(now) {
            Admission::Call => false,
            Admission::Probe => {
                tracing::info!(bmc = %bmc, action = purpose.what(), "Circuit breaker half-open: probing the BMC.");
                true
            }
            Admission::Refused { until } => {
                if let Purpose::Action(_) = purpose {
                    shared.metrics.breaker_rejections.get_or_create(&protocol_label(slot, protocol)).inc();
                }
                return Err(guard.breaker.refusal(until, now));
            }
        };
        pace(guard, deadline).await?;
        fencing.admit()?;
        let started = Instant::now();
        guard.pacer.started(started);
        let result = attempt.attempt(slot, retry).await;
        let took = if purpose.timed() { started.elapsed() } else { Duration::ZERO };
        // Out of descriptors (or of Redfish answer memory) is this
        // worker's fault, never the BMC's: a distinct error, a metric
        // and an alarm, and the breaker is not fed. Providers set the
        // code only from the typed I/O error of a socket they could not
        // make, or from their own memory budget, never from text a BMC sent.
        if let Err(e) = &result {
            if e.code == ErrorCode::WorkerExhausted {
                shared.metrics.worker_exhausted.inc();
                tracing::error!(bmc = %bmc, action = purpose.what(), error = %e, "This worker ran out of a local resource (the error says which); raise its limit (not a BMC fault).");
                return result;
            }
        }
        let transition = guard.breaker.record(Instant::now(), result.as_ref().map(drop), took);
        match transition {
            Some(Transition::Opened | Transition::Reopened) => tracing::warn!(
                bmc = %bmc, threshold = settings.breaker_threshold, probe,
                cooldown = %bmcfleet_schema::duration::format(settings.breaker_cooldown),
                "Circuit breaker opened: this BMC's actions fail fast until the cooldown passes."
            ),
            Some(Transition::Closed) => tracing::info!(bmc = %bmc, "Circuit breaker closed: the BMC answered."),
            None => {}
        }
        let e = match result {
            Ok(data) => return Ok(data),
            Err(e) if fencing.refused() => return Err(e),
            Err(e) => e,
        };
        let Purpose::Action(action) = purpose else { return Err(e) };
        let open = !matches!(guard.breaker.state(), guard::BreakerState::Closed);
        if probe || open || !policy.should_retry(action, &e, retry) {
            return Err(e);
        }
        retry += 1;
        let delay = policy.delay(retry, guard::jitter_unit());
        if Instant::now() + delay >= deadline {
            tracing::info!(bmc = %bmc, action = action.kind(), error = %e, "Not retrying: the action deadline would pass first.");
            return Err(e);
        }
        tracing::info!(
            bmc = %bmc, action = action.kind(), retry, of = policy.max, delay_ms = delay.as_millis() as u64,
            error.code = e.code.as_str(), error = %e, "Retrying the BMC call."
        );
        shared.metrics.bmc_retries.get_or_create(&protocol_label(slot, protocol)).inc();
        tokio::time::sleep(delay).await;
    }
}

/// Pacing: at least `--bmc-min-interval` between two call starts; the wait
/// counts against the deadline.
async fn pace(guard: &BmcGuard, deadline: Instant) -> Result<(), ProviderError> {
    let Some(at) = guard.pacer.next_start().filter(|at| *at > Instant::now()) else { return Ok(()) };
    if at >= deadline {
        tokio::time::sleep_until(deadline).await;
        return Err(ProviderError::new(
            ErrorCode::Timeout,
            "the action deadline passed while waiting for this BMC's minimum interval between calls (--bmc-min-interval)",
        )
        .not_sent());
    }
    tokio::time::sleep_until(at).await;
    Ok(())
}
