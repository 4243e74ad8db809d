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
//! - [`run`]: start-up, the service loop and shutdown.

pub mod admit;
pub mod config;

pub use config::Config;

use admit::Gateway;
use anyhow::Context as _;
use async_nats::service::ServiceExt;
use bmcfleet_common::streams::{self, Mode};
use futures::StreamExt;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

/// The micro-service name producers discover.
pub const SERVICE_NAME: &str = "bmcfleet-gateway";

/// Run the gateway until `shutdown` resolves; in-flight requests finish first.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let subjects = config.topology.subjects();
    let client = bmcfleet_common::nats::connect(&config.nats, SERVICE_NAME).await?;
    let resources = streams::ensure(client.clone(), &subjects, &config.stream_settings(), Mode::Update)
        .await
        .context("setting up JetStream streams and buckets")?;
    let gateway = Arc::new(Gateway::new(client.clone(), resources, subjects, config.limits(), config.max_wait));

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
    tracing::info!(prefix = %config.service_prefix, partitions = config.topology.partitions, "Gateway ready.");

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
    let _ = service.stop().await;
    client.flush().await.ok();
    Ok(())
}
