//! RMCP+ cryptography of the responder: cipher suites, the RAKP key-exchange
//! authentication codes, session keys (SIK, K1, K2), per-packet integrity
//! and AES-CBC-128 confidentiality.
//!
//! From the IPMI v2.0 rev 1.1 specification (and its errata for SHA-256):
//! - §13.28 algorithm numbers: authentication RAKP-HMAC-SHA1 (1),
//!   RAKP-HMAC-SHA256 (3); integrity HMAC-SHA1-96 (1), HMAC-SHA256-128 (4);
//!   confidentiality AES-CBC-128 (1);
//! - §13.31 RAKP 2/3 codes and the SIK; §13.32 K1/K2 from the constants
//!   `0x01 x 20` and `0x02 x 20` (also 20 bytes under SHA-256);
//! - RAKP 4's integrity check value is the SIK HMAC truncated to the
//!   integrity length: 12 bytes for SHA-1, 16 for SHA-256 (errata);
//! - §13.29 AES-CBC-128 payloads: a random 16-byte IV, then the cipher
//!   text of `payload | 01 02 .. N | N` (N ≤ 15), keyed with K2's first
//!   16 bytes.
//!
//! Only suites 1, 2, 3 and 17 are implemented (no MD5, no RC4, no
//! RAKP-none: suite 0 is never accepted).

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::Sha256;

/// Authentication (RAKP) algorithm numbers (§13.28).
pub const AUTH_RAKP_NONE: u8 = 0x00;
pub const AUTH_HMAC_SHA1: u8 = 0x01;
pub const AUTH_HMAC_SHA256: u8 = 0x03;
/// Integrity algorithm numbers (§13.28).
pub const INTEGRITY_NONE: u8 = 0x00;
pub const INTEGRITY_HMAC_SHA1_96: u8 = 0x01;
pub const INTEGRITY_HMAC_SHA256_128: u8 = 0x04;
/// Confidentiality algorithm numbers (§13.28).
pub const CONF_NONE: u8 = 0x00;
pub const CONF_AES_CBC_128: u8 = 0x01;

/// AES block (and IV) length.
pub const AES_BLOCK: usize = 16;

/// A cipher suite this responder implements (the standard suite table
/// of §22.15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CipherSuite {
    pub id: u8,
    pub auth: u8,
    pub integrity: u8,
    pub confidentiality: u8,
}

/// Every suite the responder can offer, in the order of the standard table.
pub const SUITES: [CipherSuite; 4] = [
    CipherSuite { id: 1, auth: AUTH_HMAC_SHA1, integrity: INTEGRITY_NONE, confidentiality: CONF_NONE },
    CipherSuite { id: 2, auth: AUTH_HMAC_SHA1, integrity: INTEGRITY_HMAC_SHA1_96, confidentiality: CONF_NONE },
    CipherSuite { id: 3, auth: AUTH_HMAC_SHA1, integrity: INTEGRITY_HMAC_SHA1_96, confidentiality: CONF_AES_CBC_128 },
    CipherSuite {
        id: 17,
        auth: AUTH_HMAC_SHA256,
        integrity: INTEGRITY_HMAC_SHA256_128,
        confidentiality: CONF_AES_CBC_128,
    },
];

impl CipherSuite {
    /// The implemented suite with this id.
    pub fn by_id(id: u8) -> Option<CipherSuite> {
        SUITES.iter().copied().find(|s| s.id == id)
    }

    /// The implemented suite made of exactly these algorithms.
    pub fn by_algorithms(auth: u8, integrity: u8, confidentiality: u8) -> Option<CipherSuite> {
        SUITES
            .iter()
            .copied()
            .find(|s| s.auth == auth && s.integrity == integrity && s.confidentiality == confidentiality)
    }

    /// Length of the integrity check value of each session packet (0 when
    /// the suite has no integrity algorithm).
    pub fn icv_len(&self) -> usize {
        integrity_len(self.integrity)
    }

    /// The Get Channel Cipher Suites record (§22.15): start of
    /// record, suite id, then the algorithms tagged 00b/01b/10b in bits 7:6.
    pub fn record(&self) -> [u8; 5] {
        [0xC0, self.id, self.auth, 0x40 | self.integrity, 0x80 | self.confidentiality]
    }
}

/// Length of the integrity check value for an integrity algorithm.
pub fn integrity_len(integrity: u8) -> usize {
    match integrity {
        INTEGRITY_HMAC_SHA1_96 => 12,
        INTEGRITY_HMAC_SHA256_128 => 16,
        _ => 0,
    }
}

/// A digest of up to 32 bytes (HMAC-SHA1: 20, HMAC-SHA256: 32), kept inline
/// so that a session costs no heap allocation for its keys.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    bytes: [u8; 32],
    len: u8,
}

impl Digest {
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    fn from_slice(b: &[u8]) -> Digest {
        let mut bytes = [0u8; 32];
        bytes[..b.len()].copy_from_slice(b);
        Digest { bytes, len: b.len() as u8 }
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys are secrets even in a test double's debug output.
        write!(f, "Digest([{} bytes])", self.len)
    }
}

/// HMAC over the concatenation of `parts` with the hash of an
/// authentication algorithm (SHA-1 for 1, SHA-256 for 3). The key is used as
/// given: a 20-byte zero-padded password and the bare password give the same
/// HMAC (HMAC pads keys with zeros to the 64-byte block).
pub fn hmac(auth: u8, key: &[u8], parts: &[&[u8]]) -> Digest {
    fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Digest {
        let mut mac = <M as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
        for p in parts {
            mac.update(p);
        }
        Digest::from_slice(&mac.finalize().into_bytes())
    }
    match auth {
        AUTH_HMAC_SHA256 => run::<Hmac<Sha256>>(key, parts),
        _ => run::<Hmac<Sha1>>(key, parts),
    }
}

/// Constant-time comparison of `expected` against the first `got.len()`
/// bytes of `mac` (a full or truncated code).
pub fn verify(mac: &Digest, got: &[u8]) -> bool {
    let m = mac.as_slice();
    if got.is_empty() || got.len() > m.len() {
        return false;
    }
    m[..got.len()].iter().zip(got).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Inputs of the key exchange that both sides know after RAKP 1 and 2.
#[derive(Clone, Debug)]
pub struct Exchange<'a> {
    pub auth: u8,
    /// Kuid: the user's password (20 bytes, zero padded).
    pub kuid: &'a [u8],
    /// SIDm, SIDc (remote console and managed system session ids).
    pub sidm: u32,
    pub sidc: u32,
    /// Rm, Rc (remote console and managed system random numbers).
    pub rm: &'a [u8; 16],
    pub rc: &'a [u8; 16],
    pub guid: &'a [u8; 16],
    /// RAKP 1's whole role byte (privilege and the name-only lookup bit).
    pub role: u8,
    pub username: &'a [u8],
}

impl Exchange<'_> {
    fn ulen(&self) -> [u8; 1] {
        [self.username.len() as u8]
    }

    /// RAKP 2 key exchange authentication code (§13.31):
    /// HMAC_Kuid(SIDm | SIDc | Rm | Rc | GUIDc | ROLEm | ULENGTHm | UNAMEm).
    pub fn rakp2_code(&self) -> Digest {
        hmac(
            self.auth,
            self.kuid,
            &[
                &self.sidm.to_le_bytes(),
                &self.sidc.to_le_bytes(),
                self.rm,
                self.rc,
                self.guid,
                &[self.role],
                &self.ulen(),
                self.username,
            ],
        )
    }

    /// RAKP 3 key exchange authentication code the remote console must send:
    /// HMAC_Kuid(Rc | SIDm | ROLEm | ULENGTHm | UNAMEm).
    pub fn rakp3_code(&self) -> Digest {
        hmac(self.auth, self.kuid, &[self.rc, &self.sidm.to_le_bytes(), &[self.role], &self.ulen(), self.username])
    }

    /// Session integrity key: HMAC_KG(Rm | Rc | ROLEm | ULENGTHm | UNAMEm),
    /// KG being Kuid (no BMC key is configured).
    pub fn sik(&self) -> Digest {
        hmac(self.auth, self.kuid, &[self.rm, self.rc, &[self.role], &self.ulen(), self.username])
    }

    /// RAKP 4 integrity check value: HMAC_SIK(Rm | SIDc | GUIDc), truncated
    /// to 12 bytes (SHA-1) or 16 (SHA-256).
    pub fn rakp4_icv(&self, sik: &Digest) -> Digest {
        let full = hmac(self.auth, sik.as_slice(), &[self.rm, &self.sidc.to_le_bytes(), self.guid]);
        let n = if self.auth == AUTH_HMAC_SHA256 { 16 } else { 12 };
        Digest::from_slice(&full.as_slice()[..n])
    }
}

/// The keys of an active session (§13.32).
#[derive(Clone, Copy, Debug)]
pub struct SessionKeys {
    /// K1 = HMAC_SIK(0x01 x 20): the integrity key.
    pub k1: Digest,
    /// First 16 bytes of K2 = HMAC_SIK(0x02 x 20): the AES-128 key.
    pub aes: [u8; 16],
}

impl SessionKeys {
    pub fn derive(auth: u8, sik: &Digest) -> SessionKeys {
        let k1 = hmac(auth, sik.as_slice(), &[&[0x01; 20]]);
        let k2 = hmac(auth, sik.as_slice(), &[&[0x02; 20]]);
        let mut aes = [0u8; 16];
        aes.copy_from_slice(&k2.as_slice()[..16]);
        SessionKeys { k1, aes }
    }

    /// The integrity check value of `data` (from the auth type byte through
    /// the next-header byte), truncated for the integrity algorithm.
    pub fn icv(&self, integrity: u8, data: &[u8]) -> Digest {
        let auth = if integrity == INTEGRITY_HMAC_SHA256_128 { AUTH_HMAC_SHA256 } else { AUTH_HMAC_SHA1 };
        let full = hmac(auth, self.k1.as_slice(), &[data]);
        Digest::from_slice(&full.as_slice()[..integrity_len(integrity)])
    }

    /// AES-CBC-128 payload: `IV | E(payload | 01 02 .. N | N)`.
    pub fn encrypt(&self, iv: [u8; 16], payload: &[u8]) -> Vec<u8> {
        encrypt(&self.aes, iv, payload)
    }

    /// The payload inside an AES-CBC-128 field, or `None` when the field is
    /// not whole blocks or the confidentiality pad is malformed.
    pub fn decrypt(&self, field: &[u8]) -> Option<Vec<u8>> {
        decrypt(&self.aes, field)
    }
}

/// Confidentiality pad length for a payload: `payload + pad + 1` is a
/// multiple of the AES block.
pub fn conf_pad_len(payload_len: usize) -> usize {
    (AES_BLOCK - (payload_len + 1) % AES_BLOCK) % AES_BLOCK
}

pub fn encrypt(key: &[u8; 16], iv: [u8; 16], payload: &[u8]) -> Vec<u8> {
    let pad = conf_pad_len(payload.len());
    let mut out = Vec::with_capacity(AES_BLOCK + payload.len() + pad + 1);
    out.extend_from_slice(&iv);
    out.extend_from_slice(payload);
    out.extend(1..=pad as u8);
    out.push(pad as u8);
    let mut enc = cbc::Encryptor::<aes::Aes128>::new(key.into(), (&iv).into());
    for block in out[AES_BLOCK..].chunks_exact_mut(AES_BLOCK) {
        enc.encrypt_block_mut(GenericArray::from_mut_slice(block));
    }
    out
}

pub fn decrypt(key: &[u8; 16], field: &[u8]) -> Option<Vec<u8>> {
    if field.len() < 2 * AES_BLOCK || !field.len().is_multiple_of(AES_BLOCK) {
        return None;
    }
    let (iv, body) = field.split_at(AES_BLOCK);
    let mut plain = body.to_vec();
    let mut dec = cbc::Decryptor::<aes::Aes128>::new(key.into(), GenericArray::from_slice(iv));
    for block in plain.chunks_exact_mut(AES_BLOCK) {
        dec.decrypt_block_mut(GenericArray::from_mut_slice(block));
    }
    let pad = usize::from(*plain.last()?);
    if pad >= AES_BLOCK || pad + 1 > plain.len() {
        return None;
    }
    let data_len = plain.len() - pad - 1;
    if plain[data_len..data_len + pad].iter().enumerate().any(|(i, b)| usize::from(*b) != i + 1) {
        return None;
    }
    plain.truncate(data_len);
    Some(plain)
}

/// Fills `buf` from the OS random source.
pub fn random(buf: &mut [u8]) {
    getrandom::getrandom(buf).expect("OS random source");
}

/// A random non-zero u32 (session ids; 0 means "no session").
pub fn random_nonzero_u32() -> u32 {
    loop {
        let mut b = [0u8; 4];
        random(&mut b);
        let v = u32::from_le_bytes(b);
        if v != 0 {
            return v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn hmac_matches_rfc_vectors() {
        // RFC 2202 test case 2 (SHA-1) and RFC 4231 test case 2 (SHA-256).
        let sha1 = hmac(AUTH_HMAC_SHA1, b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(sha1.as_slice(), hex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"));
        let sha256 = hmac(AUTH_HMAC_SHA256, b"Jefe", &[b"what do ya want for nothing?"]);
        assert_eq!(sha256.as_slice(), hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
    }

    #[test]
    fn zero_padded_password_is_the_same_hmac_key() {
        let mut padded = [0u8; 20];
        padded[..8].copy_from_slice(b"password");
        for auth in [AUTH_HMAC_SHA1, AUTH_HMAC_SHA256] {
            assert_eq!(hmac(auth, &padded, &[b"x"]), hmac(auth, b"password", &[b"x"]));
        }
    }

    #[test]
    fn aes_round_trip_and_pad_layout() {
        let key = [7u8; 16];
        for len in 0..40 {
            let payload: Vec<u8> = (0..len as u8).collect();
            let field = encrypt(&key, [9u8; 16], &payload);
            assert_eq!(&field[..16], &[9u8; 16]);
            assert_eq!((field.len() - 16) % 16, 0);
            assert_eq!(field.len() - 16, len + conf_pad_len(len) + 1);
            assert_eq!(decrypt(&key, &field).unwrap(), payload, "length {len}");
        }
        // 15 bytes + pad length fill one block exactly: no pad bytes.
        assert_eq!(conf_pad_len(15), 0);
        assert_eq!(conf_pad_len(0), 15);
        assert_eq!(conf_pad_len(16), 15);
    }

    #[test]
    fn aes_matches_fips197_block() {
        // One block, zero IV: CBC is plain AES (FIPS-197 appendix C.1).
        let key: [u8; 16] = hex("000102030405060708090a0b0c0d0e0f").try_into().unwrap();
        let plain = hex("00112233445566778899aabbccddeeff");
        let mut block = plain.clone();
        let mut enc = cbc::Encryptor::<aes::Aes128>::new((&key).into(), (&[0u8; 16]).into());
        enc.encrypt_block_mut(GenericArray::from_mut_slice(&mut block));
        assert_eq!(block, hex("69c4e0d86a7b0430d8cdb78070b4c55a"));
    }

    #[test]
    fn malformed_pads_and_lengths_are_refused() {
        let key = [1u8; 16];
        let iv = [2u8; 16];
        // Encrypt a block whose pad bytes are wrong (01 03 instead of 01 02).
        let mut raw = vec![0xAA; 13];
        raw.extend_from_slice(&[1, 3, 2]);
        let mut field = iv.to_vec();
        let mut body = raw.clone();
        let mut enc = cbc::Encryptor::<aes::Aes128>::new((&key).into(), (&iv).into());
        enc.encrypt_block_mut(GenericArray::from_mut_slice(&mut body));
        field.extend_from_slice(&body);
        assert_eq!(decrypt(&key, &field), None);
        // Not whole blocks, IV only.
        assert_eq!(decrypt(&key, &field[..31]), None);
        assert_eq!(decrypt(&key, &field[..16]), None);
        // Wrong key: the pad almost never survives.
        let good = encrypt(&key, iv, b"hello");
        assert_ne!(decrypt(&[0u8; 16], &good).as_deref(), Some(&b"hello"[..]));
    }

    #[test]
    fn icv_and_rakp4_lengths() {
        let suite3 = CipherSuite::by_id(3).unwrap();
        let suite17 = CipherSuite::by_id(17).unwrap();
        assert_eq!(suite3.icv_len(), 12);
        assert_eq!(suite17.icv_len(), 16);
        assert_eq!(CipherSuite::by_id(1).unwrap().icv_len(), 0);
        assert_eq!(CipherSuite::by_id(0), None);
        let (rm, rc, guid) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        for (suite, sik_len, icv_len) in [(suite3, 20, 12), (suite17, 32, 16)] {
            let x = Exchange {
                auth: suite.auth,
                kuid: b"password",
                sidm: 0x11223344,
                sidc: 0x55667788,
                rm: &rm,
                rc: &rc,
                guid: &guid,
                role: 0x14,
                username: b"admin",
            };
            let sik = x.sik();
            assert_eq!(sik.as_slice().len(), sik_len);
            assert_eq!(x.rakp2_code().as_slice().len(), sik_len);
            assert_eq!(x.rakp4_icv(&sik).as_slice().len(), icv_len);
            let keys = SessionKeys::derive(suite.auth, &sik);
            assert_eq!(keys.k1.as_slice().len(), sik_len);
            assert_eq!(keys.icv(suite.integrity, b"data").as_slice().len(), icv_len);
            assert!(verify(&keys.icv(suite.integrity, b"data"), keys.icv(suite.integrity, b"data").as_slice()));
            assert!(!verify(&keys.icv(suite.integrity, b"data"), keys.icv(suite.integrity, b"datA").as_slice()));
        }
    }

    #[test]
    fn suite_records() {
        assert_eq!(CipherSuite::by_id(17).unwrap().record(), [0xC0, 17, 3, 0x44, 0x81]);
        assert_eq!(CipherSuite::by_id(3).unwrap().record(), [0xC0, 3, 1, 0x41, 0x81]);
        assert_eq!(CipherSuite::by_algorithms(1, 1, 1).map(|s| s.id), Some(3));
        assert_eq!(CipherSuite::by_algorithms(0, 0, 0), None);
    }
}
