//! `bmcctl console MACHINE [--watch]` and `bmcctl console log MACHINE
//! --since …`: a machine's serial console over NATS (docs/CONSOLE.md).
//!
//! Attached, bmcctl sends a heartbeat on the machine's watch subject every
//! [`HEARTBEAT`] (the owning worker holds the SOL session while one is
//! fresh), writes the console's output to stdout as it comes, and, unless
//! `--watch`, sends what is typed to the input subject: the terminal is in
//! raw mode (when stdin is one), and at the start of a line `~.` leaves,
//! `~B` sends a serial break and `~~` types one `~` (ssh's and conserver's
//! escapes). Markers (session started, taken over, ended, lost bytes) go to
//! stderr, so stdout is the host's output alone.

use crate::output::Format;
use anyhow::Context;
use async_nats::HeaderMap;
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_schema::subject::{
    CONSOLE_EVENT_HEADER, CONSOLE_LOST_HEADER, CONSOLE_OP_HEADER, CONSOLE_REASON_HEADER, CONSOLE_SEQ_HEADER,
    CONSOLE_SESSION_HEADER, CONSOLE_VIEWER_HEADER,
};
use futures::StreamExt;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// How often an attached bmcctl says it still watches (the worker's TTL is 15 s).
pub const HEARTBEAT: Duration = Duration::from_secs(5);

pub async fn run(
    client: crate::client::Client,
    topology: &TopologyArgs,
    op: Option<&crate::cli::ConsoleOp>,
    machine: Option<&str>,
    watch: bool,
    tenant: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let (nats, format) = (client.nats.clone(), client.format);
    match op {
        Some(crate::cli::ConsoleOp::Log { machine, since, tenant }) => {
            // Through the gateway (tenants have no JetStream access; it
            // scopes the read to the requester's machines); straight from
            // the stream only when no gateway answers (an operator's
            // deployment without one running).
            match log_via_gateway(&client, machine, *since, format).await {
                Err(e) if no_gateway(&e) => {
                    eprintln!("[console log: no gateway answers; reading the console stream directly]");
                    let tenant = tenant_of(&nats, topology, machine, tenant.as_deref()).await;
                    log(nats, topology, machine, &tenant, *since, format).await
                }
                other => other,
            }
        }
        None => {
            let machine = machine.context("name the machine: bmcctl console MACHINE")?;
            let tenant = tenant_of(&nats, topology, machine, tenant).await;
            attach(nats, topology, machine, &tenant, watch).await
        }
    }
}

/// The machine's tenant: named, else from the registry (operators), else `default`.
async fn tenant_of(nats: &async_nats::Client, topology: &TopologyArgs, machine: &str, tenant: Option<&str>) -> String {
    if let Some(t) = tenant {
        return t.to_owned();
    }
    let subjects = topology.subjects();
    let js = async_nats::jetstream::new(nats.clone());
    let found = async {
        let kv = js.get_key_value(subjects.machines_bucket()).await.ok()?;
        let bytes = kv.get(machine).await.ok()??;
        serde_json::from_slice::<bmcfleet_schema::Machine>(&bytes).ok().map(|m| m.tenant)
    };
    tokio::time::timeout(Duration::from_secs(3), found)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| bmcfleet_schema::machine::DEFAULT_TENANT.to_owned())
}

/// What a marker or a loss says, for stderr.
fn describe(headers: Option<&HeaderMap>) -> Option<String> {
    let h = headers?;
    let get = |k: &str| h.get(k).map(|v| v.as_str().to_owned());
    let mut parts = Vec::new();
    if let Some(lost) = get(CONSOLE_LOST_HEADER) {
        parts.push(format!("{lost} bytes of output lost here"));
    }
    if let Some(event) = get(CONSOLE_EVENT_HEADER) {
        let session = get(CONSOLE_SESSION_HEADER).map(|s| format!(" (session {s})")).unwrap_or_default();
        let reason = get(CONSOLE_REASON_HEADER).map(|r| format!(": {r}")).unwrap_or_default();
        parts.push(format!("{event}{session}{reason}"));
    }
    (!parts.is_empty()).then(|| format!("[console {}]", parts.join("; ")))
}

/// Restores the terminal's mode when dropped.
struct RawMode {
    saved: Option<nix::sys::termios::Termios>,
}

impl RawMode {
    fn enter() -> RawMode {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        let Ok(saved) = tcgetattr(&stdin) else { return RawMode { saved: None } };
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        if tcsetattr(&stdin, SetArg::TCSANOW, &raw).is_err() {
            return RawMode { saved: None };
        }
        RawMode { saved: Some(saved) }
    }

    fn active(&self) -> bool {
        self.saved.is_some()
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, saved);
        }
    }
}

/// What the escape reader made of typed bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Typed {
    Bytes(Vec<u8>),
    Break,
    Leave,
}

/// ssh-style escapes: `~` right after a line end (or at the start) waits
/// for the next byte: `.` leaves, `B` breaks, `~` is one `~`; anything else
/// is sent with the `~` before it.
#[derive(Debug)]
pub struct Escapes {
    line_start: bool,
    tilde: bool,
}

impl Default for Escapes {
    fn default() -> Self {
        Escapes { line_start: true, tilde: false }
    }
}

impl Escapes {
    pub fn feed(&mut self, input: &[u8]) -> Vec<Typed> {
        let mut out = Vec::new();
        let mut bytes = Vec::new();
        for &b in input {
            if self.tilde {
                self.tilde = false;
                match b {
                    b'.' => {
                        if !bytes.is_empty() {
                            out.push(Typed::Bytes(std::mem::take(&mut bytes)));
                        }
                        out.push(Typed::Leave);
                        return out;
                    }
                    b'B' => {
                        if !bytes.is_empty() {
                            out.push(Typed::Bytes(std::mem::take(&mut bytes)));
                        }
                        out.push(Typed::Break);
                        self.line_start = false;
                        continue;
                    }
                    b'~' => bytes.push(b'~'),
                    other => {
                        bytes.push(b'~');
                        bytes.push(other);
                    }
                }
                self.line_start = matches!(b, b'\r' | b'\n');
                continue;
            }
            if self.line_start && b == b'~' {
                self.tilde = true;
                continue;
            }
            bytes.push(b);
            self.line_start = matches!(b, b'\r' | b'\n');
        }
        if !bytes.is_empty() {
            out.push(Typed::Bytes(bytes));
        }
        out
    }
}

async fn attach(
    nats: async_nats::Client,
    topology: &TopologyArgs,
    machine: &str,
    tenant: &str,
    watch: bool,
) -> anyhow::Result<ExitCode> {
    let subjects = topology.subjects();
    let mut output = nats.subscribe(subjects.console_out(tenant, machine)).await?;
    let viewer = ulid::Ulid::new().to_string();
    let watch_subject = subjects.console_watch(tenant, machine);
    let beat = {
        let (nats, viewer) = (nats.clone(), viewer.clone());
        tokio::spawn(async move {
            loop {
                let mut h = HeaderMap::new();
                h.insert(CONSOLE_VIEWER_HEADER, viewer.as_str());
                if nats.publish_with_headers(watch_subject.clone(), h, Default::default()).await.is_err() {
                    return;
                }
                tokio::time::sleep(HEARTBEAT).await;
            }
        })
    };
    let raw = if watch { RawMode { saved: None } } else { RawMode::enter() };
    let eol = if raw.active() { "\r\n" } else { "\n" };
    eprint!(
        "[console {machine} of {tenant}: {}]{eol}",
        if watch { "watching; Ctrl-C leaves" } else { "attached; ~. leaves, ~B sends a break" }
    );
    // Typed input, read on a thread of its own (stdin reads block).
    let (typed_tx, mut typed_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    if !watch {
        std::thread::spawn(move || {
            use std::io::Read;
            let mut stdin = std::io::stdin();
            let mut buf = [0u8; 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if typed_tx.blocking_send(buf[..n].to_vec()).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    } else {
        drop(typed_tx);
    }
    let input = subjects.console_in(tenant, machine);
    let mut escapes = Escapes::default();
    let mut stdout = std::io::stdout();
    let mut typing = !watch;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let code = loop {
        tokio::select! {
            _ = &mut ctrl_c => break ExitCode::SUCCESS,
            msg = output.next() => {
                let Some(msg) = msg else { break ExitCode::FAILURE };
                if let Some(note) = describe(msg.headers.as_ref()) {
                    eprint!("{eol}{note}{eol}");
                }
                if !msg.payload.is_empty() {
                    stdout.write_all(&msg.payload)?;
                    stdout.flush()?;
                }
            }
            typed = typed_rx.recv(), if typing => {
                let Some(bytes) = typed else {
                    // stdin closed (a pipe that ended): keep watching.
                    typing = false;
                    continue;
                };
                let mut leave = false;
                for t in escapes.feed(&bytes) {
                    match t {
                        Typed::Bytes(b) => nats.publish(input.clone(), b.into()).await?,
                        Typed::Break => {
                            let mut h = HeaderMap::new();
                            h.insert(CONSOLE_OP_HEADER, "break");
                            nats.publish_with_headers(input.clone(), h, Default::default()).await?;
                            eprint!("{eol}[console break sent]{eol}");
                        }
                        Typed::Leave => leave = true,
                    }
                }
                if leave {
                    break ExitCode::SUCCESS;
                }
            }
        }
    };
    beat.abort();
    let _ = nats.flush().await;
    drop(raw);
    eprintln!("\n[console left]");
    Ok(code)
}

/// One logged message, for `--output json`.
#[derive(serde::Serialize)]
struct LogLine {
    /// RFC 3339 time the stream stored it.
    time: String,
    session: Option<String>,
    seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The output (invalid UTF-8 replaced).
    data: String,
}

/// Whether a request failed because no gateway serves the endpoint.
fn no_gateway(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<async_nats::RequestError>()
            .is_some_and(|r| matches!(r.kind(), async_nats::RequestErrorKind::NoResponders))
    })
}

/// How long one page may take.
const PAGE_TIMEOUT: Duration = Duration::from_secs(15);

/// `console log` through the gateway's `console.log` endpoint, page after page.
async fn log_via_gateway(
    client: &crate::client::Client,
    machine: &str,
    since: Duration,
    format: Format,
) -> anyhow::Result<ExitCode> {
    use base64::Engine as _;
    use bmcfleet_schema::console::ConsoleLogRequest;
    use bmcfleet_schema::Reply;
    let mut stdout = std::io::stdout();
    let mut after = None;
    loop {
        let req = ConsoleLogRequest {
            machine: machine.to_owned(),
            after,
            since: after.is_none().then(|| format!("{}s", since.as_secs().max(1))),
            max_bytes: None,
        };
        let endpoint = format!("{}.{}", bmcfleet_schema::subject::CONSOLE_GROUP, "log");
        let page = match client.request(&endpoint, false, serde_json::to_vec(&req)?, PAGE_TIMEOUT).await? {
            Reply::ConsoleLog(page) => page,
            Reply::Error(e) => {
                stdout.flush()?;
                eprintln!("error: {}: {}", e.code, e.message);
                return Ok(crate::exit::of_reply(&Reply::Error(e)));
            }
            other => anyhow::bail!("unexpected reply to console.log: {other:?}"),
        };
        for e in &page.entries {
            let data = base64::engine::general_purpose::STANDARD.decode(&e.data).context("console output (base64)")?;
            if format.is_json() {
                let line = LogLine {
                    time: e.time.clone(),
                    session: e.session.clone(),
                    seq: e.seq,
                    lost: e.lost,
                    event: e.event.clone(),
                    reason: e.reason.clone(),
                    data: String::from_utf8_lossy(&data).into_owned(),
                };
                println!("{}", serde_json::to_string(&line)?);
            } else {
                let mut h = HeaderMap::new();
                let mut put = |k: &str, v: Option<String>| {
                    if let Some(v) = v {
                        h.insert(k, v.as_str());
                    }
                };
                put(CONSOLE_LOST_HEADER, e.lost.map(|n| n.to_string()));
                put(CONSOLE_EVENT_HEADER, e.event.clone());
                put(CONSOLE_SESSION_HEADER, e.session.clone());
                put(CONSOLE_REASON_HEADER, e.reason.clone());
                if let Some(note) = describe(Some(&h)) {
                    stdout.flush()?;
                    eprintln!("\n{note}");
                }
                stdout.write_all(&data)?;
            }
        }
        if !page.more || page.next.is_none() || page.next == after {
            break;
        }
        after = page.next;
    }
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

async fn log(
    nats: async_nats::Client,
    topology: &TopologyArgs,
    machine: &str,
    tenant: &str,
    since: Duration,
    format: Format,
) -> anyhow::Result<ExitCode> {
    let subjects = topology.subjects();
    let mut stdout = std::io::stdout();
    let filter = Some(subjects.console_out(tenant, machine));
    super::replay::since(nats, subjects.console_stream(), "the workers", filter, since, |msg, _| {
        if format.is_json() {
            let get = |k: &str| msg.headers.as_ref().and_then(|h| h.get(k)).map(|v| v.as_str().to_owned());
            let line = LogLine {
                time: msg
                    .info()
                    .ok()
                    .and_then(|i| i.published.format(&time::format_description::well_known::Rfc3339).ok())
                    .unwrap_or_default(),
                session: get(CONSOLE_SESSION_HEADER),
                seq: get(CONSOLE_SEQ_HEADER).and_then(|s| s.parse().ok()),
                lost: get(CONSOLE_LOST_HEADER).and_then(|s| s.parse().ok()),
                event: get(CONSOLE_EVENT_HEADER),
                reason: get(CONSOLE_REASON_HEADER),
                data: String::from_utf8_lossy(&msg.payload).into_owned(),
            };
            println!("{}", serde_json::to_string(&line)?);
        } else {
            if let Some(note) = describe(msg.headers.as_ref()) {
                stdout.flush()?;
                eprintln!("\n{note}");
            }
            stdout.write_all(&msg.payload)?;
        }
        Ok(())
    })
    .await?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_act_only_at_the_start_of_a_line() {
        let mut e = Escapes::default();
        assert_eq!(e.feed(b"ls ~.\r"), vec![Typed::Bytes(b"ls ~.\r".to_vec())], "mid-line: typed");
        assert_eq!(e.feed(b"~B"), vec![Typed::Break]);
        assert_eq!(e.feed(b"x\n~~y"), vec![Typed::Bytes(b"x\n~y".to_vec())], "~~ is one ~");
        assert_eq!(e.feed(b"\r~"), vec![Typed::Bytes(b"\r".to_vec())], "a ~ waits for the next byte");
        assert_eq!(e.feed(b"q"), vec![Typed::Bytes(b"~q".to_vec())], "an unknown escape is typed");
        assert_eq!(e.feed(b"\rabc\r~.ignored"), vec![Typed::Bytes(b"\rabc\r".to_vec()), Typed::Leave]);
        let mut fresh = Escapes::default();
        assert_eq!(fresh.feed(b"~."), vec![Typed::Leave], "the very start counts as a line start");
    }
}
