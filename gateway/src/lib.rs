//! # bmcfleet-gateway
//!
//! Serves producers as a NATS micro service (`<prefix>.submit`, `.status`,
//! `.cancel`; discoverable with `nats micro ls`). A submitted batch is
//! decoded (MessagePack, or JSON with `Content-Type: application/json`),
//! validated, given an id, and published to its BMC's job subject with
//! `Nats-Msg-Id` = batch id. Nothing is stored for a refused batch.
//! Rollouts (`<prefix>.rollout.submit`, `.status`, `.pause`, `.resume`,
//! `.abort`, `.list`) are admitted here too, and every gateway runs the
//! drivers that run them in waves under KV leases (docs/ROLLOUTS.md).
//!
//! # Layout
//! - [`config`]: flags and environment.
//! - [`service`]: [`service::Gateway`], the state the endpoints share, and request dispatch and replies.
//! - [`submit`] (with [`target`]), [`status`], [`cancel`], [`discover`]: one module per endpoint
//!   (`discover`: BMC discovery, operators only, forwarded to a worker).
//! - [`requester`]: who sent a request (operator or tenant).
//! - [`budget`]: how many requests are handled at once, per client and tenant.
//! - [`rollout`]: the rollout endpoints (`<prefix>.rollout.*`): admission and operations.
//! - [`rollout_driver`]: runs rollouts under KV leases, in every gateway.
//! - [`metrics`]: admission metrics (served on `/metrics`).
//! - [`run`]: start-up, the service loop and shutdown.

pub mod budget;
pub mod cancel;
pub mod config;
pub mod console_log;
pub mod discover;
pub mod metrics;
pub mod ownership;
pub mod requester;
pub mod rollout;
pub mod rollout_driver;
pub mod service;
pub mod status;
pub mod submit;
pub mod target;

pub use config::Config;

use anyhow::Context as _;
use async_nats::service::ServiceExt;
use bmcfleet_common::registry::Registry;
use bmcfleet_common::streams::{self, Mode};
use futures::StreamExt;
use service::Gateway;
use std::future::Future;
use std::sync::Arc;
use tokio_util::task::TaskTracker;

/// How long a stopping gateway lets in-flight requests finish (waiting
/// submits are answered at once).
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The micro-service name producers discover.
pub const SERVICE_NAME: &str = "bmcfleet-gateway";

/// Run the gateway until `shutdown` resolves; in-flight requests finish first.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    bmcfleet_common::config::ServiceConfig::validate(&config).map_err(anyhow::Error::msg)?;
    let subjects = config.process.topology.subjects();
    if let Err(e) = bmcfleet_common::runtime::raise_fd_limit() {
        tracing::warn!(error = %e, "Cannot raise the open-files limit.");
    }
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    // Ready once connected to NATS with the service started (and while the connection holds).
    let ready = bmcfleet_common::serve::Ready::new();
    let server =
        bmcfleet_common::serve::start_unless_off(config.process.metrics.addr.0, registry, ready.check()).await?;
    let client = bmcfleet_common::nats::connect(&config.process.nats, SERVICE_NAME).await?;
    ready.connected(&client);
    let resources = streams::ensure_with_retry(
        client.clone(),
        &subjects,
        &config.stream_settings(),
        Mode::Update,
        std::time::Duration::from_secs(60),
    )
    .await
    .context("setting up JetStream streams and buckets")?;
    let backlog = tokio::spawn(watch_backlog(resources.jobs.clone(), metrics.jobs_backlog.clone()));
    let stop_registry = tokio_util::sync::CancellationToken::new();
    let replicas = usize::from(config.process.topology.replicas);
    let machines = streams::retry_setup(
        "machine registry",
        std::time::Duration::from_secs(60),
        |_| false,
        || Registry::start(&resources.js, &subjects, replicas, stop_registry.child_token()),
    )
    .await
    .context("reading the machine registry")?;
    tracing::info!(machines = machines.len(), ad_hoc_targets = %config.ad_hoc_targets, "Machine registry loaded.");
    let census = tokio::spawn(ownership::census(
        resources.js.clone(),
        subjects.clone(),
        machines.clone(),
        metrics.machines_state.clone(),
    ));
    let auditor = tokio::spawn(audit_registry(machines.changes(), resources.js.clone(), subjects.audit_registry()));
    if config.workers_public_key.is_none() {
        tracing::warn!(
            "No --workers-public-key: new users' passwords, media URLs with credentials and raw request data travel in the job stream in clear; \
             give the workers' public key to seal them."
        );
    }
    let (audit, audit_writer) = bmcfleet_common::audit::Batcher::start(resources.js.clone());
    let resources_js = resources.js.clone();
    let gateway =
        Gateway::new(client.clone(), resources, subjects.clone(), config.limits(), machines, audit, config.max_wait)
            .with_metrics(metrics)
            .with_params_key(config.workers_public_key.as_deref())
            .context("--workers-public-key")?;
    let gateway = Arc::new(gateway);
    let rollout_store = {
        let js = &resources_js;
        let (records, parts) = streams::rollout_buckets(js, &subjects, &config.stream_settings(), Mode::Update)
            .await
            .context("setting up the rollout buckets")?;
        bmcfleet_common::rollouts::Store::new(records, parts, subjects.clone())
    };
    let rollout_leases = {
        let config = streams::rollout_leases_config(&subjects, config.rollout_lease_ttl, replicas);
        streams::bucket(&resources_js, config, Mode::UseExisting)
            .await
            .context("setting up the rollout lease bucket")?
    };
    let lease_ttl = match rollout_leases.status().await {
        Ok(s) if !s.info.config.max_age.is_zero() && s.info.config.max_age != config.rollout_lease_ttl => {
            tracing::warn!(configured = ?config.rollout_lease_ttl, bucket = ?s.info.config.max_age, "Rollout lease TTL differs from the bucket's; using the bucket's so all gateways agree.");
            s.info.config.max_age
        }
        _ => config.rollout_lease_ttl,
    };
    let rollouts = Arc::new(rollout::Rollouts::new(gateway.clone(), rollout_store.clone()));
    let stop_drivers = tokio_util::sync::CancellationToken::new();
    let drivers = tokio::spawn(
        rollout_driver::Drivers::new(
            gateway.clone(),
            rollout_store,
            rollout_leases,
            rollout_driver::Settings {
                lease_ttl,
                poll: config.rollout_poll_interval,
                instance: format!("{}-{}", std::process::id(), ulid::Ulid::new()),
            },
        )
        .run(stop_drivers.clone()),
    );

    let service = client
        .service_builder()
        .description("bmcfleet: ordered out-of-band BMC actions")
        .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the micro service: {e}"))?;
    let group = service.group(&config.service.service_prefix);
    let mut submit = group.endpoint("submit").await.map_err(|e| anyhow::anyhow!("submit endpoint: {e}"))?;
    let mut status = group.endpoint("status").await.map_err(|e| anyhow::anyhow!("status endpoint: {e}"))?;
    let mut cancel = group.endpoint("cancel").await.map_err(|e| anyhow::anyhow!("cancel endpoint: {e}"))?;
    let mut discover = group
        .endpoint(bmcfleet_schema::subject::DISCOVER_ENDPOINT)
        .await
        .map_err(|e| anyhow::anyhow!("discover endpoint: {e}"))?;
    let mut console_log = group
        .group(bmcfleet_schema::subject::CONSOLE_GROUP)
        .endpoint(bmcfleet_schema::subject::CONSOLE_ENDPOINTS[0])
        .await
        .map_err(|e| anyhow::anyhow!("console log endpoint: {e}"))?;
    let rollout_group = group.group(bmcfleet_schema::subject::ROLLOUT_GROUP);
    let mut rollout_endpoints = futures::stream::SelectAll::new();
    for which in rollout::Endpoint::ALL {
        let endpoint = rollout_group
            .endpoint(which.name())
            .await
            .map_err(|e| anyhow::anyhow!("rollout {} endpoint: {e}", which.name()))?;
        rollout_endpoints.push(endpoint.map(move |r| (r, which)).boxed());
    }
    ready.running(true);
    tracing::info!(
        prefix = %config.service.service_prefix, partitions = config.process.topology.partitions, inline_credentials = ?config.inline_credentials,
        workers_public_key = config.workers_public_key.as_deref().unwrap_or("-"), raw_policy = %config.raw_policy.describe(),
        firmware_update = %config.allow_firmware_update.describe(), "Gateway ready."
    );

    let budgets = budget::Budgets::new(config.budgets());
    let tracker = TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let (request, which) = tokio::select! {
            _ = &mut shutdown => break,
            Some((request, which)) = rollout_endpoints.next() => {
                let reply = request.message.reply.as_ref().map(|r| r.as_str());
                let who = requester::Requester::of_with(request.message.headers.as_ref(), &config.operator_accounts);
                match budgets.admit(false, reply, requester::Requester::budget_key(&who)) {
                    Ok(permit) => {
                        let rollouts = rollouts.clone();
                        tracker.spawn(async move {
                            rollouts.handle(which, request, who).await;
                            drop(permit);
                        });
                    }
                    Err(why) => rollouts.refuse(which, request, why.to_string()).await,
                }
                continue;
            }
            r = submit.next() => (r, service::Endpoint::Submit),
            r = status.next() => (r, service::Endpoint::Status),
            r = cancel.next() => (r, service::Endpoint::Cancel),
            r = discover.next() => (r, service::Endpoint::Discover),
            r = console_log.next() => (r, service::Endpoint::ConsoleLog),
        };
        let Some(request) = request else { break };
        // Never wait for capacity here: a full budget is an `unavailable`
        // answer now, and the loop stays free for status, cancel and SIGTERM.
        // Keyed by who asks, as nats-server names it: never the reply subject.
        let client = budget::client_of(request.message.headers.as_ref());
        let who = requester::Requester::of_with(request.message.headers.as_ref(), &config.operator_accounts);
        match budgets.admit(Gateway::waits(which, &request), client.as_deref(), requester::Requester::budget_key(&who))
        {
            Ok(permit) => {
                let gateway = gateway.clone();
                tracker.spawn(async move {
                    gateway.handle(which, request, who).await;
                    drop(permit);
                });
            }
            Err(why) => gateway.refuse(which, request, why.to_string()).await,
        }
    }
    backlog.abort();
    auditor.abort();
    census.abort();
    stop_drivers.cancel();
    let _ = tokio::time::timeout(STOP_GRACE, drivers).await;
    stop_registry.cancel();
    tracing::info!("Gateway stopping; finishing in-flight requests.");
    gateway.stopping().cancel();
    tracker.close();
    if tokio::time::timeout(STOP_GRACE, tracker.wait()).await.is_err() {
        tracing::warn!("Some requests did not finish in time; stopping anyway.");
    }
    ready.running(false);
    // The last audit records: the writer ends once the gateway (its last sender) is gone.
    drop(gateway);
    drop(rollouts);
    if tokio::time::timeout(STOP_GRACE, audit_writer).await.is_err() {
        tracing::warn!("Some audit records may not be stored: the writer did not finish in time.");
    }
    let _ = tokio::time::timeout(STOP_GRACE, service.stop()).await;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), client.flush()).await;
    if let Some(server) = server {
        server.stop().await;
    }
    Ok(())
}

/// Record every registry change this gateway sees (every gateway does: the
/// stream keeps one record per revision by its message id).
async fn audit_registry(
    mut changes: tokio::sync::broadcast::Receiver<bmcfleet_common::registry::Change>,
    js: async_nats::jetstream::Context,
    subject: String,
) {
    loop {
        let change = match changes.recv().await {
            Ok(c) => c,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                tracing::error!(
                    missed = n,
                    "Registry changes came faster than the audit log took them; some are not recorded."
                );
                continue;
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let record = bmcfleet_common::audit::registry_change(&change);
        bmcfleet_common::audit::write_soon(&js, subject.clone(), record, Some(format!("registry.{}", change.revision)));
    }
}

/// Keep `gauge` at the job stream's message count (one stream-info request
/// every [`BACKLOG_EVERY`]; a failed read keeps the last value).
async fn watch_backlog(
    mut jobs: async_nats::jetstream::stream::Stream,
    gauge: prometheus_client::metrics::gauge::Gauge,
) {
    let mut tick = tokio::time::interval(BACKLOG_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match jobs.info().await {
            Ok(info) => {
                gauge.set(i64::try_from(info.state.messages).unwrap_or(i64::MAX));
            }
            Err(e) => tracing::debug!(error = %e, "Cannot read the job stream's size."),
        }
    }
}

/// How often the gateway reads the job backlog for `bmcfleet_jobs_backlog`.
const BACKLOG_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
