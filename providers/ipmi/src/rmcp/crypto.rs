//! Cipher-suite cryptography of RMCP+ (IPMI v2.0 §13.28–13.29, §13.31–13.32,
//! and errata 4 for the SHA-256 algorithms), on RustCrypto primitives.
//!
//! | suite | authentication (RAKP) | integrity | confidentiality |
//! |---|---|---|---|
//! | 1 | RAKP-HMAC-SHA1 | none | none |
//! | 2 | RAKP-HMAC-SHA1 | HMAC-SHA1-96 | none |
//! | 3 | RAKP-HMAC-SHA1 | HMAC-SHA1-96 | AES-CBC-128 |
//! | 17 | RAKP-HMAC-SHA256 | HMAC-SHA256-128 | AES-CBC-128 |
//!
//! Keys: `Kuid` is the user's password, zero-padded to 20 bytes (the
//! length the spec gives IPMI 2.0 passwords); without a BMC key (`Kg`) the
//! SIK is keyed with `Kuid`. `K1`/`K2` are the HMAC (with the suite's
//! hash) of twenty `0x01` / `0x02` bytes keyed with the SIK; AES uses the
//! first 16 bytes of `K2`. Comparisons of received codes are constant-time.

use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use hmac::{Hmac, Mac};

/// AES block (and IV) length.
pub(crate) const AES_BLOCK: usize = 16;

/// A cipher suite bmcfleet can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// RAKP-HMAC-SHA1, no integrity, no confidentiality.
    S1,
    /// RAKP-HMAC-SHA1, HMAC-SHA1-96, no confidentiality.
    S2,
    /// RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128.
    S3,
    /// RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128.
    S17,
}

impl CipherSuite {
    /// Every suite, strongest first.
    pub const ALL: [CipherSuite; 4] = [CipherSuite::S17, CipherSuite::S3, CipherSuite::S2, CipherSuite::S1];

    /// The suite with this IPMI id (1, 2, 3 or 17).
    pub fn from_id(id: u8) -> Option<CipherSuite> {
        CipherSuite::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The suite an Open Session Response's algorithms form, if any of
    /// ours (RAKP "none" and unknown numbers form none).
    pub(crate) fn from_algorithms(a: super::wire::Algorithms) -> Option<CipherSuite> {
        CipherSuite::ALL.into_iter().find(|s| {
            [s.auth_alg(), s.integrity_alg(), s.confidentiality_alg()] == [a.auth, a.integrity, a.confidentiality]
        })
    }

    /// Its IPMI id.
    pub fn id(self) -> u8 {
        match self {
            CipherSuite::S1 => 1,
            CipherSuite::S2 => 2,
            CipherSuite::S3 => 3,
            CipherSuite::S17 => 17,
        }
    }

    /// The authentication (RAKP) hash.
    pub(crate) fn hash(self) -> Hash {
        match self {
            CipherSuite::S17 => Hash::Sha256,
            _ => Hash::Sha1,
        }
    }

    /// Authentication algorithm number (§13.28): 1 RAKP-HMAC-SHA1, 3 RAKP-HMAC-SHA256.
    pub(crate) fn auth_alg(self) -> u8 {
        match self.hash() {
            Hash::Sha1 => 0x01,
            Hash::Sha256 => 0x03,
        }
    }

    /// Integrity algorithm number (§13.28.4): 0 none, 1 HMAC-SHA1-96, 4 HMAC-SHA256-128.
    pub(crate) fn integrity_alg(self) -> u8 {
        match self {
            CipherSuite::S1 => 0x00,
            CipherSuite::S2 | CipherSuite::S3 => 0x01,
            CipherSuite::S17 => 0x04,
        }
    }

    /// Confidentiality algorithm number (§13.28.5): 0 none, 1 AES-CBC-128.
    pub(crate) fn confidentiality_alg(self) -> u8 {
        match self {
            CipherSuite::S1 | CipherSuite::S2 => 0x00,
            CipherSuite::S3 | CipherSuite::S17 => 0x01,
        }
    }

    /// Length of a message's integrity code (AuthCode): 0, 12 or 16.
    pub(crate) fn icv_len(self) -> usize {
        match self.integrity_alg() {
            0x01 => 12,
            0x04 => 16,
            _ => 0,
        }
    }

    /// Length of the RAKP 4 integrity check value: 12 (SHA1-96) or 16 (SHA256-128).
    pub(crate) fn rakp4_icv_len(self) -> usize {
        match self.hash() {
            Hash::Sha1 => 12,
            Hash::Sha256 => 16,
        }
    }

    pub(crate) fn encrypts(self) -> bool {
        self.confidentiality_alg() != 0
    }
}

impl std::fmt::Display for CipherSuite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cipher suite {}", self.id())
    }
}

/// The hash of a suite's HMACs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hash {
    Sha1,
    Sha256,
}

impl Hash {
    pub(crate) fn len(self) -> usize {
        match self {
            Hash::Sha1 => 20,
            Hash::Sha256 => 32,
        }
    }

    /// HMAC of the concatenated `parts` keyed with `key`.
    pub(crate) fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
            for p in parts {
                mac.update(p);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Hash::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts),
            Hash::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
        }
    }

    /// Whether `code` equals the first `code.len()` bytes of the HMAC of
    /// `parts` (constant-time); an empty `code` never matches.
    pub(crate) fn verify(self, key: &[u8], parts: &[&[u8]], code: &[u8]) -> bool {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]], code: &[u8]) -> bool {
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
            for p in parts {
                mac.update(p);
            }
            !code.is_empty() && mac.verify_truncated_left(code).is_ok()
        }
        match self {
            Hash::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts, code),
            Hash::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts, code),
        }
    }
}

/// `Kuid`: the password zero-padded to 20 bytes.
pub(crate) fn kuid(password: &[u8]) -> [u8; 20] {
    let mut k = [0u8; 20];
    let n = password.len().min(20);
    k[..n].copy_from_slice(&password[..n]);
    k
}

/// The keys of an established session.
#[derive(Clone)]
pub(crate) struct SessionKeys {
    pub suite: CipherSuite,
    /// Integrity key.
    pub k1: Vec<u8>,
    /// AES-128 key (first 16 bytes of K2).
    pub aes: [u8; 16],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeys").field("suite", &self.suite).finish_non_exhaustive()
    }
}

impl SessionKeys {
    /// K1 and K2 from the session integrity key.
    pub(crate) fn derive(suite: CipherSuite, sik: &[u8]) -> SessionKeys {
        let hash = suite.hash();
        let k1 = hash.hmac(sik, &[&[0x01; 20]]);
        let k2 = hash.hmac(sik, &[&[0x02; 20]]);
        let mut aes = [0u8; 16];
        aes.copy_from_slice(&k2[..16]);
        SessionKeys { suite, k1, aes }
    }

    /// The AuthCode of a message (`signed` runs from the auth type byte to
    /// the next-header byte).
    pub(crate) fn auth_code(&self, signed: &[u8]) -> Vec<u8> {
        let mut code = self.suite.hash().hmac(&self.k1, &[signed]);
        code.truncate(self.suite.icv_len());
        code
    }

    pub(crate) fn check_auth_code(&self, signed: &[u8], code: &[u8]) -> bool {
        code.len() == self.suite.icv_len() && self.suite.hash().verify(&self.k1, &[signed], code)
    }

    /// AES-CBC-128 with a fresh random IV and the IPMI confidentiality pad
    /// (1, 2, 3, … then the pad length): IV ‖ ciphertext.
    pub(crate) fn encrypt(&self, plain: &[u8], iv: [u8; AES_BLOCK]) -> Vec<u8> {
        let pad = (AES_BLOCK - (plain.len() + 1) % AES_BLOCK) % AES_BLOCK;
        let mut buf = Vec::with_capacity(AES_BLOCK + plain.len() + pad + 1);
        buf.extend_from_slice(&iv);
        buf.extend_from_slice(plain);
        buf.extend((1..=pad).map(|i| i as u8));
        buf.push(pad as u8);
        cbc_encrypt(&self.aes, &iv, &mut buf[AES_BLOCK..]);
        buf
    }

    /// The inverse of [`Self::encrypt`]; `None` when the length, the pad or
    /// the pad length is wrong.
    pub(crate) fn decrypt(&self, data: &[u8]) -> Option<Vec<u8>> {
        if data.len() < 2 * AES_BLOCK || !data.len().is_multiple_of(AES_BLOCK) {
            return None;
        }
        let (iv, body) = data.split_at(AES_BLOCK);
        let iv: [u8; AES_BLOCK] = iv.try_into().ok()?;
        let mut plain = body.to_vec();
        cbc_decrypt(&self.aes, &iv, &mut plain)?;
        let pad = usize::from(*plain.last()?);
        if pad >= AES_BLOCK || pad + 1 > plain.len() {
            return None;
        }
        let end = plain.len() - 1 - pad;
        if plain[end..plain.len() - 1].iter().enumerate().any(|(i, b)| usize::from(*b) != i + 1) {
            return None;
        }
        plain.truncate(end);
        Some(plain)
    }
}

/// AES-128-CBC in place over whole blocks.
fn cbc_encrypt(key: &[u8; 16], iv: &[u8; AES_BLOCK], blocks: &mut [u8]) {
    let len = blocks.len();
    cbc::Encryptor::<aes::Aes128>::new(key.into(), iv.into())
        .encrypt_padded_mut::<aes::cipher::block_padding::NoPadding>(blocks, len)
        .expect("whole blocks");
}

fn cbc_decrypt(key: &[u8; 16], iv: &[u8; AES_BLOCK], blocks: &mut [u8]) -> Option<()> {
    cbc::Decryptor::<aes::Aes128>::new(key.into(), iv.into())
        .decrypt_padded_mut::<aes::cipher::block_padding::NoPadding>(blocks)
        .ok()
        .map(|_| ())
}

/// 16 random bytes (console random number, IVs).
pub(crate) fn random16() -> [u8; 16] {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).expect("the OS random source works");
    b
}

/// A random non-zero u32 (console session ids).
pub(crate) fn random_u32() -> u32 {
    loop {
        let mut b = [0u8; 4];
        getrandom::getrandom(&mut b).expect("the OS random source works");
        let v = u32::from_le_bytes(b);
        if v != 0 {
            return v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_ids_and_algorithms() {
        for id in [1u8, 2, 3, 17] {
            assert_eq!(CipherSuite::from_id(id).unwrap().id(), id);
        }
        assert_eq!(CipherSuite::from_id(0), None);
        assert_eq!(CipherSuite::from_id(16), None);
        let s = CipherSuite::S17;
        assert_eq!(
            (s.auth_alg(), s.integrity_alg(), s.confidentiality_alg(), s.icv_len(), s.rakp4_icv_len()),
            (3, 4, 1, 16, 16)
        );
        let s = CipherSuite::S3;
        assert_eq!(
            (s.auth_alg(), s.integrity_alg(), s.confidentiality_alg(), s.icv_len(), s.rakp4_icv_len()),
            (1, 1, 1, 12, 12)
        );
    }

    /// RFC 2202 / RFC 4231 test case 2 ("Jefe").
    #[test]
    fn hmac_matches_the_rfc_vectors() {
        let sha1 = Hash::Sha1.hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(hex(&sha1), "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
        let sha256 = Hash::Sha256.hmac(b"Jefe", &[b"what do ya want for nothing?"]);
        assert_eq!(hex(&sha256), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert!(Hash::Sha256.verify(b"Jefe", &[b"what do ya want for nothing?"], &sha256[..16]));
        assert!(!Hash::Sha256.verify(b"jefe", &[b"what do ya want for nothing?"], &sha256[..16]));
        assert!(!Hash::Sha1.verify(b"Jefe", &[b"x"], &[]));
    }

    /// SP 800-38A F.2.1 (CBC-AES128.Encrypt), first two blocks.
    #[test]
    fn aes_cbc_matches_sp800_38a() {
        let key: [u8; 16] = hex_bytes("2b7e151628aed2a6abf7158809cf4f3c").try_into().unwrap();
        let iv: [u8; 16] = hex_bytes("000102030405060708090a0b0c0d0e0f").try_into().unwrap();
        let mut data = hex_bytes("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51");
        cbc_encrypt(&key, &iv, &mut data);
        assert_eq!(hex(&data), "7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b2");
        cbc_decrypt(&key, &iv, &mut data).unwrap();
        assert_eq!(hex(&data[..16]), "6bc1bee22e409f96e93d7e117393172a");
    }

    #[test]
    fn the_confidentiality_pad_round_trips_and_is_checked() {
        let keys = SessionKeys { suite: CipherSuite::S3, k1: vec![], aes: [9; 16] };
        for n in 0..40u8 {
            let msg: Vec<u8> = (0..n).collect();
            let out = keys.encrypt(&msg, random16());
            assert_eq!(out.len() % 16, 0);
            assert_eq!(out.len(), 16 + (usize::from(n) + 1).div_ceil(16) * 16);
            assert_eq!(keys.decrypt(&out).unwrap(), msg, "length {n}");
        }
        // A wrong key yields a pad that does not check out (for this message: verified).
        let other = SessionKeys { suite: CipherSuite::S3, k1: vec![], aes: [8; 16] };
        let out = keys.encrypt(b"abc", [1; 16]);
        assert!(other.decrypt(&out).is_none());
        assert!(keys.decrypt(&out[..16]).is_none());
        assert!(keys.decrypt(&out[..out.len() - 1]).is_none());
    }

    #[test]
    fn kuid_pads_and_truncates() {
        assert_eq!(&kuid(b"pw")[..3], b"pw\0");
        assert_eq!(kuid(&[7u8; 25]), [7u8; 20]);
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn hex_bytes(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
