//! Entry point for the `batch_decode` fuzz target (`fuzz/`) and for the
//! corpus replay test (`tests/tests/fuzz_corpus.rs`). Not a public API.
//!
//! [`batch_decode`] runs the gateway's admission decode of producer input,
//! [`decode_batch`] (MessagePack or JSON, then [`crate::validate::validate`]),
//! and checks what the gateway relies on for every batch it admits:
//! - it re-encodes in both encodings and decodes to the same batch, which
//!   still validates (the gateway re-encodes it into the job message);
//! - its BMC key makes a job subject from which the worker recovers the
//!   same key and partition.
//!
//! Input layout: `[flags, message…]`; flags bit 0 picks JSON, bit 1 allows
//! the `sim` protocol, bit 2 refuses inline credentials, bit 3 turns ad hoc
//! targets off (otherwise every public address is allowed).

use crate::codec::Encoding;
use crate::validate::{decode_batch, validate, Limits};
use crate::{Batch, Subjects};

/// One fuzz input: see the module docs for the layout.
pub fn batch_decode(data: &[u8]) {
    let [flags, message @ ..] = data else { return };
    let encoding = if flags & 1 != 0 { Encoding::Json } else { Encoding::MessagePack };
    let ad_hoc = if flags & 8 == 0 { "0.0.0.0/0,::/0" } else { "off" };
    let limits = Limits {
        allow_sim: flags & 2 != 0,
        allow_inline_credentials: flags & 4 == 0,
        ad_hoc: crate::machine::AdHocPolicy::parse(ad_hoc).expect("valid ranges"),
        ..Limits::default()
    };
    let Ok(batch) = decode_batch(message, encoding, &limits) else { return };
    for enc in [Encoding::MessagePack, Encoding::Json] {
        let bytes = enc.encode(&batch).unwrap_or_else(|e| panic!("an admitted batch does not encode as {enc:?}: {e}"));
        let back: Batch = enc
            .decode(&bytes)
            .unwrap_or_else(|e| panic!("an admitted batch does not decode from its own {enc:?}: {e}"));
        assert_eq!(back, batch, "{enc:?} round trip changed the batch");
        if let Err(e) = validate(&back, &limits) {
            panic!("a round-tripped batch no longer validates: {e}");
        }
    }
    let subjects = Subjects::default();
    let key = batch.key().expect("an admitted batch names a target");
    let subject = subjects.job(crate::machine::DEFAULT_TENANT, &key);
    assert_eq!(
        subjects.key_of_job_subject(&subject),
        Some((key.partition(16), key.clone())),
        "job subject {subject} does not give back its key"
    );
}

/// The `redfish_path` target: [`crate::raw_policy::canonical_redfish_path`]
/// on any text. A canonical path is a fixed point, stays under
/// `/redfish/v1`, holds no escape, dot segment, doubled or trailing slash,
/// and the default raw policy judges it exactly as it judges the input (the
/// policy matches the canonical form); a path that has none is refused.
pub fn redfish_path(data: &[u8]) {
    use crate::raw_policy::{canonical_redfish_path, RawPolicy, RawTarget};
    let Ok(given) = std::str::from_utf8(data) else { return };
    let policy = RawPolicy::default();
    let judge = |method: &'static str, path: &str| policy.check(RawTarget::Redfish { method, path }).is_ok();
    match canonical_redfish_path(given) {
        Err(_) => {
            assert!(!judge("POST", given) && !judge("GET", given), "{given:?} has no canonical form but was allowed")
        }
        Ok(c) => {
            assert_eq!(
                canonical_redfish_path(&c).ok().as_deref(),
                Some(c.as_str()),
                "{given:?}: {c:?} is not a fixed point"
            );
            let path = crate::raw_policy::without_query(&c);
            assert!(path == "/redfish/v1" || path.starts_with("/redfish/v1/"), "{c:?} left /redfish/v1");
            assert!(!path.contains("//") && !path.contains('%') && !path.ends_with('/'), "{c:?} is not plain");
            assert!(!path.split('/').any(|s| s == "." || s == ".."), "{c:?} has a dot segment");
            for m in ["GET", "POST", "PATCH", "DELETE"] {
                assert_eq!(judge(m, given), judge(m, &c), "{m} {given:?} and {m} {c:?} are judged differently");
            }
        }
    }
}
