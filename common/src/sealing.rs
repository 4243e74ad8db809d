//! Sealing BMC passwords for the workers (NATS xkeys: X25519 +
//! XSalsa20-Poly1305 boxes, format `xkv1`: the 4 bytes `xkv1`, a 24-byte
//! random nonce, then the box).
//!
//! Workers hold one or more xkey seeds (`SX...`); the gateway and `bmcctl
//! cred put` hold only the matching public key (`X...`). A box names its
//! recipient (`key`) and its sender (`sender`) and nothing else; only a
//! worker with the recipient's seed (or whoever holds the sender's secret)
//! can open it. Several seeds make key rotation possible: a worker opens a
//! box with the seed whose public key the box names.
//!
//! Cost: an X25519 key agreement is the expensive step (~50 µs; a fresh key
//! pair costs another). [`seal`] uses a one-off sender key per box (for
//! `bmcctl`). A gateway seals every inline password, so it uses a [`Sealer`]:
//! one sender key whose key agreement with the workers' key is computed once
//! and reused with a fresh random nonce per box, replaced every
//! [`SENDER_KEY_LIFETIME`] or [`SENDER_KEY_MAX_USES`] boxes and never written
//! anywhere. Workers keep the agreed keys of recent senders
//! ([`SealingKeys::open`]), so opening a box is one XSalsa20-Poly1305 pass.
//! Boxes keep the nkeys `xkv1` format either way: `nkeys::XKey::open` opens
//! a `Sealer`'s box and [`SealingKeys::open`] opens one made by `nkeys`.

use base64::Engine as _;
use bmcfleet_schema::{Secret, SealedCredentials};
use crypto_box::aead::{Aead, AeadCore, OsRng};
use crypto_box::SalsaBox;
use nkeys::XKey;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const XKV1: &[u8] = b"xkv1";
const NONCE_LEN: usize = 24;

/// How long a [`Sealer`] uses one sender key.
pub const SENDER_KEY_LIFETIME: Duration = Duration::from_secs(600);
/// How many boxes a [`Sealer`] seals with one sender key.
pub const SENDER_KEY_MAX_USES: u64 = 1_000_000;
/// How many (recipient, sender) agreed keys a worker keeps.
const OPEN_CACHE_ENTRIES: usize = 1024;

/// Why a sealed password could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no sealing key for public key {0} on this worker")]
    UnknownKey(String),
    #[error("the sealed box is malformed or was not sealed to this key: {0}")]
    Invalid(String),
}

/// A key, a seed or a key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("`{0}` is not a public xkey (X...; `bmcctl keygen` prints one)")]
    NotPublic(String),
    #[error("`{key}` is not a valid public xkey: {reason}")]
    InvalidPublic { key: String, reason: String },
    #[error("a sealing key seed starts with SX (`bmcctl keygen` writes one)")]
    NotSeed,
    #[error("invalid sealing key seed: {0}")]
    InvalidSeed(String),
    #[error("not an nkey: {0}")]
    Encoding(String),
    #[error("sealing key file {}: {source}", path.display())]
    Unreadable { path: std::path::PathBuf, source: std::io::Error },
    #[error("sealing key file {} is readable by others (mode {mode:o}); chmod 600 it", path.display())]
    Exposed { path: std::path::PathBuf, mode: u32 },
    #[error("sealing key file {}: {source}", path.display())]
    InFile { path: std::path::PathBuf, source: Box<KeyError> },
    /// The cipher refused (never expected with valid keys).
    #[error("cannot seal: {0}")]
    Seal(String),
}

/// A public xkey (`X...`), checked.
pub fn public_key(s: &str) -> Result<XKey, KeyError> {
    let s = s.trim();
    if !s.starts_with('X') {
        return Err(KeyError::NotPublic(s.to_owned()));
    }
    XKey::from_public_key(s).map_err(|e| KeyError::InvalidPublic { key: s.to_owned(), reason: e.to_string() })
}

fn seed(s: &str) -> Result<XKey, KeyError> {
    let s = s.trim();
    if !s.starts_with("SX") {
        return Err(KeyError::NotSeed);
    }
    XKey::from_seed(s).map_err(|e| KeyError::InvalidSeed(e.to_string()))
}

/// A new key pair: (seed `SX...`, public key `X...`).
pub fn generate() -> (Secret, String) {
    let k = XKey::new();
    (Secret::new(k.seed().expect("a generated xkey has a seed")), k.public_key())
}

/// The 32 raw bytes inside an nkeys-encoded key (base32 of prefix bytes,
/// the key and a CRC16, already checked by `nkeys`).
fn raw_key(encoded: &str, prefix_len: usize) -> Result<[u8; 32], KeyError> {
    let bytes = data_encoding::BASE32_NOPAD.decode(encoded.as_bytes()).map_err(|e| KeyError::Encoding(e.to_string()))?;
    bytes
        .get(prefix_len..prefix_len + 32)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| KeyError::Encoding("wrong length".to_owned()))
}

fn raw_public(key: &XKey) -> Result<crypto_box::PublicKey, KeyError> {
    raw_key(&key.public_key(), 1).map(crypto_box::PublicKey::from)
}

fn raw_secret(key: &XKey) -> Result<crypto_box::SecretKey, KeyError> {
    let seed = key.seed().map_err(|e| KeyError::InvalidSeed(e.to_string()))?;
    raw_key(&seed, 2).map(crypto_box::SecretKey::from)
}

/// `xkv1 ‖ nonce ‖ box`, as `nkeys::XKey::seal` writes it.
fn seal_with(agreed: &SalsaBox, plain: &[u8]) -> Result<Vec<u8>, KeyError> {
    let nonce = SalsaBox::generate_nonce(&mut OsRng);
    let boxed = agreed.encrypt(&nonce, plain).map_err(|_| KeyError::Seal("the cipher refused".to_owned()))?;
    let mut out = Vec::with_capacity(XKV1.len() + NONCE_LEN + boxed.len());
    out.extend_from_slice(XKV1);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&boxed);
    Ok(out)
}

/// Seal `password` to `recipient` (the workers' public key) with a one-off
/// sender key (two X25519 operations; a gateway uses a [`Sealer`]).
pub fn seal(username: &str, password: &Secret, recipient: &XKey) -> Result<SealedCredentials, KeyError> {
    let sender = XKey::new();
    let sealed = sender.seal(password.expose().as_bytes(), recipient).map_err(|e| KeyError::Seal(e.to_string()))?;
    Ok(SealedCredentials {
        username: username.to_owned(),
        key: recipient.public_key(),
        sender: sender.public_key(),
        sealed: B64.encode(sealed),
    })
}

/// One sender key and its key agreement with the recipient.
struct SenderKey {
    public: String,
    agreed: Arc<SalsaBox>,
    born: Instant,
    uses: u64,
}

impl SenderKey {
    fn new(recipient: &crypto_box::PublicKey) -> SenderKey {
        let secret = crypto_box::SecretKey::generate(&mut OsRng);
        let public = XKey::new_from_raw(secret.to_bytes()).public_key();
        SenderKey { public, agreed: Arc::new(SalsaBox::new(recipient, &secret)), born: Instant::now(), uses: 0 }
    }
}

/// Seals passwords to one recipient (the workers' public key), reusing a
/// sender key and its key agreement for a bounded time and number of boxes.
/// The sender's secret lives only in this process's memory, which sees the
/// passwords in clear anyway.
pub struct Sealer {
    recipient: String,
    recipient_raw: crypto_box::PublicKey,
    lifetime: Duration,
    max_uses: u64,
    current: Mutex<Option<SenderKey>>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("recipient", &self.recipient).finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer for `recipient`, a public xkey (`X...`).
    pub fn new(recipient: &str) -> Result<Sealer, KeyError> {
        Sealer::with_rotation(recipient, SENDER_KEY_LIFETIME, SENDER_KEY_MAX_USES)
    }

    /// As [`Sealer::new`], replacing the sender key after `lifetime` or `max_uses` boxes.
    pub fn with_rotation(recipient: &str, lifetime: Duration, max_uses: u64) -> Result<Sealer, KeyError> {
        let key = public_key(recipient)?;
        Ok(Sealer {
            recipient: key.public_key(),
            recipient_raw: raw_public(&key)?,
            lifetime,
            max_uses: max_uses.max(1),
            current: Mutex::new(None),
        })
    }

    /// The recipient's public key.
    pub fn recipient(&self) -> &str {
        &self.recipient
    }

    /// Seal one password.
    pub fn seal(&self, username: &str, password: &Secret) -> Result<SealedCredentials, KeyError> {
        let (sender, agreed) = {
            let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            let stale = current.as_ref().is_none_or(|k| k.uses >= self.max_uses || k.born.elapsed() >= self.lifetime);
            if stale {
                *current = Some(SenderKey::new(&self.recipient_raw));
            }
            let k = current.as_mut().expect("set above");
            k.uses += 1;
            (k.public.clone(), k.agreed.clone())
        };
        let sealed = seal_with(&agreed, password.expose().as_bytes())?;
        Ok(SealedCredentials { username: username.to_owned(), key: self.recipient.clone(), sender, sealed: B64.encode(sealed) })
    }
}

/// The seeds a worker opens sealed credentials with, by public key.
#[derive(Default)]
pub struct SealingKeys {
    keys: HashMap<String, XKey>,
    /// Key agreements of recent (recipient, sender) pairs.
    agreed: Mutex<HashMap<(String, String), Arc<SalsaBox>>>,
}

impl std::fmt::Debug for SealingKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealingKeys").field("public_keys", &self.keys.keys().collect::<Vec<_>>()).finish()
    }
}

impl SealingKeys {
    /// Add a seed (`SX...`).
    pub fn add_seed(&mut self, seed_text: &Secret) -> Result<String, KeyError> {
        let k = seed(seed_text.expose())?;
        let public = k.public_key();
        self.keys.insert(public.clone(), k);
        Ok(public)
    }

    /// Add the seed in a file (first non-empty line). The file must not be
    /// readable by others (group read is allowed: Kubernetes mounts Secrets
    /// owned by the pod's fsGroup).
    pub fn add_file(&mut self, path: &Path) -> Result<String, KeyError> {
        let unreadable = |source| KeyError::Unreadable { path: path.to_owned(), source };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path).map_err(unreadable)?.permissions().mode();
            if mode & 0o007 != 0 {
                return Err(KeyError::Exposed { path: path.to_owned(), mode: mode & 0o777 });
            }
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
        self.add_seed(&Secret::new(line)).map_err(|e| KeyError::InFile { path: path.to_owned(), source: Box::new(e) })
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
        let boxed = B64.decode(s.sealed.as_bytes()).map_err(|e| OpenError::Invalid(format!("not base64: {e}")))?;
        let rest = boxed.strip_prefix(XKV1).ok_or_else(|| OpenError::Invalid("not an xkv1 box".into()))?;
        if rest.len() <= NONCE_LEN {
            return Err(OpenError::Invalid("the box is too short".into()));
        }
        let (nonce, boxed) = rest.split_at(NONCE_LEN);
        let agreed = self.agreed(key, &s.key, &s.sender)?;
        let plain = agreed.decrypt(nonce.into(), boxed).map_err(|_| OpenError::Invalid("cannot decrypt the box".into()))?;
        String::from_utf8(plain).map(Secret::new).map_err(|_| OpenError::Invalid("the password is not UTF-8".into()))
    }

    /// The key agreement of `recipient` (held here as `key`) and `sender`, cached.
    fn agreed(&self, key: &XKey, recipient: &str, sender: &str) -> Result<Arc<SalsaBox>, OpenError> {
        let id = (recipient.to_owned(), sender.to_owned());
        if let Some(b) = self.agreed.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(b.clone());
        }
        let sender_key = public_key(sender).map_err(|e| OpenError::Invalid(e.to_string()))?;
        let agreed = Arc::new(SalsaBox::new(&raw_public(&sender_key).map_err(|e| OpenError::Invalid(e.to_string()))?, &raw_secret(key).map_err(|e| OpenError::Invalid(e.to_string()))?));
        let mut cache = self.agreed.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= OPEN_CACHE_ENTRIES {
            // One-off senders (`bmcctl`) fill it; gateways' keys come right back.
            cache.clear();
        }
        cache.insert(id, agreed.clone());
        Ok(agreed)
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
    fn sealer_boxes_are_xkv1_both_ways_and_rotate() {
        let (seed, public) = generate();
        let mut keys = SealingKeys::default();
        keys.add_seed(&seed).unwrap();
        let worker = XKey::from_seed(seed.expose()).unwrap();
        let sealer = Sealer::with_rotation(&public, Duration::from_secs(3600), 3).unwrap();
        assert_eq!(sealer.recipient(), public);
        let boxes: Vec<_> = (0..4).map(|i| sealer.seal("admin", &Secret::new(format!("pw{i}"))).unwrap()).collect();
        for (i, b) in boxes.iter().enumerate() {
            assert_eq!(b.key, public);
            assert_eq!(keys.open(b).unwrap().expose(), format!("pw{i}"));
            // nkeys itself opens a Sealer's box: the format is xkv1.
            let raw = B64.decode(&b.sealed).unwrap();
            let sender = XKey::from_public_key(&b.sender).unwrap();
            assert_eq!(worker.open(&raw, &sender).unwrap(), format!("pw{i}").into_bytes());
        }
        // One sender key for max_uses boxes, then a new one; a fresh nonce per box.
        assert!(boxes[0].sender == boxes[1].sender && boxes[1].sender == boxes[2].sender);
        assert_ne!(boxes[2].sender, boxes[3].sender);
        let again = sealer.seal("admin", &Secret::new("pw0")).unwrap();
        assert_eq!(again.sender, boxes[3].sender);
        assert_ne!(again.sealed, boxes[0].sealed);
        // A zero lifetime means a new sender key for every box.
        let short = Sealer::with_rotation(&public, Duration::ZERO, 1000).unwrap();
        let (a, b) = (short.seal("u", &Secret::new("x")).unwrap(), short.seal("u", &Secret::new("x")).unwrap());
        assert_ne!(a.sender, b.sender);
        assert_eq!(keys.open(&b).unwrap().expose(), "x");
        // nkeys' own one-off seal opens here too (cached agreement or not).
        let recipient = public_key(&public).unwrap();
        for _ in 0..2 {
            let s = seal("admin", &Secret::new("hunter2"), &recipient).unwrap();
            assert_eq!(keys.open(&s).unwrap().expose(), "hunter2");
            assert_eq!(keys.open(&s).unwrap().expose(), "hunter2");
        }
        assert!(Sealer::new(seed.expose()).is_err());
    }

    #[test]
    fn a_cached_agreement_does_not_open_a_box_for_another_key() {
        let (seed1, pub1) = generate();
        let (seed2, pub2) = generate();
        let mut keys = SealingKeys::default();
        keys.add_seed(&seed1).unwrap();
        keys.add_seed(&seed2).unwrap();
        let s1 = Sealer::new(&pub1).unwrap().seal("a", &Secret::new("one")).unwrap();
        assert_eq!(keys.open(&s1).unwrap().expose(), "one");
        // Same sender, box relabelled as sealed to the other key: refused.
        let relabelled = SealedCredentials { key: pub2.clone(), ..s1.clone() };
        assert!(matches!(keys.open(&relabelled), Err(OpenError::Invalid(_))));
        assert_eq!(keys.open(&s1).unwrap().expose(), "one");
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
        assert!(keys.add_file(&path).unwrap_err().to_string().contains("chmod 600"));
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
