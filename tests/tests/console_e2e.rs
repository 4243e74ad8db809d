//! Serial console over NATS (issue 36, docs/CONSOLE.md) against a real
//! OpenIPMI `ipmi_sim` whose SOL line is a test-side TCP listener playing
//! the host's serial port (`SerialHost`), with real nats-server, gateway
//! and worker processes: what viewers type on the input subject reaches the
//! host; the host's output reaches two viewers in order and is stored in
//! the console stream; the session ends when nobody watches; an always-on
//! machine's console survives the kill of its owning worker with the gap
//! reported by a `takeover` marker.

use bmcfleet_schema::subject::*;
use bmcfleet_schema::*;
use bmcfleet_testing::ipmi::{IpmiSim, IpmiSimOptions, SerialHost};
use bmcfleet_tests::producer::Stack;
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn sim_with_serial() -> (IpmiSim, SerialHost) {
    let host = SerialHost::start().expect("serial host");
    let sim =
        IpmiSim::start_with(IpmiSimOptions { sol_port: Some(host.port()), ..Default::default() }).expect("ipmi_sim");
    assert!(host.wait_connected(WAIT), "ipmi_sim never connected its SOL line: {}", sim.log());
    (sim, host)
}

/// Sets the machine's record to log its console always.
async fn always_on(client: &async_nats::Client, subjects: &Subjects, name: &str) {
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let js = async_nats::jetstream::new(client.clone());
    let machines = bucket(&js, machines_config(subjects, 1), Mode::UseExisting).await.unwrap();
    let mut m: Machine = serde_json::from_slice(&machines.get(name).await.unwrap().unwrap()).unwrap();
    m.console.always_on = true;
    bmcfleet_common::registry::put(&machines, &m).await.unwrap();
}

/// Waits until the partitions are shared by `w0` and `w1` (the second
/// worker's arrival moves partitions by graceful hand-overs: after this,
/// a console's owner stays put until one dies).
async fn both_workers_own_partitions(client: &async_nats::Client, subjects: &Subjects) {
    use futures::TryStreamExt;
    let js = async_nats::jetstream::new(client.clone());
    let owners = bmcfleet_tests::poll_until(WAIT, Duration::from_millis(100), || {
        let js = js.clone();
        let bucket = subjects.leases_bucket();
        async move {
            let kv = js.get_key_value(bucket).await.ok()?;
            let keys: Vec<String> = kv.keys().await.ok()?.try_collect().await.ok()?;
            let (mut w0, mut w1) = (0usize, 0usize);
            for k in &keys {
                let v = String::from_utf8_lossy(&kv.get(k).await.ok()??).into_owned();
                w0 += usize::from(v.contains("w0"));
                w1 += usize::from(v.contains("w1"));
            }
            // Every partition leased, shared evenly.
            (w0 + w1 == keys.len() && w0.abs_diff(w1) <= 1 && w0 > 0).then_some(())
        }
    })
    .await;
    assert!(owners.is_some(), "the two workers never shared the partitions");
}

/// One message of the console's output subject.
#[derive(Clone, Debug)]
struct Chunk {
    event: Option<String>,
    reason: Option<String>,
    session: Option<String>,
    seq: Option<u64>,
    lost: u64,
    gap_bytes: Option<u64>,
    worker: Option<String>,
    body: Vec<u8>,
}

impl Chunk {
    fn of(headers: Option<&async_nats::HeaderMap>, body: &[u8]) -> Chunk {
        let get = |k: &str| headers.and_then(|h| h.get(k)).map(|v| v.as_str().to_owned());
        Chunk {
            event: get(CONSOLE_EVENT_HEADER),
            reason: get(CONSOLE_REASON_HEADER),
            session: get(CONSOLE_SESSION_HEADER),
            seq: get(CONSOLE_SEQ_HEADER).and_then(|s| s.parse().ok()),
            lost: get(CONSOLE_LOST_HEADER).and_then(|s| s.parse().ok()).unwrap_or(0),
            gap_bytes: get(CONSOLE_GAP_BYTES_HEADER).and_then(|s| s.parse().ok()),
            worker: get(WORKER_HEADER),
            body: body.to_vec(),
        }
    }
}

/// A live viewer: subscribes to the output subject and, while `beating`,
/// sends a heartbeat every second on the machine's watch subject.
struct Viewer {
    seen: Arc<Mutex<Vec<Chunk>>>,
    reader: tokio::task::JoinHandle<()>,
    heart: Option<tokio::task::JoinHandle<()>>,
}

impl Viewer {
    async fn start(client: &async_nats::Client, subjects: &Subjects, tenant: &str, machine: &str, id: &str) -> Viewer {
        let mut sub = client.subscribe(subjects.console_out(tenant, machine)).await.unwrap();
        client.flush().await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let reader = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                sink.lock().unwrap().push(Chunk::of(msg.headers.as_ref(), &msg.payload));
            }
        });
        let (client, watch, id) = (client.clone(), subjects.console_watch(tenant, machine), id.to_owned());
        let heart = tokio::spawn(async move {
            loop {
                let mut h = async_nats::HeaderMap::new();
                h.insert(CONSOLE_VIEWER_HEADER, id.as_str());
                let _ = client.publish_with_headers(watch.clone(), h, Default::default()).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Viewer { seen, reader, heart: Some(heart) }
    }

    fn stop_beating(&mut self) {
        if let Some(h) = self.heart.take() {
            h.abort();
        }
    }

    fn chunks(&self) -> Vec<Chunk> {
        self.seen.lock().unwrap().clone()
    }

    fn data(&self) -> Vec<u8> {
        self.chunks().iter().filter(|c| c.event.is_none()).flat_map(|c| c.body.clone()).collect()
    }

    async fn wait_event(&self, event: &str) -> Chunk {
        let seen = self.seen.clone();
        bmcfleet_tests::poll_until(WAIT, Duration::from_millis(50), || {
            let found = seen.lock().unwrap().iter().find(|c| c.event.as_deref() == Some(event)).cloned();
            async move { found }
        })
        .await
        .unwrap_or_else(|| panic!("no `{event}` marker; saw {:?}", self.events()))
    }

    async fn wait_data(&self, n: usize) -> Vec<u8> {
        let _ = bmcfleet_tests::poll_until(WAIT, Duration::from_millis(50), || {
            let enough = self.data().len() >= n;
            async move { enough.then_some(()) }
        })
        .await;
        self.data()
    }

    fn events(&self) -> Vec<(Option<String>, Option<String>)> {
        self.chunks().into_iter().filter(|c| c.event.is_some()).map(|c| (c.event, c.reason)).collect()
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.stop_beating();
        self.reader.abort();
    }
}

/// Printable host output: `n` bytes of numbered lines, so a gap or a
/// reordering shows.
fn host_text(tag: &str, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while out.len() < n {
        out.extend_from_slice(format!("{tag} line {i:05}\r\n").as_bytes());
        i += 1;
    }
    out.truncate(n);
    out
}

/// The console stream's stored messages of one subject, in order.
async fn stored(client: &async_nats::Client, subjects: &Subjects, subject: &str) -> Vec<Chunk> {
    use async_nats::jetstream::consumer;
    let js = async_nats::jetstream::new(client.clone());
    let stream = js.get_stream(subjects.console_stream()).await.expect("console stream");
    let info = stream.get_info().await.expect("stream info");
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig { filter_subject: subject.to_owned(), ..Default::default() })
        .await
        .expect("ordered consumer");
    let mut out = Vec::new();
    let total = info.state.messages;
    let mut messages = consumer.messages().await.expect("messages");
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(2), messages.next()).await {
        out.push(Chunk::of(m.headers.as_ref(), &m.payload));
        if out.len() as u64 >= total {
            break;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_bytes_reach_the_host_and_its_output_reaches_two_viewers_in_order() {
    let (sim, host) = sim_with_serial();
    let stack = Stack::start(1, &[]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &sim.target()).await;

    let mut a = Viewer::start(client, &subjects, "default", &name, "viewer-a").await;
    let mut b = Viewer::start(client, &subjects, "default", &name, "viewer-b").await;
    let started = a.wait_event("started").await;
    assert_eq!(started.worker.as_deref(), Some("w0"));
    let session = started.session.clone().expect("a session id");
    b.wait_event("started").await;

    // Viewers to host: bytes published on the input subject.
    let input = subjects.console_in("default", &name);
    client.publish(input.clone(), "root\r".into()).await.unwrap();
    client.publish(input.clone(), "uname -a\r".into()).await.unwrap();
    assert!(host.wait_for(b"root\runame -a\r", WAIT), "the host got {:?}", String::from_utf8_lossy(&host.received()));

    // Host to viewers: 12 KiB (several chunks, SOL sequence numbers wrap).
    let text = host_text("boot", 12 * 1024);
    for part in text.chunks(1024) {
        assert!(host.write(part));
    }
    let got_a = a.wait_data(text.len()).await;
    let got_b = b.wait_data(text.len()).await;
    assert_eq!(String::from_utf8_lossy(&got_a), String::from_utf8_lossy(&text), "viewer a");
    assert_eq!(got_a, got_b, "viewer b saw the same output");
    let chunks = a.chunks();
    let data: Vec<&Chunk> = chunks.iter().filter(|c| c.session.as_deref() == Some(&session)).collect();
    let seqs: Vec<u64> = data.iter().filter_map(|c| c.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "one session, numbered without gaps");
    assert!(data.iter().all(|c| c.lost == 0 && c.body.len() <= bmcfleet_common::streams::CONSOLE_CHUNK_BYTES));

    // The same output is stored (console log), in order.
    let out = subjects.console_out("default", &name);
    let stored_data: Vec<u8> = stored(client, &subjects, &out)
        .await
        .iter()
        .filter(|c| c.event.is_none())
        .flat_map(|c| c.body.clone())
        .collect();
    assert_eq!(stored_data, text, "the console stream holds the output");

    // Nobody watches any more: the session closes on the BMC.
    a.stop_beating();
    b.stop_beating();
    let ended = a.wait_event("ended").await;
    let reason = ended.reason.clone().unwrap_or_default();
    assert!(reason.starts_with("nobody watches") && reason.contains("payload deactivated"), "{ended:?}");
    // Console data is tenant data: none of it in the worker's log.
    let log = stack.workers[0].log_text();
    assert!(log.contains("Serial console session open."), "the worker logs sessions");
    assert!(!log.contains("boot line") && !log.contains("uname"), "console data in the worker's log");
    drop(sim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_always_on_console_survives_the_owners_death_with_the_gap_reported() {
    let (sim, host) = sim_with_serial();
    let stack = Stack::start(2, &[]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &sim.target()).await;
    // A viewer that does not send heartbeats: the always-on record alone holds the session.
    let mut viewer = Viewer::start(client, &subjects, "default", &name, "logger").await;
    viewer.stop_beating();
    always_on(client, &subjects, &name).await;
    let started = viewer.wait_event("started").await;
    let owner = started.worker.clone().expect("the owner names itself");
    let before = host_text("before", 3000);
    assert!(host.write(&before));
    assert_eq!(viewer.wait_data(before.len()).await, before);
    let last_seq = viewer.chunks().iter().filter_map(|c| c.seq).max().unwrap();

    let mut workers = stack.workers;
    let victim = if owner == "w0" { 0 } else { 1 };
    workers[victim].kill();
    // While nobody holds the console, the host goes on printing.
    let gap = host_text("gap", 500);
    assert!(host.write(&gap));

    let takeover = viewer.wait_event("takeover").await;
    assert_ne!(takeover.worker.as_deref(), Some(owner.as_str()), "{takeover:?}");
    let reason = takeover.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(started.session.as_deref().unwrap()) && reason.contains(&format!("after chunk {last_seq} ")),
        "the marker names the old session and its last chunk: {reason}"
    );
    // Typing reaches the host through the new owner's session.
    client.publish(subjects.console_in("default", &name), "after take-over\r".into()).await.unwrap();
    assert!(
        host.wait_for(b"after take-over\r", WAIT),
        "typing after the take-over: {:?}",
        String::from_utf8_lossy(&host.received())
    );
    let after = host_text("after", 3000);
    assert!(host.write(&after));
    let all = viewer.wait_data(before.len() + after.len()).await;
    // Nothing before the kill is lost; everything after the take-over
    // arrives; of the gap, what arrived is a part, in order.
    assert!(all.starts_with(&before), "the output before the kill is whole");
    assert!(all.ends_with(&after), "the output after the take-over is whole");
    let middle = &all[before.len()..all.len() - after.len()];
    assert!(
        gap.windows(middle.len().max(1)).any(|w| middle.is_empty() || w == middle),
        "gap bytes in order: {middle:?}"
    );
    let stats = viewer.chunks();
    let new_session = takeover.session.clone().unwrap();
    assert!(stats.iter().any(|c| c.session.as_deref() == Some(&new_session) && c.event.is_none()));
}

/// `bmcctl console MACHINE` with stdin a pipe: its heartbeats open the
/// console, what it reads from stdin reaches the host (`~B` a break, which
/// is not typed), the host's output comes out on its stdout, and `~.` at a
/// line start leaves; `bmcctl console log` then prints the logged output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bmcctl_attaches_types_leaves_and_prints_the_log() {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    let (sim, host) = sim_with_serial();
    let stack = Stack::start(1, &[]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &sim.target()).await;
    let mut observer = Viewer::start(client, &subjects, "default", &name, "observer").await;
    observer.stop_beating();
    let url = stack.nats.url();
    let mut bmcctl = Command::new(bmcfleet_tests::bin("bmcctl"))
        .args(["--nats-url", &url, "console", &name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    observer.wait_event("started").await;
    let mut stdin = bmcctl.stdin.take().unwrap();
    stdin.write_all(b"echo one\r~Becho two\r").unwrap();
    stdin.flush().unwrap();
    // ipmi_sim forwards a serial break on its TCP line as telnet's IAC BRK (0xFF 0xF3).
    assert!(host.wait_for(b"echo one\r\xff\xf3echo two\r", WAIT), "{:?}", String::from_utf8_lossy(&host.received()));
    assert!(!host.received().contains(&b'~'), "the escape is not typed");
    let text = host_text("bmcctl", 2000);
    assert!(host.write(&text));
    observer.wait_data(text.len()).await;
    stdin.write_all(b"~.").unwrap();
    stdin.flush().unwrap();
    let status = bmcfleet_tests::poll_until(WAIT, Duration::from_millis(50), || {
        let s = bmcctl.try_wait().unwrap();
        async move { s }
    })
    .await
    .expect("bmcctl leaves on ~.");
    assert!(status.success());
    let mut out = Vec::new();
    bmcctl.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&text), "bmcctl's stdout is the host's output");
    // No viewer any more: the worker closes the session.
    let ended = observer.wait_event("ended").await;
    assert!(ended.reason.unwrap_or_default().starts_with("nobody watches"));

    let log = Command::new(bmcfleet_tests::bin("bmcctl"))
        .args(["--nats-url", &url, "console", "log", &name, "--since", "10m"])
        .output()
        .unwrap();
    assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stderr));
    assert_eq!(String::from_utf8_lossy(&log.stdout), String::from_utf8_lossy(&text));
    let notes = String::from_utf8_lossy(&log.stderr);
    assert!(notes.contains("[console started (session ") && notes.contains("[console ended"), "{notes}");
}

/// A BMC flooding console output (the wire-level responder sending every
/// packet without waiting for acks, `testing/src/ipmi/lan/sol.rs`): the
/// worker's SOL queue and its one publish in flight bound what it holds;
/// what it could not keep is counted in `Bmc-Console-Lost`, what it
/// published is in order, and the console still shows output afterwards
/// (a session the flood made unresponsive is replaced by one taking over
/// the worker's own instance, never an `error`). Packets dropped at the worker's socket (at most 16 queued
/// per session) are not acknowledged, so a real BMC sends them again; the
/// responder does not retransmit, so here they are simply missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_bmc_stays_bounded_and_in_order() {
    use bmcfleet_testing::ipmi::{LanConfig, LanFleet};
    let fleet = LanFleet::start(LanConfig::default()).expect("responder");
    let bmc = fleet.bmc(0);
    let stack = Stack::start(1, &[]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let target = BmcTarget {
        address: bmc.addr().to_string().parse().unwrap(),
        protocol: Protocol::Ipmi,
        credentials: Credentials::Inline { username: "admin".into(), password: Secret::new("password") },
        tls: TlsOptions::default(),
        system_id: None,
        options: Default::default(),
    };
    let name = stack.topology.register_machine(client, &target).await;
    let viewer = Viewer::start(client, &subjects, "default", &name, "v").await;
    viewer.wait_event("started").await;
    client.publish(subjects.console_in("default", &name), "before\r".into()).await.unwrap();
    let typed = bmcfleet_tests::poll_until(WAIT, Duration::from_millis(50), || {
        let got = bmc.sol_received();
        async move { got.ends_with(b"before\r").then_some(()) }
    })
    .await;
    assert!(typed.is_some(), "typing before the flood: {:?}", String::from_utf8_lossy(&bmc.sol_received()));
    // 2 MiB of numbered records, sent without waiting for acks.
    let total = 2 * 1024 * 1024;
    let mut flood = Vec::with_capacity(total);
    let mut i = 0u32;
    while flood.len() < total {
        flood.extend_from_slice(format!("rec {i:08}\r\n").as_bytes());
        i += 1;
    }
    bmc.sol_faults(|f| f.flood = true);
    bmc.sol_write(&flood);
    // (Still flooding: the responder does not retransmit, so a packet of
    // the flood dropped at the worker's socket would hold the next one
    // back for ever; a real BMC retransmits it.)
    // Once the worker has published what it kept (nothing new for a while), the host prints again.
    let mut last = (0, 0);
    let _ = bmcfleet_tests::poll_until(Duration::from_secs(60), Duration::from_millis(500), || {
        let now = (viewer.data().len(), viewer.chunks().len());
        let settled = now == last && now.1 > 0;
        last = now;
        async move { settled.then_some(()) }
    })
    .await;
    // The flood is over: the host's next output is sent as a BMC sends
    // output, resent until acknowledged (in flood mode a dropped datagram
    // of it would be lost for good, and the check below would test UDP).
    bmc.sol_faults(|f| f.flood = false);
    bmc.sol_write(b"<after the flood>");
    let seen = bmcfleet_tests::poll_until(WAIT, Duration::from_millis(100), || {
        let data = viewer.data();
        async move { data.ends_with(b"<after the flood>").then_some(data) }
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the console outlives the flood: {} bytes, events {:?}, tail {:?}",
            viewer.data().len(),
            viewer.events(),
            String::from_utf8_lossy(&viewer.data()[viewer.data().len().saturating_sub(80)..])
        )
    });
    let data = &seen[..seen.len() - b"<after the flood>".len()];
    let lost: u64 = viewer.chunks().iter().map(|c| c.lost).sum();
    // In order: what was published is a subsequence of what the host wrote.
    let mut at = 0;
    for b in data {
        match flood[at..].iter().position(|x| x == b) {
            Some(p) => at += p + 1,
            None => panic!("published output is not in the host's order"),
        }
    }
    assert!(data.len() as u64 + lost <= flood.len() as u64, "{} published + {lost} lost", data.len());
    // Bounded: no message beyond the chunk size, and typing still works.
    assert!(viewer.chunks().iter().all(|c| c.body.len() <= bmcfleet_common::streams::CONSOLE_CHUNK_BYTES));
    // Typing after the flood reaches the host, once and in order.
    let before_typing = bmc.stats().discarded;
    for n in 0..3 {
        client.publish(subjects.console_in("default", &name), format!("after {n}\r").into()).await.unwrap();
    }
    let typed = bmcfleet_tests::poll_until(WAIT, Duration::from_millis(50), || {
        let got = bmc.sol_received();
        async move { got.ends_with(b"after 2\r").then_some(got) }
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "typing after the flood: {:?}; responder discarded {} datagrams meanwhile; events {:?}",
            String::from_utf8_lossy(&bmc.sol_received()),
            bmc.stats().discarded - before_typing,
            viewer.events()
        )
    });
    assert_eq!(String::from_utf8_lossy(&typed), "before\rafter 0\rafter 1\rafter 2\r", "each line once, in order");
    let events = viewer.events();
    assert!(events.iter().all(|(e, _)| e.as_deref() != Some("error")), "{events:?}");
    eprintln!("flood: {} of {} bytes published, {lost} reported lost", data.len(), flood.len());
}

/// The host floods 2 MiB of output through a real `ipmi_sim` while a
/// viewer watches; lines typed during and after the flood all reach the
/// host, each once, in the order they were typed, and the console still
/// shows the host's output afterwards. What the worker could not keep is
/// reported in `Bmc-Console-Lost`, never silently missing: stored output
/// plus the reported loss never exceeds what the host wrote, and what was
/// published is in the host's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_reaches_the_host_during_and_after_a_2_mib_flood() {
    let (sim, host) = sim_with_serial();
    let stack = Stack::start(1, &[]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &sim.target()).await;
    let viewer = Viewer::start(client, &subjects, "default", &name, "v").await;
    viewer.wait_event("started").await;
    let input = subjects.console_in("default", &name);
    client.publish(input.clone(), "before\r".into()).await.unwrap();
    assert!(
        host.wait_for(b"before\r", WAIT),
        "typing before the flood: {:?}",
        String::from_utf8_lossy(&host.received())
    );

    let total = 2 * 1024 * 1024;
    let mut flood = Vec::with_capacity(total);
    let mut i = 0u32;
    while flood.len() < total {
        flood.extend_from_slice(format!("rec {i:08}\r\n").as_bytes());
        i += 1;
    }
    let writer = {
        let (flood, host) = (flood.clone(), Arc::new(host));
        let h = host.clone();
        (tokio::task::spawn_blocking(move || h.write(&flood)), host)
    };
    let (writer, host) = writer;
    // Typed while the host floods (the worker reads output all the time).
    let mut typed = Vec::new();
    for n in 0..5 {
        let line = format!("during {n}\r");
        client.publish(input.clone(), line.clone().into()).await.unwrap();
        typed.extend_from_slice(line.as_bytes());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(tokio::time::timeout(Duration::from_secs(300), writer).await.expect("the flood is written").unwrap());
    // Typed once the host has written everything.
    for n in 0..5 {
        let line = format!("after {n}\r");
        client.publish(input.clone(), line.clone().into()).await.unwrap();
        typed.extend_from_slice(line.as_bytes());
    }
    let wanted = [&b"before\r"[..], &typed].concat();
    let got = bmcfleet_tests::poll_until(Duration::from_secs(90), Duration::from_millis(100), || {
        let got = host.received();
        async move { got.ends_with(b"after 4\r").then_some(got) }
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "typing after the flood never reached the host: {:?}; events {:?}",
            String::from_utf8_lossy(&host.received()),
            viewer.events()
        )
    });
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&wanted), "every line once, in order");

    // The console still shows the host's output.
    assert!(host.write(b"<after the flood>"));
    let seen = bmcfleet_tests::poll_until(Duration::from_secs(90), Duration::from_millis(100), || {
        let data = viewer.data();
        async move { data.ends_with(b"<after the flood>").then_some(data) }
    })
    .await
    .unwrap_or_else(|| panic!("no output after the flood; events {:?}", viewer.events()));
    let data = &seen[..seen.len() - b"<after the flood>".len()];
    let lost: u64 = viewer.chunks().iter().map(|c| c.lost).sum();
    let mut at = 0;
    for b in data {
        match flood[at..].iter().position(|x| x == b) {
            Some(p) => at += p + 1,
            None => panic!("published output is not in the host's order"),
        }
    }
    assert!(data.len() as u64 + lost <= flood.len() as u64, "{} published + {lost} lost", data.len());
    assert!(viewer.chunks().iter().all(|c| c.body.len() <= bmcfleet_common::streams::CONSOLE_CHUNK_BYTES));
    let events = viewer.events();
    assert!(events.iter().all(|(e, _)| e.as_deref() != Some("error")), "{events:?}");
    let log = stack.workers[0].log_text();
    assert!(!log.contains("rec 0000") && !log.contains("during 1"), "console data in the worker's log");
    eprintln!(
        "ipmi_sim flood: {} of {} bytes published, {lost} reported lost, events {events:?}",
        data.len(),
        flood.len()
    );
    drop(sim);
}

/// The owning worker is SIGKILLed while the host prints (a line every
/// 4 ms, below the 115200 bit/s line's rate): the new owner's `takeover`
/// marker reports the gap in bytes (`Bmc-Console-Gap-Bytes`), the output
/// the viewers got is the host's with one contiguous hole at most, and
/// that hole is no larger than the reported bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_output_reports_the_gap_in_bytes() {
    let (sim, host) = sim_with_serial();
    let stack = Stack::start(2, &[]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &sim.target()).await;
    both_workers_own_partitions(client, &subjects).await;
    let mut viewer = Viewer::start(client, &subjects, "default", &name, "logger").await;
    viewer.stop_beating();
    always_on(client, &subjects, &name).await;
    let started = viewer.wait_event("started").await;
    let owner = started.worker.clone().expect("the owner names itself");

    let lines = 3000usize;
    let line = |i: usize| format!("mid line {i:06}\r\n").into_bytes();
    let written: Vec<u8> = (0..lines).flat_map(line).collect();
    let host = Arc::new(host);
    let writer = {
        let host = host.clone();
        std::thread::spawn(move || {
            for i in 0..lines {
                assert!(host.write(&line(i)), "the host's line is down");
                std::thread::sleep(Duration::from_millis(4));
            }
        })
    };
    // Mid-output: the owner dies once viewers have seen 300 lines. (The
    // owner is the writer of the latest output: the second worker's
    // arrival may have moved the partition by a graceful hand-over.)
    viewer.wait_data(300 * line(0).len()).await;
    let owner =
        viewer.chunks().iter().rev().find(|c| c.event.is_none()).and_then(|c| c.worker.clone()).unwrap_or(owner);
    let mut workers = stack.workers;
    workers[if owner == "w0" { 0 } else { 1 }].kill();
    let takeover = viewer.wait_event("takeover").await;
    assert_ne!(takeover.worker.as_deref(), Some(owner.as_str()), "{takeover:?}");
    let bound =
        takeover.gap_bytes.unwrap_or_else(|| panic!("the takeover marker reports the gap in bytes: {takeover:?}"));
    tokio::task::spawn_blocking(move || writer.join().unwrap()).await.unwrap();
    let last = line(lines - 1);
    let _ = bmcfleet_tests::poll_until(Duration::from_secs(60), Duration::from_millis(100), || {
        let done = viewer.data().ends_with(&last);
        async move { done.then_some(()) }
    })
    .await;
    let got = viewer.data();
    assert!(got.ends_with(&last), "the output after the take-over arrives: {} of {} bytes", got.len(), written.len());
    // One contiguous hole at most: a prefix, then a suffix of the host's output.
    let head = got.iter().zip(&written).take_while(|(a, b)| a == b).count();
    let tail = got.iter().rev().zip(written.iter().rev()).take_while(|(a, b)| a == b).count();
    assert!(
        head + tail >= got.len(),
        "output beyond one hole: {head} + {tail} of {} bytes; events {:?}",
        got.len(),
        viewer.events()
    );
    let lost = (written.len() - got.len()) as u64;
    assert!(lost <= bound, "{lost} bytes lost, but the marker said at most {bound}: {:?}", takeover.reason);
    let reason = takeover.reason.clone().unwrap_or_default();
    assert!(reason.contains(&format!("at most {bound} bytes")), "{reason}");
    eprintln!("failover mid-output: {lost} bytes lost, bound {bound}: {reason}");
    drop(sim);
}
