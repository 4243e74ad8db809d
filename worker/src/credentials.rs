//! Resolving a batch's credentials: named references from the worker's
//! credentials file, then from the credentials KV bucket (values sealed to
//! the workers' key); sealed inline credentials opened with the worker's
//! sealing keys.
//!
//! Bucket entries are cached for `--credentials-cache-ttl` (default 10s):
//! a credential rotated with `bmcctl cred put` is used by every worker at
//! most that long after the write, with no restart. Only successful look-ups
//! are cached, so a newly added name works on the next batch.

use async_nats::jetstream::{self, kv};
use bmcfleet_common::sealing::{OpenError, SealingKeys};
use bmcfleet_provider::ResolvedCredentials;
use bmcfleet_schema::{Credentials, ErrorBody, ErrorCode, SealedCredentials, Secret};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    username: String,
    password: Secret,
}

/// The credentials bucket, read lazily (it may be created after the worker starts).
struct Bucket {
    js: jetstream::Context,
    name: String,
    ttl: Duration,
    store: tokio::sync::Mutex<Option<kv::Store>>,
    cache: Mutex<HashMap<String, (Instant, ResolvedCredentials)>>,
}

/// Named credentials and sealing keys known to this worker.
#[derive(Default)]
pub struct CredentialStore {
    named: HashMap<String, ResolvedCredentials>,
    keys: SealingKeys,
    bucket: Option<Bucket>,
}

impl std::fmt::Debug for CredentialStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialStore")
            .field("names", &self.named.keys().collect::<Vec<_>>())
            .field("keys", &self.keys)
            .field("bucket", &self.bucket.as_ref().map(|b| &b.name))
            .finish()
    }
}

/// How far a sealer's clock may be behind this worker's.
const CLOCK_SKEW_MS: u64 = 60_000;

/// What a box is opened for.
enum Use<'a> {
    Named(&'a str),
    Target(&'a str),
}

fn unavailable(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::CredentialUnavailable, message)
}

/// Why the credentials file cannot be loaded ([`CredentialStore::load`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileErrorKind {
    /// It cannot be read (the source is the I/O error).
    Unreadable,
    /// It is not the JSON map of credentials (the source is the JSON error).
    Invalid,
}

pub type FileError = bmcfleet_schema::error::Error<FileErrorKind>;

impl CredentialStore {
    /// Load `{"name": {"username": "...", "password": "..."}}` from a JSON file.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            FileError::with_source(
                FileErrorKind::Unreadable,
                format!("cannot read credentials file {}", path.display()),
                e,
            )
        })?;
        let entries: HashMap<String, Entry> = serde_json::from_str(&text).map_err(|e| {
            FileError::with_source(FileErrorKind::Invalid, format!("credentials file {} is invalid", path.display()), e)
        })?;
        let named = entries
            .into_iter()
            .map(|(k, e)| (k, ResolvedCredentials { username: e.username, password: e.password }))
            .collect();
        Ok(CredentialStore { named, ..Default::default() })
    }

    /// Open sealed credentials with these keys.
    pub fn with_keys(mut self, keys: SealingKeys) -> Self {
        self.keys = keys;
        self
    }

    /// Resolve names missing from the file in this KV bucket.
    pub fn with_bucket(mut self, js: jetstream::Context, name: String, ttl: Duration) -> Self {
        self.bucket = Some(Bucket { js, name, ttl, store: Default::default(), cache: Default::default() });
        self
    }

    pub fn len(&self) -> usize {
        self.named.len()
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }

    /// Open a box for its use: `named` for a bucket entry, else the
    /// batch's target (`context`). Expiry is judged with [`CLOCK_SKEW`] of
    /// tolerance for the sealer's clock.
    fn open(&self, sealed: &SealedCredentials, what: &str, use_: Use<'_>) -> Result<ResolvedCredentials, ErrorBody> {
        let opened = match use_ {
            Use::Named(name) => self.keys.open_named(sealed, name),
            Use::Target(context) => {
                self.keys.open(sealed, context, bmcfleet_common::runtime::now_ms().saturating_sub(CLOCK_SKEW_MS))
            }
        };
        match opened {
            Ok(password) => Ok(ResolvedCredentials { username: sealed.username.clone(), password }),
            Err(e @ OpenError::UnknownKey(_)) if self.keys.is_empty() => {
                Err(unavailable(format!("{what}: {e} (start workers with --sealing-key-file)")))
            }
            Err(e) => Err(unavailable(format!("{what}: {e}"))),
        }
    }

    /// A secret action parameter sealed for `context` (see
    /// `bmcfleet_common::sealing::Binding::param`).
    pub fn open_param(&self, sealed: &SealedCredentials, context: &str) -> Result<Secret, ErrorBody> {
        self.open(sealed, "a sealed action parameter", Use::Target(context)).map(|c| c.password)
    }

    /// The credentials of a batch whose target has the ordering key `key`.
    pub async fn resolve(
        &self,
        creds: &Credentials,
        key: &bmcfleet_schema::BmcKey,
    ) -> Result<ResolvedCredentials, ErrorBody> {
        match creds {
            Credentials::Inline { username, password } => {
                Ok(ResolvedCredentials { username: username.clone(), password: password.clone() })
            }
            Credentials::Sealed(sealed) => {
                let context = bmcfleet_common::sealing::Binding::target(key, 0).context;
                self.open(sealed, "sealed credentials", Use::Target(&context))
            }
            Credentials::Ref(name) => {
                if let Some(c) = self.named.get(name) {
                    return Ok(c.clone());
                }
                match &self.bucket {
                    Some(bucket) => self.resolve_in_bucket(bucket, name).await,
                    None => Err(ErrorBody::new(
                        ErrorCode::UnknownCredential,
                        format!("credential `{name}` is not known to this worker"),
                    )),
                }
            }
        }
    }

    async fn resolve_in_bucket(&self, bucket: &Bucket, name: &str) -> Result<ResolvedCredentials, ErrorBody> {
        if let Some((at, c)) = bucket.cache.lock().expect("cache lock").get(name) {
            if at.elapsed() < bucket.ttl {
                return Ok(c.clone());
            }
        }
        let unknown = || {
            ErrorBody::new(
                ErrorCode::UnknownCredential,
                format!(
                    "credential `{name}` is neither in this worker's credentials file nor in bucket {}",
                    bucket.name
                ),
            )
        };
        let store = {
            let mut slot = bucket.store.lock().await;
            match &*slot {
                Some(s) => s.clone(),
                None => match tokio::time::timeout(Duration::from_secs(5), bucket.js.get_key_value(&bucket.name)).await
                {
                    Ok(Ok(s)) => slot.insert(s).clone(),
                    Ok(Err(e)) if error_chain(&e).contains("not found") => {
                        tracing::debug!(bucket = %bucket.name, error = %e, "No credentials bucket.");
                        return Err(unknown());
                    }
                    Ok(Err(e)) => {
                        return Err(unavailable(format!("cannot open credentials bucket {}: {e}", bucket.name)))
                    }
                    Err(_) => return Err(unavailable(format!("credentials bucket {} did not answer", bucket.name))),
                },
            }
        };
        let entry = match tokio::time::timeout(Duration::from_secs(5), store.get(name)).await {
            Ok(Ok(Some(bytes))) => bytes,
            Ok(Ok(None)) => return Err(unknown()),
            Ok(Err(e)) => {
                return Err(unavailable(format!("cannot read credential `{name}` from {}: {e}", bucket.name)))
            }
            Err(_) => return Err(unavailable(format!("credentials bucket {} did not answer", bucket.name))),
        };
        let sealed: SealedCredentials = serde_json::from_slice(&entry).map_err(|e| {
            unavailable(format!("credential `{name}` in {} is not a sealed credential: {e}", bucket.name))
        })?;
        let c = self.open(&sealed, &format!("credential `{name}`"), Use::Named(name))?;
        bucket.cache.lock().expect("cache lock").insert(name.to_owned(), (Instant::now(), c.clone()));
        Ok(c)
    }
}

/// An error with its sources, to tell "no such bucket" from NATS trouble.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_key() -> bmcfleet_schema::BmcKey {
        bmcfleet_schema::BmcKey::machine("m1")
    }

    #[tokio::test]
    async fn loads_and_resolves_without_leaking() {
        let dir = std::env::temp_dir().join(format!("bmcfleet-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.json");
        std::fs::write(&path, r#"{"rack12": {"username": "root", "password": "s3cret"}}"#).unwrap();
        let store = CredentialStore::load(&path).unwrap();
        let c = store.resolve(&Credentials::Ref("rack12".into()), &test_key()).await.unwrap();
        assert_eq!(c.username, "root");
        assert_eq!(c.password.expose(), "s3cret");
        assert!(!format!("{store:?} {c:?}").contains("s3cret"));
        assert_eq!(
            store.resolve(&Credentials::Ref("nope".into()), &test_key()).await.unwrap_err().code,
            ErrorCode::UnknownCredential
        );
        std::fs::write(&path, r#"{"x": {"username": "u"}}"#).unwrap();
        assert_eq!(CredentialStore::load(&path).unwrap_err().kind(), FileErrorKind::Invalid);
        assert_eq!(CredentialStore::load(&dir.join("missing.json")).unwrap_err().kind(), FileErrorKind::Unreadable);
    }

    #[tokio::test]
    async fn sealed_credentials_open_with_the_matching_key_only() {
        use bmcfleet_common::sealing::Binding;
        let (seed, public) = bmcfleet_common::sealing::generate();
        let key = bmcfleet_common::sealing::public_key(&public).unwrap();
        let far = bmcfleet_common::runtime::now_ms() + 3_600_000;
        let sealed =
            bmcfleet_common::sealing::seal("admin", &Secret::new("hunter2"), &key, &Binding::target(&test_key(), far))
                .unwrap();
        let none = CredentialStore::default();
        let e = none.resolve(&Credentials::Sealed(sealed.clone()), &test_key()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::CredentialUnavailable);
        assert!(e.message.contains("--sealing-key-file"), "{e}");
        let mut keys = SealingKeys::default();
        keys.add_seed(&seed).unwrap();
        let store = CredentialStore::default().with_keys(keys);
        let c = store.resolve(&Credentials::Sealed(sealed.clone()), &test_key()).await.unwrap();
        assert_eq!((c.username.as_str(), c.password.expose()), ("admin", "hunter2"));
        // The same box in a batch for another target opens to nothing.
        let elsewhere = bmcfleet_schema::BmcKey::machine("m2");
        let e = store.resolve(&Credentials::Sealed(sealed.clone()), &elsewhere).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::CredentialUnavailable);
        assert!(e.message.contains("another use"), "{e}");
        // Past its expiry (beyond the clock-skew tolerance): refused.
        let old = bmcfleet_common::runtime::now_ms() - CLOCK_SKEW_MS - 1_000;
        let late =
            bmcfleet_common::sealing::seal("admin", &Secret::new("hunter2"), &key, &Binding::target(&test_key(), old))
                .unwrap();
        assert_eq!(
            store.resolve(&Credentials::Sealed(late), &test_key()).await.unwrap_err().code,
            ErrorCode::CredentialUnavailable
        );
        // Sealed with no expiry at all (a producer's own tooling): it could be replayed for ever, so it is refused.
        let forever = Binding { expires_at_ms: None, ..Binding::target(&test_key(), 0) };
        let forever = bmcfleet_common::sealing::seal("admin", &Secret::new("hunter2"), &key, &forever).unwrap();
        let e = store.resolve(&Credentials::Sealed(forever), &test_key()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::CredentialUnavailable);
        assert!(e.message.contains("no expiry"), "{e}");
        let forged = SealedCredentials { sealed: "eGt2MQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into(), ..sealed };
        let e = store.resolve(&Credentials::Sealed(forged), &test_key()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::CredentialUnavailable);
        assert!(!e.message.contains("hunter2"));
    }
}
