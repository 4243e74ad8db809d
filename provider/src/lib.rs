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
//! - [`Capability`] and one trait per capability: [`Power`], [`BootControl`],
//!   [`Users`], [`BmcReset`], [`NetworkSource`], [`Raw`], [`VirtualMedia`],
//!   [`Inventory`].
//! - [`ProviderError`]: the single error type, carrying a wire [`ErrorCode`].
//! - [`Ctx`]: per-call context (deadline).

use async_trait::async_trait;
use bmcfleet_schema::{
    BmcResetKind, BmcTarget, BootDeviceRequest, ErrorBody, ErrorCode, Inventory as InventoryData,
    MediaKind, NetworkSourceOp, PowerOp, PowerState, RawRequest, RawResponse, Secret, StaticIpv4,
    UserInfo, UserSpec, UserUpdate,
};
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// What a BMC can be asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    Power,
    BootDevice,
    Users,
    BmcReset,
    NetworkSource,
    Raw,
    VirtualMedia,
    Inventory,
}

impl Capability {
    pub const ALL: [Capability; 8] = [
        Capability::Power,
        Capability::BootDevice,
        Capability::Users,
        Capability::BmcReset,
        Capability::NetworkSource,
        Capability::Raw,
        Capability::VirtualMedia,
        Capability::Inventory,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Power => "power",
            Capability::BootDevice => "boot_device",
            Capability::Users => "users",
            Capability::BmcReset => "bmc_reset",
            Capability::NetworkSource => "network_source",
            Capability::Raw => "raw",
            Capability::VirtualMedia => "virtual_media",
            Capability::Inventory => "inventory",
        }
    }

    /// The capability an action needs.
    pub fn of(action: &bmcfleet_schema::Action) -> Capability {
        use bmcfleet_schema::Action::*;
        match action {
            Power(_) => Capability::Power,
            BootDevice(_) | GetBootDevice => Capability::BootDevice,
            User(_) => Capability::Users,
            BmcReset(_) => Capability::BmcReset,
            NetworkSource(_) => Capability::NetworkSource,
            Raw(_) => Capability::Raw,
            VirtualMedia(_) => Capability::VirtualMedia,
            Inventory => Capability::Inventory,
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
}

impl ProviderError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let retryable = matches!(code, ErrorCode::Timeout | ErrorCode::Unreachable);
        ProviderError { code, message: message.into(), retryable, not_sent: false }
    }

    pub fn unsupported(cap: Capability, protocol: &str) -> Self {
        ProviderError::new(
            ErrorCode::Unsupported,
            format!("the {protocol} provider does not implement {cap}"),
        )
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

    /// Set [`ProviderError::not_sent`] from a provider's own knowledge.
    pub fn with_not_sent(mut self, not_sent: bool) -> Self {
        self.not_sent = not_sent;
        self
    }
}

impl From<ProviderError> for ErrorBody {
    fn from(e: ProviderError) -> Self {
        ErrorBody::new(e.code, e.message)
    }
}

pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

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
        Ctx { deadline, call: None, sent: Default::default() }
    }

    /// The same deadline and call, with nothing sent yet: one attempt of an
    /// action (the worker builds one per attempt, after opening the session).
    pub fn for_attempt(&self) -> Ctx {
        Ctx { deadline: self.deadline, call: self.call.clone(), sent: Default::default() }
    }

    /// Providers call this right before handing a request to the wire and
    /// pass the error of that request through [`Ctx::settle`].
    /// Returns whether an earlier request of this attempt was sent.
    pub fn note_sending(&self) -> bool {
        self.sent.swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    /// `e` as the action's error: `not_sent` only holds when no earlier
    /// request of the attempt was sent (`sent_before` from [`Ctx::note_sending`]).
    pub fn settle(&self, sent_before: bool, e: ProviderError) -> ProviderError {
        let not_sent = e.not_sent && !sent_before;
        e.with_not_sent(not_sent)
    }

    pub fn with_timeout(timeout: Duration) -> Self {
        Ctx::new(Instant::now() + timeout)
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

/// Credentials after the worker resolved a reference.
#[derive(Clone, Debug)]
pub struct ResolvedCredentials {
    pub username: String,
    pub password: Secret,
}

#[async_trait]
pub trait Power: Send {
    /// Performs `op`; returns the power state for [`PowerOp::Status`] (and
    /// may return it for other ops when the BMC reports it for free).
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>>;
}

#[async_trait]
pub trait BootControl: Send {
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<()>;
    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest>;
}

#[async_trait]
pub trait Users: Send {
    async fn list_users(&mut self, ctx: &Ctx) -> Result<Vec<UserInfo>>;
    async fn create_user(&mut self, ctx: &Ctx, spec: &UserSpec) -> Result<UserInfo>;
    /// Must fail with [`ErrorCode::TargetNotFound`] when the user does not exist.
    async fn update_user(&mut self, ctx: &Ctx, update: &UserUpdate) -> Result<UserInfo>;
    /// Must fail with [`ErrorCode::TargetNotFound`] when the user does not exist.
    async fn delete_user(&mut self, ctx: &Ctx, name: &str) -> Result<()>;
}

#[async_trait]
pub trait BmcReset: Send {
    async fn reset_bmc(&mut self, ctx: &Ctx, kind: BmcResetKind) -> Result<()>;
}

#[async_trait]
pub trait NetworkSource: Send {
    /// Returns `Dhcp` or `Static(..)` with the current address.
    async fn network_source(&mut self, ctx: &Ctx) -> Result<NetworkSourceOp>;
    async fn set_dhcp(&mut self, ctx: &Ctx) -> Result<()>;
    async fn set_static(&mut self, ctx: &Ctx, addr: &StaticIpv4) -> Result<()>;
}

#[async_trait]
pub trait Raw: Send {
    /// Must refuse (with `InvalidField`/`Unsupported`) a request of another protocol.
    async fn raw(&mut self, ctx: &Ctx, req: &RawRequest) -> Result<RawResponse>;
}

#[async_trait]
pub trait VirtualMedia: Send {
    async fn insert_media(&mut self, ctx: &Ctx, url: &str, media: MediaKind) -> Result<()>;
    async fn eject_media(&mut self, ctx: &Ctx, media: MediaKind) -> Result<()>;
}

#[async_trait]
pub trait Inventory: Send {
    async fn inventory(&mut self, ctx: &Ctx) -> Result<InventoryData>;
}

/// An open, authenticated conversation with one BMC.
///
/// Accessors default to `None` (capability not implemented). Implement the
/// ones the provider supports by returning `Some(self)`.
#[async_trait]
pub trait BmcSession: Send {
    /// Provider name reported in results (`ipmi`, `redfish`, `amt`, `sim`).
    fn provider(&self) -> &'static str;

    fn power(&mut self) -> Option<&mut dyn Power> {
        None
    }
    fn boot(&mut self) -> Option<&mut dyn BootControl> {
        None
    }
    fn users(&mut self) -> Option<&mut dyn Users> {
        None
    }
    fn bmc_reset(&mut self) -> Option<&mut dyn BmcReset> {
        None
    }
    fn network_source(&mut self) -> Option<&mut dyn NetworkSource> {
        None
    }
    fn raw(&mut self) -> Option<&mut dyn Raw> {
        None
    }
    fn virtual_media(&mut self) -> Option<&mut dyn VirtualMedia> {
        None
    }
    fn inventory(&mut self) -> Option<&mut dyn Inventory> {
        None
    }

    /// Whether the session is still worth reusing (false after a fatal
    /// transport error; the worker then reconnects).
    fn is_healthy(&self) -> bool {
        true
    }

    /// Close the session on the BMC (logout, Close Session). Best effort.
    async fn close(&mut self) {}
}

/// The capabilities a session implements, derived from its accessors.
pub fn capabilities(session: &mut dyn BmcSession) -> Vec<Capability> {
    let mut caps = Vec::new();
    if session.power().is_some() {
        caps.push(Capability::Power);
    }
    if session.boot().is_some() {
        caps.push(Capability::BootDevice);
    }
    if session.users().is_some() {
        caps.push(Capability::Users);
    }
    if session.bmc_reset().is_some() {
        caps.push(Capability::BmcReset);
    }
    if session.network_source().is_some() {
        caps.push(Capability::NetworkSource);
    }
    if session.raw().is_some() {
        caps.push(Capability::Raw);
    }
    if session.virtual_media().is_some() {
        caps.push(Capability::VirtualMedia);
    }
    if session.inventory().is_some() {
        caps.push(Capability::Inventory);
    }
    caps
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

    #[test]
    fn not_sent_holds_only_for_an_attempts_first_request() {
        let ctx = Ctx::with_timeout(Duration::from_secs(5));
        let refused = || ProviderError::new(ErrorCode::Unreachable, "refused").not_sent();
        let first = ctx.note_sending();
        assert!(!first);
        assert!(ctx.settle(first, refused()).not_sent, "nothing went out before the first request");
        let clone = ctx.clone();
        let second = clone.note_sending();
        assert!(second, "clones share the action's record");
        assert!(!ctx.settle(second, refused()).not_sent, "the first request went out");
        let fresh = ctx.for_attempt();
        assert_eq!((fresh.deadline, fresh.call.clone()), (ctx.deadline, ctx.call.clone()));
        assert!(!fresh.note_sending(), "a new attempt starts with nothing sent");
    }
}
