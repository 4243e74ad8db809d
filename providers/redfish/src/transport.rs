//! One BMC's HTTP conversation: authentication, bounded exchanges, one
//! tracing span per request, and Task Monitor polling.
//!
//! Retry policy: nothing is sent twice except after a `401` on a session
//! token (the BMC did not process the request; we log in again and resend
//! once). Every other retry decision belongs to the worker, which knows
//! whether the action is idempotent.

use crate::config::RedfishConfig;
use crate::error::{err, protocol, status_error, transport_error};
use crate::json::{link, norm_path, str_of};
use bmcfleet_provider::{Ctx, Outgoing, PlannedRequest, ProviderError, ResolvedCredentials, Result};
use bmcfleet_schema::{ErrorCode, RedfishAuth, Secret};
use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, ETAG, IF_MATCH, LOCATION, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::field::Empty;
use tracing::Instrument;

/// How requests are authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthKind {
    /// A Redfish session (`X-Auth-Token`), created once and reused.
    Session,
    /// HTTP Basic on every request (no usable SessionService).
    Basic,
}

enum Auth {
    /// Not logged in yet (only the service root is readable).
    None,
    Basic,
    Session {
        token: Secret,
        /// The session resource to DELETE on logout.
        location: Option<String>,
    },
}

/// Reads of an accepted change after the first, before it counts as not
/// made ([`Transport::read_back`]).
const SETTLE_READS: u32 = 4;

/// A response as read off the wire (any status).
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Its share of the connector's [`AnswerMemory`], given back when the
    /// reply (and so the body it is parsed from) is dropped.
    #[expect(dead_code, reason = "held for its drop, never read")]
    pub held: Option<OwnedSemaphorePermit>,
    /// The body's JSON values ([`crate::json::value_count`]), counted once
    /// as it was read: what it was charged, and what parsing checks.
    pub values: usize,
}

/// The bytes of BMC answers one connector's sessions hold at once
/// (`RedfishConfig::max_buffered_bytes`), shared by all of them: many
/// BMCs answering large at once make reads fail `worker_exhausted`
/// rather than the worker grow without bound. One BMC has one request in
/// flight, so it alone can hold at most one answer's charge.
#[derive(Clone, Debug)]
pub(crate) struct AnswerMemory {
    free: Arc<Semaphore>,
    limit: usize,
}

/// The budget had not that many bytes left.
#[derive(Debug)]
struct Exhausted;

impl AnswerMemory {
    pub fn new(limit: usize) -> Self {
        let limit = limit.min(Semaphore::MAX_PERMITS);
        AnswerMemory { free: Arc::new(Semaphore::new(limit)), limit }
    }

    /// Bytes held now by replies being read or still alive.
    pub fn held(&self) -> usize {
        self.limit - self.free.available_permits()
    }

    /// Add `n` bytes to what `held` holds, at once or not at all.
    fn take(&self, held: &mut Option<OwnedSemaphorePermit>, n: usize) -> std::result::Result<(), Exhausted> {
        if n == 0 {
            return Ok(());
        }
        let n = u32::try_from(n).map_err(|_| Exhausted)?;
        let more = self.free.clone().try_acquire_many_owned(n).map_err(|_| Exhausted)?;
        match held {
            Some(h) => h.merge(more),
            None => *held = Some(more),
        }
        Ok(())
    }
}

impl Reply {
    /// A reply not read off the wire (tests, fuzzing): its values counted here.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn new(status: StatusCode, headers: HeaderMap, body: Bytes) -> Reply {
        let values = crate::json::value_count(&body);
        Reply { status, headers, body, held: None, values }
    }

    /// The body parsed as JSON ([`crate::json::parse`]), its values not counted again.
    pub fn parse(&self) -> std::result::Result<Value, crate::json::Unparsed> {
        crate::json::parse_counted(&self.body, self.values)
    }

    /// The body as JSON; an empty body is `null`.
    pub fn json(&self, method: &Method, path: &str) -> Result<Value> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        self.parse().map_err(|e| {
            let start: String = String::from_utf8_lossy(&self.body[..self.body.len().min(80)])
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            protocol(format!("{method} {path}: the BMC's answer {e}; it starts with {start:?}"))
        })
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name)?.to_str().ok().map(str::to_owned)
    }

    pub fn location(&self) -> Option<String> {
        self.headers.get(LOCATION)?.to_str().ok().map(norm_path)
    }
}

/// A resource read with GET.
#[derive(Clone, Debug)]
pub(crate) struct Resource {
    pub path: String,
    pub body: Value,
    /// From the `ETag` header, else the body's `@odata.etag`.
    pub etag: Option<String>,
}

pub(crate) struct Transport {
    http: reqwest::Client,
    /// `https://host:port`
    base: String,
    /// The BMC address as the producer wrote it, for spans and messages.
    bmc: String,
    username: String,
    password: Secret,
    auth: Auth,
    /// What the machine's operator allows (`redfish.auth`).
    mode: RedfishAuth,
    /// Where sessions are created (from the service root), when there is a SessionService.
    sessions_path: Option<String>,
    config: Arc<RedfishConfig>,
    /// The connector's, shared with every other session it opened.
    memory: AnswerMemory,
    /// Set after a transport failure (timeout, refused, TLS): the worker
    /// should reconnect rather than reuse this conversation.
    broken: bool,
    /// Response body bytes read on this conversation so far (see
    /// [`Transport::kept_within`]).
    received: u64,
}

/// What a request carries.
pub(crate) enum Payload<'a> {
    Empty,
    Json(&'a [u8]),
    /// `multipart/form-data` (a firmware image push): the exchange may take
    /// as long as the action has left, not just `request_timeout`.
    Multipart(reqwest::multipart::Form),
}

impl<'a> From<Option<&'a [u8]>> for Payload<'a> {
    fn from(b: Option<&'a [u8]>) -> Self {
        b.map_or(Payload::Empty, Payload::Json)
    }
}

enum ReadError {
    Http(reqwest::Error),
    TooLarge(usize),
    /// The connector's answer memory cannot hold this answer: bytes wanted.
    Exhausted(usize),
}

impl Transport {
    pub fn new(
        http: reqwest::Client,
        base: String,
        bmc: String,
        credentials: &ResolvedCredentials,
        config: Arc<RedfishConfig>,
        memory: AnswerMemory,
        mode: RedfishAuth,
    ) -> Self {
        Transport {
            http,
            base,
            bmc,
            username: credentials.username.clone(),
            password: credentials.password.clone(),
            // `basic`: the operator chose Basic for every request.
            auth: if mode == RedfishAuth::Basic { Auth::Basic } else { Auth::None },
            mode,
            sessions_path: None,
            config,
            memory,
            broken: false,
            received: 0,
        }
    }

    pub fn bmc(&self) -> &str {
        &self.bmc
    }

    pub fn username(&self) -> &str {
        &self.username
    }

    pub fn config(&self) -> &RedfishConfig {
        &self.config
    }

    pub fn auth_kind(&self) -> Option<AuthKind> {
        match self.auth {
            Auth::None => None,
            Auth::Basic => Some(AuthKind::Basic),
            Auth::Session { .. } => Some(AuthKind::Session),
        }
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// `path` read back after a change the BMC accepted, until `done` says
    /// the change shows: a BMC may apply it a moment later, so it is read
    /// again up to [`SETTLE_READS`] times, `state_poll_interval` apart,
    /// while the action has that long left. The last read either way (the
    /// caller says what a change that never showed means).
    pub async fn read_back(&mut self, ctx: &Ctx, path: &str, done: impl Fn(&Resource) -> bool) -> Result<Resource> {
        let mut round = 0;
        loop {
            let r = self.get(ctx, path).await?;
            if done(&r) || !self.settle(ctx, &mut round).await {
                return Ok(r);
            }
        }
    }

    /// Before another read of [`Transport::read_back`]: waits
    /// `state_poll_interval` and says `true`, or says `false` at once when
    /// [`SETTLE_READS`] more reads were made already or the action has not
    /// that long left.
    async fn settle(&self, ctx: &Ctx, round: &mut u32) -> bool {
        let wait = self.config.state_poll_interval;
        if *round >= SETTLE_READS || ctx.remaining().map_or(true, |left| left <= wait) {
            return false;
        }
        *round += 1;
        tokio::time::sleep(wait).await;
        true
    }

    /// Response body bytes read on this conversation so far: a reading
    /// taken before a walk, for [`Transport::kept_within`].
    pub fn received(&self) -> u64 {
        self.received
    }

    /// A walk that keeps the resources it reads (a collection's members,
    /// held until it chooses among them) holds at most one answer's worth
    /// (`max_response_bytes`) of them: every member is a bounded answer,
    /// but how many a BMC lists is bounded only by the deadline. `Err`
    /// (`protocol_error`, naming `what`) once the answers read since
    /// `start` (a [`Transport::received`] reading) take more.
    pub fn kept_within(&self, start: u64, what: &str) -> Result<()> {
        let kept = self.received.saturating_sub(start);
        let max = self.config.max_response_bytes as u64;
        if kept > max {
            return Err(protocol(format!(
                "{what}: the members read so far take {kept} bytes, more than one answer may ({max} bytes); refused, the rest is not read"
            )));
        }
        Ok(())
    }

    /// A URI the BMC named (a task to record and poll) as a path on the
    /// BMC: refused (`protocol_error`) when it leaves the BMC, is longer
    /// than [`crate::firmware_update::MAX_TASK_URI`] or has control characters.
    pub fn on_bmc(&self, uri: &str) -> Result<String> {
        if uri.len() > crate::firmware_update::MAX_TASK_URI || uri.chars().any(|c| c.is_control() || c == ' ') {
            return Err(protocol(format!(
                "{:?} is not a resource path the worker keeps (at most {} bytes, no spaces or control characters)",
                uri.chars().take(80).collect::<String>(),
                crate::firmware_update::MAX_TASK_URI
            )));
        }
        let url = resolve(&self.base, uri)?;
        Ok(match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        })
    }

    /// One HTTP exchange, bounded by the config and the action deadline.
    /// `own`: the action's own request (described to the send seam, so
    /// that plan mode records it, and stops it if it is no `GET`/`HEAD`),
    /// not session set-up (service root, login, logout).
    #[allow(clippy::too_many_arguments)]
    async fn send_once(
        &mut self,
        ctx: &Ctx,
        method: &Method,
        path: &str,
        body: Payload<'_>,
        if_match: Option<&str>,
        with_auth: bool,
        own: bool,
    ) -> Result<Reply> {
        let budget = match body {
            Payload::Multipart(_) => ctx.remaining()?,
            _ => ctx.remaining()?.min(self.config.request_timeout),
        };
        // Every path, ours or a link the BMC supplied, is resolved as a URL
        // against the BMC's base and must stay on the BMC (nothing is sent otherwise).
        let url = resolve(&self.base, path)?;
        // Spans, logs and messages name the path without its query: a raw
        // request's query may carry a token (its loggable form hides it too).
        let path = shown_path(path);
        // The ETag is the BMC's text: one that is no header value (a line
        // break, a control character) cannot go out as If-Match. Refused here, before
        // anything is sent, rather than as a failed connection (reqwest
        // would refuse to build the request at `send`).
        let if_match = match if_match {
            Some(tag) => Some(HeaderValue::from_str(tag).map_err(|_| {
                protocol(format!(
                    "{method} {path}: the BMC's ETag for the resource is not a valid HTTP header value, so it cannot be sent back as If-Match; nothing was sent"
                ))
                .with_retryable(false)
                .not_sent()
            })?),
            None => None,
        };
        // What plan mode shows of the body (computed only in plan mode).
        let shown = match &body {
            Payload::Empty => Shown::Empty,
            Payload::Json(b) => Shown::Json(b),
            Payload::Multipart(_) => Shown::Multipart,
        };
        let span = tracing::info_span!(
            "redfish.http",
            bmc = %self.bmc,
            protocol = "redfish",
            method = %method,
            path = %path,
            status = Empty,
            outcome = Empty,
        );
        let mut rb = self.http.request(method.clone(), url).timeout(budget);
        if with_auth {
            rb = match &self.auth {
                Auth::None => rb,
                Auth::Basic => rb.basic_auth(&self.username, Some(self.password.expose())),
                Auth::Session { token, .. } => {
                    let mut v = HeaderValue::from_str(token.expose()).map_err(|_| {
                        protocol("the BMC issued a session token that is not a valid header value; nothing was sent")
                            .not_sent()
                    })?;
                    v.set_sensitive(true);
                    rb.header("X-Auth-Token", v)
                }
            };
        }
        match body {
            Payload::Empty => {}
            Payload::Json(b) => rb = rb.header(CONTENT_TYPE, "application/json").body(b.to_vec()),
            // Sets the boundary's content type and, every part's length being known, Content-Length.
            Payload::Multipart(form) => rb = rb.multipart(form),
        }
        if let Some(tag) = if_match {
            rb = rb.header(IF_MATCH, tag);
        }
        let max = self.config.max_response_bytes;
        let memory = self.memory.clone();
        let sent_before =
            if own { ctx.sending_request(|| planned(method, path, shown)).await? } else { ctx.sending().await? };
        let exchange = async move {
            let mut resp = rb.send().await.map_err(ReadError::Http)?;
            // What this answer holds of the connector's memory: the bytes
            // as they arrive (not the length it announces, which a BMC that
            // then stalls would hold for nothing), then its values' parsed
            // size, at most what an answer that is parsed may hold.
            let (mut held, mut charged) = (None, 0usize);
            let mut charge = |held: &mut Option<OwnedSemaphorePermit>, total: usize| {
                let more = total.saturating_sub(charged);
                memory.take(held, more).map_err(|_| ReadError::Exhausted(more))?;
                charged = charged.max(total);
                Ok(())
            };
            if let Some(len) = resp.content_length() {
                if len as usize > max {
                    return Err(ReadError::TooLarge(len as usize));
                }
            }
            let status = resp.status();
            let headers = resp.headers().clone();
            let mut buf = BytesMut::new();
            while let Some(chunk) = resp.chunk().await.map_err(ReadError::Http)? {
                if buf.len() + chunk.len() > max {
                    return Err(ReadError::TooLarge(buf.len() + chunk.len()));
                }
                charge(&mut held, buf.len() + chunk.len())?;
                buf.extend_from_slice(&chunk);
            }
            let values = if buf.is_empty() { 0 } else { crate::json::value_count(&buf) };
            if !buf.is_empty() {
                // More values than that are refused unparsed (`json::parse`).
                charge(&mut held, buf.len() + values.min(crate::json::MAX_VALUES) * crate::json::PARSED_VALUE_BYTES)?;
            }
            Ok(Reply { status, headers, body: buf.freeze(), held, values })
        };
        let (outcome, fatal) = async {
            let res = tokio::time::timeout(budget, exchange).await;
            let current = tracing::Span::current();
            match res {
                Err(_) => {
                    current.record("outcome", "timeout");
                    let e = err(
                        ErrorCode::Timeout,
                        format!("{method} {path}: {} did not answer within {budget:?}", self.bmc),
                    );
                    (Err(e), true)
                }
                Ok(Err(ReadError::TooLarge(n))) => {
                    current.record("outcome", "protocol_error");
                    let e = protocol(format!(
                        "{method} {path}: the answer is larger than {max} bytes ({n} so far); refused"
                    ));
                    (Err(e), false)
                }
                Ok(Err(ReadError::Exhausted(n))) => {
                    current.record("outcome", "worker_exhausted");
                    let e = err(
                        ErrorCode::WorkerExhausted,
                        format!(
                            "{method} {path}: this worker already holds {} of its {} bytes for BMC answers (max_buffered_bytes) and this answer needs {n} more; refused (not a BMC fault)",
                            self.memory.held(),
                            self.memory.limit
                        ),
                    )
                    .with_retryable(true);
                    (Err(e), false)
                }
                Ok(Err(ReadError::Http(e))) => {
                    // reqwest's message names the URL, query and all.
                    let (perr, outcome) = transport_error(&self.bmc, method.as_str(), path, &e.without_url());
                    current.record("outcome", outcome);
                    (Err(perr), outcome != "protocol_error")
                }
                Ok(Ok(reply)) => {
                    current.record("status", reply.status.as_u16());
                    current.record("outcome", if reply.status.is_success() { "ok" } else { "http_error" });
                    tracing::debug!(status = reply.status.as_u16(), bytes = reply.body.len(), "Redfish request done.");
                    (Ok(reply), false)
                }
            }
        }
        .instrument(span)
        .await;
        if fatal {
            self.broken = true;
        }
        if let Ok(reply) = &outcome {
            self.received = self.received.saturating_add(reply.body.len() as u64);
        }
        outcome.map_err(|e| ctx.settle(sent_before, e))
    }

    /// An authenticated exchange returning any HTTP status. A `401` on a
    /// session token means the session expired or was revoked: log in again
    /// and resend once (the BMC did not process the first request).
    pub async fn exchange(
        &mut self,
        ctx: &Ctx,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> Result<Reply> {
        let bytes = match body {
            Some(v) => {
                Some(serde_json::to_vec(v).map_err(|e| err(ErrorCode::Internal, format!("encoding a request: {e}")))?)
            }
            None => None,
        };
        self.authenticated(ctx, &method, path, if_match, || bytes.as_deref().into()).await
    }

    /// An authenticated `multipart/form-data` POST (a firmware image push)
    /// returning any HTTP status; `form` builds the body (again for the one
    /// resend after a `401` on a session token, as in [`Transport::exchange`]).
    pub async fn post_multipart(
        &mut self,
        ctx: &Ctx,
        path: &str,
        form: impl Fn() -> reqwest::multipart::Form,
    ) -> Result<Reply> {
        self.authenticated(ctx, &Method::POST, path, None, || Payload::Multipart(form())).await
    }

    /// Sends `payload()`; on a `401` to a session token, logs in again and
    /// sends a fresh `payload()` once.
    async fn authenticated<'a>(
        &mut self,
        ctx: &Ctx,
        method: &Method,
        path: &str,
        if_match: Option<&str>,
        payload: impl Fn() -> Payload<'a>,
    ) -> Result<Reply> {
        let reply = self.send_once(ctx, method, path, payload(), if_match, true, true).await?;
        if reply.status == StatusCode::UNAUTHORIZED && matches!(self.auth, Auth::Session { .. }) {
            tracing::info!(bmc = %self.bmc, "The BMC rejected the session token; logging in again.");
            self.auth = Auth::None;
            self.create_session(ctx).await?;
            return self.send_once(ctx, method, path, payload(), if_match, true, true).await;
        }
        Ok(reply)
    }

    fn check(method: &Method, path: &str, reply: Reply) -> Result<Reply> {
        if reply.status.is_success() {
            Ok(reply)
        } else {
            Err(status_error(method.as_str(), path, reply.status, &reply.body))
        }
    }

    /// GET a resource; non-2xx and non-JSON answers are errors.
    /// GET a resource the BMC itself links to (a service, a collection).
    /// The one rule for a missing one: a link the BMC advertises that
    /// answers 404 is a capability it does not implement, `unsupported`
    /// (naming `what`); `target_not_found` stays for things a batch names
    /// (a user, a media device) that are not there.
    pub async fn get_linked(&mut self, ctx: &Ctx, path: &str, what: &str) -> Result<Resource> {
        match self.get(ctx, path).await {
            Err(e) if e.code == ErrorCode::TargetNotFound => Err(crate::error::unsupported(format!(
                "the BMC links {what} at {path} but does not implement it ({})",
                e.message
            ))),
            other => other,
        }
    }

    pub async fn get(&mut self, ctx: &Ctx, path: &str) -> Result<Resource> {
        let reply = self.exchange(ctx, Method::GET, path, None, None).await?;
        let reply = Self::check(&Method::GET, path, reply)?;
        let body = reply.json(&Method::GET, path)?;
        if !body.is_object() {
            return Err(protocol(format!("GET {path}: expected a JSON object from the BMC")));
        }
        let etag = reply.header(ETAG.as_str()).or_else(|| str_of(&body, "@odata.etag").map(str::to_owned));
        Ok(Resource { path: path.to_owned(), body, etag })
    }

    /// POST (actions, collection members); a `202` is followed to completion.
    pub async fn post(&mut self, ctx: &Ctx, path: &str, body: &Value) -> Result<Reply> {
        let reply = self.exchange(ctx, Method::POST, path, Some(body), None).await?;
        let reply = Self::check(&Method::POST, path, reply)?;
        self.finish(ctx, &Method::POST, path, reply).await
    }

    /// Check an exchange's status and follow a `202` to completion.
    pub async fn complete(&mut self, ctx: &Ctx, method: &Method, path: &str, reply: Reply) -> Result<Reply> {
        let reply = Self::check(method, path, reply)?;
        self.finish(ctx, method, path, reply).await
    }

    async fn finish(&mut self, ctx: &Ctx, method: &Method, path: &str, reply: Reply) -> Result<Reply> {
        if reply.status == StatusCode::ACCEPTED {
            self.follow_task(ctx, method, path, reply).await
        } else {
            Ok(reply)
        }
    }

    /// DSP0266 asynchronous operations: a `202` names a Task Monitor
    /// (`Location`); GET it until it stops answering `202` (or its Task
    /// reaches a final state), never past the action deadline.
    async fn follow_task(&mut self, ctx: &Ctx, method: &Method, path: &str, accepted: Reply) -> Result<Reply> {
        let body = accepted.json(method, path).unwrap_or(Value::Null);
        let Some(monitor) = task_monitor(&accepted, &body) else {
            tracing::debug!(bmc = %self.bmc, %path, "202 Accepted without a task monitor; treating as accepted.");
            return Ok(accepted);
        };
        tracing::debug!(bmc = %self.bmc, %path, %monitor, "Following a Redfish task.");
        let mut last = accepted;
        let mut last_state = task_state(&body);
        loop {
            let wait = poll_wait(&last, self.config.task_poll_interval);
            let still_running = |state: &Option<String>| {
                err(
                    ErrorCode::Timeout,
                    format!(
                        "{method} {path}: the BMC's task {monitor} was still running at the action deadline{}",
                        state.as_ref().map(|s| format!(" (state {s})")).unwrap_or_default()
                    ),
                )
            };
            let remaining = ctx.remaining().map_err(|_| still_running(&last_state))?;
            if wait >= remaining {
                tokio::time::sleep(remaining).await;
                return Err(still_running(&last_state));
            }
            tokio::time::sleep(wait).await;
            let reply = match self.exchange(ctx, Method::GET, &monitor, None, None).await {
                // The deadline passed before the read, or during it (the
                // read's time limit was what was left of the action's):
                // the task was last seen running either way.
                Err(e)
                    if e.code == ErrorCode::DeadlineExceeded
                        || (e.code == ErrorCode::Timeout && ctx.remaining().is_err()) =>
                {
                    return Err(still_running(&last_state))
                }
                other => other?,
            };
            match read_poll(method, path, &monitor, &reply)? {
                Poll::Running(state) => {
                    last_state = state;
                    last = reply;
                }
                Poll::Finished => return Ok(reply),
            }
        }
    }

    /// Read the service root. It is unauthenticated by the spec; a BMC that
    /// wants credentials anyway gets Basic auth.
    pub async fn service_root(&mut self, ctx: &Ctx) -> Result<Value> {
        const ROOT: &str = "/redfish/v1/";
        let basic = self.mode == RedfishAuth::Basic;
        let reply = self.send_once(ctx, &Method::GET, ROOT, Payload::Empty, None, basic, false).await?;
        let reply = if reply.status == StatusCode::UNAUTHORIZED && !basic {
            if self.mode == RedfishAuth::Session {
                return Err(err(
                    ErrorCode::AuthFailed,
                    format!(
                        "GET {ROOT}: {} demands credentials for the service root, which only HTTP Basic could give, \
                         and this machine allows Redfish sessions only (redfish.auth: session); nothing was sent with Basic",
                        self.bmc
                    ),
                ));
            }
            self.auth = Auth::Basic;
            self.send_once(ctx, &Method::GET, ROOT, Payload::Empty, None, true, false).await?
        } else {
            reply
        };
        let reply = Self::check(&Method::GET, ROOT, reply)?;
        let body = reply.json(&Method::GET, ROOT)?;
        if !body.is_object() {
            return Err(protocol(
                "GET /redfish/v1/: the service root is not a JSON object; is this a Redfish service?",
            ));
        }
        Ok(body)
    }

    /// Authenticate: a SessionService session when the root advertises one,
    /// HTTP Basic otherwise, or when the BMC will not create a session (any
    /// refusal, `401` included: a BMC without session support may guard the
    /// path; wrong credentials then fail on the first Basic request, so a
    /// bad password costs two attempts against the BMC's lockout counter).
    pub async fn login(&mut self, ctx: &Ctx, root: &Value) -> Result<()> {
        if matches!(self.auth, Auth::Basic) {
            // The root itself demanded credentials: stay on Basic.
            return Ok(());
        }
        self.sessions_path = root
            .get("Links")
            .and_then(|l| link(l, "Sessions"))
            .or_else(|| link(root, "SessionService").map(|s| format!("{s}/Sessions")));
        if self.sessions_path.is_none() {
            if self.mode == RedfishAuth::Session {
                return Err(self.no_session("the service root advertises no SessionService"));
            }
            tracing::debug!(bmc = %self.bmc, "No SessionService advertised; using HTTP Basic.");
            self.auth = Auth::Basic;
            return Ok(());
        }
        self.create_session(ctx).await
    }

    /// The error when a session-only machine (`redfish.auth: session`)
    /// cannot have a session: the password is not then sent with Basic.
    fn no_session(&self, why: &str) -> ProviderError {
        err(
            ErrorCode::AuthFailed,
            format!("{}: {why}; this machine allows Redfish sessions only (redfish.auth: session), so HTTP Basic was not tried", self.bmc),
        )
        .with_retryable(false)
    }

    async fn create_session(&mut self, ctx: &Ctx) -> Result<()> {
        let Some(path) = self.sessions_path.clone() else {
            if self.mode == RedfishAuth::Session {
                return Err(self.no_session("the BMC has no session service"));
            }
            self.auth = Auth::Basic;
            return Ok(());
        };
        let body = json!({"UserName": self.username, "Password": self.password.expose()});
        let bytes = serde_json::to_vec(&body).map_err(|e| err(ErrorCode::Internal, e.to_string()))?;
        drop(body);
        let reply = self.send_once(ctx, &Method::POST, &path, Payload::Json(&bytes), None, false, false).await?;
        match reply.status {
            s if s.is_success() => match reply.header("x-auth-token") {
                Some(token) if !token.is_empty() => {
                    let location = reply
                        .location()
                        .or_else(|| reply.json(&Method::POST, &path).ok().and_then(|v| str_of(&v, "@odata.id").map(norm_path)))
                        .and_then(|l| {
                            let member = session_member(&self.base, &path, &l);
                            if member.is_none() {
                                tracing::warn!(bmc = %self.bmc, "The BMC named a session resource outside its sessions collection; the session will not be deleted on logout.");
                            }
                            member
                        });
                    tracing::debug!(bmc = %self.bmc, "Redfish session created.");
                    self.auth = Auth::Session { token: Secret::new(token), location };
                }
                _ if self.mode == RedfishAuth::Session => {
                    return Err(err(
                        ErrorCode::ProtocolError,
                        format!("POST {path}: {} created a session without an X-Auth-Token", self.bmc),
                    ));
                }
                _ => {
                    tracing::warn!(bmc = %self.bmc, "The BMC created a session without an X-Auth-Token; using HTTP Basic.");
                    self.auth = Auth::Basic;
                }
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN if self.mode == RedfishAuth::Session => {
                return Err(
                    self.no_session(&format!("the BMC refused to create a session (HTTP {})", reply.status.as_u16()))
                );
            }
            s if self.mode == RedfishAuth::Session => {
                // The BMC's words may quote the login it refused: not the
                // password (this error is logged where a read fails, before
                // the worker scrubs what it returns).
                let mut e = status_error("POST", &path, s, &reply.body);
                e.message = bmcfleet_schema::secret::scrub(&e.message, &[self.password.expose()]);
                return Err(e);
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                // Either the credentials are wrong, or this BMC has no
                // session support and guards every unknown path. Basic
                // tells the two apart on the next request (a wrong password
                // then fails there with auth_failed).
                tracing::info!(
                    bmc = %self.bmc,
                    status = reply.status.as_u16(),
                    "The BMC refused to create a session; trying HTTP Basic."
                );
                self.auth = Auth::Basic;
            }
            s => {
                tracing::info!(
                    bmc = %self.bmc,
                    status = s.as_u16(),
                    "The BMC did not create a Redfish session; falling back to HTTP Basic."
                );
                self.auth = Auth::Basic;
            }
        }
        Ok(())
    }

    /// Delete the Redfish session, if any. Best effort, bounded.
    pub async fn logout(&mut self) {
        let auth = std::mem::replace(&mut self.auth, Auth::None);
        if let Auth::Session { token, location: Some(location) } = auth {
            let ctx = Ctx::with_timeout(self.config.close_timeout);
            self.auth = Auth::Session { token, location: None };
            match self.send_once(&ctx, &Method::DELETE, &location, Payload::Empty, None, true, false).await {
                Ok(r) if r.status.is_success() || r.status == StatusCode::NOT_FOUND => {
                    tracing::debug!(bmc = %self.bmc, "Redfish session deleted.");
                }
                Ok(r) => {
                    tracing::info!(bmc = %self.bmc, status = r.status.as_u16(), "The BMC refused to delete the session.")
                }
                Err(e) => tracing::info!(bmc = %self.bmc, error = %e, "Could not delete the Redfish session."),
            }
            self.auth = Auth::None;
        }
    }
}

/// A request body as plan mode shows it.
#[derive(Clone, Copy)]
enum Shown<'a> {
    Empty,
    Json(&'a [u8]),
    Multipart,
}

/// `method path body` as plan mode records it: the path without its query
/// (as logs show it), the body's secrets redacted
/// ([`bmcfleet_schema::plan::redact_json`]), a firmware image push named,
/// not shown. Anything but `GET` and `HEAD` changes state.
fn planned(method: &Method, path: &str, body: Shown<'_>) -> Outgoing {
    let body = match body {
        Shown::Empty => None,
        Shown::Json(b) => Some(match serde_json::from_slice::<Value>(b) {
            Ok(v) => bmcfleet_schema::plan::redact_json(&v),
            Err(_) => Value::String(bmcfleet_schema::plan::REDACTED.into()),
        }),
        Shown::Multipart => Some(Value::String("[multipart/form-data: firmware image]".into())),
    };
    let request = PlannedRequest::Redfish {
        method: method.as_str().to_owned(),
        path: bmcfleet_schema::plan::redact_text(path),
        body,
    };
    if matches!(*method, Method::GET | Method::HEAD) {
        Outgoing::read(request)
    } else {
        Outgoing::change(request)
    }
}

/// Where a `202 Accepted` says to poll: `Location`, else the body's
/// `TaskMonitor`, else the Task's own `@odata.id`.
pub(crate) fn task_monitor(accepted: &Reply, body: &Value) -> Option<String> {
    accepted
        .location()
        .or_else(|| str_of(body, "TaskMonitor").map(norm_path))
        .or_else(|| str_of(body, "@odata.id").map(norm_path))
}

/// What one Task Monitor reply says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Poll {
    /// Still running, in this `TaskState` if the BMC names it.
    Running(Option<String>),
    /// Done: the reply is the operation's result.
    Finished,
}

/// Read one Task Monitor reply to `method path` polled at `monitor`: still
/// running, finished, or the error the task ended in.
pub(crate) fn read_poll(method: &Method, path: &str, monitor: &str, reply: &Reply) -> Result<Poll> {
    match reply.status {
        StatusCode::ACCEPTED => Ok(Poll::Running(task_state(&reply.json(&Method::GET, monitor).unwrap_or(Value::Null)))),
        s if s.is_success() => {
            let v = reply.json(&Method::GET, monitor).unwrap_or(Value::Null);
            match str_of(&v, "TaskState") {
                None => Ok(Poll::Finished),
                Some("Completed") => {
                    if str_of(&v, "TaskStatus") == Some("Critical") {
                        return Err(task_failed(method, path, monitor, "Completed (Critical)", &reply.body));
                    }
                    Ok(Poll::Finished)
                }
                Some(state @ ("Exception" | "Killed" | "Cancelled" | "Interrupted")) => {
                    Err(task_failed(method, path, monitor, state, &reply.body))
                }
                Some(other) => Ok(Poll::Running(Some(other.to_owned()))),
            }
        }
        StatusCode::NOT_FOUND => Err(err(
            ErrorCode::BmcError,
            format!("{method} {path}: the task monitor {monitor} disappeared before reporting completion; the outcome is unknown"),
        )),
        _ => Err(status_error("GET", monitor, reply.status, &reply.body)),
    }
}

fn task_state(v: &Value) -> Option<String> {
    str_of(v, "TaskState").map(str::to_owned)
}

fn task_failed(method: &Method, path: &str, monitor: &str, state: &str, body: &[u8]) -> ProviderError {
    let detail = crate::error::bmc_messages(body).map(|m| format!(": {m}")).unwrap_or_default();
    err(ErrorCode::BmcError, format!("{method} {path}: the BMC's task {monitor} ended {state}{detail}"))
}

pub(crate) fn retry_after(reply: &Reply) -> Option<Duration> {
    let v = reply.headers.get(RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// How long to wait before polling a task again after `reply`: the poll
/// `interval`, longer when the BMC's `Retry-After` asks for it (it says
/// how long to wait at least: a `0` does not make the worker poll faster),
/// at most 30 s.
pub(crate) fn poll_wait(reply: &Reply, interval: Duration) -> Duration {
    retry_after(reply).unwrap_or_default().max(interval).clamp(Duration::from_millis(10), Duration::from_secs(30))
}

/// `path` as spans, logs and messages show it: without its query (a raw
/// request's may carry a token or a signature; `Action::loggable` hides it).
pub(crate) use bmcfleet_schema::raw_policy::without_query as shown_path;

/// The session resource to DELETE on logout, as the BMC named it at
/// login (`location`): only a member of the sessions `collection` (both
/// resolved on the BMC, dot segments and escapes included), with no query.
/// Any other resource a BMC names (an account, say) would be deleted with
/// the worker's own token: `None`, and the session is left to expire.
pub(crate) fn session_member(base: &str, collection: &str, location: &str) -> Option<String> {
    let (collection, member) = (resolve(base, collection).ok()?, resolve(base, location).ok()?);
    let prefix = format!("{}/", collection.path().trim_end_matches('/'));
    let path = member.path();
    (member.query().is_none() && path.len() > prefix.len() && path.starts_with(&prefix)).then(|| path.to_owned())
}

/// The URL of `path` (one of ours, or a link, `Location` or action target
/// the BMC supplied) resolved against the BMC's base `https://host:port` the
/// way a URL parser reads it. It must keep the base's scheme, host and port
/// and carry no user info: a BMC cannot send the worker, and the
/// credentials it carries, to another host. Refused: `protocol_error`,
/// nothing sent.
pub(crate) fn resolve(base: &str, path: &str) -> Result<url::Url> {
    let base = url::Url::parse(base).map_err(|e| protocol(format!("the BMC's base {base:?} is not a URL: {e}")))?;
    let url = base.join(path).map_err(|e| protocol(format!("{path:?} is not a URL on the BMC: {e}")))?;
    let same = url.scheme() == base.scheme()
        && url.host() == base.host()
        && url.port_or_known_default() == base.port_or_known_default();
    if !same || !url.username().is_empty() || url.password().is_some() {
        return Err(protocol(format!(
            "{path:?} points away from the BMC (to {}); refused, nothing was sent",
            url.origin().ascii_serialization()
        )));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logout_deletes_only_a_member_of_the_sessions_collection() {
        let (base, sessions) = ("https://10.0.0.5:8443", "/redfish/v1/SessionService/Sessions");
        for (location, member) in [
            ("/redfish/v1/SessionService/Sessions/5", "/redfish/v1/SessionService/Sessions/5"),
            ("https://10.0.0.5:8443/redfish/v1/SessionService/Sessions/ab", "/redfish/v1/SessionService/Sessions/ab"),
            ("/redfish/v1/SessionService/Sessions/5/", "/redfish/v1/SessionService/Sessions/5/"),
        ] {
            assert_eq!(session_member(base, sessions, location).as_deref(), Some(member), "{location}");
        }
        for location in [
            "/redfish/v1/AccountService/Accounts/3",
            "/redfish/v1/SessionService/Sessions",
            "/redfish/v1/SessionService/Sessions/",
            "/redfish/v1/SessionService/Sessions/../../AccountService/Accounts/3",
            "/redfish/v1/SessionService/Sessions/%2e%2e/%2e%2e/AccountService/Accounts/3",
            "/redfish/v1/SessionService/SessionsX/1",
            "/redfish/v1/SessionService/Sessions/5?$select=x",
            "https://10.9.9.9:8443/redfish/v1/SessionService/Sessions/5",
        ] {
            assert_eq!(session_member(base, sessions, location), None, "{location}");
        }
    }

    #[test]
    fn links_stay_on_the_bmc() {
        let base = "https://10.0.0.5:8443";
        for ok in [
            "/redfish/v1/Systems",
            "/redfish/v1/SessionService/Sessions",
            "https://10.0.0.5:8443/redfish/v1/x",
            "@10.9.9.9:8443/x",
            "redfish/v1/y",
        ] {
            let url = resolve(base, ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!((url.host_str(), url.port_or_known_default()), (Some("10.0.0.5"), Some(8443)), "{ok} -> {url}");
        }
        for bad in [
            "//10.9.9.9:8443/x",
            "https://10.9.9.9:8443/x",
            "http://10.0.0.5:8443/x",
            "https://10.0.0.5:9443/x",
            "https://10.0.0.5/x",
            "https://user:pw@10.0.0.5:8443/x",
            "\\\\10.9.9.9\\x",
            "\t//10.9.9.9/x",
            "https:\\\\10.9.9.9/x",
            "//10.0.0.5.evil.example:8443/x",
        ] {
            let e = resolve(base, bad).map(|u| u.to_string()).unwrap_err();
            assert_eq!(e.code, ErrorCode::ProtocolError, "{bad}");
        }
    }

    proptest::proptest! {
        /// Whatever a BMC writes as a link, a URL it resolves to stays on
        /// the BMC: same scheme, host and port, no user info. (Links built
        /// from URL-ish pieces, so the parser's edge cases come up often.)
        #[test]
        fn no_link_leaves_the_bmc(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "/", "//", "\\", "@", ":", "https:", "http:", "10.9.9.9", "10.0.0.5", ":8443", ":443", "evil.example",
                "%2f", "%40", "..", ".", "?", "#", "redfish", "v1", "\t", " ", "user:pw@", "[::1]", "%00",
            ]), 0..8),
            tail in "[a-zA-Z0-9/._%@:-]{0,12}",
        ) {
            let link = format!("{}{tail}", parts.concat());
            let base = "https://10.0.0.5:8443";
            if let Ok(url) = resolve(base, &link) {
                proptest::prop_assert_eq!(url.scheme(), "https", "{}", link);
                proptest::prop_assert_eq!(url.host_str(), Some("10.0.0.5"), "{} -> {}", link, url);
                proptest::prop_assert_eq!(url.port_or_known_default(), Some(8443), "{} -> {}", link, url);
                proptest::prop_assert!(url.username().is_empty() && url.password().is_none(), "{} -> {}", link, url);
            }
        }
    }

    fn reply(status: u16, body: &str, location: Option<&str>) -> Reply {
        let mut headers = HeaderMap::new();
        if let Some(l) = location {
            headers.insert(LOCATION, HeaderValue::from_str(l).unwrap());
        }
        Reply::new(StatusCode::from_u16(status).unwrap(), headers, Bytes::copy_from_slice(body.as_bytes()))
    }

    fn poll(status: u16, body: &str) -> Result<Poll> {
        read_poll(&Method::POST, "/redfish/v1/x", "/redfish/v1/TaskService/Tasks/1", &reply(status, body, None))
    }

    #[test]
    fn task_monitor_replies() {
        assert_eq!(poll(202, r#"{"TaskState":"Running"}"#).unwrap(), Poll::Running(Some("Running".into())));
        assert_eq!(poll(202, "").unwrap(), Poll::Running(None));
        assert_eq!(poll(200, r#"{"TaskState":"Starting"}"#).unwrap(), Poll::Running(Some("Starting".into())));
        assert_eq!(poll(200, r#"{"TaskState":"Completed"}"#).unwrap(), Poll::Finished);
        assert_eq!(poll(204, "").unwrap(), Poll::Finished);
        assert_eq!(poll(200, "not json").unwrap(), Poll::Finished);
        let e = poll(200, r#"{"TaskState":"Completed","TaskStatus":"Critical"}"#).unwrap_err();
        assert!(e.message.contains("Completed (Critical)"), "{e}");
        assert_eq!(poll(200, r#"{"TaskState":"Killed"}"#).unwrap_err().code, ErrorCode::BmcError);
        assert_eq!(poll(404, "").unwrap_err().code, ErrorCode::BmcError);
        assert_eq!(poll(500, "").unwrap_err().code, ErrorCode::BmcError);
    }

    #[test]
    fn task_monitor_location() {
        let body = json!({"TaskMonitor": "/redfish/v1/TaskMonitors/9", "@odata.id": "/redfish/v1/TaskService/Tasks/9"});
        let with_header = reply(202, "", Some("https://bmc/redfish/v1/TaskService/Tasks/7/"));
        assert_eq!(task_monitor(&with_header, &body).as_deref(), Some("https://bmc/redfish/v1/TaskService/Tasks/7"));
        assert_eq!(task_monitor(&reply(202, "", None), &body).as_deref(), Some("/redfish/v1/TaskMonitors/9"));
        assert_eq!(task_monitor(&reply(202, "", None), &Value::Null), None);
    }
}
