//! The machine registry and the trust model, against real processes
//! (nats-server, gateway, worker, bmc-sim):
//! - a named credential never reaches a host the producer chose: the
//!   gateway refuses a batch that aims it anywhere (with or without
//!   producer TLS options), and the listener the producer controls sees no
//!   connection at all;
//! - batches name machines; an unknown one is `machine_not_found`, nothing
//!   is queued; a machine registered a moment ago is honoured at once;
//! - an ad hoc target at a registered machine's address is refused;
//! - the worker checks ad hoc targets again after name resolution: a name
//!   resolving into a range it does not allow is refused and nothing is sent.

use bmcfleet_schema::*;
use bmcfleet_testing::SimConfig;
use bmcfleet_tests::producer::{ref_machine_batch, refusal, stream_last_sequence, stream_messages, SimStack, Topology};
use bmcfleet_tests::NatsServer;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

async fn env(worker_args: &[&str]) -> SimStack {
    SimStack::start(SimConfig { password: Some("pw-in-line".into()), ..SimConfig::default() })
        .await
        .with_workers(1, worker_args)
        .await
}

/// A loopback TCP listener standing for a host the producer controls: counts connections.
async fn attacker_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((_conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_credential_never_reaches_a_host_the_producer_chose() {
    let e = env(&[]).await;
    let p = &e.producer;
    // The operator's machine, bound to its credential "rack12".
    let (ok, _, err) = bmcctl_cred_put(&e, "rack12", "pw-in-line");
    assert!(ok, "{err}");
    let good =
        ref_machine_batch(&p.client, &e.topology.subjects(), "10.30.0.1", "rack12", vec![Action::Power(PowerOp::On)])
            .await;
    let Reply::Result(r) = p.submit(&good, true).await else { panic!("a machine batch runs") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");

    let (port, seen) = attacker_listener().await;
    let jobs = e.topology.subjects().jobs_stream();
    // The stream's last sequence: the good batch's job leaves the work queue
    // when acknowledged (racing a message count), a refused one would add one.
    let queued = stream_last_sequence(&p.client, &jobs).await;
    for tls in [
        "",
        r#","tls":{"insecure":true}"#,
        r#","tls":{"ca_pem":"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}"#,
    ] {
        let json = format!(
            r#"{{"bmc":{{"address":"127.0.0.1:{port}","protocol":"redfish","credentials":{{"ref":"rack12"}}{tls}}},"actions":[{{"power":"status"}}]}}"#
        );
        let err = refusal(p.submit_json(&json, true).await);
        assert_eq!(err.code, ErrorCode::TargetForbidden, "{tls}: {err:?}");
    }
    // Also aimed at the machine's own name but another host: there is no such field to aim with.
    let json = r#"{"machine":"sim-v4-10-30-0-1","bmc":{"address":"127.0.0.1:1","credentials":{"ref":"rack12"}},"actions":["inventory"]}"#;
    assert_eq!(refusal(p.submit_json(json, true).await).code, ErrorCode::InvalidField);
    assert_eq!(stream_last_sequence(&p.client, &jobs).await, queued, "a refused batch was queued");
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the producer's listener was contacted");
}

fn bmcctl_cred_put(e: &SimStack, name: &str, password: &str) -> (bool, String, String) {
    use std::io::Write;
    let url = e.nats.url();
    let mut child = std::process::Command::new(bmcfleet_tests::bin("bmcctl"))
        .args([
            "--nats-url",
            &url,
            "cred",
            "put",
            name,
            "--username",
            "admin",
            "--password-stdin",
            "--workers-public-key",
            &e.topology.sealing.public,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn bmcctl");
    child.stdin.take().unwrap().write_all(format!("{password}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_name_registered_machines() {
    let e = env(&[]).await;
    let p = &e.producer;
    let jobs = e.topology.subjects().jobs_stream();
    let err = refusal(p.submit_json(r#"{"machine":"nobody-here","actions":[{"power":"on"}]}"#, false).await);
    assert_eq!(err.code, ErrorCode::MachineNotFound, "{err:?}");
    assert_eq!(stream_messages(&p.client, &jobs).await, 0);

    // Registered a moment ago (no wait for the watch): honoured at once, by gateway and worker.
    let target = bmcfleet_tests::checks::sim_batch("10.31.0.1", vec![]).bmc.unwrap();
    let name = e.topology.register_machine(&p.client, &target).await;
    let json = format!(r#"{{"machine":"{name}","actions":[{{"power":"on"}},{{"power":"status"}}]}}"#);
    let Reply::Result(r) = p.submit_json(&json, true).await else { panic!("result") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    assert_eq!(e.sim.power("v4-10-31-0-1"), Some(PowerState::On), "the machine's BMC was driven");

    // An ad hoc batch at the machine's address is refused: name the machine.
    let err = refusal(
        p.submit(&bmcfleet_tests::checks::sim_batch("10.31.0.1", vec![Action::Power(PowerOp::Off)]), false).await,
    );
    assert_eq!(err.code, ErrorCode::TargetForbidden, "{err:?}");
    assert!(err.message.contains(&name), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_checks_what_a_name_resolves_to() {
    // The gateway allows loopback (and passes names on); this worker only 10/8.
    let e = env(&["--ad-hoc-targets", "10.0.0.0/8"]).await;
    let p = &e.producer;
    let mut b = bmcfleet_tests::checks::sim_batch("localhost", vec![Action::Power(PowerOp::On)]);
    // A real protocol: sim names are labels and are never resolved.
    b.bmc.as_mut().unwrap().protocol = Protocol::Ipmi;
    let r = match p.submit(&b, true).await {
        Reply::Result(r) => r,
        other => panic!("{other:?}"),
    };
    let err = r.results[0].error.as_ref().expect("refused");
    assert_eq!(err.code, ErrorCode::TargetForbidden, "{r:?}");
    assert!(err.message.contains("127.0.0.1") || err.message.contains("::1"), "{err:?}");
    assert!(e.sim.log().iter().all(|l| l.bmc != "h-localhost"), "the BMC behind the name was called");
    // An address inside the worker's ranges runs.
    let Reply::Result(r) =
        p.submit(&bmcfleet_tests::checks::sim_batch("10.32.0.1", vec![Action::Power(PowerOp::On)]), true).await
    else {
        panic!()
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_box_opens_only_for_the_target_it_was_sealed_for() {
    use bmcfleet_common::sealing::{public_key, seal, Binding};
    let e = env(&[]).await;
    let p = &e.producer;
    let key = public_key(&e.topology.sealing.public).unwrap();
    let victim: BmcAddress = "10.33.0.1".parse().unwrap();
    let far = bmcfleet_common::runtime::now_ms() + 600_000;
    let sealed = seal("admin", &Secret::new("pw-in-line"), &key, &Binding::target(&victim.key(), far)).unwrap();
    let with_box = |address: &str| {
        let mut b = bmcfleet_tests::checks::sim_batch(address, vec![Action::Power(PowerOp::On)]);
        b.bmc.as_mut().unwrap().credentials = Credentials::Sealed(sealed.clone());
        b
    };
    // The victim's own batch works.
    let Reply::Result(r) = p.submit(&with_box("10.33.0.1"), true).await else { panic!() };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    // The captured box against the attacker's target: nothing is sent.
    let Reply::Result(r) = p.submit(&with_box("10.33.0.66"), true).await else { panic!() };
    let err = r.results[0].error.as_ref().expect("refused");
    assert_eq!(err.code, ErrorCode::CredentialUnavailable, "{r:?}");
    assert!(e.sim.log().iter().all(|l| l.bmc != "v4-10-33-0-66"), "the attacker's BMC was called");
    // Expired boxes do not open either.
    let old = seal("admin", &Secret::new("pw-in-line"), &key, &Binding::target(&victim.key(), 1)).unwrap();
    let mut late = with_box("10.33.0.1");
    late.bmc.as_mut().unwrap().credentials = Credentials::Sealed(old);
    let Reply::Result(r) = p.submit(&late, true).await else { panic!() };
    assert_eq!(r.results[0].error.as_ref().unwrap().code, ErrorCode::CredentialUnavailable, "{r:?}");
}

fn bmcctl_out(e: &SimStack, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bmcfleet_tests::bin("bmcctl"))
        .args(["--nats-url", &e.nats.url()])
        .args(args)
        .env("USER", "alice")
        .env_remove("RUST_LOG")
        .output()
        .expect("run bmcctl")
}

fn bmcctl(e: &SimStack, args: &[&str]) -> (bool, String, String) {
    let out = bmcctl_out(e, args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_apply_is_declarative_checked_and_audited() {
    let e = env(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("machines.yaml");
    let f = file.to_str().unwrap();
    std::fs::write(&file, "machines:\n  - {name: web-1, address: 10.50.0.1, protocol: sim, credentials: rack50, labels: {rack: '50'}}\n  - {name: web-2, address: 10.50.0.2, protocol: sim, credentials: rack50}\n").unwrap();
    // A credential nobody stored is refused (exit 2), nothing written; the flag only warns.
    let out = bmcctl_out(&e, &["machine", "apply", "-f", f]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown_credential") && err.contains("`rack50` (named by web-1, web-2)"), "{err}");
    let (_, ls, _) = bmcctl(&e, &["machine", "ls"]);
    assert!(!ls.contains("web-1"), "a refused file wrote something: {ls}");
    let out = bmcctl_out(&e, &["machine", "add", "web-8", "--address", "10.50.0.8", "--credentials", "rack50"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("unknown_credential"), "{err}");
    let (ok, out, err) = bmcctl(&e, &["machine", "apply", "-f", f, "--dry-run", "--allow-missing-credentials"]);
    assert!(ok && err.contains("warning: credential not in bucket") && out.contains("2 added"), "{out}{err}");
    let (ok, _, err) = bmcctl_cred_put(&e, "rack50", "pw-in-line");
    assert!(ok, "{err}");
    let (ok, out, err) = bmcctl(&e, &["machine", "apply", "-f", f]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("+ web-1") && out.contains("+ web-2") && out.contains("2 added"), "{out}");
    // The same file again changes nothing.
    let (ok, out, _) = bmcctl(&e, &["machine", "apply", "-f", f]);
    assert!(ok && out.contains("0 added, 0 changed, 0 removed, 2 unchanged"), "{out}");
    // `set` to a credential nobody stored is refused too; the record keeps its own.
    let out = bmcctl_out(&e, &["machine", "set", "web-2", "--credentials", "nobody-put-this"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("`nobody-put-this` (named by web-2)"), "{err}");
    let (_, got, _) = bmcctl(&e, &["machine", "get", "web-2"]);
    assert!(got.contains("\"rack50\""), "{got}");
    // A bad file is refused whole, naming the entry; nothing is written.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "machines:\n  - {name: web-3, address: 10.50.0.3, credentials: rack50}\n  - {name: web-4, address: '10.50.0.3:623', credentials: rack50}\n").unwrap();
    let (ok, _, err) = bmcctl(&e, &["machine", "apply", "-f", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("machines[1]") && err.contains("same BMC endpoint"), "{err}");
    let (_, ls, _) = bmcctl(&e, &["machine", "ls"]);
    assert!(!ls.contains("web-3"), "a refused file wrote something: {ls}");
    // Change one, prune the other: first as a dry run in JSON (one document, nothing written).
    std::fs::write(
        &file,
        "machines:\n  - {name: web-1, address: 10.50.0.1, protocol: sim, credentials: rack50, labels: {rack: '51'}}\n",
    )
    .unwrap();
    let (ok, out, err) = bmcctl(&e, &["machine", "apply", "-f", f, "--prune", "--dry-run", "--output", "json"]);
    assert!(ok, "{out}{err}");
    let plan: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON document ({e}): {out}"));
    assert_eq!(
        plan,
        serde_json::json!({"added": [], "changed": ["web-1"], "removed": ["web-2"], "unchanged": 0, "dry_run": true})
    );
    let (_, got, _) = bmcctl(&e, &["machine", "get", "web-1"]);
    assert!(got.contains("\"50\""), "a dry run wrote: {got}");
    let (ok, out, _) = bmcctl(&e, &["machine", "apply", "-f", f, "--prune"]);
    assert!(ok && out.contains("~ web-1") && out.contains("- web-2"), "{out}");
    let (ok, got, _) = bmcctl(&e, &["machine", "get", "web-1"]);
    assert!(ok && got.contains("\"51\""), "{got}");
    // ls narrows by name, selector and tenant; completion words come from the registry.
    let (ok, _, err) = bmcctl(&e, &["machine", "add", "web-5", "--address", "10.50.0.5", "--credentials", "rack50"]);
    assert!(ok, "{err}");
    let names = |args: &[&str]| -> Vec<String> {
        let (ok, out, err) = bmcctl(&e, &[&["--json", "machine", "ls"], args].concat());
        assert!(ok, "{args:?}: {err}");
        out.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&[]), ["web-1", "web-5"]);
    assert_eq!(names(&["web-5"]), ["web-5"]);
    assert_eq!(names(&["--selector", "rack=51"]), ["web-1"]);
    assert_eq!(names(&["web-5", "--selector", "rack=51"]), Vec::<String>::new());
    assert_eq!(names(&["--tenant", "default", "--selector", "rack=50"]), Vec::<String>::new());
    let out = bmcctl_out(&e, &["machine", "ls", "web-77"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let (ok, words, _) = bmcctl(&e, &["__complete", "machines"]);
    assert!(ok && words == "web-1\nweb-5\n", "{words}");
    let (ok, words, _) = bmcctl(&e, &["__complete", "labels"]);
    assert!(ok && words == "rack=51\n", "{words}");
    // bash completes them on the command line being typed (its --nats-url).
    let (ok, script, _) = bmcctl(&e, &["completions", "bash"]);
    assert!(ok);
    let script_file = dir.path().join("bmcctl.bash");
    std::fs::write(&script_file, script).unwrap();
    let url = e.nats.url();
    let tab = |words: &[&str]| -> Vec<String> {
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let program = format!(
            r#"source '{}' || exit 9
COMP_WORDS=({})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}
_bmcctl_dynamic bmcctl "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
            script_file.display(),
            quoted.join(" ")
        );
        let out = std::process::Command::new("bash").args(["--norc", "--noprofile", "-c", &program]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
    };
    let bin = bmcfleet_tests::bin("bmcctl");
    let bin = bin.to_str().unwrap();
    assert_eq!(tab(&[bin, "--nats-url", &url, "machine", "get", "web-"]), ["web-1", "web-5"]);
    assert_eq!(tab(&[bin, "--nats-url", &url, "power", "on", "--machine", "web-5"]), ["web-5"]);
    assert_eq!(tab(&[bin, "--nats-url", &url, "power", "on", "--selector", "ra"]), ["rack=51"]);
    // zsh too: its `_bmcctl` hands the same words to `compadd` (a stand-in
    // here that prints them: zsh matches them against the word itself).
    if let Some(zsh) = bmcfleet_testing::peers::program("zsh", &[], "scripts/setup.sh installs it") {
        let (ok, script, _) = bmcctl(&e, &["completions", "zsh"]);
        assert!(ok);
        let script_file = dir.path().join("_bmcctl");
        std::fs::write(&script_file, script).unwrap();
        let zsh_tab = |line: &[&str]| -> Vec<String> {
            let quoted: Vec<String> = line.iter().map(|w| format!("'{w}'")).collect();
            let program = format!(
                r#"compdef() {{ : }}
source '{}' || exit 9
compadd() {{ local -a a=("$@"); local p="" i; for (( i = 1; i <= $#a; i++ )); do [[ $a[i] == -p ]] && p=$a[i+1]; [[ $a[i] == -- ]] && break; done; print -rl -- "${{(@)a[i+1,-1]/#/$p}}" }}
_bmcctl_clap() {{ print -r -- CLAP }}
words=({})
CURRENT=$#words
_bmcctl"#,
                script_file.display(),
                quoted.join(" ")
            );
            let out = std::process::Command::new(&zsh).args(["-f", "-c", &program]).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap().lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
        };
        assert_eq!(zsh_tab(&[bin, "--nats-url", &url, "machine", "get", "web-"]), ["web-1", "web-5"]);
        assert_eq!(zsh_tab(&[bin, "--nats-url", &url, "power", "on", "--machine", "w"]), ["web-1", "web-5"]);
        assert_eq!(zsh_tab(&[bin, "--nats-url", &url, "power", "on", "--selector", "ra"]), ["rack=51"]);
        assert_eq!(zsh_tab(&[bin, "--nats-url", &url, "ls", "--selector", "a=b,r"]), ["a=b,rack=51"]);
        assert_eq!(zsh_tab(&[bin, "--nats-url", &url, "power", "on", "--"]), ["CLAP"], "flags: clap's completion");
    }
    let (_, _, _) = bmcctl(&e, &["machine", "rm", "web-5"]);

    // One machine at a time.
    let (ok, out, err) = bmcctl(
        &e,
        &[
            "machine",
            "add",
            "web-9",
            "--address",
            "10.50.0.9",
            "--protocol",
            "sim",
            "--credentials",
            "rack50",
            "--label",
            "rack=59",
        ],
    );
    assert!(ok, "{out}{err}");
    let (ok, _, err) = bmcctl(&e, &["machine", "add", "web-9", "--address", "10.50.0.19", "--credentials", "rack50"]);
    assert!(!ok && err.contains("already registered"), "{err}");
    let (ok, _, err) =
        bmcctl(&e, &["machine", "add", "web-10", "--address", "10.50.0.1:623", "--credentials", "rack50"]);
    // web-1 names no port: it stands for every port of its host.
    assert!(!ok && err.contains("same BMC endpoint") && err.contains("`web-1`"), "{err}");
    let (ok, _, err) = bmcctl(&e, &["machine", "set", "web-9", "--label", "rack=60", "--tenant", "Bad Tenant"]);
    assert!(!ok && err.contains("tenant"), "{err}");
    let (ok, _, _) = bmcctl(&e, &["machine", "set", "web-9", "--label", "rack=60"]);
    let (_, got, _) = bmcctl(&e, &["machine", "get", "web-9"]);
    assert!(ok && got.contains("\"60\""), "{got}");
    // IPMI options: the cipher-suite order and the privilege, checked.
    let (ok, out, err) = bmcctl(
        &e,
        &[
            "machine",
            "add",
            "ipmi-9",
            "--address",
            "10.50.0.99",
            "--protocol",
            "ipmi",
            "--credentials",
            "rack50",
            "--ipmi-cipher-suites",
            "3,17",
            "--ipmi-privilege",
            "operator",
        ],
    );
    assert!(ok, "{out}{err}");
    let (_, got, _) = bmcctl(&e, &["machine", "get", "ipmi-9"]);
    let got: serde_json::Value = serde_json::from_str(&got).expect("machine get prints JSON");
    assert_eq!(got["ipmi"], serde_json::json!({"cipher_suites": [3, 17], "privilege": "operator"}), "{got}");
    let (ok, _, err) = bmcctl(&e, &["machine", "set", "ipmi-9", "--ipmi-cipher-suites", "2"]);
    assert!(!ok && err.contains("not allowed"), "suite 2 has no confidentiality: {err}");
    let (ok, _, err) = bmcctl(&e, &["machine", "set", "web-9", "--ipmi-privilege", "user"]);
    assert!(!ok && err.contains("never speaks IPMI"), "{err}");

    // Without $USER the actor is what the server says: no authentication here, so `anonymous`.
    let out = std::process::Command::new(bmcfleet_tests::bin("bmcctl"))
        .args(["--nats-url", &e.nats.url(), "machine", "set", "web-9", "--label", "rack=61"])
        .env_remove("USER")
        .env_remove("BMCFLEET_NATS_USER")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A batch by an operator, then the audit log shows who did what.
    let json = r#"{"machine":"web-1","actions":[{"power":"status"}]}"#;
    let Reply::Accepted(a) = e.producer.submit_json(json, false).await else { panic!("accepted") };
    let log = bmcfleet_tests::eventually(std::time::Duration::from_secs(10), "audit records", || {
        let (_, out, _) = bmcctl(&e, &["--json", "audit", "--since", "1h"]);
        let records: Vec<bmcfleet_schema::audit::AuditRecord> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        async move { records.iter().any(|r| matches!(&r.what, bmcfleet_schema::audit::AuditEvent::BatchAdmitted { batch, .. } if *batch == a.id)).then_some(records) }
    })
    .await;
    use bmcfleet_schema::audit::AuditEvent;
    let by = |actor: &str, pred: &dyn Fn(&AuditEvent) -> bool| log.iter().any(|r| r.actor == actor && pred(&r.what));
    assert!(
        by("operator:alice", &|w| matches!(w, AuditEvent::MachinePut { machine, .. } if machine == "web-2")),
        "{log:#?}"
    );
    assert!(
        by("operator:alice", &|w| matches!(w, AuditEvent::MachineRemoved { machine, .. } if machine == "web-2")),
        "{log:#?}"
    );
    assert!(
        by("operator:anonymous", &|w| matches!(w, AuditEvent::MachinePut { machine, .. } if machine == "web-9")),
        "{log:#?}"
    );
    assert!(!log.iter().any(|r| r.actor == "operator:unknown"), "{log:#?}");
    assert!(
        by("registry", &|w| matches!(w, AuditEvent::MachineRemoved { machine, .. } if machine == "web-2")),
        "{log:#?}"
    );
    assert!(
        by(
            "operator",
            &|w| matches!(w, AuditEvent::BatchAdmitted { machine: Some(m), actions, .. } if m == "web-1" && actions == &["power_status"])
        ),
        "{log:#?}"
    );
    // One record per registry revision, however many gateways saw it.
    let puts = log
        .iter()
        .filter(|r| {
            r.actor == "registry" && matches!(&r.what, AuditEvent::MachinePut { machine, .. } if machine == "web-1")
        })
        .count();
    assert_eq!(puts, 2, "{log:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_a_registered_machine_is_that_machine() {
    // A producer cannot reach a registered BMC (another tenant's, say)
    // through a hostname of its own that resolves to it.
    let e = env(&[]).await;
    let p = &e.producer;
    let registered = bmcfleet_tests::checks::sim_batch("127.0.0.1", vec![]).bmc.unwrap();
    e.topology.register_machine(&p.client, &registered).await;
    let mut b = bmcfleet_tests::checks::sim_batch("localhost", vec![Action::Power(PowerOp::Status)]);
    b.bmc.as_mut().unwrap().protocol = Protocol::Ipmi;
    let Reply::Result(r) = p.submit(&b, true).await else { panic!("a result") };
    let err = r.results[0].error.as_ref().expect("refused");
    assert_eq!(err.code, ErrorCode::TargetForbidden, "{r:?}");
    assert!(err.message.contains("registered machine"), "{err:?}");
}

/// The other way round: a machine registered by host name is reached by no
/// ad hoc target at an address that name resolves to (an IP literal, or
/// another name for the same address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_a_registered_machine_s_name_resolves_to_is_that_machine() {
    let e = env(&[]).await;
    let p = &e.producer;
    let mut registered = bmcfleet_tests::checks::sim_batch("localhost", vec![]).bmc.unwrap();
    registered.protocol = Protocol::Ipmi;
    let name = e.topology.register_machine(&p.client, &registered).await;
    // (`localhost` resolves to 127.0.0.1 everywhere; to ::1 only on some machines.)
    for host in ["127.0.0.1"] {
        let mut b = bmcfleet_tests::checks::sim_batch(host, vec![Action::Power(PowerOp::Status)]);
        b.bmc.as_mut().unwrap().protocol = Protocol::Ipmi;
        let Reply::Result(r) = p.submit(&b, true).await else { panic!("a result") };
        let err = r.results[0].error.as_ref().expect("refused");
        assert_eq!(err.code, ErrorCode::TargetForbidden, "{host}: {r:?}");
        assert!(err.message.contains(&format!("registered machine `{name}`")), "{host}: {err:?}");
    }
}

/// A machine the operator hands to another tenant runs none of the batches
/// its old tenant still had queued (`machine_not_found`, as for a removed
/// machine, nothing sent): a tenant cannot act on a machine it no longer
/// owns, nor have its state reported to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_moved_to_another_tenant_runs_none_of_its_old_tenants_queued_batches() {
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let e = SimStack::start(SimConfig::default()).await;
    let p = &e.producer;
    let target = bmcfleet_tests::checks::sim_batch("10.32.0.1", vec![]).bmc.unwrap();
    let name = e.topology.register_machine(&p.client, &target).await;
    // Queued by tenant `default` (no worker yet) ...
    let b = bmcfleet_tests::producer::machine_batch(&name, vec![Action::Power(PowerOp::On)]);
    let Reply::Accepted(a) = p.submit(&b, false).await else { panic!("accepted") };
    // ... then the machine is moved to tenant-b.
    let js = async_nats::jetstream::new(p.client.clone());
    let machines = bucket(&js, machines_config(&e.topology.subjects(), 1), Mode::UseExisting).await.unwrap();
    let mut m: Machine = serde_json::from_slice(&machines.get(&name).await.unwrap().unwrap()).unwrap();
    m.tenant = "tenant-b".into();
    bmcfleet_common::registry::put(&machines, &m).await.unwrap();
    let e = e.with_workers(1, &[]).await;
    let results = bmcfleet_tests::producer::wait_final_statuses(
        &e.producer.client,
        &e.topology.subjects(),
        &[a.id],
        Duration::from_secs(30),
    )
    .await;
    let r = &results[&a.id];
    assert_eq!(r.results[0].error.as_ref().map(|e| e.code), Some(ErrorCode::MachineNotFound), "{r:?}");
    assert!(
        !e.sim.log().iter().any(|l| l.action == "power_on"),
        "the old tenant's power on reached the BMC: {:?}",
        e.sim.log()
    );
}

/// A machine's protocol preference and Redfish auth mode are the
/// operator's: the worker tries only the listed protocols, in order, and a
/// producer cannot put either on an ad hoc target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machines_protocol_preference_is_the_only_order_tried() {
    use bmcfleet_tests::producer::{batch_for, Stack};
    let stack = Stack::start(1, &["--protocols", "redfish,ipmi", "--action-timeout", "4s", "--retry-max", "0"]).await;
    let server = bmcfleet_testing::redfish::spec::spec_service().start().await.unwrap();
    let status = || vec![Action::Power(PowerOp::Status)];

    let mut target = server.target();
    target.protocol = Protocol::Auto;
    target.options.protocols = vec![Protocol::Redfish];
    target.options.redfish.auth = RedfishAuth::Basic;
    let r = stack.run(&batch_for(target.clone(), status())).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    assert_eq!(r.results[0].provider.as_deref(), Some("redfish"));
    assert!(
        server.requests_to("POST", "/redfish/v1/SessionService/Sessions").is_empty(),
        "redfish.auth basic: no session"
    );

    // Preference [ipmi]: this worker speaks Redfish too, but never to this machine.
    server.clear_requests();
    target.options.protocols = vec![Protocol::Ipmi];
    target.options.redfish = Default::default(); // Redfish options on an IPMI-only machine are refused
    let r = stack.run(&batch_for(target.clone(), status())).await;
    let code = r.results[0].error.as_ref().map(|e| e.code);
    assert!(matches!(code, Some(ErrorCode::Unreachable | ErrorCode::Timeout | ErrorCode::DeadlineExceeded)), "{r:?}");
    assert!(
        server.requests().is_empty(),
        "Redfish was tried against the machine's preference: {:?}",
        server.requests().len()
    );

    // A producer cannot choose them for an ad hoc target.
    let mut ad_hoc = bmcfleet_tests::checks::sim_batch("10.31.9.1", status());
    ad_hoc.bmc.as_mut().unwrap().options.protocols = vec![Protocol::Ipmi];
    let err = refusal(stack.producer.submit(&ad_hoc, false).await);
    assert_eq!(err.code, ErrorCode::TargetForbidden, "{err:?}");
    assert!(err.message.contains("bmc.options"), "{err:?}");
}

/// A machine replaced at its host (the old record removed, a new one put)
/// is found by a fresh lookup even while the registry copy still holds the
/// old one: the stale neighbour at that host is read again instead of the
/// lookup answering `conflict`. The copy is made stale on purpose: its
/// watch is stopped before the bucket changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_lookup_reads_a_stale_neighbour_at_the_host_again() {
    use bmcfleet_common::registry::{self, Lookup, Registry};
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let nats = NatsServer::start();
    let js = async_nats::jetstream::new(nats.client().await);
    let subjects = Topology::default().subjects();
    let kv = bucket(&js, machines_config(&subjects, 1), Mode::UseExisting).await.unwrap();
    for attempt in 0..10 {
        let (old, new) = (format!("old-{attempt}"), format!("new-{attempt}"));
        let host: BmcAddress = format!("10.31.8.{}", attempt + 1).parse().unwrap();
        registry::put(&kv, &Machine::new(old.as_str(), host.clone(), Protocol::Sim, "c1")).await.unwrap();
        let copy = Registry::start(&js, &subjects, 1, tokio_util::sync::CancellationToken::new()).await.unwrap();
        assert!(matches!(copy.get(&old), Lookup::Found(_)));
        copy.stop();
        kv.delete(&old).await.unwrap();
        registry::put(&kv, &Machine::new(new.as_str(), host, Protocol::Sim, "c1")).await.unwrap();
        if !matches!(copy.get(&old), Lookup::Found(_)) {
            continue; // the watch saw the removal before it stopped: not the case under test
        }
        let found = copy.get_fresh(&new).await;
        assert!(matches!(&found, Lookup::Found(m) if m.name == new), "{found:?}");
        return;
    }
    panic!("the registry copy never stayed stale after its watch stopped");
}

/// Read-your-writes for what reads the whole copy (a rollout's selector):
/// `caught_up` waits until the copy holds every write the bucket had
/// stored, and says so; a copy that cannot follow (its watch stopped here)
/// is reported not caught up instead of answering without the new machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_catches_up_with_writes_just_made_or_says_it_cannot() {
    use bmcfleet_common::registry::{self, Registry};
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let nats = NatsServer::start();
    let js = async_nats::jetstream::new(nats.client().await);
    let subjects = Topology::default().subjects();
    let kv = bucket(&js, machines_config(&subjects, 1), Mode::UseExisting).await.unwrap();
    let copy = Registry::start(&js, &subjects, 1, tokio_util::sync::CancellationToken::new()).await.unwrap();
    // Another writer's connection: the copy learns of these only through its watch.
    let writer = async_nats::jetstream::new(nats.client().await);
    let wkv = writer.get_key_value(subjects.machines_bucket()).await.unwrap();
    for i in 0..200 {
        let m = Machine::new(
            format!("cu-{i:03}").as_str(),
            format!("10.32.{}.{}", i / 250, i % 250 + 1).parse().unwrap(),
            Protocol::Sim,
            "c1",
        );
        registry::put(&wkv, &m).await.unwrap();
    }
    assert!(copy.caught_up(Duration::from_secs(5)).await, "a following copy catches up");
    assert_eq!(copy.len(), 200, "every machine written before the call is in the copy");
    // A copy that no longer follows the bucket: not caught up, and it says so.
    copy.stop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    registry::put(&kv, &Machine::new("cu-late", "10.32.9.1".parse().unwrap(), Protocol::Sim, "c1")).await.unwrap();
    assert!(!copy.caught_up(Duration::from_millis(300)).await, "a copy behind the bucket is not caught up");
    assert_eq!(copy.len(), 200);
}

/// An operator replacing the machine at a host (remove one, register the
/// next) is honoured at once: the gateway's and the worker's copies may
/// still hold the removed one for a moment, and that stale neighbour is read
/// again instead of answering `conflict`. Twenty replacements in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_replaced_at_its_host_is_honoured_at_once() {
    let e = env(&[]).await;
    let p = &e.producer;
    for i in 0..20 {
        let mut target = bmcfleet_tests::checks::sim_batch("10.31.7.1", vec![]).bmc.unwrap();
        // A different record each time (so a different machine name) at the same host.
        target.system_id = Some(format!("sys-{i}"));
        let name = e.topology.register_machine(&p.client, &target).await;
        let json = format!(r#"{{"machine":"{name}","actions":[{{"power":"status"}}]}}"#);
        match p.submit_json(&json, true).await {
            Reply::Result(r) => assert_eq!(r.state, BatchState::Succeeded, "replacement {i}: {r:?}"),
            other => panic!("replacement {i}: {other:?}"),
        }
    }
}

/// VirtualBMC's layout (issue 33): BMCs on one IP, one port each, are
/// machines of their own. Both register (by `bmcctl machine add`), run
/// batches side by side under their own ordering keys, and each batch acts
/// on its own BMC; a third record at one of their endpoints (in another
/// spelling) is refused. What the host rule protected still holds: an ad
/// hoc target on that host (any port, or a name resolving to it) is
/// refused, and a BMC may not be given that IP as its static address,
/// even by a machine of that IP (another machine answers there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_bmcs_on_one_ip_with_their_own_ports_are_two_machines() {
    let e = env(&[]).await;
    let p = &e.producer;
    let (ok, _, err) = bmcctl_cred_put(&e, "vbmc", "pw-in-line");
    assert!(ok, "{err}");
    for (name, port) in [("port-a", 26400), ("port-b", 26401)] {
        let address = format!("127.0.0.1:{port}");
        let (ok, out, err) =
            bmcctl(&e, &["machine", "add", name, "--address", &address, "--protocol", "sim", "--credentials", "vbmc"]);
        assert!(ok, "{name}: {out}{err}");
    }
    let (ok, _, err) = bmcctl(
        &e,
        &[
            "machine",
            "add",
            "port-a2",
            "--address",
            "[::ffff:127.0.0.1]:26400",
            "--protocol",
            "sim",
            "--credentials",
            "vbmc",
        ],
    );
    assert!(!ok && err.contains("same BMC endpoint") && err.contains("`port-a`"), "{err}");

    let mut results = bmcfleet_tests::producer::ResultCollector::start(&p.client, &e.topology.subjects()).await;
    let a = bmcfleet_tests::producer::machine_batch("port-a", vec![Action::Power(PowerOp::On)]);
    let b = bmcfleet_tests::producer::machine_batch(
        "port-b",
        vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Off), Action::Power(PowerOp::Status)],
    );
    let mut ids = Vec::new();
    for (batch, key) in [(&a, "m-port-a"), (&b, "m-port-b")] {
        let Reply::Accepted(acc) = p.submit(batch, false).await else { panic!("accepted") };
        assert!(acc.subject.ends_with(&format!(".{key}")), "the machine's own ordering key: {}", acc.subject);
        ids.push(acc.id);
    }
    results.wait_all(&ids, Duration::from_secs(60)).await;
    for id in &ids {
        assert_eq!(results.results[id].state, BatchState::Succeeded, "{:?}", results.results[id]);
    }
    assert_eq!(e.sim.power("v4-127-0-0-1-P26400"), Some(PowerState::On), "port-a's BMC");
    assert_eq!(e.sim.power("v4-127-0-0-1-P26401"), Some(PowerState::Off), "port-b's BMC");
    assert_eq!(results.results[&ids[1]].results[2].data, Some(ActionData::PowerState(PowerState::Off)));

    // Ad hoc: not at a machine's endpoint, nor at another port of its host.
    for address in ["127.0.0.1:26400", "127.0.0.1:26402"] {
        let err = refusal(
            p.submit(&bmcfleet_tests::checks::sim_batch(address, vec![Action::Power(PowerOp::Off)]), true).await,
        );
        assert_eq!(err.code, ErrorCode::TargetForbidden, "{address}: {err:?}");
    }
    // Nor through a name resolving to that host (the worker resolves it).
    let mut by_name = bmcfleet_tests::checks::sim_batch("localhost:26400", vec![Action::Power(PowerOp::Off)]);
    by_name.bmc.as_mut().unwrap().protocol = Protocol::Ipmi;
    let Reply::Result(r) = p.submit(&by_name, true).await else { panic!("a result") };
    let err = r.results[0].error.as_ref().expect("refused");
    assert_eq!(err.code, ErrorCode::TargetForbidden, "{r:?}");
    assert_eq!(e.sim.power("v4-127-0-0-1-P26400"), Some(PowerState::On), "nothing reached port-a's BMC");

    // A static address of that IP: another machine answers there (port-b
    // for port-a's BMC), so it is refused, at admission and by the worker.
    let readdress = Action::NetworkSource(NetworkSourceOp::Static(StaticIpv4 {
        address: [127, 0, 0, 1].into(),
        netmask: [255, 0, 0, 0].into(),
        gateway: None,
    }));
    let err =
        refusal(p.submit(&bmcfleet_tests::producer::machine_batch("port-a", vec![readdress.clone()]), true).await);
    assert_eq!(err.code, ErrorCode::TargetForbidden, "{err:?}");
    assert!(err.message.contains("`port-b`"), "{err:?}");
    let target = Machine::new("port-a", "127.0.0.1:26400".parse().unwrap(), Protocol::Sim, "vbmc").target();
    let job = bmcfleet_tests::producer::job_of(
        Batch { bmc: Some(target), ..bmcfleet_tests::producer::machine_batch("port-a", vec![readdress]) },
        bmcfleet_schema::machine::DEFAULT_TENANT,
    );
    let id = job.id;
    bmcfleet_tests::producer::queue_job(&p.client, &e.topology.subjects(), &job).await;
    let done = bmcfleet_tests::producer::wait_final_statuses(
        &p.client,
        &e.topology.subjects(),
        &[id],
        Duration::from_secs(30),
    )
    .await;
    let err = done[&id].results[0].error.as_ref().expect("refused by the worker");
    assert_eq!(err.code, ErrorCode::TargetForbidden, "{err:?}");
    assert!(
        e.sim.log().iter().all(|l| l.action != "network_source_set"),
        "no address change reached a BMC: {:?}",
        e.sim.log()
    );
}

/// `registry::put` tells a record that does not validate (kind `Invalid`,
/// the `MachineError` kept as its source, nothing written) from a store
/// failure, where it used to flatten both to text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_refuses_an_invalid_record_as_invalid_and_writes_nothing() {
    use bmcfleet_common::registry::{self, ErrorKind};
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let nats = NatsServer::start();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let kv = bucket(&js, machines_config(&Subjects::new("bmc", "BMCFLEET", 4), 1), Mode::UseExisting).await.unwrap();
    let good = Machine::new("rack1-node1", "10.0.0.1".parse().unwrap(), Protocol::Sim, "c1");
    assert!(registry::put(&kv, &good).await.unwrap() > 0);
    let bad = Machine { name: "Rack1_Node2".into(), ..good.clone() };
    let e = registry::put(&kv, &bad).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    let why = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<machine::MachineError>());
    assert_eq!(why.map(|m| m.name.as_str()), Some("Rack1_Node2"), "{e}");
    assert_eq!(e.to_string(), why.unwrap().to_string(), "the text is the validation error's, as before");
    assert!(kv.get("Rack1_Node2").await.unwrap().is_none(), "nothing is written");
}
