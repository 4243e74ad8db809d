//! `bmcctl discover CIDR...`: ask the gateway for a BMC discovery (operators
//! only; a worker with `--discover-allow` ranges probes), then print what
//! it found as proposed machine records in the `machine apply` file format
//! (`--output json`: the report itself). Nothing is registered: the
//! operator reviews the file, names the credential, and applies it.

use crate::cli::DiscoverArgs;
use crate::client::Client;
use bmcfleet_schema::discover::{self, DiscoverPorts, DiscoverReport, DiscoverRequest, Proposal};
use bmcfleet_schema::{Protocol, Reply};
use std::process::ExitCode;
use std::time::Duration;

/// How much longer than the longest discovery bmcctl waits for its report.
const MARGIN: Duration = Duration::from_secs(60);

/// The request the flags ask for.
pub fn request(args: &DiscoverArgs) -> DiscoverRequest {
    let pick = |p: Protocol, given: &[u16], default: Vec<u16>| -> Vec<u16> {
        if !args.protocols.contains(&p) {
            Vec::new()
        } else if given.is_empty() {
            default
        } else {
            given.to_vec()
        }
    };
    let defaults = DiscoverPorts::default();
    DiscoverRequest {
        targets: args.targets.clone(),
        ports: DiscoverPorts {
            ipmi: pick(Protocol::Ipmi, &args.ipmi_ports, defaults.ipmi),
            redfish: pick(Protocol::Redfish, &args.redfish_ports, defaults.redfish),
            amt: pick(Protocol::Amt, &args.amt_ports, defaults.amt),
        },
        rate: args.rate,
        timeout_ms: args.probe_timeout.map(|d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX)),
    }
}

pub async fn run(client: &Client, args: &DiscoverArgs) -> anyhow::Result<ExitCode> {
    let request = request(args);
    // A malformed request costs no connection's worth of waiting: exit 2 now.
    if let Err(e) = request.plan(discover::MAX_ADDRESSES) {
        return Err(crate::Usage(format!("invalid_field: {}", e.context())).into());
    }
    let body = serde_json::to_vec(&request)?;
    let reply = client
        .request(bmcfleet_schema::subject::DISCOVER_ENDPOINT, false, body, discover::MAX_DURATION + MARGIN)
        .await?;
    let Reply::Discovery(report) = &reply else { return Ok(client.print(&reply)) };
    if client.format.is_json() {
        return Ok(client.print(&reply));
    }
    let proposals = discover::proposals(&report.found, &args.credentials);
    let file = machine_file(&args.targets, report, &proposals, &args.credentials)?;
    match &args.out {
        Some(path) => {
            std::fs::write(path, &file).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?
        }
        None => print!("{file}"),
    }
    eprintln!("{}", summary(report, proposals.len()));
    Ok(ExitCode::SUCCESS)
}

/// One line: what was probed, where, how fast, and what was found.
pub fn summary(report: &DiscoverReport, machines: usize) -> String {
    format!(
        "worker {} probed {} addresses ({} probes at {}/s in {:.1} s): {} services found, {} proposed machines",
        report.worker,
        report.addresses,
        report.probes,
        report.rate,
        report.elapsed_ms as f64 / 1000.0,
        report.found.len(),
        machines
    )
}

/// The proposed machines as a `machine apply` file: a comment header, then
/// `machines:` with one entry per proposal, each after a comment saying what
/// answered (vendor, product, version: the BMC's own unauthenticated words,
/// printable only).
pub fn machine_file(
    targets: &[String],
    report: &DiscoverReport,
    proposals: &[Proposal],
    credentials: &str,
) -> anyhow::Result<String> {
    let mut out = format!(
        "# Proposed by `bmcctl discover {}` (worker {}): {} machines.\n\
         # Nothing is registered: review, then `bmcctl machine apply -f FILE`.\n\
         # Every machine names the credential `{credentials}`: put it (`bmcctl cred put {credentials} ...`) or edit.\n",
        targets.join(" "),
        report.worker,
        proposals.len()
    );
    if proposals.is_empty() {
        out.push_str("machines: []\n");
        return Ok(out);
    }
    out.push_str("machines:\n");
    for p in proposals {
        for f in &p.found {
            out.push_str(&format!("# {}\n", describe(f)));
        }
        let entry = serde_norway::to_string(&[&p.machine])?;
        out.push_str(&entry);
    }
    Ok(out)
}

fn describe(f: &discover::Found) -> String {
    let mut words = vec![format!("{} port {}", f.protocol.as_str(), f.port)];
    for (label, value) in [("vendor", &f.vendor), ("product", &f.product), ("version", &f.version), ("uuid", &f.uuid)] {
        if let Some(v) = value {
            words.push(format!("{label} {v}"));
        }
    }
    if f.asf == Some(true) {
        words.push("answers RMCP/ASF presence ping".into());
    }
    if let Some(pin) = &f.pin_sha256 {
        words.push(format!("certificate sha256 {pin}"));
    }
    words.join(", ").chars().filter(|c| !c.is_control()).collect()
}
