//! Sealing BMC passwords for the workers (NATS xkeys: X25519 +
//! XSalsa20-Poly1305 boxes, format `xkv1`).
//!
//! Workers hold one or more xkey seeds (`SX...`); the gateway and `bmcctl
//! cred put` hold only the matching public key (`X...`). A password is sealed
//! by a fresh one-off sender key, so a box names its recipient (`key`) and its
//! sender (`sender`) and nothing else; only a worker with the recipient's seed
//! can open it. Several seeds make key rotation possible: a worker opens a
//! box with the seed whose public key the box names.

use base64::Engine as _;
use bmcfleet_schema::{Secret, SealedCredentials};
use nkeys::XKey;
use std::collections::HashMap;
use std::path::Path;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Why a sealed password could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no sealing key for public key {0} on this worker")]
    UnknownKey(String),
    #[error("the sealed box is malformed or was not sealed to this key: {0}")]
    Invalid(String),
}

/// A public xkey (`X...`), checked.
pub fn public_key(s: &str) -> Result<XKey, String> {
    let s = s.trim();
    if !s.starts_with('X') {
        return Err(format!("`{s}` is not a public xkey (X...; `bmcctl keygen` prints one)"));
    }
    XKey::from_public_key(s).map_err(|e| format!("`{s}` is not a valid public xkey: {e}"))
}

fn seed(s: &str) -> Result<XKey, String> {
    let s = s.trim();
    if !s.starts_with("SX") {
        return Err("a sealing key seed starts with SX (`bmcctl keygen` writes one)".into());
    }
    XKey::from_seed(s).map_err(|e| format!("invalid sealing key seed: {e}"))
}

/// A new key pair: (seed `SX...`, public key `X...`).
pub fn generate() -> (Secret, String) {
    let k = XKey::new();
    (Secret::new(k.seed().expect("a generated xkey has a seed")), k.public_key())
}

/// Seal `password` to `recipient` (the workers' public key).
pub fn seal(username: &str, password: &Secret, recipient: &XKey) -> Result<SealedCredentials, String> {
    let sender = XKey::new();
    let sealed = sender.seal(password.expose().as_bytes(), recipient).map_err(|e| format!("cannot seal: {e}"))?;
    Ok(SealedCredentials {
        username: username.to_owned(),
        key: recipient.public_key(),
        sender: sender.public_key(),
        sealed: B64.encode(sealed),
    })
}

/// The seeds a worker opens sealed credentials with, by public key.
#[derive(Default)]
pub struct SealingKeys {
    keys: HashMap<String, XKey>,
}

impl std::fmt::Debug for SealingKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealingKeys").field("public_keys", &self.keys.keys().collect::<Vec<_>>()).finish()
    }
}

impl SealingKeys {
    /// Add a seed (`SX...`).
    pub fn add_seed(&mut self, seed_text: &Secret) -> Result<String, String> {
        let k = seed(seed_text.expose())?;
        let public = k.public_key();
        self.keys.insert(public.clone(), k);
        Ok(public)
    }

    /// Add the seed in a file (first non-empty line). The file must not be
    /// readable by others (group read is allowed: Kubernetes mounts Secrets
    /// owned by the pod's fsGroup).
    pub fn add_file(&mut self, path: &Path) -> Result<String, String> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(path).map_err(|e| format!("sealing key file {}: {e}", path.display()))?;
            if meta.permissions().mode() & 0o007 != 0 {
                return Err(format!(
                    "sealing key file {} is readable by others (mode {:o}); chmod 600 it",
                    path.display(),
                    meta.permissions().mode() & 0o777
                ));
            }
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("sealing key file {}: {e}", path.display()))?;
        let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
        self.add_seed(&Secret::new(line)).map_err(|e| format!("sealing key file {}: {e}", path.display()))
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The public keys, for logs and for the gateway's configuration.
    pub fn public_keys(&self) -> Vec<String> {
        let mut v: Vec<String> = self.keys.keys().cloned().collect();
        v.sort();
        v
    }

    /// Open a sealed password.
    pub fn open(&self, s: &SealedCredentials) -> Result<Secret, OpenError> {
        let key = self.keys.get(&s.key).ok_or_else(|| OpenError::UnknownKey(s.key.clone()))?;
        let sender = public_key(&s.sender).map_err(OpenError::Invalid)?;
        let boxed = B64.decode(s.sealed.as_bytes()).map_err(|e| OpenError::Invalid(format!("not base64: {e}")))?;
        let plain = key.open(&boxed, &sender).map_err(|e| OpenError::Invalid(e.to_string()))?;
        String::from_utf8(plain).map(Secret::new).map_err(|_| OpenError::Invalid("the password is not UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_and_open_with_rotation() {
        let (seed1, pub1) = generate();
        let (seed2, pub2) = generate();
        let mut keys = SealingKeys::default();
        assert_eq!(keys.add_seed(&seed1).unwrap(), pub1);
        let s = seal("admin", &Secret::new("hunter2"), &public_key(&pub1).unwrap()).unwrap();
        assert_eq!(s.key, pub1);
        assert!(!s.sealed.contains("hunter2") && !format!("{s:?}").contains("hunter2"));
        assert_eq!(keys.open(&s).unwrap().expose(), "hunter2");
        // Sealed to a key this worker does not hold yet, then after rotation.
        let s2 = seal("admin", &Secret::new("pw2"), &public_key(&pub2).unwrap()).unwrap();
        assert!(matches!(keys.open(&s2), Err(OpenError::UnknownKey(_))));
        keys.add_seed(&seed2).unwrap();
        assert_eq!(keys.open(&s2).unwrap().expose(), "pw2");
        assert_eq!(keys.open(&s).unwrap().expose(), "hunter2", "old boxes still open");
        // Two seals of one password differ (fresh sender and nonce).
        assert_ne!(seal("admin", &Secret::new("hunter2"), &public_key(&pub1).unwrap()).unwrap().sealed, s.sealed);
    }

    #[test]
    fn tampering_is_an_error_not_a_panic() {
        let (seed1, pub1) = generate();
        let mut keys = SealingKeys::default();
        keys.add_seed(&seed1).unwrap();
        let good = seal("admin", &Secret::new("hunter2"), &public_key(&pub1).unwrap()).unwrap();
        let mut raw = B64.decode(&good.sealed).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        for bad in [
            SealedCredentials { sealed: B64.encode(&raw), ..good.clone() },
            SealedCredentials { sealed: "!!!".into(), ..good.clone() },
            SealedCredentials { sealed: B64.encode(b"xkv1"), ..good.clone() },
            SealedCredentials { sealed: String::new(), ..good.clone() },
            SealedCredentials { sender: "Xnope".into(), ..good.clone() },
            SealedCredentials { sender: generate().1, ..good.clone() },
        ] {
            assert!(matches!(keys.open(&bad), Err(OpenError::Invalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn key_formats_are_checked() {
        let (seed1, pub1) = generate();
        assert!(seed1.expose().starts_with("SX") && pub1.starts_with('X'));
        assert!(public_key(&pub1).is_ok());
        assert!(public_key(seed1.expose()).is_err());
        assert!(public_key("XABC").is_err());
        assert!(public_key("UABC").is_err());
        let mut keys = SealingKeys::default();
        assert!(keys.add_seed(&Secret::new(pub1.clone())).is_err());
        assert!(keys.add_seed(&Secret::new("SXnope")).is_err());
        let dir = tempdir();
        let path = dir.join("seed");
        std::fs::write(&path, format!("{}\n", seed1.expose())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(keys.add_file(&path).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(keys.add_file(&path).unwrap(), pub1);
        assert!(!format!("{keys:?}").contains(seed1.expose()));
        std::fs::remove_dir_all(dir).ok();
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("bmcfleet-sealing-{}-{}", std::process::id(), ulid_like()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn ulid_like() -> u128 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    }
}
