//! # bmcfleet-gateway
//!
//! Serves producers as a NATS micro service (`<prefix>.submit`, `.status`,
//! `.cancel`; discoverable with `nats micro ls`). A submitted batch is
//! decoded (MessagePack, or JSON with `Content-Type: application/json`),
//! validated, given an id, and published to its BMC's job subject with
//! `Nats-Msg-Id` = batch id. Nothing is stored for a refused batch.
//!
//! # Layout
//! - [`config`]: flags and environment.
//! - [`admit`]: the request handlers (pure logic over NATS handles).
//! - [`metrics`]: admission metrics (served on `/metrics`).
//! - [`run`]: start-up, the service loop and shutdown.

pub mod admit;
pub mod config;
pub mod metrics;

pub use config::Config;

use admit::Gateway;
use anyhow::Context as _;
use async_nats::service::ServiceExt;
use bmcfleet_common::streams::{self, Mode};
use futures::StreamExt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

/// The micro-service name producers discover.
pub const SERVICE_NAME: &str = "bmcfleet-gateway";

/// Run the gateway until `shutdown` resolves; in-flight requests finish first.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let subjects = config.topology.subjects();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    // Ready once connected to NATS with the service started (and while the connection holds).
    let client_cell: Arc<std::sync::OnceLock<async_nats::Client>> = Arc::default();
    let started = Arc::new(AtomicBool::new(false));
    let ready = {
        let (client_cell, started) = (client_cell.clone(), started.clone());
        Arc::new(move || {
            started.load(Ordering::SeqCst)
                && client_cell.get().is_some_and(|c| c.connection_state() == async_nats::connection::State::Connected)
        })
    };
    let server = bmcfleet_common::serve::start_unless_off(config.metrics.addr.0, registry, ready).await?;
    let client = bmcfleet_common::nats::connect(&config.nats, SERVICE_NAME).await?;
    let _ = client_cell.set(client.clone());
    let resources = streams::ensure_with_retry(client.clone(), &subjects, &config.stream_settings(), Mode::Update, std::time::Duration::from_secs(60))
        .await
        .context("setting up JetStream streams and buckets")?;
    let gateway = Arc::new(Gateway::new(client.clone(), resources, subjects, config.limits(), config.max_wait).with_metrics(metrics));

    let service = client
        .service_builder()
        .description("bmcfleet: ordered out-of-band BMC actions")
        .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the micro service: {e}"))?;
    let group = service.group(&config.service_prefix);
    let mut submit = group.endpoint("submit").await.map_err(|e| anyhow::anyhow!("submit endpoint: {e}"))?;
    let mut status = group.endpoint("status").await.map_err(|e| anyhow::anyhow!("status endpoint: {e}"))?;
    let mut cancel = group.endpoint("cancel").await.map_err(|e| anyhow::anyhow!("cancel endpoint: {e}"))?;
    started.store(true, Ordering::SeqCst);
    tracing::info!(
        prefix = %config.service_prefix, partitions = config.topology.partitions, inline_credentials = ?config.inline_credentials,
        workers_public_key = config.workers_public_key.as_deref().unwrap_or("-"), raw_policy = %config.raw_policy.describe(), "Gateway ready."
    );

    let permits = Arc::new(Semaphore::new(config.max_concurrent_requests as usize));
    let tracker = TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let (request, which) = tokio::select! {
            _ = &mut shutdown => break,
            r = submit.next() => (r, admit::Endpoint::Submit),
            r = status.next() => (r, admit::Endpoint::Status),
            r = cancel.next() => (r, admit::Endpoint::Cancel),
        };
        let Some(request) = request else { break };
        let permit = permits.clone().acquire_owned().await.expect("semaphore never closes");
        let gateway = gateway.clone();
        tracker.spawn(async move {
            gateway.handle(which, request).await;
            drop(permit);
        });
    }
    tracing::info!("Gateway stopping; finishing in-flight requests.");
    tracker.close();
    tracker.wait().await;
    started.store(false, Ordering::SeqCst);
    let _ = service.stop().await;
    client.flush().await.ok();
    if let Some(server) = server {
        server.stop().await;
    }
    Ok(())
}
