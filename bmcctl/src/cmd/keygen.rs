//! `bmcctl keygen --out FILE`: the workers' sealing key pair (no NATS needed).

use anyhow::Context;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::process::ExitCode;

pub fn run(out: &std::path::Path) -> anyhow::Result<ExitCode> {
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
