//! HTTP Digest access authentication (RFC 7616), client side.
//!
//! - Challenges are read from every `WWW-Authenticate` header; the strongest
//!   Digest challenge we support wins (SHA-512-256 > SHA-256 > MD5, each
//!   with its `-sess` variant). AMT offers MD5 with `qop="auth"`.
//! - Only `qop=auth` is used (`auth-int` is never needed for WS-Man); a
//!   challenge without `qop` (RFC 2069 mode, crackable offline from one
//!   observed exchange) is refused.
//! - A nonce is reused for later requests with an increasing nonce count
//!   (`nc`) and a fresh client nonce each time, which saves AMT a 401
//!   round trip per call.
//! - `userhash=true` and `username*` (RFC 8187) are honoured.
//!
//! The password is read only here, through [`Secret::expose`]; neither it nor
//! a computed response is ever logged.

use bmcfleet_schema::Secret;
use md5::Md5;
use sha2::{Digest as _, Sha256, Sha512_256};
use std::fmt::Write as _;

/// Digest hash algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Algorithm {
    Md5,
    Md5Sess,
    Sha256,
    Sha256Sess,
    Sha512_256,
    Sha512_256Sess,
}

impl Algorithm {
    pub fn parse(s: &str) -> Option<Algorithm> {
        Some(match s.to_ascii_uppercase().as_str() {
            "MD5" => Algorithm::Md5,
            "MD5-SESS" => Algorithm::Md5Sess,
            "SHA-256" => Algorithm::Sha256,
            "SHA-256-SESS" => Algorithm::Sha256Sess,
            "SHA-512-256" => Algorithm::Sha512_256,
            "SHA-512-256-SESS" => Algorithm::Sha512_256Sess,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Md5 => "MD5",
            Algorithm::Md5Sess => "MD5-sess",
            Algorithm::Sha256 => "SHA-256",
            Algorithm::Sha256Sess => "SHA-256-sess",
            Algorithm::Sha512_256 => "SHA-512-256",
            Algorithm::Sha512_256Sess => "SHA-512-256-sess",
        }
    }

    fn is_sess(self) -> bool {
        matches!(self, Algorithm::Md5Sess | Algorithm::Sha256Sess | Algorithm::Sha512_256Sess)
    }

    /// Preference order (higher is stronger).
    fn strength(self) -> u8 {
        match self {
            Algorithm::Md5 | Algorithm::Md5Sess => 1,
            Algorithm::Sha256 | Algorithm::Sha256Sess => 2,
            Algorithm::Sha512_256 | Algorithm::Sha512_256Sess => 3,
        }
    }

    /// Lower-case hex digest of `data`.
    pub fn hash(self, data: &[u8]) -> String {
        match self {
            Algorithm::Md5 | Algorithm::Md5Sess => hex(&Md5::digest(data)),
            Algorithm::Sha256 | Algorithm::Sha256Sess => hex(&Sha256::digest(data)),
            Algorithm::Sha512_256 | Algorithm::Sha512_256Sess => hex(&Sha512_256::digest(data)),
        }
    }
}

use bmcfleet_provider::hex;

/// Random hex string of `n` bytes of OS entropy.
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).expect("the operating system's random source failed");
    hex(&buf)
}

/// One Digest challenge from a `WWW-Authenticate` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub realm: String,
    pub nonce: String,
    pub opaque: Option<String>,
    pub algorithm: Algorithm,
    /// Whether the server named the algorithm (we then echo it).
    pub algorithm_given: bool,
    /// Whether the server offered `qop="auth"` (else RFC 2069 mode).
    pub qop_auth: bool,
    pub stale: bool,
    pub userhash: bool,
}

/// Why no usable challenge was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    #[error("the BMC sent 401 without a WWW-Authenticate header")]
    Missing,
    #[error("the BMC offered no supported HTTP Digest challenge (offered: {0})")]
    Unsupported(String),
}

/// A parsed auth scheme with its parameters (names lower-cased).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthParams {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl AuthParams {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Parse a challenge or credentials list (`Digest a="b", c=d, Basic realm="x"`).
/// Lenient about spacing (AMT writes `nonce="…",stale="false"`).
pub fn parse_auth_header(header: &str) -> Vec<AuthParams> {
    let b = header.as_bytes();
    let mut i = 0;
    let mut out: Vec<AuthParams> = Vec::new();
    let is_tchar = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && matches!(b[*i], b' ' | b'\t') {
            *i += 1;
        }
    };
    while i < b.len() {
        while i < b.len() && matches!(b[i], b' ' | b'\t' | b',') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let start = i;
        while i < b.len() && is_tchar(b[i]) {
            i += 1;
        }
        if i == start {
            i += 1; // not a token: skip the byte
            continue;
        }
        let token = &header[start..i];
        skip_ws(&mut i);
        if i < b.len() && b[i] == b'=' {
            i += 1;
            skip_ws(&mut i);
            let value = if i < b.len() && b[i] == b'"' {
                i += 1;
                let mut v = String::new();
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    // Copy one UTF-8 character.
                    let ch = header[i..].chars().next().unwrap_or('\u{fffd}');
                    v.push(ch);
                    i += ch.len_utf8();
                }
                i += 1; // closing quote
                v
            } else {
                let s = i;
                while i < b.len() && !matches!(b[i], b',' | b' ' | b'\t') {
                    i += 1;
                }
                header[s..i].to_owned()
            };
            if let Some(last) = out.last_mut() {
                last.params.push((token.to_ascii_lowercase(), value));
            }
        } else {
            out.push(AuthParams { scheme: token.to_owned(), params: Vec::new() });
        }
    }
    out
}

impl Challenge {
    fn from_params(p: &AuthParams) -> Option<Challenge> {
        if !p.scheme.eq_ignore_ascii_case("Digest") {
            return None;
        }
        let (algorithm, algorithm_given) = match p.get("algorithm") {
            Some(a) => (Algorithm::parse(a)?, true),
            None => (Algorithm::Md5, false),
        };
        let qop_auth = match p.get("qop") {
            Some(q) => {
                if !q.split(',').any(|x| x.trim().eq_ignore_ascii_case("auth")) {
                    return None; // only auth-int offered
                }
                true
            }
            None => false,
        };
        // RFC 2069 mode (no qop): no client nonce, so an observer can
        // precompute and crack the response offline; refused.
        if !qop_auth {
            return None;
        }
        Some(Challenge {
            realm: p.get("realm")?.to_owned(),
            nonce: p.get("nonce")?.to_owned(),
            opaque: p.get("opaque").map(str::to_owned),
            algorithm,
            algorithm_given,
            qop_auth,
            stale: p.get("stale").is_some_and(|s| s.eq_ignore_ascii_case("true")),
            userhash: p.get("userhash").is_some_and(|s| s.eq_ignore_ascii_case("true")),
        })
    }

    /// The strongest supported Digest challenge among all `WWW-Authenticate` values.
    pub fn select<'a>(headers: impl IntoIterator<Item = &'a str>) -> Result<Challenge, ChallengeError> {
        let all: Vec<AuthParams> = headers.into_iter().flat_map(parse_auth_header).collect();
        if all.is_empty() {
            return Err(ChallengeError::Missing);
        }
        all.iter().filter_map(Challenge::from_params).max_by_key(|c| c.algorithm.strength()).ok_or_else(|| {
            let offered: Vec<String> = all
                .iter()
                .map(|a| match a.get("algorithm") {
                    Some(alg) => format!("{} {alg}", a.scheme),
                    None => a.scheme.clone(),
                })
                .collect();
            ChallengeError::Unsupported(offered.join(", "))
        })
    }
}

/// Inputs of one response computation.
pub struct ResponseInput<'a> {
    pub algorithm: Algorithm,
    pub username: &'a str,
    pub realm: &'a str,
    pub password: &'a str,
    pub method: &'a str,
    pub uri: &'a str,
    pub nonce: &'a str,
    /// `(nc, cnonce)` when `qop=auth`; `None` in RFC 2069 mode.
    pub qop_auth: Option<(&'a str, &'a str)>,
}

/// The `response` value (RFC 7616 §3.4.1).
pub fn compute_response(i: &ResponseInput<'_>) -> String {
    let alg = i.algorithm;
    let mut ha1 = alg.hash(format!("{}:{}:{}", i.username, i.realm, i.password).as_bytes());
    if alg.is_sess() {
        let cnonce = i.qop_auth.map(|(_, c)| c).unwrap_or("");
        ha1 = alg.hash(format!("{ha1}:{}:{cnonce}", i.nonce).as_bytes());
    }
    let ha2 = alg.hash(format!("{}:{}", i.method, i.uri).as_bytes());
    match i.qop_auth {
        Some((nc, cnonce)) => alg.hash(format!("{ha1}:{}:{nc}:{cnonce}:auth:{ha2}", i.nonce).as_bytes()),
        None => alg.hash(format!("{ha1}:{}:{ha2}", i.nonce).as_bytes()),
    }
}

/// `username` as sent: hashed when the server asked (`userhash`).
pub fn wire_username(algorithm: Algorithm, username: &str, realm: &str, userhash: bool) -> String {
    if userhash {
        algorithm.hash(format!("{username}:{realm}").as_bytes())
    } else {
        username.to_owned()
    }
}

fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

/// RFC 8187 ext-value for `username*`.
fn ext_value(s: &str) -> String {
    let mut out = String::from("UTF-8''");
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Per-connection Digest state: the current challenge and its nonce count.
#[derive(Debug, Default)]
pub struct DigestState {
    challenge: Option<Challenge>,
    nc: u32,
}

impl DigestState {
    /// Whether we hold a nonce to try without a fresh challenge.
    pub fn has_challenge(&self) -> bool {
        self.challenge.is_some()
    }

    /// Adopt a new challenge (after a 401): the nonce count restarts.
    pub fn set_challenge(&mut self, c: Challenge) {
        self.challenge = Some(c);
        self.nc = 0;
    }

    /// Forget the nonce (after an authentication failure).
    pub fn clear(&mut self) {
        self.challenge = None;
        self.nc = 0;
    }

    pub fn algorithm(&self) -> Option<Algorithm> {
        self.challenge.as_ref().map(|c| c.algorithm)
    }

    /// The `Authorization` header value for the next request, or `None`
    /// without a challenge. Counts the nonce use.
    pub fn authorization(&mut self, method: &str, uri: &str, username: &str, password: &Secret) -> Option<String> {
        let c = self.challenge.as_ref()?;
        self.nc = self.nc.wrapping_add(1);
        let nc = format!("{:08x}", self.nc);
        let cnonce = random_hex(16);
        let response = compute_response(&ResponseInput {
            algorithm: c.algorithm,
            username,
            realm: &c.realm,
            password: password.expose(),
            method,
            uri,
            nonce: &c.nonce,
            qop_auth: c.qop_auth.then_some((nc.as_str(), cnonce.as_str())),
        });
        let user = wire_username(c.algorithm, username, &c.realm, c.userhash);
        let mut h = String::from("Digest ");
        if c.userhash || user.chars().all(|ch| (' '..='~').contains(&ch)) {
            let _ = write!(h, "username={}", quote(&user));
        } else {
            let _ = write!(h, "username*={}", ext_value(&user));
        }
        let _ = write!(h, ", realm={}, nonce={}, uri={}", quote(&c.realm), quote(&c.nonce), quote(uri));
        if c.algorithm_given {
            let _ = write!(h, ", algorithm={}", c.algorithm.as_str());
        }
        let _ = write!(h, ", response={}", quote(&response));
        if c.qop_auth {
            let _ = write!(h, ", qop=auth, nc={nc}, cnonce={}", quote(&cnonce));
        }
        if let Some(o) = &c.opaque {
            let _ = write!(h, ", opaque={}", quote(o));
        }
        if c.userhash {
            h.push_str(", userhash=true");
        }
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published examples, all for user Mufasa: RFC 7616 §3.9.1 (MD5
    /// and SHA-256) and RFC 2617 §3.5 (MD5, qop=auth).
    #[test]
    fn rfc7616_and_rfc2617_examples() {
        let rfc7616 = || ResponseInput {
            algorithm: Algorithm::Md5,
            username: "Mufasa",
            realm: "http-auth@example.org",
            password: "Circle of Life",
            method: "GET",
            uri: "/dir/index.html",
            nonce: "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
            qop_auth: Some(("00000001", "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ")),
        };
        let rfc2617 = ResponseInput {
            realm: "testrealm@host.com",
            password: "Circle Of Life",
            nonce: "dcd98b7102dd2f0e8b11d0f600bfb0c093",
            qop_auth: Some(("00000001", "0a4f113b")),
            ..rfc7616()
        };
        assert_eq!(compute_response(&rfc7616()), "8ca523f5e9506fed4657c9700eebdbec");
        let sha = ResponseInput { algorithm: Algorithm::Sha256, ..rfc7616() };
        assert_eq!(compute_response(&sha), "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1");
        assert_eq!(compute_response(&rfc2617), "6629fae49393a05397450978507c4ef1");
    }

    #[test]
    fn parses_amt_challenges_from_the_captured_transcripts() {
        // Exactly as in amt/http/amt11-401-digest-challenge.http and amt15-….
        let amt11 = r#"Digest realm="Digest:A4070000000000000000000000000000", nonce="wlbEK1EtAAAAAAAAWW5aUHFp+mQQ1j63",stale="false",qop="auth""#;
        let c = Challenge::select([amt11]).unwrap();
        assert_eq!(c.realm, "Digest:A4070000000000000000000000000000");
        assert_eq!(c.nonce, "wlbEK1EtAAAAAAAAWW5aUHFp+mQQ1j63");
        assert_eq!(c.algorithm, Algorithm::Md5);
        assert!(!c.algorithm_given && c.qop_auth && !c.stale);
        let amt15 = r#"Digest realm="Digest:727734D63A1FC0423736E48DA554E462", nonce="B9AX94iAAAAAAAAAx6rrSfPHGUrx/3uA",stale="false",qop="auth""#;
        assert_eq!(Challenge::select([amt15]).unwrap().nonce, "B9AX94iAAAAAAAAAx6rrSfPHGUrx/3uA");
    }

    #[test]
    fn picks_the_strongest_and_reads_stale() {
        let md5 = r#"Digest realm="r", nonce="n1", qop="auth""#;
        let sha = r#"Digest realm="r", nonce="n2", qop="auth,auth-int", algorithm=SHA-256, stale=TRUE"#;
        let c = Challenge::select([md5, sha]).unwrap();
        assert_eq!(c.algorithm, Algorithm::Sha256);
        assert!(c.stale && c.algorithm_given);
        // Both in one header value, with a Basic challenge too.
        let c = Challenge::select([r#"Basic realm="x", Digest realm="r", nonce="a\"b", algorithm=MD5, qop="auth""#])
            .unwrap();
        assert_eq!(c.nonce, "a\"b");
        assert!(c.qop_auth);
    }

    #[test]
    fn refuses_what_it_cannot_answer() {
        assert_eq!(Challenge::select([]), Err(ChallengeError::Missing));
        assert!(matches!(Challenge::select([r#"Basic realm="x""#]), Err(ChallengeError::Unsupported(_))));
        assert!(Challenge::select([r#"Digest realm="x", nonce="y", algorithm=SHA-1"#]).is_err());
        assert!(Challenge::select([r#"Digest realm="x", nonce="y", qop="auth-int""#]).is_err());
        assert!(Challenge::select([r#"Digest nonce="y""#]).is_err());
        // RFC 2069 mode (no qop, no client nonce) is crackable offline: refused, whatever the algorithm.
        for no_qop in [
            r#"Digest realm="x", nonce="y""#,
            r#"Digest realm="x", nonce="y", algorithm=MD5"#,
            r#"Digest realm="x", nonce="y", algorithm=SHA-256"#,
        ] {
            assert!(matches!(Challenge::select([no_qop]), Err(ChallengeError::Unsupported(_))), "{no_qop}");
        }
    }

    #[test]
    fn authorization_counts_nonce_uses_and_verifies() {
        let mut st = DigestState::default();
        let pw = Secret::new("P@ssw0rd");
        assert!(st.authorization("POST", "/wsman", "admin", &pw).is_none());
        st.set_challenge(
            Challenge::select([r#"Digest realm="Digest:AB", nonce="xyz", qop="auth", opaque="op""#]).unwrap(),
        );
        for expected_nc in ["00000001", "00000002"] {
            let h = st.authorization("POST", "/wsman", "admin", &pw).unwrap();
            let p = &parse_auth_header(&h)[0];
            assert_eq!(p.scheme, "Digest");
            assert_eq!(p.get("nc"), Some(expected_nc));
            assert_eq!(p.get("opaque"), Some("op"));
            assert_eq!(p.get("qop"), Some("auth"));
            assert!(p.get("algorithm").is_none());
            let expect = compute_response(&ResponseInput {
                algorithm: Algorithm::Md5,
                username: "admin",
                realm: "Digest:AB",
                password: "P@ssw0rd",
                method: "POST",
                uri: "/wsman",
                nonce: "xyz",
                qop_auth: Some((expected_nc, p.get("cnonce").unwrap())),
            });
            assert_eq!(p.get("response"), Some(expect.as_str()));
            assert!(!h.contains("P@ssw0rd"));
        }
    }

    #[test]
    fn usernames_are_quoted_hashed_or_extended() {
        let mut st = DigestState::default();
        let pw = Secret::new("x");
        st.set_challenge(Challenge::select([r#"Digest realm="r", nonce="n", qop="auth""#]).unwrap());
        let h = st.authorization("POST", "/wsman", "a\"b", &pw).unwrap();
        assert_eq!(parse_auth_header(&h)[0].get("username"), Some("a\"b"));
        let h = st.authorization("POST", "/wsman", "jürgen", &pw).unwrap();
        assert_eq!(parse_auth_header(&h)[0].get("username*"), Some("UTF-8''j%C3%BCrgen"));
        st.set_challenge(
            Challenge::select([r#"Digest realm="r", nonce="n", qop="auth", userhash=true, algorithm=SHA-256"#])
                .unwrap(),
        );
        let h = st.authorization("POST", "/wsman", "admin", &pw).unwrap();
        let p = &parse_auth_header(&h)[0];
        assert_eq!(p.get("username"), Some(Algorithm::Sha256.hash(b"admin:r").as_str()));
        assert_eq!(p.get("userhash"), Some("true"));
    }
}
