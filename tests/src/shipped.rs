//! The shipped NATS accounts config (`deploy/nats/bmcfleet.conf`) under
//! test: nats-server started with it, and bmcfleet's processes and clients
//! connecting as its users.

use crate::producer::{wait_gateway, wait_partitions_owned, Topology};
use crate::{NatsServer, Process, Producer};
use async_nats::ConnectOptions;
use bmcfleet_testing::{SimConfig, SimServer};
use std::sync::{Arc, Mutex};

/// The users' passwords, as the config reads them from the environment.
pub const PASSWORDS: [(&str, &str); 8] = [
    ("BMCFLEET_NATS_GATEWAY_PASSWORD", "gw-secret-1"),
    ("BMCFLEET_NATS_WORKER_PASSWORD", "wk-secret-2"),
    ("BMCFLEET_NATS_PRODUCER_PASSWORD", "pr-secret-3"),
    ("BMCFLEET_NATS_SYS_PASSWORD", "sys-secret-4"),
    ("BMCFLEET_NATS_ADMIN_PASSWORD", "adm-secret-5"),
    ("BMCFLEET_NATS_TENANT_A_PASSWORD", "ta-secret-6"),
    ("BMCFLEET_NATS_TENANT_B_PASSWORD", "tb-secret-7"),
    ("BMCFLEET_NATS_OPS_PASSWORD", "ops-secret-8"),
];

/// Where the shipped config lives.
pub fn config_path() -> String {
    format!("{}/../deploy/nats/bmcfleet.conf", env!("CARGO_MANIFEST_DIR"))
}

/// nats-server with the shipped accounts config.
pub fn nats() -> NatsServer {
    NatsServer::start_with_env(&["-c", &config_path()], &PASSWORDS)
}

/// The gateway's flags for its NATS user.
pub fn gateway_user() -> [&'static str; 4] {
    ["--nats-user", "gateway", "--nats-password", PASSWORDS[0].1]
}

/// The worker's flags for its NATS user.
pub fn worker_user() -> [&'static str; 4] {
    ["--nats-user", "worker", "--nats-password", PASSWORDS[1].1]
}

/// nats-server with the shipped accounts config, a simulator, and a gateway
/// and a worker each under its own NATS user. Dropped processes first.
pub struct Shipped {
    pub gateway: Process,
    pub worker: Process,
    pub sim: SimServer,
    pub topo: Topology,
    pub nats: NatsServer,
}

impl Shipped {
    /// A producer connected as `user`, with the errors the server reports
    /// to it, once the gateway answers it.
    pub async fn producer(&self, user: &str, password: &str) -> (Producer, Arc<Mutex<Vec<String>>>) {
        let (client, errors) = connect(&self.nats, user, password).await;
        let producer = Producer::new(client);
        wait_gateway(&producer).await;
        (producer, errors)
    }

    /// Wait until the worker holds every partition (read as the `worker`
    /// user: leases are the workers' to read).
    pub async fn wait_partitions_owned(&self) {
        wait_partitions_owned(&connect(&self.nats, "worker", PASSWORDS[1].1).await.0, &self.topo.subjects()).await;
    }
}

/// [`Shipped`] with default topology and no extra flags.
pub async fn shipped(sim: SimConfig) -> Shipped {
    shipped_with(Topology::default(), sim, &[], &[]).await
}

/// [`Shipped`] with this topology and extra gateway and worker flags.
pub async fn shipped_with(topo: Topology, sim: SimConfig, gateway_extra: &[&str], worker_extra: &[&str]) -> Shipped {
    let nats = nats();
    let sim = SimServer::start(sim).await.expect("simulator");
    let gateway = topo.gateway(&nats, &[&gateway_user()[..], gateway_extra].concat());
    let worker = topo.worker(&nats, "w0", sim.addr(), &[&worker_user()[..], worker_extra].concat());
    Shipped { gateway, worker, sim, topo, nats }
}

/// Connect as `user`, recording every error the server reports.
pub async fn connect(nats: &NatsServer, user: &str, password: &str) -> (async_nats::Client, Arc<Mutex<Vec<String>>>) {
    let errors = Arc::new(Mutex::new(vec![]));
    let sink = errors.clone();
    let client = ConnectOptions::with_user_and_password(user.into(), password.into())
        .event_callback(move |event| {
            let sink = sink.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    sink.lock().unwrap().push(e.to_string());
                }
            }
        })
        .connect(nats.url())
        .await
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
    (client, errors)
}
