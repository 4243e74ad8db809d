//! `bmcctl submit FILE`: any batch, from a file or standard input.

use crate::cli::SubmitArgs;
use crate::client::Client;
use anyhow::Context;
use bmcfleet_schema::{Batch, Credentials, Encoding};
use std::io::Read;
use std::process::ExitCode;

/// What is sent: the file as the producer wrote it (the gateway validates it
/// and answers with typed errors), except that an inline password is sealed
/// first when the workers' key is given: then a file that is no batch is
/// refused here rather than sent with a password in clear.
pub fn payload(text: String, file: &str, workers_public_key: Option<&str>) -> anyhow::Result<Vec<u8>> {
    let Some(key) = workers_public_key else { return Ok(text.into_bytes()) };
    let mut batch: Batch = Encoding::Json
        .decode(text.as_bytes())
        .with_context(|| format!("{file} is not a batch (needed to seal its password)"))?;
    let Some(target) = batch.bmc.as_mut().filter(|t| matches!(t.credentials, Credentials::Inline { .. })) else {
        return Ok(text.into_bytes());
    };
    // The gateway applies its default deadline (10 min unless configured) to a batch without one.
    let deadline = batch.deadline.unwrap_or(std::time::Duration::from_secs(600));
    target.credentials = super::seal_inline(target.credentials.clone(), Some(key), &target.address, deadline)?;
    Ok(Encoding::Json.encode(&batch)?)
}

pub async fn run(client: &Client, args: &SubmitArgs) -> anyhow::Result<ExitCode> {
    let mut text = String::new();
    if args.file == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(&args.file).with_context(|| format!("cannot read {}", args.file))?;
    }
    let body = payload(text, &args.file, args.workers_public_key.as_deref())?;
    let reply = client.request("submit", args.wait, body, args.timeout).await?;
    Ok(client.print(&reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INLINE: &str = r#"{"bmc":{"address":"10.0.0.5","protocol":"sim","credentials":{"inline":{"username":"admin","password":"s3cret"}}},"actions":[{"power":"on"}]}"#;

    #[test]
    fn sent_as_written_unless_a_password_must_be_sealed() {
        assert_eq!(payload(INLINE.into(), "f", None).unwrap(), INLINE.as_bytes(), "no key: untouched");
        let by_ref = INLINE.replace(r#"{"inline":{"username":"admin","password":"s3cret"}}"#, r#"{"ref":"r"}"#);
        let (_, public) = bmcfleet_common::sealing::generate();
        assert_eq!(
            payload(by_ref.clone(), "f", Some(&public)).unwrap(),
            by_ref.as_bytes(),
            "nothing to seal: untouched"
        );
        let sealed = String::from_utf8(payload(INLINE.into(), "f", Some(&public)).unwrap()).unwrap();
        assert!(!sealed.contains("s3cret") && sealed.contains("\"sealed\""), "{sealed}");
        let e = payload("{not json".into(), "batch.json", Some(&public)).unwrap_err();
        assert!(e.to_string().contains("batch.json is not a batch"), "{e}");
    }
}
