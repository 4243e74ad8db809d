//! Serial console over NATS (issue 36, docs/CONSOLE.md): the worker that
//! owns a machine's partition holds the machine's IPMI Serial-over-LAN
//! session while someone watches (or always, for a machine whose record
//! says `console: {always_on: true}`), publishes the host's output to the
//! console stream and writes what viewers type to the host.
//!
//! # Presence
//! A viewer (`bmcctl console`) publishes a heartbeat on
//! `<prefix>.console.watch.<tenant>.<machine>` every few seconds (header
//! `Bmc-Console-Viewer`: its id). The owner of the partition counts a
//! viewer as present for [`Settings::viewer_ttl`] after its last
//! heartbeat. (Core NATS rather than a KV key with a TTL: a tenant needs no
//! JetStream API of the operator's account, only a publish permission on
//! its own machines' subjects, and a new owner learns who watches within
//! one heartbeat.)
//!
//! # Output
//! Characters are coalesced for at most [`FLUSH_AFTER`] (or
//! [`CONSOLE_CHUNK_BYTES`]) into one message on
//! `<prefix>.console.out.<tenant>.<machine>` with `Bmc-Console-Session`
//! (new per activation) and `Bmc-Console-Seq` (1, 2, … in the session);
//! output lost before a chunk (the SOL layer's bounded queue, or a publish
//! JetStream did not acknowledge) is counted in `Bmc-Console-Lost` on the
//! next message. Markers (`Bmc-Console-Event`, empty body): `started`,
//! `takeover` (with the previous session and its last chunk), `break`,
//! `overrun`, `ended` (with `Bmc-Console-Reason`), `error`, `unsupported`.
//!
//! # Ownership and failover
//! Every SOL packet passes the partition's fence (the SOL layer asks the
//! send gate), and every publish asks the fence first: an old owner falls
//! silent before a new one can start. A new owner reads the last message of
//! the machine's output subject: when it is not an `ended` marker, the
//! previous owner's session never closed (it died or lost its lease with
//! the BMC's SOL instance still active), so the new owner activates with
//! take-over and publishes a `takeover` marker naming the session and the
//! last chunk it reached: what the host printed between that chunk and the
//! new activation is the gap, reported in bytes as a bound
//! (`Bmc-Console-Gap-Bytes`, [`gap_bound_bytes`]): what the host can print
//! at the SOL line's bit rate (read from the BMC before activating, else
//! the fastest SOL rate) from the stored time of that chunk to the new
//! activation (`Bmc-Console-Gap-Ms`), plus what the old owner could hold
//! unpublished ([`held_bound_bytes`]). A graceful hand-over closes the
//! session (`ended`, reason `hand-over`), so the next owner needs no
//! take-over. A SOL instance held by anyone else (an operator's
//! `ipmitool sol activate`) is never taken over: the viewers see an
//! `error` marker (`conflict`).
//!
//! Console data is tenant data: it never reaches a log, a trace or an
//! event; metrics count bytes only.

use crate::fence::Fence;
use crate::Shared;
use async_nats::HeaderMap;
use bmcfleet_common::streams::CONSOLE_CHUNK_BYTES;
use bmcfleet_ipmi::{IpmiConnector, SolEvent, SolOptions};
use bmcfleet_provider::Ctx;
use bmcfleet_schema::subject::{
    CONSOLE_EVENT_HEADER, CONSOLE_GAP_BYTES_HEADER, CONSOLE_GAP_MS_HEADER, CONSOLE_LOST_HEADER, CONSOLE_OP_HEADER,
    CONSOLE_REASON_HEADER, CONSOLE_SEQ_HEADER, CONSOLE_SESSION_HEADER, CONSOLE_VIEWER_HEADER, WORKER_HEADER,
};
use bmcfleet_schema::{BmcKey, Machine, Protocol};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Longest time host output waits in the worker before it is published.
pub const FLUSH_AFTER: Duration = Duration::from_millis(50);
/// Most bytes one input message may carry (larger ones are refused, not cut).
pub const MAX_INPUT_BYTES: usize = 4096;
/// Viewers remembered per machine (further heartbeats only refresh these).
const MAX_VIEWERS: usize = 64;
/// How long a publish may wait for JetStream's acknowledgement.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of the console sessions.
#[derive(Clone, Debug)]
pub struct Settings {
    /// A viewer counts as present this long after its last heartbeat.
    pub viewer_ttl: Duration,
    /// Time to open a session (RMCP+ handshake and SOL activation).
    pub open_timeout: Duration,
    /// SOL output events queued in the worker per session before output is
    /// dropped and counted (each ≤ 255 bytes).
    pub output_queue: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { viewer_ttl: Duration::from_secs(15), open_timeout: Duration::from_secs(20), output_queue: 256 }
    }
}

/// Why a provider has no console (what viewers of such a machine are told).
pub fn unsupported_reason(protocol: Protocol) -> Option<&'static str> {
    match protocol {
        Protocol::Ipmi => None,
        Protocol::Redfish => Some(bmcfleet_redfish::CONSOLE_UNSUPPORTED),
        Protocol::Amt => Some(bmcfleet_amt::CONSOLE_UNSUPPORTED),
        Protocol::Sim => Some("the simulator has no serial console"),
        Protocol::Auto => Some("the serial console needs the machine's protocol set to ipmi (SOL)"),
    }
}

struct Held {
    stop: CancellationToken,
}

/// Hold the consoles of partition `p`'s machines until its fence is lost
/// or drained (or `stop`).
pub async fn run(shared: Arc<Shared>, p: u16, fence: Fence, stop: CancellationToken) {
    let Some(connector) = shared.console.clone() else { return };
    let settings = shared.console_settings.clone();
    let partitions = shared.subjects.partitions;
    let in_partition = |name: &str| BmcKey::machine(name).partition(partitions) == p;
    let mut watch = match shared.client.subscribe(shared.subjects.console_watch_all()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(partition = p, error = %e, "Cannot subscribe to console heartbeats; no consoles here.");
            return;
        }
    };
    let mut viewers: HashMap<String, HashMap<String, Instant>> = HashMap::new();
    let mut held: HashMap<String, Held> = HashMap::new();
    // Machines whose last session failed: not before this instant again (and how often in a row).
    let mut retry_at: HashMap<String, (Instant, u32)> = HashMap::new();
    // Machines whose last session here ended without the BMC confirming the
    // close (unresponsive, failed): the SOL instance may still be ours.
    let mut unclean: std::collections::HashSet<String> = Default::default();
    // Non-IPMI machines whose viewers were told why there is no console.
    let mut told: HashMap<String, Instant> = HashMap::new();
    let mut tasks: tokio::task::JoinSet<(String, bool, bool)> = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = fence.lost.cancelled() => break,
            _ = fence.drain.cancelled() => break,
            _ = stop.cancelled() => break,
            Some(done) = tasks.join_next() => {
                if let Ok((name, ok, dirty)) = done {
                    held.remove(&name);
                    if dirty {
                        unclean.insert(name.clone());
                    } else {
                        unclean.remove(&name);
                    }
                    if ok {
                        retry_at.remove(&name);
                    } else {
                        let n = retry_at.get(&name).map(|(_, n)| n + 1).unwrap_or(0);
                        let wait = Duration::from_secs(2u64.saturating_pow(n.min(5)).min(60));
                        retry_at.insert(name, (Instant::now() + wait, n));
                    }
                }
            }
            Some(msg) = watch.next() => {
                let Some((tenant, machine)) = shared.subjects.parse_console_subject(&msg.subject) else { continue };
                if !in_partition(machine) {
                    continue;
                }
                // Only a registered machine of that tenant (the subject's
                // tenant is what NATS let the viewer publish to).
                let Some(m) = registered(&shared, machine).filter(|m| m.tenant == tenant) else { continue };
                let viewer = msg.headers.as_ref().and_then(|h| h.get(CONSOLE_VIEWER_HEADER)).map(|v| v.as_str().chars().take(64).collect()).unwrap_or_else(|| "anonymous".to_owned());
                let seen = viewers.entry(m.name.clone()).or_default();
                if seen.len() < MAX_VIEWERS || seen.contains_key(&viewer) {
                    seen.insert(viewer, Instant::now());
                }
            }
            _ = tick.tick() => {
                if !fence.may_act() {
                    continue;
                }
                let now = Instant::now();
                for seen in viewers.values_mut() {
                    seen.retain(|_, at| now.duration_since(*at) < settings.viewer_ttl);
                }
                viewers.retain(|_, seen| !seen.is_empty());
                // What should be held: watched machines and always-on ones of this partition.
                let mut wanted: HashMap<String, Arc<Machine>> = shared
                    .targets
                    .machines
                    .machines(|m| m.console.always_on && in_partition(&m.name))
                    .into_iter()
                    .map(|m| (m.name.clone(), m))
                    .collect();
                for name in viewers.keys() {
                    if let Some(m) = registered(&shared, name) {
                        wanted.insert(name.clone(), m);
                    }
                }
                held.retain(|name, h| {
                    let keep = wanted.contains_key(name);
                    if !keep {
                        h.stop.cancel();
                    }
                    true
                });
                told.retain(|name, at| wanted.contains_key(name) && now.duration_since(*at) < settings.viewer_ttl);
                for (name, machine) in wanted {
                    if held.contains_key(&name) || retry_at.get(&name).is_some_and(|(at, _)| *at > now) {
                        continue;
                    }
                    if let Some(reason) = unsupported_reason(machine.protocol) {
                        if !told.contains_key(&name) {
                            told.insert(name.clone(), now);
                            let out = shared.subjects.console_out(&machine.tenant, &machine.name);
                            let mut h = HeaderMap::new();
                            h.insert(CONSOLE_EVENT_HEADER, "unsupported");
                            h.insert(CONSOLE_REASON_HEADER, reason);
                            // Live only: a core publish, not stored.
                            let _ = shared.client.publish_with_headers(out, h, Default::default()).await;
                        }
                        continue;
                    }
                    let stop = CancellationToken::new();
                    held.insert(name.clone(), Held { stop: stop.clone() });
                    let (shared, connector, fence, settings) = (shared.clone(), connector.clone(), fence.clone(), settings.clone());
                    let own_unclean = unclean.contains(&name);
                    tasks.spawn(async move {
                        let (ok, dirty) = hold(&shared, &connector, &machine, &fence, &settings, own_unclean, stop).await;
                        (machine.name.clone(), ok, dirty)
                    });
                }
            }
        }
    }
    // Hand-over or lost lease: every session ends (a drained one closes
    // on the BMC; a fenced one sends nothing more).
    for h in held.values() {
        h.stop.cancel();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
}

fn registered(shared: &Shared, name: &str) -> Option<Arc<Machine>> {
    match shared.targets.machines.get(name) {
        bmcfleet_common::registry::Lookup::Found(m) => Some(m),
        _ => None,
    }
}

/// What the last message of a machine's output subject says about the
/// session before ours.
#[derive(Debug)]
struct Previous {
    session: String,
    seq: u64,
    ended: bool,
    /// When the stream stored it (the server's clock).
    stored: time::OffsetDateTime,
}

async fn previous(shared: &Shared, subject: &str) -> Option<Previous> {
    let stream = shared.res.js.get_stream(shared.subjects.console_stream()).await.ok()?;
    let msg = stream.get_last_raw_message_by_subject(subject).await.ok()?;
    let headers = &msg.headers;
    let session = headers.get(CONSOLE_SESSION_HEADER)?.as_str().to_owned();
    let seq = headers.get(CONSOLE_SEQ_HEADER).and_then(|v| v.as_str().parse().ok()).unwrap_or(0);
    // A session's last word, or a marker of no session (an attempt that failed, no console).
    let ended =
        headers.get(CONSOLE_EVENT_HEADER).is_some_and(|v| matches!(v.as_str(), "ended" | "error" | "unsupported"));
    Some(Previous { session, seq, ended, stored: msg.time })
}

/// The fastest SOL line (IPMI v2.0 table 26-5's highest bit rate): the
/// bound of a gap when the BMC does not say its line's rate.
pub const MAX_SOL_BIT_RATE: u32 = 115_200;

/// Most bytes of host output a failover gap can have cost: what the host
/// can print at the line's `bit_rate` (10 bits a character: start, 8 data,
/// stop) from the last stored chunk of the old session until the new
/// activation (`gap`, rounded up to whole milliseconds), plus what the old
/// owner could hold unpublished when it died (`held`: its SOL output queue
/// and one chunk being coalesced or published).
pub fn gap_bound_bytes(bit_rate: Option<u32>, gap: Duration, held: u64) -> u64 {
    let chars_per_s = u64::from(bit_rate.unwrap_or(MAX_SOL_BIT_RATE).min(MAX_SOL_BIT_RATE)) / 10;
    let ms = gap.as_micros().div_ceil(1000) as u64;
    (chars_per_s * ms).div_ceil(1000) + held
}

/// What one owner can hold of a session's output before it is stored.
pub fn held_bound_bytes(settings: &Settings) -> u64 {
    settings.output_queue as u64 * 255 + 2 * CONSOLE_CHUNK_BYTES as u64
}

/// One session's publisher: numbering, loss accounting, the fence.
struct Out<'a> {
    shared: &'a Shared,
    fence: &'a Fence,
    subject: String,
    session: String,
    seq: u64,
    lost: u64,
}

impl Out<'_> {
    fn headers(&mut self) -> HeaderMap {
        self.seq += 1;
        let mut h = HeaderMap::new();
        h.insert(CONSOLE_SESSION_HEADER, self.session.as_str());
        h.insert(CONSOLE_SEQ_HEADER, self.seq.to_string().as_str());
        h.insert(WORKER_HEADER, self.shared.worker_id.as_str());
        if self.lost > 0 {
            h.insert(CONSOLE_LOST_HEADER, self.lost.to_string().as_str());
        }
        h
    }

    /// Publish `body` with `extra` headers; false when the fence refused
    /// (nothing published: the partition is someone else's now).
    async fn publish(&mut self, body: Vec<u8>, extra: &[(&str, &str)]) -> bool {
        if !self.fence.valid() {
            return false;
        }
        let mut h = self.headers();
        for (k, v) in extra {
            h.insert(*k, *v);
        }
        let len = body.len() as u64;
        let reported = self.lost;
        let sent = async {
            let ack = self.shared.res.js.publish_with_headers(self.subject.clone(), h, body.into()).await.ok()?;
            tokio::time::timeout(PUBLISH_TIMEOUT, ack).await.ok()?.ok()
        }
        .await;
        if sent.is_some() {
            self.lost -= reported;
            self.shared.metrics.console_bytes.get_or_create(&out_label()).inc_by(len);
        } else {
            // Not stored: counted, reported on the next message.
            self.lost += len;
            self.shared.metrics.console_lost_bytes.inc_by(len);
        }
        true
    }

    async fn marker(&mut self, event: &str, reason: Option<&str>) -> bool {
        match reason {
            Some(r) => self.publish(Vec::new(), &[(CONSOLE_EVENT_HEADER, event), (CONSOLE_REASON_HEADER, r)]).await,
            None => self.publish(Vec::new(), &[(CONSOLE_EVENT_HEADER, event)]).await,
        }
    }

    /// Publish `buf` in chunks of at most [`CONSOLE_CHUNK_BYTES`].
    async fn flush(&mut self, buf: &mut Vec<u8>) -> bool {
        let mut ok = true;
        for chunk in buf.chunks(CONSOLE_CHUNK_BYTES) {
            ok &= self.publish(chunk.to_vec(), &[]).await;
        }
        buf.clear();
        ok
    }
}

fn out_label() -> crate::metrics::DirectionLabels {
    crate::metrics::DirectionLabels { direction: "out".into() }
}

/// Hold `machine`'s console until `stop`, the fence, or the BMC ends it.
/// Returns whether the next attempt may come at once (else after a pause),
/// and whether the session ended without the BMC confirming the close
/// (`own_unclean` of the next attempt: the instance may still be ours).
async fn hold(
    shared: &Shared,
    connector: &IpmiConnector,
    machine: &Machine,
    fence: &Fence,
    settings: &Settings,
    own_unclean: bool,
    stop: CancellationToken,
) -> (bool, bool) {
    let subject = shared.subjects.console_out(&machine.tenant, &machine.name);
    let mut out =
        Out { shared, fence, subject: subject.clone(), session: ulid::Ulid::new().to_string(), seq: 0, lost: 0 };
    let opened = |outcome: &str| {
        shared.metrics.console_opens.get_or_create(&crate::metrics::OutcomeLabels { outcome: outcome.into() }).inc();
    };
    let target = machine.target();
    let key = machine.key();
    let creds = match shared.credentials.resolve(&target.credentials, &key).await {
        Ok(c) => c,
        Err(e) => {
            opened(e.code.as_str());
            out.marker("error", Some(&format!("{}: {}", e.code.as_str(), e.message))).await;
            return (false, own_unclean);
        }
    };
    let previous = previous(shared, &subject).await;
    // Only our own instance is ever taken over: a previous owner's session
    // that never ended (failover), or this worker's own that ended unconfirmed.
    let failover = previous.as_ref().is_some_and(|p| !p.ended);
    let take_over = failover || own_unclean;
    let ctx = Ctx::with_timeout(settings.open_timeout).with_gate(fence.gate());
    // After a failover the line's bit rate bounds the gap (read before activating).
    let options =
        SolOptions { take_over, read_bit_rate: failover, output_queue: settings.output_queue, ..SolOptions::default() };
    let mut sol = match connector.open_console(&ctx, &target, &creds, options).await {
        Ok(s) => s,
        Err(e) => {
            opened(e.code.as_str());
            let message = bmcfleet_schema::secret::scrub(&e.message, &[creds.password.expose()]);
            tracing::info!(machine = %machine.name, code = e.code.as_str(), error = %message, "Cannot open the machine's serial console.");
            out.marker("error", Some(&format!("{}: {message}", e.code.as_str()))).await;
            return (false, own_unclean);
        }
    };
    opened("ok");
    shared.metrics.console_sessions.inc();
    tracing::info!(machine = %machine.name, session = %out.session, take_over, "Serial console session open.");
    // Subscribed before the first marker: nats-server handles one
    // connection's SUB and PUB in order, so a viewer that saw the marker
    // can type at once.
    let mut input = shared.client.subscribe(shared.subjects.console_in(&machine.tenant, &machine.name)).await.ok();
    match &previous {
        Some(p) if failover => {
            shared.metrics.console_takeovers.inc();
            // Server time of the old session's last stored chunk to our
            // activation (a clock behind the server's counts as no gap;
            // `held` still bounds what the old owner had).
            let since = time::OffsetDateTime::now_utc() - p.stored;
            let gap = Duration::try_from(since).unwrap_or(Duration::ZERO);
            let bound = gap_bound_bytes(sol.bit_rate(), gap, held_bound_bytes(settings));
            let rate = sol
                .bit_rate()
                .map(|r| format!("{r} bit/s"))
                .unwrap_or_else(|| format!("{MAX_SOL_BIT_RATE} bit/s, the fastest SOL rate: the BMC did not say"));
            let reason = format!(
                "session {} ended without closing after chunk {} (worker failover); host output between that chunk and this session is lost: at most {bound} bytes ({} ms at {rate}, and what the old owner held)",
                p.session, p.seq, gap.as_millis()
            );
            let (gap_bytes, gap_ms) = (bound.to_string(), gap.as_millis().to_string());
            out.publish(
                Vec::new(),
                &[
                    (CONSOLE_EVENT_HEADER, "takeover"),
                    (CONSOLE_REASON_HEADER, &reason),
                    (CONSOLE_GAP_BYTES_HEADER, &gap_bytes),
                    (CONSOLE_GAP_MS_HEADER, &gap_ms),
                ],
            )
            .await;
            shared.metrics.console_gap_bytes.inc_by(bound);
        }
        _ if own_unclean => {
            shared.metrics.console_takeovers.inc();
            out.marker("takeover", Some("the previous session here ended without the BMC confirming its close; host output since its end is lost")).await;
        }
        _ => {
            out.marker("started", None).await;
        }
    }
    let mut buf: Vec<u8> = Vec::with_capacity(CONSOLE_CHUNK_BYTES);
    let mut flush_at: Option<Instant> = None;
    let mut reported_lost = 0u64;
    let in_label = crate::metrics::DirectionLabels { direction: "in".into() };
    let unconfirmed;
    let closing: Option<&str> = loop {
        let next_input = async {
            match input.as_mut() {
                Some(sub) => sub.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = stop.cancelled() => break Some(if fence.drain.is_cancelled() { "hand-over" } else { "nobody watches" }),
            _ = fence.lost.cancelled() => break None,
            event = sol.recv() => match event {
                Some(SolEvent::Data(d)) => {
                    buf.extend_from_slice(&d);
                    if buf.len() >= CONSOLE_CHUNK_BYTES {
                        flush_at = None;
                        if !out.flush(&mut buf).await { break None; }
                    } else if flush_at.is_none() {
                        flush_at = Some(Instant::now() + FLUSH_AFTER);
                    }
                }
                Some(SolEvent::Lost(n)) => {
                    // Before the data that follows: what is buffered goes first.
                    if !out.flush(&mut buf).await { break None; }
                    flush_at = None;
                    out.lost += n;
                    reported_lost += n;
                    shared.metrics.console_lost_bytes.inc_by(n);
                }
                Some(SolEvent::BreakDetected) => {
                    if !out.flush(&mut buf).await { break None; }
                    flush_at = None;
                    out.marker("break", None).await;
                }
                Some(SolEvent::Overrun) => {
                    if !out.flush(&mut buf).await { break None; }
                    flush_at = None;
                    out.marker("overrun", Some("the BMC dropped characters of the host's output")).await;
                }
                None => break Some("ended by the BMC"),
            },
            _ = async { tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)).await }, if flush_at.is_some() => {
                flush_at = None;
                if !out.flush(&mut buf).await { break None; }
            }
            Some(msg) = next_input => {
                if !fence.valid() {
                    break None;
                }
                let op = msg.headers.as_ref().and_then(|h| h.get(CONSOLE_OP_HEADER)).map(|v| v.as_str().to_owned());
                let sent = match op.as_deref() {
                    Some("break") => sol.send_break().await,
                    Some(_) => continue, // an operation this release does not know: nothing is sent
                    None if msg.payload.len() > MAX_INPUT_BYTES => continue,
                    None => {
                        let r = sol.send(&msg.payload).await;
                        if r.is_ok() {
                            shared.metrics.console_bytes.get_or_create(&in_label).inc_by(msg.payload.len() as u64);
                        }
                        r
                    }
                };
                if sent.is_err() {
                    break Some("ended by the BMC");
                }
            }
        }
    };
    if out.lost == 0 && reported_lost > 0 {
        tracing::debug!(machine = %machine.name, lost = reported_lost, "Console output was lost and reported.");
    }
    match closing {
        Some(why) => {
            out.flush(&mut buf).await;
            let end = if why == "ended by the BMC" { sol.end_reason() } else { None };
            let end = match end {
                Some(e) => {
                    drop(sol);
                    unconfirmed = !matches!(e, bmcfleet_ipmi::SolEnd::Deactivated | bmcfleet_ipmi::SolEnd::Closed);
                    e.to_string()
                }
                None => {
                    let e = sol.close().await;
                    unconfirmed = !matches!(e, bmcfleet_ipmi::SolEnd::Deactivated | bmcfleet_ipmi::SolEnd::Closed);
                    format!("{why}: {e}")
                }
            };
            out.marker("ended", Some(&end)).await;
            tracing::info!(machine = %machine.name, session = %out.session, reason = %end, "Serial console session closed.");
        }
        None => {
            // Fenced: nothing more is sent or published; the next owner takes over.
            unconfirmed = true;
            drop(sol);
            tracing::info!(machine = %machine.name, session = %out.session, "Serial console session fenced (lease lost).");
        }
    }
    shared.metrics.console_sessions.dec();
    // A session the BMC ended is retried after a pause.
    (closing.is_some_and(|w| w != "ended by the BMC") || stop.is_cancelled(), unconfirmed)
}
