//! # bmcfleet-tests
//!
//! Harness for end-to-end tests against real components: a `nats-server`
//! with JetStream on a free loopback port and a temporary store, the
//! `bmc-gateway` / `bmc-worker` binaries as separate OS processes (so they
//! can be SIGKILLed), and simulated BMCs. Everything is stopped on `Drop`.
//!
//! The binaries must be built first (`cargo build --workspace --bins`, which
//! the README's test command does).

pub mod checks;
pub mod cluster;
pub mod machine_events;
pub mod metrics;
pub mod nats;
pub mod otlp;
pub mod process;
pub mod producer;
pub mod proxy;
pub mod shipped;

pub use nats::NatsServer;
pub use process::{bin, Process};
pub use producer::Producer;

use bmcfleet_testing::redfish::{FakeSystem, SushyEmulator};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (the kernel's choice, released for reuse).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0").local_addr().unwrap().port()
}

/// A sushy-emulator with one powered-off system `node<N>` (UUID ending in
/// `N`), or `None` when `test` skips (see [`SushyEmulator::start_or_skip`]).
pub async fn sushy_node(n: u32, test: &str) -> Option<SushyEmulator> {
    let system = FakeSystem::new(&format!("9a1d0c6e-2222-4c3a-9d55-{n:012}"), &format!("node{n}"), "Off");
    SushyEmulator::start_or_skip(SushyEmulator::builder().systems(vec![system]), test).await
}

/// Poll `check` until it returns `Some`, or panic with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match poll_until(timeout, Duration::from_millis(50), check).await {
        Some(v) => v,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// Poll `check` every `every` until it returns `Some`; `None` once
/// `timeout` has passed (checked once more at the end).
pub async fn poll_until<T, F, Fut>(timeout: Duration, every: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}
