//! BMC discovery (docs/BMCCTL.md "Discovery"): a worker started with
//! `--discover-allow` ranges answers the discovery requests the gateway
//! forwards (`<prefix>.discover.run`, queue group `bmcfleet-discover`: one
//! worker answers each). The request is checked whole before any packet
//! leaves: its form and size (`--discover-max-addresses`), every address
//! inside the allowed ranges, and a duration within
//! [`discover::MAX_DURATION`] at the rate it will run at. Then each
//! (address, protocol, port) is one probe, started at most `--discover-rate`
//! per second across every discovery of this worker (one pacer), with the
//! request's timeout. The probes are the providers' unauthenticated ones
//! (`bmcfleet_ipmi::probe::discover`, `bmcfleet_redfish::probe::discover`,
//! `bmcfleet_amt::probe::discover`): no session, no credential, nothing
//! registered.

use bmcfleet_schema::discover::{self, DiscoverReport, DiscoverRequest, Found};
use bmcfleet_schema::error::Coded;
use bmcfleet_schema::machine::Cidr;
use bmcfleet_schema::subject::{CONTENT_TYPE, DISCOVER_QUEUE};
use bmcfleet_schema::{Encoding, ErrorBody, ErrorCode, Protocol, Reply, Subjects};
use futures::StreamExt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Probes in flight at once, whatever the rate (each holds a socket).
const MAX_IN_FLIGHT: usize = 256;

/// The worker's discovery flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `--discover-allow`: empty, discovery is off.
    pub allow: Vec<Cidr>,
    /// `--discover-rate`: probes per second, all discoveries together.
    pub rate: u32,
    /// `--discover-max-addresses`: most addresses of one request.
    pub max_addresses: u64,
}

/// Spaces probe starts at least `1 / rate` apart, across every discovery
/// of the worker.
#[derive(Debug)]
pub struct Pacer {
    next: std::sync::Mutex<tokio::time::Instant>,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer { next: std::sync::Mutex::new(tokio::time::Instant::now()) }
    }
}

impl Pacer {
    /// Wait for the next probe's turn at `rate` probes per second.
    pub async fn turn(&self, rate: u32) {
        let gap = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
        let slot = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let slot = (*next).max(tokio::time::Instant::now());
            *next = slot + gap;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

/// Subscribe to discovery requests when discovery is on (`None`: off, or
/// the subscription failed, logged). Flushed: once this returns, the server
/// routes discovery requests to this worker.
pub async fn subscribe(
    client: &async_nats::Client,
    subjects: &Subjects,
    settings: &Settings,
) -> Option<async_nats::Subscriber> {
    if settings.allow.is_empty() {
        tracing::info!("BMC discovery is off on this worker (no --discover-allow range).");
        return None;
    }
    let subscribed = client.queue_subscribe(subjects.discover_run(), DISCOVER_QUEUE.to_owned()).await;
    let flushed = match subscribed {
        Ok(s) => client.flush().await.map(|()| s).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match flushed {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "Cannot subscribe to discovery requests; discovery is off.");
            None
        }
    }
}

/// Serve the discovery requests of `requests` ([`subscribe`]) until `stop`.
pub async fn serve(
    mut requests: async_nats::Subscriber,
    client: async_nats::Client,
    worker: String,
    settings: Settings,
    stop: CancellationToken,
) {
    let ranges: Vec<String> = settings.allow.iter().map(|r| r.to_string()).collect();
    tracing::info!(allow = %ranges.join(","), rate = settings.rate, max_addresses = settings.max_addresses, "BMC discovery on.");
    let pacer = Arc::new(Pacer::default());
    let settings = Arc::new(settings);
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => break,
            m = requests.next() => match m { Some(m) => m, None => break },
        };
        let Some(reply_to) = msg.reply.clone() else { continue };
        let (client, worker, settings, pacer, stop) =
            (client.clone(), worker.clone(), settings.clone(), pacer.clone(), stop.clone());
        tasks.spawn(async move {
            let encoding =
                Encoding::from_content_type(msg.headers.as_ref().and_then(|h| h.get(CONTENT_TYPE)).map(|v| v.as_str()))
                    .unwrap_or(Encoding::Json);
            let reply = tokio::select! {
                r = answer(encoding, &msg.payload, &worker, &settings, &pacer) => r,
                _ = stop.cancelled() => Reply::Error(ErrorBody::new(ErrorCode::Unavailable, "the worker is stopping")),
            };
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(CONTENT_TYPE, encoding.content_type());
            match encoding.encode(&reply) {
                Ok(body) => {
                    if let Err(e) = client.publish_with_headers(reply_to, headers, body.into()).await {
                        tracing::warn!(error = %e, "Cannot send a discovery reply.");
                    }
                }
                Err(e) => tracing::error!(error = %e, "Cannot encode a discovery reply."),
            }
        });
    }
    tasks.close();
    tasks.wait().await;
}

/// Check and run one request.
async fn answer(encoding: Encoding, payload: &[u8], worker: &str, settings: &Settings, pacer: &Pacer) -> Reply {
    let refuse = |code: ErrorCode, message: String| {
        tracing::info!(code = %code, message = %message, "Discovery refused.");
        Reply::Error(ErrorBody::new(code, message))
    };
    let request: DiscoverRequest = match encoding.decode(payload) {
        Ok(r) => r,
        Err(e) => return refuse(ErrorCode::Malformed, format!("not a discovery request: {e}")),
    };
    let plan = match request.plan(settings.max_addresses) {
        Ok(p) => p,
        Err(e) => return refuse(e.kind().code(), e.context().to_owned()),
    };
    // Every address inside the allowed ranges, before any packet.
    if let Err(e) = DiscoverRequest::allowed(&plan, &settings.allow) {
        return refuse(e.kind().code(), e.context().to_owned());
    }
    let rate = request.rate(settings.rate);
    if plan.duration(rate) > discover::MAX_DURATION {
        return refuse(
            ErrorCode::InvalidField,
            format!(
                "{} probes at {rate} per second take longer than {} s: probe fewer addresses or ports",
                plan.probes,
                discover::MAX_DURATION.as_secs()
            ),
        );
    }
    tracing::info!(targets = %request.targets.join(","), addresses = plan.addresses, probes = plan.probes, rate, "Discovery starting.");
    let started = std::time::Instant::now();
    let found = run(&plan, &request.ports, rate, pacer).await;
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::info!(
        addresses = plan.addresses,
        probes = plan.probes,
        found = found.len(),
        elapsed_ms,
        "Discovery finished."
    );
    Reply::Discovery(DiscoverReport {
        worker: worker.to_owned(),
        addresses: plan.addresses,
        probes: plan.probes,
        rate,
        elapsed_ms,
        found,
    })
}

/// Every probe of `plan`, paced; what answered, by address, port and protocol.
pub async fn run(plan: &discover::Plan, ports: &discover::DiscoverPorts, rate: u32, pacer: &Pacer) -> Vec<Found> {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut probes = tokio::task::JoinSet::new();
    for ip in plan.addresses() {
        for (protocol, port) in ports.each() {
            let permit = in_flight.clone().acquire_owned().await.expect("never closed");
            pacer.turn(rate).await;
            let timeout = plan.timeout;
            probes.spawn(async move {
                let found = probe(ip, protocol, port, timeout).await;
                drop(permit);
                found
            });
        }
    }
    let mut found = Vec::new();
    while let Some(done) = probes.join_next().await {
        match done {
            Ok(Some(f)) => found.push(f),
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "A discovery probe failed; its port is reported as nothing."),
        }
    }
    found.sort_by(|a, b| (a.address, a.port, a.protocol.as_str()).cmp(&(b.address, b.port, b.protocol.as_str())));
    found
}

async fn probe(ip: IpAddr, protocol: Protocol, port: u16, timeout: Duration) -> Option<Found> {
    match protocol {
        Protocol::Ipmi => bmcfleet_ipmi::probe::discover(ip, port, timeout).await,
        Protocol::Redfish => bmcfleet_redfish::probe::discover(ip, port, timeout).await,
        Protocol::Amt => bmcfleet_amt::probe::discover(ip, port, timeout).await,
        Protocol::Auto | Protocol::Sim => None,
    }
}
