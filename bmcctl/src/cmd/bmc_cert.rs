//! `bmcctl bmc-cert replace --machine NAME`: the BMC's HTTPS certificate
//! replaced, with the registry's `tls.pin_sha256` following it, so a pinned
//! machine stays reachable (docs/BMC_CERTIFICATES.md).
//!
//! The order: (1) the machine's record is changed to trust the old *and*
//! the new certificate (`tls.pin_sha256: "OLD,NEW"`, CAS on its revision);
//! (2) the batch runs (the worker refuses it, nothing sent, unless its copy
//! of the record accepts the new fingerprint; the provider reads the
//! change back on a connection pinned to NEW); (3) on success the record
//! pins NEW alone; on a failure that provably sent nothing (`unsupported`,
//! `invalid_field`) it pins OLD again; on any other failure both stay
//! trusted (the BMC may serve either) and the operator is told how to
//! settle it. At no point does the registry trust neither certificate.
//!
//! A machine that is not pinned (`tls.ca_pem`, the system roots or
//! `tls.insecure`) needs no change to its record; a plan, a fleet run or an
//! ad hoc target goes the ordinary way.

use crate::cli::Target;
use crate::client::Client;
use anyhow::{bail, Context};
use base64::Engine;
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_schema::{hex, Action, ActionData, BatchState, Encoding, ErrorCode, Machine, Reply};
use std::process::ExitCode;
use std::time::Duration;

/// How often the batch is submitted again when a worker's copy of the
/// registry does not yet hold the record written a moment before (its
/// refusal sends nothing).
const LAGGING_COPY_RETRIES: u32 = 5;

/// SHA-256 (lower-case hex) of the first certificate of a PEM text.
pub fn fingerprint(pem: &str) -> anyhow::Result<String> {
    let start = pem.find("-----BEGIN CERTIFICATE-----").context("the certificate file holds no CERTIFICATE block")?;
    let body = &pem[start + "-----BEGIN CERTIFICATE-----".len()..];
    let end = body.find("-----END CERTIFICATE-----").context("the CERTIFICATE block has no end")?;
    let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64).context("the CERTIFICATE block is not base64")?;
    use sha2::Digest;
    Ok(hex(&sha2::Sha256::digest(&der)))
}

/// The record's pins, normalised (lower-case hex, no separators).
fn pins_of(m: &Machine) -> anyhow::Result<Vec<String>> {
    Ok(m.tls.pins().map_err(anyhow::Error::msg)?.iter().map(|p| hex(p)).collect())
}

async fn read(kv: &async_nats::jetstream::kv::Store, name: &str) -> anyhow::Result<(Machine, u64)> {
    let entry = kv.entry(name).await?.filter(|e| matches!(e.operation, async_nats::jetstream::kv::Operation::Put));
    let Some(entry) = entry else { bail!("machine `{name}` is not registered") };
    let m: Machine = serde_json::from_slice(&entry.value).with_context(|| format!("the record of `{name}`"))?;
    Ok((m, entry.revision))
}

/// Write `m` over revision `revision` (CAS: a concurrent change wins and this fails).
async fn write(kv: &async_nats::jetstream::kv::Store, m: &Machine, revision: u64) -> anyhow::Result<u64> {
    m.validate()?;
    let bytes = serde_json::to_vec(m)?;
    kv.update(m.name.as_str(), bytes.into(), revision)
        .await
        .with_context(|| format!("writing the record of `{}` (changed meanwhile? run the command again)", m.name))
}

/// The one action's result, if the batch finished.
fn outcome(reply: &Reply) -> Option<(BatchState, Option<&bmcfleet_schema::ActionResult>)> {
    match reply {
        Reply::Result(r) => Some((r.state, r.results.first())),
        _ => None,
    }
}

/// A refusal by a worker whose copy of the record is older than our write.
fn lagging(reply: &Reply) -> bool {
    outcome(reply)
        .and_then(|(_, r)| r?.error.as_ref())
        .is_some_and(|e| e.code == ErrorCode::InvalidField && e.message.contains("does not accept the new certificate"))
}

pub async fn replace(
    nats: async_nats::Client,
    client: &Client,
    topology: &TopologyArgs,
    target: &Target,
    actions: Vec<Action>,
) -> anyhow::Result<ExitCode> {
    let [Action::BmcCertReplace(r)] = actions.as_slice() else { bail!("bmc-cert replace builds one action") };
    let name = target.machines.first().context("one --machine")?.clone();
    let new = fingerprint(&r.certificate_pem)?;
    let actor = crate::identity::of(&nats, None).await;
    let js = async_nats::jetstream::new(nats);
    let kv = super::machine::registry_bucket(&js, topology).await?;
    let subjects = topology.subjects();

    let (mut m, revision) = read(&kv, &name).await?;
    let before = m.tls.pin_sha256.clone();
    let pins = pins_of(&m)?;
    let pinned = !pins.is_empty();
    if pinned && !pins.contains(&new) {
        // Trust both while the BMC changes over (the first pin is the one registered before).
        m.tls.pin_sha256 = Some(format!("{},{new}", pins[0]));
        let revision = write(&kv, &m, revision).await?;
        super::machine::audit_put(&js, &subjects, &actor, &m, revision).await;
        eprintln!("{name}: the registry trusts the old and the new certificate during the change");
    }

    let mut batch = target.batch(actions.clone())?;
    let mut attempt = 0;
    let reply = loop {
        batch.id = Some(ulid::Ulid::new());
        let reply = client.request("submit", true, Encoding::Json.encode(&batch)?, target.answer_timeout()).await?;
        attempt += 1;
        if pinned && lagging(&reply) && attempt <= LAGGING_COPY_RETRIES {
            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            continue;
        }
        break reply;
    };
    let code = client.print(&reply);
    if !pinned {
        return Ok(code);
    }

    let (mut m, revision) = read(&kv, &name).await?;
    match outcome(&reply) {
        Some((BatchState::Succeeded, Some(res))) => {
            let served = match &res.data {
                Some(ActionData::BmcCertificate(c)) => c.sha256.clone(),
                _ => String::new(),
            };
            if served != new {
                eprintln!("{name}: the result names no certificate {new}; the registry keeps trusting both");
                return Ok(code);
            }
            m.tls.pin_sha256 = Some(new.clone());
            let revision = write(&kv, &m, revision).await?;
            super::machine::audit_put(&js, &subjects, &actor, &m, revision).await;
            eprintln!("{name}: the registry now pins the new certificate (tls.pin_sha256 {new})");
        }
        Some((_, Some(res)))
            if res
                .error
                .as_ref()
                .is_some_and(|e| matches!(e.code, ErrorCode::Unsupported | ErrorCode::InvalidField)) =>
        {
            // Refused before anything was sent: the old certificate alone again.
            m.tls.pin_sha256 = before;
            let revision = write(&kv, &m, revision).await?;
            super::machine::audit_put(&js, &subjects, &actor, &m, revision).await;
            eprintln!("{name}: nothing was changed on the BMC; the registry pins the old certificate again");
        }
        _ => eprintln!(
            "{name}: the change may or may not have happened; the registry keeps trusting both certificates. \
             Run `bmcctl bmc-cert get --machine {name}`, then `bmcctl machine set {name} --pin-sha256 <its sha256>`"
        ),
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_the_first_certificates_der_digest() {
        // DER bytes "0\x03\x02\x01\x00" as a (not meaningful) certificate block.
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n";
        use sha2::Digest;
        assert_eq!(fingerprint(pem).unwrap(), hex(&sha2::Sha256::digest([0x30, 0x03, 0x02, 0x01, 0x00])));
        assert!(fingerprint("-----BEGIN PRIVATE KEY-----").is_err());
    }
}
