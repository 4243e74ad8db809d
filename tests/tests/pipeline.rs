//! End to end through a real nats-server, gateway and worker processes, with
//! the simulated BMC fleet recording what every worker did.

use bmcfleet_schema::*;
use bmcfleet_sim::{SimConfig, SimServer};
use bmcfleet_tests::producer::{stream_messages, wait_gateway, wait_partitions_owned, Topology};
use bmcfleet_tests::{NatsServer, Producer};
use std::time::Duration;

fn batch(address: &str, actions: Vec<Action>) -> Batch {
    Batch {
        id: None,
        bmc: BmcTarget {
            address: address.parse().unwrap(),
            protocol: Protocol::Sim,
            credentials: Credentials::Inline { username: "admin".into(), password: Secret::new("pw-in-line") },
            tls: TlsOptions::default(),
            system_id: None,
        },
        actions,
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(60)),
    }
}

struct Env {
    nats: NatsServer,
    sim: SimServer,
    topo: Topology,
    producer: Producer,
    _gateway: bmcfleet_tests::Process,
    _workers: Vec<bmcfleet_tests::Process>,
}

async fn env(workers: usize) -> Env {
    let nats = NatsServer::start();
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let topo = Topology::default();
    let gateway = topo.gateway(&nats, &[]);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let workers = (0..workers).map(|i| topo.worker(&nats, &format!("w{i}"), sim.addr(), &[])).collect();
    wait_partitions_owned(&producer.client, &topo.subjects()).await;
    Env { nats, sim, topo, producer, _gateway: gateway, _workers: workers }
}

#[tokio::test]
async fn submit_and_wait_returns_the_final_result() {
    let e = env(1).await;
    let b = batch(
        "10.0.0.5",
        vec![
            Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true }),
            Action::Power(PowerOp::On),
            Action::Power(PowerOp::Status),
        ],
    );
    let reply = e.producer.submit(&b, true).await;
    let Reply::Result(r) = reply else { panic!("expected a result, got {reply:?}") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    assert_eq!(r.results.len(), 3);
    assert_eq!(r.results[2].data, Some(ActionData::PowerState(PowerState::On)));
    assert!(r.results.iter().all(|a| a.provider.as_deref() == Some("sim")));
    assert_eq!(e.sim.power("v4-10-0-0-5"), Some(PowerState::On));
    let boot = e.sim.boot("v4-10-0-0-5").unwrap();
    assert_eq!((boot.device, boot.efi), (BootDevice::Pxe, true));
    // The status endpoint serves the same final result.
    let Reply::Status(s) = e.producer.status(r.id).await else { panic!("status") };
    assert_eq!(s.state, BatchState::Succeeded);
    assert_eq!(s.result.unwrap(), r);
    // Work-queue: the finished job is gone from the jobs stream.
    let subjects = e.topo.subjects();
    bmcfleet_tests::eventually(Duration::from_secs(10), "job acknowledged", || {
        let c = e.producer.client.clone();
        let s = subjects.jobs_stream();
        async move { (stream_messages(&c, &s).await == 0).then_some(()) }
    })
    .await;
    drop(e.nats);
}
