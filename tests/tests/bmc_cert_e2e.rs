//! BMC certificates end to end: NATS, the gateway and a worker process,
//! the `bmcctl` binary, and the Redfish mockup with a CertificateService
//! whose ReplaceCertificate swaps the certificate its TLS server presents.
//!
//! `bmcctl bmc-cert replace --machine NAME` on a machine pinned to the old
//! certificate: the BMC serves the new one, the registry pins it alone, the
//! next batch reaches the machine through the pipeline, and a record still
//! pinned to the old certificate no longer reaches it. The private key
//! appears in no process log, status record or result.

use bmcfleet_common::streams::{bucket, machines_config, Mode};
use bmcfleet_provider::tls::{first_certificate, sha256};
use bmcfleet_schema::*;
use bmcfleet_testing::redfish::{MockupServer, TestPki, REPLACE_CERTIFICATE};
use bmcfleet_tests::bin;
use bmcfleet_tests::producer::Stack;
use std::time::Duration;

fn cert_get(machine: &str) -> Batch {
    Batch {
        events: Default::default(),
        plan: false,
        id: Some(ulid::Ulid::new()),
        machine: Some(machine.to_owned()),
        bmc: None,
        actions: vec![Action::BmcCertGet],
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(60)),
    }
}

async fn record(stack: &Stack, name: &str) -> (async_nats::jetstream::kv::Store, Machine) {
    let js = async_nats::jetstream::new(stack.producer.client.clone());
    let kv = bucket(&js, machines_config(&stack.topology.subjects(), 1), Mode::UseExisting).await.unwrap();
    let m = serde_json::from_slice(&kv.get(name).await.unwrap().expect("registered")).unwrap();
    (kv, m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_moves_the_pin_and_the_machine_stays_reachable() {
    let server = MockupServer::with_certificate_service().await.unwrap();
    let old = hex(&sha256(&server.served_certificate()));
    let stack = Stack::start(1, &[]).await;
    let mut target = server.target();
    target.protocol = Protocol::Redfish;
    target.tls = TlsOptions { pin_sha256: Some(old.clone()), ..TlsOptions::default() };
    let name = stack.topology.register_machine(&stack.producer.client, &target).await;

    let (cert, key) = TestPki::self_signed("bmc-rotated-e2e", 20).unwrap();
    let new = hex(&sha256(&first_certificate(&cert).unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, &cert).unwrap();
    std::fs::write(&key_file, &key).unwrap();

    let out = tokio::process::Command::new(bin("bmcctl"))
        .args(["--nats-url", &stack.nats.url(), "--output", "json", "bmc-cert", "replace", "--machine", &name])
        .arg("--cert")
        .arg(&cert_file)
        .arg("--key")
        .arg(&key_file)
        .env_remove("RUST_LOG")
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("now pins the new certificate"), "{stderr}");
    assert_eq!(hex(&sha256(&server.served_certificate())), new, "the BMC serves the new certificate");
    assert_eq!(server.requests_to("POST", REPLACE_CERTIFICATE).len(), 1);
    let (kv, mut m) = record(&stack, &name).await;
    assert_eq!(m.tls.pin_sha256.as_deref(), Some(new.as_str()), "the registry pins the new certificate alone");

    // The next batch reaches the machine with the new pin, through the pipeline.
    let r = stack.run(&cert_get(&name)).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let Some(ActionData::BmcCertificate(c)) = &r.results[0].data else { panic!("{r:#?}") };
    assert_eq!(c.sha256, new);

    // A record still pinned to the old certificate no longer reaches it.
    m.tls.pin_sha256 = Some(old.clone());
    kv.put(&name, serde_json::to_vec(&m).unwrap().into()).await.unwrap();
    let stale = bmcfleet_tests::eventually(Duration::from_secs(20), "a batch refused by the stale pin", || async {
        let r = stack.run(&cert_get(&name)).await;
        (r.state == BatchState::Failed).then_some(r)
    })
    .await;
    let e = stale.results[0].error.as_ref().expect("an error");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{e:?}");
    assert!(e.message.contains("TLS"), "{e:?}");

    // The key is nowhere: not in the processes' logs, not in bmcctl's output.
    let lines: Vec<&str> = key.lines().filter(|l| !l.starts_with("-----") && l.len() > 16).collect();
    let logs = format!("{}{}{stdout}{stderr}", stack.gateway.log_text(), stack.workers[0].log_text());
    for line in lines {
        assert!(!logs.contains(line), "a line of the private key leaked");
    }
}

async fn state_of(stack: &Stack, machine: &str) -> Option<bmcfleet_schema::state::MachineState> {
    let js = async_nats::jetstream::new(stack.producer.client.clone());
    let kv = js.get_key_value(stack.topology.subjects().state_bucket()).await.ok()?;
    serde_json::from_slice(&kv.get(machine).await.ok()??).ok()
}

/// The poll (with its inventory read) records the certificate's expiry in
/// the machine's state; after a replacement the new expiry follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificates_expiry_is_in_fleet_state() {
    let server = MockupServer::with_certificate_service().await.unwrap();
    let served = bmcfleet_provider::tls::describe_certificate(&server.served_certificate(), "t").unwrap();
    // The first inventory read of a machine waits a random part of the
    // inventory interval: a short one here.
    let stack =
        Stack::start(1, &["--poll-interval", "1s", "--poll-timeout", "900ms", "--inventory-interval", "2s"]).await;
    let mut target = server.target();
    target.protocol = Protocol::Redfish;
    let name = stack.topology.register_machine(&stack.producer.client, &target).await;
    let want = u64::try_from(served.not_after_unix).unwrap() * 1000;
    bmcfleet_tests::eventually(Duration::from_secs(30), "the certificate's expiry in the state", || async {
        state_of(&stack, &name).await.filter(|s| s.cert_not_after_ms == Some(want))
    })
    .await;

    // A replacement's expiry follows. The machine trusts the mockup's CA,
    // which did not sign the new self-signed certificate: its record opts
    // in to `tls.insecure` for this part (the pin case is the test above).
    let (cert, key) = TestPki::self_signed("expiring-soon", 10).unwrap();
    let new = bmcfleet_provider::tls::describe_certificate(&first_certificate(&cert).unwrap(), "t").unwrap();
    let (kv, mut m) = record(&stack, &name).await;
    m.tls = TlsOptions { insecure: true, ..TlsOptions::default() };
    kv.put(&name, serde_json::to_vec(&m).unwrap().into()).await.unwrap();
    let replace = Batch {
        actions: vec![Action::BmcCertReplace(BmcCertReplace {
            certificate_pem: cert,
            private_key_pem: Secret::new(key),
        })],
        ..cert_get(&name)
    };
    let r = bmcfleet_tests::eventually(Duration::from_secs(20), "the replacement", || async {
        let r = stack.run(&Batch { id: Some(ulid::Ulid::new()), ..replace.clone() }).await;
        (r.state == BatchState::Succeeded).then_some(r)
    })
    .await;
    let Some(ActionData::BmcCertificate(c)) = &r.results[0].data else { panic!("{r:#?}") };
    assert_eq!(c.sha256, new.sha256);
    let want = u64::try_from(new.not_after_unix).unwrap() * 1000;
    bmcfleet_tests::eventually(Duration::from_secs(20), "the new expiry in the state", || async {
        state_of(&stack, &name).await.filter(|s| s.cert_not_after_ms == Some(want))
    })
    .await;
}
