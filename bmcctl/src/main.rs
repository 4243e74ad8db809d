//! `bmcctl`: a command-line producer for bmcfleet.
//!
//! Exit codes: 0 success (accepted, or finished successfully with `--wait`),
//! 1 the batch finished with a failure, 2 usage error, 3 the gateway refused
//! the request or could not be reached.

use anyhow::Context;
use async_nats::HeaderMap;
use bmcfleet_common::config::{duration, LogArgs, LogFormat, NatsArgs, OtelArgs};
use bmcfleet_schema::subject::{CONTENT_TYPE, WAIT_HEADER};
use bmcfleet_schema::*;
use clap::{Args, Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;
use tracing::Instrument;

/// Command-line producer for bmcfleet: ordered out-of-band BMC actions.
#[derive(Parser, Debug)]
#[command(name = "bmcctl", version)]
struct Cli {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    otel: OtelArgs,
    /// Start a W3C trace for the request (`traceparent` header) and print its trace id on stderr.
    #[arg(long, global = true)]
    trace: bool,
    /// Subject prefix of the gateway service.
    #[arg(long, env = "BMCFLEET_SERVICE_PREFIX", default_value = "bmcfleet", global = true)]
    service_prefix: String,
    /// Subject prefix of job and event subjects (for `watch`).
    #[arg(long, env = "BMCFLEET_SUBJECT_PREFIX", default_value = "bmc", global = true)]
    subject_prefix: String,
    /// Stem of stream and bucket names (for `cred`).
    #[arg(long, env = "BMCFLEET_STREAM", default_value = "BMCFLEET", global = true)]
    stream: String,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Power control: on, off, soft-off, cycle, reset, status, nmi.
    Power {
        op: PowerArg,
        #[command(flatten)]
        target: Target,
    },
    /// Set the next boot device.
    Boot {
        device: BootArg,
        /// Boot from it every time, not just next time.
        #[arg(long, conflicts_with = "once")]
        persistent: bool,
        /// Next boot only (the default).
        #[arg(long)]
        once: bool,
        /// UEFI boot (default legacy BIOS).
        #[arg(long)]
        efi: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Read the BMC's inventory.
    Inventory {
        #[command(flatten)]
        target: Target,
    },
    /// Submit a batch from a JSON file (`-` for standard input).
    Submit {
        file: String,
        /// Seal an inline password to the workers' public key (X...) here,
        /// so it does not travel in clear even to the gateway.
        #[arg(long, env = "BMCFLEET_WORKERS_PUBLIC_KEY", value_parser = workers_key)]
        workers_public_key: Option<String>,
        /// Wait for the final result.
        #[arg(long)]
        wait: bool,
        /// Request timeout when waiting.
        #[arg(long, default_value = "15m", value_parser = duration)]
        timeout: Duration,
    },
    /// Show a batch's status.
    Status { id: ulid::Ulid },
    /// Cancel a batch (queued: at once; running: after its current action).
    Cancel { id: ulid::Ulid },
    /// Stream events (all batches, or one batch until it finishes).
    Watch {
        /// Only this batch.
        id: Option<ulid::Ulid>,
    },
    /// Create a workers' sealing key pair: the seed (SX...) goes to a new file
    /// with mode 0600 (give it to the workers: --sealing-key-file), the public
    /// key (X...) is printed (give it to the gateways and `cred put`).
    Keygen {
        /// Where to write the seed; must not exist.
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Named BMC credentials in the credentials KV bucket, sealed to the workers' key.
    Cred {
        #[command(subcommand)]
        op: CredOp,
    },
}

#[derive(Subcommand, Debug)]
enum CredOp {
    /// Seal a credential to the workers' public key and store it (replaces an existing one).
    Put {
        name: String,
        #[arg(long)]
        username: String,
        /// Read the password from standard input (one line).
        #[arg(long, required = true)]
        password_stdin: bool,
        /// The workers' public sealing key (X...).
        #[arg(long, env = "BMCFLEET_WORKERS_PUBLIC_KEY")]
        workers_public_key: String,
        /// JetStream replicas when the bucket is created.
        #[arg(long, env = "BMCFLEET_REPLICAS", default_value_t = 1)]
        replicas: usize,
    },
    /// Remove a credential (purged: no sealed copy stays in the bucket).
    Delete { name: String },
    /// List credential names (never values).
    List,
}

#[derive(Args, Debug)]
struct Target {
    /// BMC address: IP, [IPv6]:port or hostname[:port].
    #[arg(long)]
    bmc: BmcAddress,
    /// Protocol to speak.
    #[arg(long, value_enum, default_value = "auto")]
    protocol: ProtocolArg,
    /// Named credential known to the workers.
    #[arg(long, conflicts_with_all = ["user", "password_env"])]
    cred: Option<String>,
    /// BMC user name (with --password-env).
    #[arg(long, requires = "password_env")]
    user: Option<String>,
    /// Environment variable holding the BMC password.
    #[arg(long, requires = "user")]
    password_env: Option<String>,
    /// Wait for the final result.
    #[arg(long)]
    wait: bool,
    /// Batch deadline.
    #[arg(long, default_value = "5m", value_parser = duration)]
    deadline: Duration,
    /// Skip TLS verification of the BMC (Redfish/AMT).
    #[arg(long)]
    insecure: bool,
    /// Seal the password (--password-env) to the workers' public key (X...)
    /// here, so it does not travel in clear even to the gateway.
    #[arg(long, env = "BMCFLEET_WORKERS_PUBLIC_KEY", value_parser = workers_key)]
    workers_public_key: Option<String>,
}

/// A workers' public key (`X...`), checked at parse time like every flag.
fn workers_key(s: &str) -> Result<String, String> {
    bmcfleet_common::sealing::public_key(s).map(|k| k.public_key())
}

/// Replace inline credentials by a box sealed to `key`; others unchanged.
fn seal_inline(credentials: Credentials, key: Option<&str>) -> anyhow::Result<Credentials> {
    match (credentials, key) {
        (Credentials::Inline { username, password }, Some(key)) => {
            let key = bmcfleet_common::sealing::public_key(key).map_err(anyhow::Error::msg)?;
            let sealed = bmcfleet_common::sealing::seal(&username, &password, &key).map_err(anyhow::Error::msg)?;
            Ok(Credentials::Sealed(sealed))
        }
        (c, _) => Ok(c),
    }
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum PowerArg {
    On,
    Off,
    SoftOff,
    Cycle,
    Reset,
    Status,
    Nmi,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum BootArg {
    Pxe,
    Disk,
    Cdrom,
    Bios,
    Safe,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum ProtocolArg {
    Auto,
    Ipmi,
    Redfish,
    Amt,
    Sim,
}

impl Target {
    fn batch(&self, actions: Vec<Action>) -> anyhow::Result<Batch> {
        let credentials = match (&self.cred, &self.user, &self.password_env) {
            (Some(name), _, _) => Credentials::Ref(name.clone()),
            (None, Some(user), Some(var)) => {
                let pw = std::env::var(var).with_context(|| format!("environment variable {var} (the BMC password) is not set"))?;
                Credentials::Inline { username: user.clone(), password: Secret::new(pw) }
            }
            _ => anyhow::bail!("give --cred NAME, or --user and --password-env"),
        };
        let credentials = seal_inline(credentials, self.workers_public_key.as_deref())?;
        Ok(Batch {
            id: None,
            bmc: BmcTarget {
                address: self.bmc.clone(),
                protocol: match self.protocol {
                    ProtocolArg::Auto => Protocol::Auto,
                    ProtocolArg::Ipmi => Protocol::Ipmi,
                    ProtocolArg::Redfish => Protocol::Redfish,
                    ProtocolArg::Amt => Protocol::Amt,
                    ProtocolArg::Sim => Protocol::Sim,
                },
                credentials,
                tls: TlsOptions { insecure: self.insecure, ca_pem: None },
                system_id: None,
            },
            actions,
            on_error: OnError::Stop,
            deadline: Some(self.deadline),
        })
    }
}

struct Client {
    nats: async_nats::Client,
    prefix: String,
    json: bool,
    /// Trace-context headers added to every request (`--trace`).
    trace: HeaderMap,
}

impl Client {
    async fn request(&self, endpoint: &str, mut headers: HeaderMap, body: Vec<u8>, timeout: Duration) -> anyhow::Result<Reply> {
        bmcfleet_common::telemetry::merge(&mut headers, &self.trace);
        let req = async_nats::Request::new().headers(headers).payload(body.into()).timeout(Some(timeout));
        let msg = self
            .nats
            .send_request(format!("{}.{endpoint}", self.prefix), req)
            .await
            .map_err(|e| anyhow::anyhow!("no answer from the gateway on {}.{endpoint}: {e}", self.prefix))?;
        let enc = Encoding::from_content_type(msg.headers.as_ref().and_then(|h| h.get(CONTENT_TYPE)).map(|v| v.as_str()))?;
        Ok(enc.decode(&msg.payload)?)
    }

    fn print(&self, reply: &Reply) -> ExitCode {
        if self.json {
            println!("{}", serde_json::to_string_pretty(reply).unwrap_or_default());
        } else {
            print_human(reply);
        }
        match reply {
            Reply::Error(_) => ExitCode::from(3),
            Reply::Result(r) if r.state != BatchState::Succeeded => ExitCode::from(1),
            _ => ExitCode::SUCCESS,
        }
    }
}

fn headers(wait: bool) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, Encoding::Json.content_type());
    if wait {
        h.insert(WAIT_HEADER, "true");
    }
    h
}

fn data_text(d: &ActionData) -> String {
    match d {
        ActionData::PowerState(s) => format!("power={}", serde_json::to_value(s).unwrap_or_default().as_str().unwrap_or("?")),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn print_result(r: &BatchResult) {
    println!("batch {} on {}: {:?} (worker {}, delivery {})", r.id, r.bmc, r.state, r.worker, r.deliveries);
    for a in &r.results {
        let detail = match (&a.error, &a.data) {
            (Some(e), _) => format!("{}: {}", e.code, e.message),
            (None, Some(d)) => data_text(d),
            (None, None) => String::new(),
        };
        println!(
            "  {:>2} {:<22} {:<5} {:>6}ms {:<8} {}",
            a.index,
            a.action,
            if a.is_ok() { "ok" } else { "ERROR" },
            a.duration_ms,
            a.provider.as_deref().unwrap_or("-"),
            detail
        );
    }
}

fn print_human(reply: &Reply) {
    match reply {
        Reply::Accepted(a) => println!(
            "accepted {}{} (stream sequence {}, subject {})",
            a.id,
            if a.duplicate { " (already known: not queued again)" } else { "" },
            a.stream_sequence,
            a.subject
        ),
        Reply::Result(r) => print_result(r),
        Reply::Status(s) => {
            println!("batch {} on {}: {:?}, {} of {} actions done", s.id, s.bmc, s.state, s.results.len(), s.actions.len());
            if let Some(r) = &s.result {
                print_result(r);
            }
        }
        Reply::Cancelled { id, state } => println!("cancel requested for {id}: now {state:?}"),
        Reply::Error(e) => eprintln!("error: {}: {}", e.code, e.message),
    }
}

async fn watch(client: &Client, subject_prefix: &str, id: Option<ulid::Ulid>) -> anyhow::Result<ExitCode> {
    let subject = match id {
        Some(id) => format!("{subject_prefix}.events.{id}"),
        None => format!("{subject_prefix}.events.>"),
    };
    let mut sub = client.nats.subscribe(subject).await?;
    // Subscribed first, so nothing is missed: a batch that already finished is reported from its status.
    if let Some(id) = id {
        client.nats.flush().await?;
        let body = serde_json::to_vec(&IdRequest { id })?;
        if let Reply::Status(s) = client.request("status", headers(false), body, Duration::from_secs(10)).await? {
            if let (true, Some(result)) = (s.state.is_final(), s.result) {
                if client.json {
                    let ev = Event { batch: id, at_ms: result.finished_at_ms, event: EventKind::BatchFinished { result: result.clone() } };
                    println!("{}", serde_json::to_string(&ev).unwrap_or_default());
                } else {
                    print_result(&result);
                }
                return Ok(if result.state == BatchState::Succeeded { ExitCode::SUCCESS } else { ExitCode::from(1) });
            }
        }
    }
    while let Some(msg) = sub.next().await {
        let Ok(ev) = Encoding::MessagePack.decode::<Event>(&msg.payload) else { continue };
        if client.json {
            println!("{}", serde_json::to_string(&ev).unwrap_or_default());
        } else {
            match &ev.event {
                EventKind::ActionStarted { index, action } => println!("{} #{index} {action} started", ev.batch),
                EventKind::ActionFinished { result } => println!(
                    "{} #{} {} {}{}",
                    ev.batch,
                    result.index,
                    result.action,
                    if result.is_ok() { "ok" } else { "failed" },
                    result.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
                ),
                EventKind::BatchFinished { result } => print_result(result),
            }
        }
        if let (Some(_), EventKind::BatchFinished { result }) = (id, &ev.event) {
            return Ok(if result.state == BatchState::Succeeded { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn power_op(op: PowerArg) -> PowerOp {
    match op {
        PowerArg::On => PowerOp::On,
        PowerArg::Off => PowerOp::Off,
        PowerArg::SoftOff => PowerOp::SoftOff,
        PowerArg::Cycle => PowerOp::Cycle,
        PowerArg::Reset => PowerOp::Reset,
        PowerArg::Status => PowerOp::Status,
        PowerArg::Nmi => PowerOp::Nmi,
    }
}

fn boot_device(d: BootArg) -> BootDevice {
    match d {
        BootArg::Pxe => BootDevice::Pxe,
        BootArg::Disk => BootDevice::Disk,
        BootArg::Cdrom => BootDevice::Cdrom,
        BootArg::Bios => BootDevice::Bios,
        BootArg::Safe => BootDevice::Safe,
    }
}

/// `bmcctl keygen`: no NATS needed.
fn keygen(out: &std::path::Path) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let (seed, public) = bmcfleet_common::sealing::generate();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| format!("cannot create {} (it must not exist)", out.display()))?;
    writeln!(f, "{}", seed.expose())?;
    f.sync_all()?;
    println!("{public}");
    eprintln!("seed written to {} (mode 0600): give it to the workers (--sealing-key-file); the public key above goes to the gateways (--workers-public-key)", out.display());
    Ok(ExitCode::SUCCESS)
}

fn credential_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..");
    anyhow::ensure!(ok, "credential names are 1-128 characters of [A-Za-z0-9-_./], not starting or ending with `.`");
    Ok(())
}

/// `bmcctl cred ...` against the credentials bucket.
async fn cred(nats: async_nats::Client, stream: &str, op: &CredOp) -> anyhow::Result<ExitCode> {
    use bmcfleet_common::streams;
    use futures::TryStreamExt;
    let subjects = Subjects::new("bmc", stream, 1);
    let js = async_nats::jetstream::new(nats);
    let bucket = subjects.credentials_bucket();
    match op {
        CredOp::Put { name, username, workers_public_key, replicas, .. } => {
            credential_name(name)?;
            let key = bmcfleet_common::sealing::public_key(workers_public_key).map_err(anyhow::Error::msg)?;
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).context("reading the password from standard input")?;
            let password = Secret::new(line.trim_end_matches(['\r', '\n']));
            anyhow::ensure!(!password.is_empty(), "empty password on standard input");
            let sealed = bmcfleet_common::sealing::seal(username, &password, &key).map_err(anyhow::Error::msg)?;
            let kv = streams::bucket(&js, streams::credentials_config(&subjects, *replicas), streams::Mode::UseExisting).await?;
            kv.put(name.as_str(), serde_json::to_vec(&sealed)?.into()).await.with_context(|| format!("writing {name} to {bucket}"))?;
            println!("stored {name} in {bucket} (sealed to {})", sealed.key);
        }
        CredOp::Delete { name } => {
            credential_name(name)?;
            let kv = js.get_key_value(&bucket).await.with_context(|| format!("bucket {bucket}"))?;
            kv.purge(name.as_str()).await.with_context(|| format!("deleting {name} from {bucket}"))?;
            println!("deleted {name} from {bucket}");
        }
        CredOp::List => {
            let kv = js.get_key_value(&bucket).await.with_context(|| format!("bucket {bucket}"))?;
            let mut names: Vec<String> = kv.keys().await?.try_collect().await?;
            names.sort();
            for n in names {
                println!("{n}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Keygen { out } = &cli.command {
        return keygen(out);
    }
    let nats = bmcfleet_common::nats::connect(&cli.nats, "bmcctl").await?;
    if let Command::Cred { op } = &cli.command {
        return cred(nats, &cli.stream, op).await;
    }
    let trace = if cli.trace { start_trace() } else { HeaderMap::new() };
    let client = Client { nats, prefix: cli.service_prefix.clone(), json: cli.json, trace };
    let id_body = |id: &ulid::Ulid| serde_json::to_vec(&IdRequest { id: *id });
    let (target, actions) = match &cli.command {
        Command::Power { op, target } => (target, vec![Action::Power(power_op(*op))]),
        Command::Boot { device, persistent, efi, target, .. } => (
            target,
            vec![Action::BootDevice(BootDeviceRequest { device: boot_device(*device), persistent: *persistent, efi: *efi })],
        ),
        Command::Inventory { target } => (target, vec![Action::Inventory]),
        Command::Submit { file, wait, timeout, workers_public_key } => {
            let mut text = String::new();
            if file == "-" {
                std::io::stdin().read_to_string(&mut text)?;
            } else {
                text = std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?;
            }
            // Sent as the producer wrote it (the gateway validates and answers
            // with typed errors), except that an inline password is sealed
            // first when the workers' key is given: then a batch that does not
            // parse is refused here rather than sent with a password in clear.
            let payload = match workers_public_key {
                Some(key) => {
                    let mut batch: Batch = Encoding::Json
                        .decode(text.as_bytes())
                        .with_context(|| format!("{file} is not a batch (needed to seal its password)"))?;
                    if matches!(batch.bmc.credentials, Credentials::Inline { .. }) {
                        batch.bmc.credentials = seal_inline(batch.bmc.credentials, Some(key))?;
                        Encoding::Json.encode(&batch)?
                    } else {
                        text.into_bytes()
                    }
                }
                None => text.into_bytes(),
            };
            let reply = client.request("submit", headers(*wait), payload, *timeout).await?;
            return Ok(client.print(&reply));
        }
        Command::Status { id } => {
            let reply = client.request("status", headers(false), id_body(id)?, Duration::from_secs(10)).await?;
            return Ok(client.print(&reply));
        }
        Command::Cancel { id } => {
            let reply = client.request("cancel", headers(false), id_body(id)?, Duration::from_secs(10)).await?;
            return Ok(client.print(&reply));
        }
        Command::Watch { id } => return watch(&client, &cli.subject_prefix, *id).await,
        Command::Keygen { .. } | Command::Cred { .. } => unreachable!("handled above"),
    };
    let batch = target.batch(actions)?;
    let timeout = target.deadline + Duration::from_secs(10);
    let reply = client.request("submit", headers(target.wait), Encoding::Json.encode(&batch)?, timeout).await?;
    Ok(client.print(&reply))
}

/// Trace headers for `--trace`: the current (exported) span's context when an
/// OTLP endpoint is configured, else a fresh sampled `traceparent`. Prints the trace id.
fn start_trace() -> HeaderMap {
    let mut h = bmcfleet_common::telemetry::trace_headers(&tracing::Span::current(), None);
    let trace_id = match h.get("traceparent").and_then(|v| v.as_str().split('-').nth(1).map(str::to_owned)) {
        Some(id) => id,
        None => {
            let (traceparent, id) = bmcfleet_common::telemetry::new_traceparent();
            h.insert("traceparent", traceparent.as_str());
            id
        }
    };
    eprintln!("trace id: {trace_id}");
    h
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Spans are exported only when an OTLP endpoint is configured; logs go to stderr at `warn`.
    let log = LogArgs { log_format: LogFormat::Pretty, log: "warn".into() };
    let telemetry = match bmcfleet_common::telemetry::init(&log, &cli.otel, "bmcctl") {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let span = tracing::info_span!("bmcctl.request", otel.kind = "client");
    let result = run(cli).instrument(span).await;
    telemetry.shutdown(Duration::from_secs(5)).await;
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(3)
        }
    }
}
