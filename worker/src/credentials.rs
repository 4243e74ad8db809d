//! Resolving a batch's credentials: named references from the worker's
//! credential file, or inline values.

use bmcfleet_provider::ResolvedCredentials;
use bmcfleet_schema::{Credentials, ErrorBody, ErrorCode, Secret};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    username: String,
    password: Secret,
}

/// Named credentials known to this worker.
#[derive(Default)]
pub struct CredentialStore {
    named: HashMap<String, ResolvedCredentials>,
}

impl std::fmt::Debug for CredentialStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialStore").field("names", &self.named.keys().collect::<Vec<_>>()).finish()
    }
}

impl CredentialStore {
    /// Load `{"name": {"username": "...", "password": "..."}}` from a JSON file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read credentials file {}: {e}", path.display()))?;
        let entries: HashMap<String, Entry> =
            serde_json::from_str(&text).map_err(|e| format!("credentials file {} is invalid: {e}", path.display()))?;
        let named = entries
            .into_iter()
            .map(|(k, e)| (k, ResolvedCredentials { username: e.username, password: e.password }))
            .collect();
        Ok(CredentialStore { named })
    }

    pub fn len(&self) -> usize {
        self.named.len()
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }

    pub fn resolve(&self, creds: &Credentials) -> Result<ResolvedCredentials, ErrorBody> {
        match creds {
            Credentials::Inline { username, password } => {
                Ok(ResolvedCredentials { username: username.clone(), password: password.clone() })
            }
            Credentials::Ref(name) => self.named.get(name).cloned().ok_or_else(|| {
                ErrorBody::new(ErrorCode::UnknownCredential, format!("credential `{name}` is not known to this worker"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_and_resolves_without_leaking() {
        let dir = std::env::temp_dir().join(format!("bmcfleet-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.json");
        std::fs::write(&path, r#"{"rack12": {"username": "root", "password": "s3cret"}}"#).unwrap();
        let store = CredentialStore::load(&path).unwrap();
        let c = store.resolve(&Credentials::Ref("rack12".into())).unwrap();
        assert_eq!(c.username, "root");
        assert_eq!(c.password.expose(), "s3cret");
        assert!(!format!("{store:?} {c:?}").contains("s3cret"));
        assert_eq!(store.resolve(&Credentials::Ref("nope".into())).unwrap_err().code, ErrorCode::UnknownCredential);
        std::fs::write(&path, r#"{"x": {"username": "u"}}"#).unwrap();
        assert!(CredentialStore::load(&path).is_err());
    }
}
