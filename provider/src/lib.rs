//! # bmcfleet-provider
//!
//! The capability layer between the worker and a BMC protocol.
//!
//! A provider (IPMI, Redfish, AMT, the test `sim`) implements [`Connector`]:
//! given a target and resolved credentials it opens a [`BmcSession`]. A
//! session exposes one accessor per [`Capability`]; each accessor returns
//! `Some(&mut dyn Trait)` when the provider implements that capability and
//! `None` (the default) when it does not. The capability list is *derived*
//! from those accessors ([`capabilities`]), so declared and implemented
//! capabilities cannot drift apart.
//!
//! Sessions are long-lived: the worker keeps one per BMC lane while the lane
//! is busy (an IPMI session handshake or a Redfish session token is paid
//! once per lane, not per action) and closes it when the lane is evicted.
//!
//! # Layout
//! - [`capability`]: every capability declared once (its trait, the actions
//!   it serves, how they dispatch); [`Capability`], [`BmcSession`],
//!   [`capabilities`] and [`perform`] are derived from that one table.
//! - [`ProviderError`]: the single error type, carrying a wire [`ErrorCode`].
//! - [`Ctx`]: per-call context (deadline, send gate, plan recorder).
//! - [`Plan`]: plan mode's recorder at the send seam ([`Ctx::sending_request`]).
//! - [`image`]: the firmware images a worker may push (its operator's
//!   directory; what a push update reads, checked before anything is sent).

pub mod capability;
pub mod image;
pub mod tls;

// Every capability trait, `Capability`, `capabilities` and `perform`: a new
// capability is exported by its line in the table, not listed again here.
pub use capability::*;

use async_trait::async_trait;
use bmcfleet_schema::{BmcTarget, ErrorBody, ErrorCode, Secret};
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// A provider failure: a wire code plus the BMC's own words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ProviderError {
    pub code: ErrorCode,
    pub message: String,
    /// Whether sending the same request again may succeed (packet loss, 5xx).
    /// Never true for auth failures.
    pub retryable: bool,
    /// The request provably never reached the BMC (the connection was
    /// refused or no session could be opened before it was sent). Only then
    /// may the worker retry a non-idempotent action. `false` (the default)
    /// means "it may have been sent": the conservative answer whenever a
    /// provider cannot tell, e.g. a UDP request that got no reply.
    pub not_sent: bool,
    /// The status the BMC answered with (HTTP), when the error is such an
    /// answer: what a provider decides on, never parsed back from `message`.
    pub status: Option<u16>,
}

impl ProviderError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let retryable = matches!(code, ErrorCode::Timeout | ErrorCode::Unreachable);
        ProviderError { code, message: message.into(), retryable, not_sent: false, status: None }
    }

    /// Record the status the BMC answered with.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// An operation within a capability the BMC/provider cannot do (e.g.
    /// `bootdev safe` on Redfish).
    pub fn unsupported_op(message: impl Into<String>) -> Self {
        ProviderError::new(ErrorCode::Unsupported, message)
    }

    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Mark the error as raised before the request left (see [`ProviderError::not_sent`]).
    pub fn not_sent(self) -> Self {
        self.with_not_sent(true)
    }

    /// Plan mode stopped the action at its first state-changing request,
    /// which was not sent ([`Ctx::sending_request`]). Never retryable; the
    /// worker reports the action's plan instead of this error.
    pub fn planned() -> Self {
        ProviderError::new(
            ErrorCode::Cancelled,
            "plan mode: stopped before the first state-changing request, which was not sent",
        )
        .with_retryable(false)
        .not_sent()
    }

    /// Set [`ProviderError::not_sent`] from a provider's own knowledge.
    pub fn with_not_sent(mut self, not_sent: bool) -> Self {
        self.not_sent = not_sent;
        self
    }
}

/// Longest message a provider puts into an error: a BMC's own text (a
/// Redfish error body, a WS-Man fault) can be as long as its whole answer.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// `s` cut to at most [`MAX_ERROR_MESSAGE`] bytes (on a character
/// boundary), `…` marking a cut.
pub fn clip_message(mut s: String) -> String {
    if s.len() > MAX_ERROR_MESSAGE {
        let mut cut = MAX_ERROR_MESSAGE;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Lower-case hex of `bytes` (hashes, digests, raw records): the schema's.
pub use bmcfleet_schema::hex;

/// The local cause when `e` (or an error in its source chain) is this
/// process running out of file descriptors (`EMFILE`, `ENFILE`) — found on
/// the typed I/O error where the socket was made, never in text a BMC could
/// write.
pub fn descriptor_exhaustion<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if is_descriptor_exhaustion(io) {
                return Some(io);
            }
        }
        cur = err.source();
    }
    None
}

/// Whether an I/O error is `EMFILE` (this process's open-files limit) or
/// `ENFILE` (the system's).
pub fn is_descriptor_exhaustion(e: &std::io::Error) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    matches!(e.raw_os_error(), Some(ENFILE | EMFILE))
}

impl ProviderError {
    /// This worker ran out of descriptors before anything reached the BMC:
    /// `worker_exhausted`, retryable, nothing sent. Providers build it only
    /// from a typed I/O error ([`descriptor_exhaustion`]).
    pub fn worker_exhausted(what: impl fmt::Display, cause: &std::io::Error) -> Self {
        ProviderError::new(
            ErrorCode::WorkerExhausted,
            format!("the worker ran out of file descriptors while {what} (not a BMC fault; raise its open-files limit): {cause}"),
        )
        .with_retryable(true)
        .not_sent()
    }
}

impl From<ProviderError> for ErrorBody {
    fn from(e: ProviderError) -> Self {
        ErrorBody::new(e.code, e.message)
    }
}

pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// The last check before a request leaves for a BMC.
///
/// The worker installs one per action attempt ([`Ctx::with_gate`]): it
/// answers `Err` once the worker no longer holds the lease of the BMC's
/// partition, so a worker that froze or lost NATS sends nothing after its
/// successor may have started. Providers never call it directly: they call
/// [`Ctx::sending`] immediately before every request they hand to a socket
/// (session set-up, each request of an action, each re-established session).
#[async_trait]
pub trait SendGate: Send + Sync + fmt::Debug {
    /// May a request leave now? `for_action` is false for the session
    /// set-up the worker does before an attempt ([`Ctx::for_attempt`] turns
    /// it on): only an action's own requests can change the machine.
    async fn admit(&self, for_action: bool) -> Result<()>;

    /// Whether requests may still leave, without waiting or writing
    /// anything: for what a provider sends on its own (keep-alives,
    /// retransmits, re-establishing or closing a session), including from
    /// threads outside the runtime.
    fn holds(&self) -> bool;

    /// The gate a session keeps for what it sends on its own after this
    /// action ([`Ctx::send_gate`]): it answers [`SendGate::holds`] as this
    /// one does. A gate that carries an action's state (its status record,
    /// its events) returns a lighter one, so that a session living for
    /// minutes does not keep the batch that opened it in memory.
    fn for_session(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn SendGate>;
}

/// Where an action that starts a long-running BMC task
/// ([`bmcfleet_schema::Action::watches_task`]: a firmware update) records
/// it. The worker's implementation writes the batch's status record (CAS,
/// fenced) before returning, so that a worker taking the batch over
/// watches the task instead of starting a second one.
#[async_trait]
pub trait TaskLog: Send + Sync + fmt::Debug {
    /// What an earlier owner of the batch recorded for this action.
    fn resume(&self) -> bmcfleet_schema::TaskResume;
    /// The request that starts the task is about to leave: recorded
    /// durably first. `Err`: send nothing and return it.
    async fn requesting(&self) -> Result<()>;
    /// The BMC named its task: recorded durably. `Err`: stop (the lease is lost).
    async fn started(&self, task: &str) -> Result<()>;
    /// The task's progress (an event; best effort, never waits).
    fn progress(&self, percent: Option<u8>, state: Option<&str>);
}

/// Where a provider reports a known quirk of a BMC it worked around (flags
/// a BMC reports invalid although it keeps the device, a cipher suite it
/// answers instead of the one proposed). The worker's implementation logs
/// a quirk once per machine and counts every occurrence in a metric, so a
/// fleet of such BMCs does not log a warning per action. Without one
/// (library use, tests) a quirk is logged at debug level.
pub trait QuirkLog: Send + Sync + fmt::Debug {
    /// `quirk` is a stable snake_case name (a metric label); `what` says it
    /// for people (no secrets, no BMC-provided text).
    fn noticed(&self, quirk: &'static str, what: &str);
}

/// Per-call context. Build it with [`Ctx::new`] / [`Ctx::with_timeout`]
/// (fields may be added).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Ctx {
    /// No BMC call may run past this instant; providers bound their own
    /// timeouts and retransmits by it.
    pub deadline: Instant,
    /// Which batch/action this call serves, when run by the worker (for
    /// tracing and for the test BMC's bookkeeping).
    pub call: Option<CallInfo>,
    /// Set when a request of this action has been handed to a transport
    /// (shared by clones; [`Ctx::for_attempt`] starts afresh). An action of
    /// several requests whose second one fails to connect has still sent
    /// the first, so its error must not claim `not_sent`.
    sent: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Consulted before every request ([`Ctx::sending`]); none outside the worker.
    gate: Option<std::sync::Arc<dyn SendGate>>,
    /// Whether requests made with this context are the action's own
    /// (after [`Ctx::for_attempt`]) rather than session set-up.
    for_action: bool,
    /// Where a long-running BMC task is recorded (the worker's status
    /// record); none outside the worker: nothing is recorded.
    tasks: Option<std::sync::Arc<dyn TaskLog>>,
    /// How long a power change may take to show (the worker's
    /// `--power-settle-timeout`, or an action's own `settle`); `None`: the
    /// provider's default, and for a soft off the action's deadline.
    pub settle: Option<Duration>,
    /// The worker's firmware image directory (`--firmware-image-dir`): the
    /// only files a push update may send; none: push updates are off.
    images: Option<std::sync::Arc<image::ImageDir>>,
    /// Where known BMC quirks are reported ([`Ctx::quirk`]).
    quirks: Option<std::sync::Arc<dyn QuirkLog>>,
    /// Plan mode: where the action's requests are recorded; its first
    /// state-changing request is recorded instead of sent ([`Ctx::sending_request`]).
    plan: Option<std::sync::Arc<Plan>>,
}

/// Where a call comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallInfo {
    pub batch: bmcfleet_schema::BatchId,
    pub index: u32,
    /// JetStream delivery count of the batch (1 on first delivery).
    pub delivery: u64,
    pub worker: String,
}

impl Ctx {
    pub fn new(deadline: Instant) -> Self {
        Ctx {
            deadline,
            call: None,
            sent: Default::default(),
            gate: None,
            for_action: false,
            tasks: None,
            settle: None,
            images: None,
            quirks: None,
            plan: None,
        }
    }

    /// The same deadline, call and gate, with nothing sent yet: one attempt
    /// of an action (the worker builds one per attempt, after opening the
    /// session); its requests are the action's own.
    pub fn for_attempt(&self) -> Ctx {
        Ctx {
            deadline: self.deadline,
            call: self.call.clone(),
            sent: Default::default(),
            gate: self.gate.clone(),
            for_action: true,
            tasks: self.tasks.clone(),
            settle: self.settle,
            images: self.images.clone(),
            plan: self.plan.clone(),
            quirks: self.quirks.clone(),
        }
    }

    /// Report known BMC quirks to `log`.
    pub fn with_quirks(mut self, log: std::sync::Arc<dyn QuirkLog>) -> Self {
        self.quirks = Some(log);
        self
    }

    /// A known quirk of this BMC was worked around (see [`QuirkLog`]).
    pub fn quirk(&self, quirk: &'static str, what: &str) {
        match &self.quirks {
            Some(log) => log.noticed(quirk, what),
            None => tracing::debug!(quirk, "{what}"),
        }
    }

    /// Plan mode: record the action's requests in `plan`, and stop at its
    /// first state-changing one without sending it ([`Ctx::sending_request`]).
    pub fn with_plan(mut self, plan: std::sync::Arc<Plan>) -> Self {
        self.plan = Some(plan);
        self
    }

    /// The plan recorder, in plan mode.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_deref()
    }

    /// Push updates send images of `dir` only.
    pub fn with_images(mut self, dir: Option<std::sync::Arc<image::ImageDir>>) -> Self {
        self.images = dir;
        self
    }

    /// The firmware image directory, if this worker has one.
    pub fn images(&self) -> Option<&image::ImageDir> {
        self.images.as_deref()
    }

    /// The gate for a provider that sends on its own later (keep-alives,
    /// logout) and must ask [`SendGate::holds`] first: the session's
    /// ([`SendGate::for_session`]), not the action's.
    pub fn send_gate(&self) -> Option<std::sync::Arc<dyn SendGate>> {
        self.gate.clone().map(|g| g.for_session())
    }

    /// Record long-running BMC tasks in `log`.
    pub fn with_tasks(mut self, log: std::sync::Arc<dyn TaskLog>) -> Self {
        self.tasks = Some(log);
        self
    }

    /// The task log, if the caller keeps one.
    pub fn tasks(&self) -> Option<&dyn TaskLog> {
        self.tasks.as_deref()
    }

    /// Check every request against `gate` before it leaves.
    pub fn with_gate(mut self, gate: std::sync::Arc<dyn SendGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Providers call this immediately before handing a request to the wire
    /// (after any wait of their own) and pass the error of that request
    /// through [`Ctx::settle`]. An `Err` from the gate means: send nothing,
    /// return that error. Otherwise returns whether an earlier request of
    /// this attempt was sent.
    ///
    /// This form is for requests that are no part of what an action does to
    /// the machine (session set-up, a re-login, a logout): plan mode sends
    /// them as they are. An action's own requests go through
    /// [`Ctx::sending_request`].
    pub async fn sending(&self) -> Result<bool> {
        if let Some(gate) = &self.gate {
            gate.admit(self.for_action).await?;
        }
        Ok(self.sent.swap(true, std::sync::atomic::Ordering::SeqCst))
    }

    /// [`Ctx::sending`] for one of the action's own requests, which
    /// `describe` says (called only in plan mode): the one seam plan mode
    /// records at. In plan mode a reading request is recorded and sent; the
    /// first state-changing one is recorded and **not** sent: the answer is
    /// then [`ProviderError::planned`] (and so for every request after it),
    /// and the action stops there. Outside plan mode, and for session
    /// set-up requests (before [`Ctx::for_attempt`]), the same as [`Ctx::sending`].
    pub async fn sending_request(&self, describe: impl FnOnce() -> Outgoing) -> Result<bool> {
        if let (Some(plan), true) = (&self.plan, self.for_action) {
            plan.record(describe())?;
        }
        self.sending().await
    }

    /// `e` as the action's error: `not_sent` only holds when no earlier
    /// request of the attempt was sent (`sent_before` from [`Ctx::sending`]).
    pub fn settle(&self, sent_before: bool, e: ProviderError) -> ProviderError {
        let not_sent = e.not_sent && !sent_before;
        e.with_not_sent(not_sent)
    }

    pub fn with_timeout(timeout: Duration) -> Self {
        Ctx::new(Instant::now() + timeout)
    }

    /// How long power changes may take to show (see [`Ctx::settle`]).
    pub fn with_settle(mut self, settle: Option<Duration>) -> Self {
        self.settle = settle;
        self
    }

    pub fn with_call(mut self, call: CallInfo) -> Self {
        self.call = Some(call);
        self
    }

    /// Time left, or a `DeadlineExceeded` error when none is.
    pub fn remaining(&self) -> Result<Duration> {
        let now = Instant::now();
        if now >= self.deadline {
            Err(ProviderError::new(ErrorCode::DeadlineExceeded, "the action deadline passed"))
        } else {
            Ok(self.deadline - now)
        }
    }
}

/// One request as its transport describes it to the send seam
/// ([`Ctx::sending_request`]), secrets already removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    pub request: PlannedRequest,
    /// Whether the request may change the machine or the BMC. Transports
    /// decide conservatively: Redfish anything but `GET`/`HEAD`; IPMI
    /// everything not in its table of reading commands (unknown raw ones
    /// included); WS-Man everything but Get, Enumerate, Pull and Identify.
    pub changes_state: bool,
}

impl Outgoing {
    /// A request that only reads.
    pub fn read(request: PlannedRequest) -> Self {
        Outgoing { request, changes_state: false }
    }

    /// A request that may change state.
    pub fn change(request: PlannedRequest) -> Self {
        Outgoing { request, changes_state: true }
    }
}

pub use bmcfleet_schema::plan::{ActionPlan, PlannedRequest};

/// Plan mode's recorder for one action (the worker makes one per action
/// and hands it over with [`Ctx::with_plan`]): the reads it let through,
/// and the first state-changing request, which it stopped.
#[derive(Debug, Default)]
pub struct Plan {
    state: std::sync::Mutex<PlanState>,
}

#[derive(Debug, Default)]
struct PlanState {
    plan: ActionPlan,
    stopped: bool,
}

impl Plan {
    pub fn new() -> std::sync::Arc<Plan> {
        std::sync::Arc::new(Plan::default())
    }

    /// `Ok`: send it (a read, recorded). `Err`: the first state-changing
    /// request (recorded), or any request after it: send nothing.
    fn record(&self, out: Outgoing) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.stopped {
            return Err(ProviderError::planned());
        }
        if out.changes_state {
            st.plan.change = Some(out.request);
            st.stopped = true;
            return Err(ProviderError::planned());
        }
        if st.plan.reads.len() < bmcfleet_schema::plan::MAX_PLAN_READS {
            st.plan.reads.push(out.request);
        } else {
            st.plan.reads_omitted = st.plan.reads_omitted.saturating_add(1);
        }
        Ok(())
    }

    /// Whether the action reached a state-changing request (and stopped there).
    pub fn stopped(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).stopped
    }

    /// Forget what an earlier attempt of the action recorded (the worker,
    /// before it retries a read that failed).
    pub fn restart(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = PlanState::default();
    }

    /// What was recorded.
    pub fn snapshot(&self) -> ActionPlan {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).plan.clone()
    }
}

/// Credentials after the worker resolved a reference.
#[derive(Clone, Debug)]
pub struct ResolvedCredentials {
    pub username: String,
    pub password: Secret,
}

/// Opens sessions for one protocol.
#[async_trait]
pub trait Connector: Send + Sync {
    fn protocol(&self) -> &'static str;

    /// The capabilities every session of this connector offers (documented
    /// list; a contract test checks it equals [`capabilities`] of a real session).
    fn declared_capabilities(&self) -> &'static [Capability];

    async fn connect(
        &self,
        ctx: &Ctx,
        target: &BmcTarget,
        credentials: &ResolvedCredentials,
    ) -> Result<Box<dyn BmcSession>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connect failed")]
    struct Wrapper(#[source] std::io::Error);

    #[test]
    fn descriptor_exhaustion_is_found_on_typed_errors_only() {
        let emfile = Wrapper(std::io::Error::from_raw_os_error(24));
        assert!(descriptor_exhaustion(&emfile).is_some(), "EMFILE in the source chain");
        assert!(is_descriptor_exhaustion(&std::io::Error::from_raw_os_error(23)), "ENFILE");
        assert!(!is_descriptor_exhaustion(&std::io::Error::from_raw_os_error(111)), "connection refused");
        // Text that merely says so (as a hostile BMC's error message could) is not it.
        let spoof = std::io::Error::other("Too many open files (os error 24)");
        assert!(descriptor_exhaustion(&Wrapper(spoof)).is_none());
        let e = ProviderError::worker_exhausted("connecting", &std::io::Error::from_raw_os_error(24));
        assert!(e.code == ErrorCode::WorkerExhausted && e.retryable && e.not_sent, "{e:?}");
    }

    #[tokio::test]
    async fn not_sent_holds_only_for_an_attempts_first_request() {
        let ctx = Ctx::with_timeout(Duration::from_secs(5));
        let refused = || ProviderError::new(ErrorCode::Unreachable, "refused").not_sent();
        let first = ctx.sending().await.unwrap();
        assert!(!first);
        assert!(ctx.settle(first, refused()).not_sent, "nothing went out before the first request");
        let clone = ctx.clone();
        let second = clone.sending().await.unwrap();
        assert!(second, "clones share the action's record");
        assert!(!ctx.settle(second, refused()).not_sent, "the first request went out");
        let fresh = ctx.for_attempt();
        assert_eq!((fresh.deadline, fresh.call.clone()), (ctx.deadline, ctx.call.clone()));
        assert!(!fresh.sending().await.unwrap(), "a new attempt starts with nothing sent");
    }

    #[tokio::test]
    async fn plan_mode_sends_reads_and_stops_at_the_first_change() {
        let read =
            |p: &str| Outgoing::read(PlannedRequest::Redfish { method: "GET".into(), path: p.into(), body: None });
        let change = Outgoing::change(PlannedRequest::Redfish { method: "POST".into(), path: "/x".into(), body: None });
        let plan = Plan::new();
        let setup = Ctx::with_timeout(Duration::from_secs(5)).with_plan(plan.clone());
        // Session set-up is no part of the plan, even when it would change state.
        setup.sending_request(|| change.clone()).await.unwrap();
        assert_eq!(plan.snapshot(), ActionPlan::default());
        let attempt = setup.for_attempt();
        assert!(!attempt.sending_request(|| read("/a")).await.unwrap(), "a read is sent");
        for i in 0..bmcfleet_schema::plan::MAX_PLAN_READS {
            attempt.sending_request(|| read(&format!("/r{i}"))).await.unwrap();
        }
        assert_eq!(attempt.sending_request(|| change.clone()).await.unwrap_err(), ProviderError::planned());
        assert!(plan.stopped());
        // Nothing after the change leaves, a read included.
        assert_eq!(attempt.sending_request(|| read("/after")).await.unwrap_err(), ProviderError::planned());
        let p = plan.snapshot();
        assert_eq!((p.reads.len(), p.reads_omitted), (bmcfleet_schema::plan::MAX_PLAN_READS, 1));
        assert_eq!(p.change, Some(change.request.clone()));
        plan.restart();
        assert!(!plan.stopped() && plan.snapshot() == ActionPlan::default(), "a retried attempt starts afresh");
        // Without a plan, a change is sent.
        let plain = Ctx::with_timeout(Duration::from_secs(5)).for_attempt();
        assert!(!plain.sending_request(|| change.clone()).await.unwrap());
    }

    /// Records what it was asked and refuses after `open` requests.
    #[derive(Debug, Default)]
    struct CountingGate {
        asked: std::sync::Mutex<Vec<bool>>,
        open: usize,
    }

    #[async_trait]
    impl SendGate for CountingGate {
        async fn admit(&self, for_action: bool) -> Result<()> {
            let mut asked = self.asked.lock().unwrap();
            asked.push(for_action);
            if asked.len() > self.open {
                return Err(ProviderError::new(ErrorCode::Interrupted, "fenced").not_sent());
            }
            Ok(())
        }

        fn holds(&self) -> bool {
            self.asked.lock().unwrap().len() < self.open
        }

        fn for_session(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn SendGate> {
            self
        }
    }

    #[tokio::test]
    async fn the_gate_is_asked_before_every_request_and_can_refuse() {
        let gate = std::sync::Arc::new(CountingGate { open: 2, ..Default::default() });
        let setup = Ctx::with_timeout(Duration::from_secs(5)).with_gate(gate.clone());
        assert!(!setup.sending().await.unwrap(), "session set-up request admitted");
        let attempt = setup.for_attempt();
        assert!(
            !attempt.sending().await.unwrap(),
            "the attempt's first request admitted, nothing of the attempt sent before"
        );
        let refused = attempt.sending().await.unwrap_err();
        assert_eq!(refused.code, ErrorCode::Interrupted);
        assert_eq!(*gate.asked.lock().unwrap(), vec![false, true, true], "set-up, then the action's own requests");
    }
}
