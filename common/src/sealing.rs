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
//!
//! # Bound boxes
//! What is sealed is not the bare password but the password *with its use*
//! ([`Binding`]): the context (`bmc:<target key>` for a batch's target,
//! `cred:<name>` for a named credential in the bucket), the user name and,
//! for boxes that travel in batches, an expiry. The worker opens a box only
//! for the use it was sealed for ([`SealingKeys::open`] with the expected
//! context), so a box captured from one batch and resubmitted against
//! another host, for another user or after its expiry opens to nothing
//! (`credential_unavailable`, nothing sent). Boxes from before binding (the
//! bare password) are accepted only as named credentials in the bucket,
//! which the machine registry binds to their machines, and never in a batch.

use base64::Engine as _;
use bmcfleet_schema::{SealedCredentials, Secret};
use crypto_box::aead::{Aead, AeadCore, OsRng};
use crypto_box::SalsaBox;
use nkeys::XKey;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const XKV1: &[u8] = b"xkv1";
/// Start of a bound plaintext (then JSON [`Bound`]).
const BOUND_V1: &[u8] = b"bmcfleet-bound-1\n";
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
    #[error("the sealed box is for another use ({0}); a box opens only for the target, user and credential it was sealed for")]
    WrongUse(String),
    #[error("the sealed box expired {0} ms ago")]
    Expired(u64),
    #[error("the sealed box is not bound to a use (sealed by an older bmcctl or gateway); seal it again")]
    Unbound,
    #[error(
        "the sealed box carries no expiry; a box in a batch must (seal it with one, as the gateway and bmcctl do)"
    )]
    NoExpiry,
}

/// Whether a box for `context` must carry an expiry: every box that travels
/// in a batch (a target's password, a sealed parameter) does; a named
/// credential (`cred:`) is rotated by the operator instead.
fn must_expire(context: &str) -> bool {
    !context.starts_with("cred:")
}

/// The one use a sealed box may be opened for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub context: String,
    /// Unix ms after which the box does not open (`None`: rotated by the operator).
    pub expires_at_ms: Option<u64>,
}

impl Binding {
    /// A BMC password for the target whose ordering key is `key`, until `expires_at_ms`.
    pub fn target(key: &bmcfleet_schema::BmcKey, expires_at_ms: u64) -> Binding {
        Binding { context: format!("bmc:{key}"), expires_at_ms: Some(expires_at_ms) }
    }

    /// A named credential in the credentials bucket.
    pub fn credential(name: &str) -> Binding {
        Binding { context: format!("cred:{name}"), expires_at_ms: None }
    }

    /// A secret parameter (`field`) of action `index` of batch `batch`, until `expires_at_ms`.
    pub fn param(batch: &str, index: u32, field: &str, expires_at_ms: u64) -> Binding {
        Binding { context: format!("param:{batch}:{index}:{field}"), expires_at_ms: Some(expires_at_ms) }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Bound {
    ctx: String,
    user: String,
    exp: Option<u64>,
    secret: String,
}

fn bound_plaintext(username: &str, password: &Secret, binding: &Binding) -> Vec<u8> {
    let bound = Bound {
        ctx: binding.context.clone(),
        user: username.to_owned(),
        exp: binding.expires_at_ms,
        secret: password.expose().to_owned(),
    };
    let mut plain = BOUND_V1.to_vec();
    plain.extend_from_slice(&serde_json::to_vec(&bound).expect("plain JSON"));
    plain
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
    let bytes =
        data_encoding::BASE32_NOPAD.decode(encoded.as_bytes()).map_err(|e| KeyError::Encoding(e.to_string()))?;
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

/// Seal `password` for `binding` to `recipient` (the workers' public key)
/// with a one-off sender key (two X25519 operations; a gateway uses a [`Sealer`]).
pub fn seal(
    username: &str,
    password: &Secret,
    recipient: &XKey,
    binding: &Binding,
) -> Result<SealedCredentials, KeyError> {
    let sender = XKey::new();
    let sealed = sender
        .seal(&bound_plaintext(username, password, binding), recipient)
        .map_err(|e| KeyError::Seal(e.to_string()))?;
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

    /// Seal one password for `binding`.
    pub fn seal(&self, username: &str, password: &Secret, binding: &Binding) -> Result<SealedCredentials, KeyError> {
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
        let sealed = seal_with(&agreed, &bound_plaintext(username, password, binding))?;
        Ok(SealedCredentials {
            username: username.to_owned(),
            key: self.recipient.clone(),
            sender,
            sealed: B64.encode(sealed),
        })
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

    /// Open a box sealed for `context` (see [`Binding`]) and `s.username`,
    /// unless it expired before `now_ms`.
    pub fn open(&self, s: &SealedCredentials, context: &str, now_ms: u64) -> Result<Secret, OpenError> {
        let plain = self.open_raw(s)?;
        let json = plain.strip_prefix(BOUND_V1).ok_or(OpenError::Unbound)?;
        let bound: Bound =
            serde_json::from_slice(json).map_err(|_| OpenError::Invalid("the bound plaintext is malformed".into()))?;
        if bound.ctx != context {
            return Err(OpenError::WrongUse(format!("sealed for `{}`, used for `{context}`", bound.ctx)));
        }
        if bound.user != s.username {
            return Err(OpenError::WrongUse("sealed for another user name".into()));
        }
        match bound.exp {
            Some(exp) if now_ms > exp => return Err(OpenError::Expired(now_ms - exp)),
            // A box without one could be replayed against its target for ever.
            None if must_expire(context) => return Err(OpenError::NoExpiry),
            _ => {}
        }
        Ok(Secret::new(bound.secret))
    }

    /// Open the named credential `name` from the bucket: bound to
    /// `cred:<name>`, or a bare password sealed before binding existed (the
    /// registry binds named credentials to their machines).
    pub fn open_named(&self, s: &SealedCredentials, name: &str) -> Result<Secret, OpenError> {
        match self.open(s, &Binding::credential(name).context, 0) {
            Err(OpenError::Unbound) => {
                let plain = self.open_raw(s)?;
                String::from_utf8(plain)
                    .map(Secret::new)
                    .map_err(|_| OpenError::Invalid("the password is not UTF-8".into()))
            }
            other => other,
        }
    }

    /// The plaintext of a box.
    fn open_raw(&self, s: &SealedCredentials) -> Result<Vec<u8>, OpenError> {
        let key = self.keys.get(&s.key).ok_or_else(|| OpenError::UnknownKey(s.key.clone()))?;
        let boxed = B64.decode(s.sealed.as_bytes()).map_err(|e| OpenError::Invalid(format!("not base64: {e}")))?;
        let rest = boxed.strip_prefix(XKV1).ok_or_else(|| OpenError::Invalid("not an xkv1 box".into()))?;
        if rest.len() <= NONCE_LEN {
            return Err(OpenError::Invalid("the box is too short".into()));
        }
        let (nonce, boxed) = rest.split_at(NONCE_LEN);
        let agreed = self.agreed(key, &s.key, &s.sender)?;
        agreed.decrypt(nonce.into(), boxed).map_err(|_| OpenError::Invalid("cannot decrypt the box".into()))
    }

    /// The key agreement of `recipient` (held here as `key`) and `sender`, cached.
    fn agreed(&self, key: &XKey, recipient: &str, sender: &str) -> Result<Arc<SalsaBox>, OpenError> {
        let id = (recipient.to_owned(), sender.to_owned());
        if let Some(b) = self.agreed.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(b.clone());
        }
        let sender_key = public_key(sender).map_err(|e| OpenError::Invalid(e.to_string()))?;
        let agreed = Arc::new(SalsaBox::new(
            &raw_public(&sender_key).map_err(|e| OpenError::Invalid(e.to_string()))?,
            &raw_secret(key).map_err(|e| OpenError::Invalid(e.to_string()))?,
        ));
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

    const CTX: &str = "bmc:v4-10-0-0-1";

    fn b() -> Binding {
        Binding { context: CTX.into(), expires_at_ms: Some(u64::MAX) }
    }

    /// Open for the use every test seals for.
    trait OpenFor {
        fn open_for(&self, s: &SealedCredentials) -> Result<Secret, OpenError>;
    }

    impl OpenFor for SealingKeys {
        fn open_for(&self, s: &SealedCredentials) -> Result<Secret, OpenError> {
            self.open(s, CTX, 0)
        }
    }

    #[test]
    fn a_box_opens_only_for_its_use() {
        let (seed, public) = generate();
        let mut keys = SealingKeys::default();
        keys.add_seed(&seed).unwrap();
        let key = public_key(&public).unwrap();
        let bound = Binding { context: CTX.into(), expires_at_ms: Some(1_000) };
        let s = seal("admin", &Secret::new("hunter2"), &key, &bound).unwrap();
        assert_eq!(keys.open(&s, CTX, 999).unwrap().expose(), "hunter2");
        // Replayed against another target, for another user, or late.
        assert!(matches!(keys.open(&s, "bmc:v4-127-0-0-1", 999), Err(OpenError::WrongUse(_))));
        let other_user = SealedCredentials { username: "root".into(), ..s.clone() };
        assert!(matches!(keys.open(&other_user, CTX, 999), Err(OpenError::WrongUse(_))));
        assert!(matches!(keys.open(&s, CTX, 1_001), Err(OpenError::Expired(1))));
        // A named credential's box is not a batch's, and the other way round.
        let named = seal("admin", &Secret::new("pw"), &key, &Binding::credential("rack12")).unwrap();
        assert_eq!(keys.open_named(&named, "rack12").unwrap().expose(), "pw");
        assert!(keys.open_named(&named, "rack13").is_err());
        assert!(matches!(keys.open(&named, CTX, 0), Err(OpenError::WrongUse(_))));
        assert!(keys.open_named(&s, "rack12").is_err());
        // A bare (pre-binding) box: only as a named credential.
        let sender = XKey::new();
        let bare = SealedCredentials {
            username: "admin".into(),
            key: public.clone(),
            sender: sender.public_key(),
            sealed: B64.encode(sender.seal(b"old-pw", &key).unwrap()),
        };
        assert!(matches!(keys.open(&bare, CTX, 0), Err(OpenError::Unbound)));
        assert_eq!(keys.open_named(&bare, "rack12").unwrap().expose(), "old-pw");
    }

    #[test]
    fn seal_and_open_with_rotation() {
        let (seed1, pub1) = generate();
        let (seed2, pub2) = generate();
        let mut keys = SealingKeys::default();
        assert_eq!(keys.add_seed(&seed1).unwrap(), pub1);
        let s = seal("admin", &Secret::new("hunter2"), &public_key(&pub1).unwrap(), &b()).unwrap();
        assert_eq!(s.key, pub1);
        assert!(!s.sealed.contains("hunter2") && !format!("{s:?}").contains("hunter2"));
        assert_eq!(keys.open_for(&s).unwrap().expose(), "hunter2");
        // Sealed to a key this worker does not hold yet, then after rotation.
        let s2 = seal("admin", &Secret::new("pw2"), &public_key(&pub2).unwrap(), &b()).unwrap();
        assert!(matches!(keys.open_for(&s2), Err(OpenError::UnknownKey(_))));
        keys.add_seed(&seed2).unwrap();
        assert_eq!(keys.open_for(&s2).unwrap().expose(), "pw2");
        assert_eq!(keys.open_for(&s).unwrap().expose(), "hunter2", "old boxes still open");
        // Two seals of one password differ (fresh sender and nonce).
        assert_ne!(seal("admin", &Secret::new("hunter2"), &public_key(&pub1).unwrap(), &b()).unwrap().sealed, s.sealed);
    }

    #[test]
    fn sealer_boxes_are_xkv1_both_ways_and_rotate() {
        let (seed, public) = generate();
        let mut keys = SealingKeys::default();
        keys.add_seed(&seed).unwrap();
        let worker = XKey::from_seed(seed.expose()).unwrap();
        let sealer = Sealer::with_rotation(&public, Duration::from_secs(3600), 3).unwrap();
        assert_eq!(sealer.recipient(), public);
        let boxes: Vec<_> =
            (0..4).map(|i| sealer.seal("admin", &Secret::new(format!("pw{i}")), &b()).unwrap()).collect();
        for (i, b) in boxes.iter().enumerate() {
            assert_eq!(b.key, public);
            assert_eq!(keys.open_for(b).unwrap().expose(), format!("pw{i}"));
            // nkeys itself opens a Sealer's box: the format is xkv1.
            let raw = B64.decode(&b.sealed).unwrap();
            let sender = XKey::from_public_key(&b.sender).unwrap();
            let plain = worker.open(&raw, &sender).unwrap();
            assert!(
                plain.starts_with(BOUND_V1) && plain.ends_with(format!("\"pw{i}\"}}").as_bytes()),
                "{}",
                String::from_utf8_lossy(&plain)
            );
        }
        // One sender key for max_uses boxes, then a new one; a fresh nonce per box.
        assert!(boxes[0].sender == boxes[1].sender && boxes[1].sender == boxes[2].sender);
        assert_ne!(boxes[2].sender, boxes[3].sender);
        let again = sealer.seal("admin", &Secret::new("pw0"), &b()).unwrap();
        assert_eq!(again.sender, boxes[3].sender);
        assert_ne!(again.sealed, boxes[0].sealed);
        // A zero lifetime means a new sender key for every box.
        let short = Sealer::with_rotation(&public, Duration::ZERO, 1000).unwrap();
        let (first, second) =
            (short.seal("u", &Secret::new("x"), &b()).unwrap(), short.seal("u", &Secret::new("x"), &b()).unwrap());
        assert_ne!(first.sender, second.sender);
        assert_eq!(keys.open_for(&second).unwrap().expose(), "x");
        // nkeys' own one-off seal opens here too (cached agreement or not).
        let recipient = public_key(&public).unwrap();
        for _ in 0..2 {
            let s = seal("admin", &Secret::new("hunter2"), &recipient, &b()).unwrap();
            assert_eq!(keys.open_for(&s).unwrap().expose(), "hunter2");
            assert_eq!(keys.open_for(&s).unwrap().expose(), "hunter2");
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
        let s1 = Sealer::new(&pub1).unwrap().seal("a", &Secret::new("one"), &b()).unwrap();
        assert_eq!(keys.open_for(&s1).unwrap().expose(), "one");
        // Same sender, box relabelled as sealed to the other key: refused.
        let relabelled = SealedCredentials { key: pub2.clone(), ..s1.clone() };
        assert!(matches!(keys.open_for(&relabelled), Err(OpenError::Invalid(_))));
        assert_eq!(keys.open_for(&s1).unwrap().expose(), "one");
    }

    #[test]
    fn tampering_is_an_error_not_a_panic() {
        let (seed1, pub1) = generate();
        let mut keys = SealingKeys::default();
        keys.add_seed(&seed1).unwrap();
        let good = seal("admin", &Secret::new("hunter2"), &public_key(&pub1).unwrap(), &b()).unwrap();
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
            assert!(matches!(keys.open_for(&bad), Err(OpenError::Invalid(_))), "{bad:?}");
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
