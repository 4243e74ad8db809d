//! Security against the real nats-server: the least-privilege accounts of
//! deploy/nats/bmcfleet.conf, and TLS between bmcfleet and NATS.

use async_nats::ConnectOptions;
use bmcfleet_schema::*;
use bmcfleet_sim::{SimConfig, SimServer};
use bmcfleet_tests::checks::sim_batch;
use bmcfleet_tests::producer::{stream_messages, wait_gateway, wait_partitions_owned, Topology};
use bmcfleet_tests::{NatsServer, Process, Producer};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PASSWORDS: [(&str, &str); 4] = [
    ("BMCFLEET_NATS_GATEWAY_PASSWORD", "gw-secret-1"),
    ("BMCFLEET_NATS_WORKER_PASSWORD", "wk-secret-2"),
    ("BMCFLEET_NATS_PRODUCER_PASSWORD", "pr-secret-3"),
    ("BMCFLEET_NATS_SYS_PASSWORD", "sys-secret-4"),
];

fn config_path() -> String {
    format!("{}/../deploy/nats/bmcfleet.conf", env!("CARGO_MANIFEST_DIR"))
}

/// Connect as `user`, recording every error the server reports.
async fn connect(nats: &NatsServer, user: &str, password: &str) -> (async_nats::Client, Arc<Mutex<Vec<String>>>) {
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

async fn wait_error(errors: &Arc<Mutex<Vec<String>>>, needle: &str) -> String {
    bmcfleet_tests::eventually(Duration::from_secs(10), needle, || {
        let found = errors.lock().unwrap().iter().find(|e| e.contains(needle)).cloned();
        async move { found }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_cannot_bypass_the_gateway() {
    let config = config_path();
    let nats = NatsServer::start_with_env(&["-c", &config], &PASSWORDS);
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let topo = Topology::default();
    let _gw = topo.gateway(&nats, &["--nats-user", "gateway", "--nats-password", PASSWORDS[0].1]);
    let (producer_client, producer_errors) = connect(&nats, "producer", PASSWORDS[2].1).await;
    let producer = Producer::new(producer_client.clone());
    wait_gateway(&producer).await;
    let _w: Process = topo.worker(&nats, "w0", sim.addr(), &["--nats-user", "worker", "--nats-password", PASSWORDS[1].1]);
    let (admin, _) = connect(&nats, "gateway", PASSWORDS[0].1).await;
    wait_partitions_owned(&admin, &topo.subjects()).await;

    // The sanctioned path works end to end under these permissions.
    let Reply::Result(r) = producer.submit(&sim_batch("10.7.0.1", vec![Action::Power(PowerOp::On)]), true).await else {
        panic!("submit through the gateway")
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    let jobs = topo.subjects().jobs_stream();
    let before = stream_messages(&admin, &jobs).await;

    // A producer publishing straight onto a job subject is refused by the server.
    let subject = topo.subjects().job(&"10.7.0.1".parse::<BmcAddress>().unwrap().key());
    producer_client.publish(subject.clone(), "forged".into()).await.unwrap();
    producer_client.flush().await.unwrap();
    let e = wait_error(&producer_errors, "Permissions Violation for Publish").await;
    assert!(e.contains("bmc.jobs"), "{e}");
    // ... and cannot read the job stream or the JetStream API either.
    producer_client.subscribe("bmc.jobs.>").await.unwrap();
    wait_error(&producer_errors, "Permissions Violation for Subscription").await;
    let js = async_nats::jetstream::new(producer_client.clone());
    assert!(tokio::time::timeout(Duration::from_secs(5), js.get_stream(&jobs)).await.map(|r| r.is_err()).unwrap_or(true));

    // Workers consume jobs but may not publish them either.
    let (worker_client, worker_errors) = connect(&nats, "worker", PASSWORDS[1].1).await;
    worker_client.publish(subject, "forged".into()).await.unwrap();
    worker_client.flush().await.unwrap();
    wait_error(&worker_errors, "Permissions Violation for Publish").await;

    assert_eq!(stream_messages(&admin, &jobs).await, before, "a forged job reached the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_and_worker_speak_tls_to_nats() {
    let pki = bmcfleet_redfish::testing::TestPki::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pki.write_to(dir.path()).unwrap();
    let ca = dir.path().join("ca.pem");
    let (cert, key, ca) = (cert.display().to_string(), key.display().to_string(), ca.display().to_string());
    let nats = NatsServer::start_with(&["--tls", "--tlscert", &cert, "--tlskey", &key]);
    assert!(nats.log().contains("TLS required for client connections"), "{}", nats.log());
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let topo = Topology::default();
    let _gw = topo.gateway(&nats, &["--nats-tls-ca", &ca]);
    let _w = topo.worker(&nats, "w0", sim.addr(), &["--nats-tls-ca", &ca]);
    let client = ConnectOptions::new().add_root_certificates(dir.path().join("ca.pem")).require_tls(true).connect(nats.url()).await.unwrap();
    let producer = Producer::new(client.clone());
    wait_gateway(&producer).await;
    wait_partitions_owned(&client, &topo.subjects()).await;
    let Reply::Result(r) = producer.submit(&sim_batch("10.7.1.1", vec![Action::Power(PowerOp::Status)]), true).await else {
        panic!("submit over TLS")
    };
    assert_eq!(r.state, BatchState::Succeeded);

    // A gateway that does not trust the server's CA refuses to start.
    let mut untrusting = topo.gateway(&nats, &["--nats-connect-timeout", "3s"]);
    let status = untrusting.wait();
    assert!(!status.success());
    let log = untrusting.log_text();
    assert!(log.contains("cannot connect to NATS") || log.contains("did not answer"), "{log}");
}
