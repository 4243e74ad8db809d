//! Digest authentication as AMT enforces it (server side).
//!
//! - A request without credentials, with a wrong response hash, an unknown
//!   nonce, a wrong realm/uri/user, or a nonce count that does not increase
//!   gets `401` with a fresh nonce and `stale="false"`.
//! - A correct response computed with a nonce the server has since expired
//!   gets `401` with a fresh nonce and `stale="true"`.
//! - The challenge is written like AMT writes it:
//!   `Digest realm="Digest:…", nonce="…",stale="false",qop="auth"`.

use bmcfleet_amt::digest::{compute_response, parse_auth_header, random_hex, Algorithm, ResponseInput};
use std::collections::HashMap;

/// Which Digest algorithms the server offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestMode {
    /// MD5 without an `algorithm` parameter, exactly as AMT does.
    Md5,
    /// `algorithm=SHA-256` only.
    Sha256,
    /// Two challenges, SHA-256 first, then MD5 (RFC 7616 §3.7).
    Sha256AndMd5,
}

impl DigestMode {
    fn algorithms(self) -> &'static [Algorithm] {
        match self {
            DigestMode::Md5 => &[Algorithm::Md5],
            DigestMode::Sha256 => &[Algorithm::Sha256],
            DigestMode::Sha256AndMd5 => &[Algorithm::Sha256, Algorithm::Md5],
        }
    }
}

/// What a client sent, minus the response hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestSummary {
    pub username: String,
    /// `None` when the client sent no `algorithm` (MD5).
    pub algorithm: Option<String>,
    pub nonce: String,
    /// Nonce count as sent (`00000001`).
    pub nc: Option<String>,
}

#[derive(Debug)]
struct NonceInfo {
    last_nc: u32,
    stale: bool,
}

#[derive(Debug)]
pub(crate) struct DigestServer {
    pub realm: String,
    pub username: String,
    pub password: String,
    pub mode: DigestMode,
    nonces: HashMap<String, NonceInfo>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AuthResult {
    Ok(DigestSummary),
    /// Answer 401; `stale` per RFC 7616, `seen` is what the client sent, if anything.
    Challenge {
        stale: bool,
        seen: Option<DigestSummary>,
    },
}

fn amt_nonce() -> String {
    // AMT nonces are 32 base64-ish characters; hex is fine for clients.
    random_hex(16)
}

impl DigestServer {
    pub fn new(realm: String, username: String, password: String, mode: DigestMode) -> Self {
        DigestServer { realm, username, password, mode, nonces: HashMap::new() }
    }

    /// Mark every nonce issued so far as expired.
    pub fn expire_all(&mut self) {
        for n in self.nonces.values_mut() {
            n.stale = true;
        }
    }

    /// Forget every nonce issued so far (as a firmware restart does): the
    /// next request using one gets `401` with `stale="false"`.
    pub fn forget_all(&mut self) {
        self.nonces.clear();
    }

    /// `WWW-Authenticate` values for a new nonce.
    pub fn challenge(&mut self, stale: bool) -> Vec<String> {
        let nonce = amt_nonce();
        self.nonces.insert(nonce.clone(), NonceInfo { last_nc: 0, stale: false });
        self.mode
            .algorithms()
            .iter()
            .map(|a| {
                let alg = match (self.mode, a) {
                    (DigestMode::Md5, _) => String::new(),
                    (_, a) => format!(",algorithm={}", a.as_str()),
                };
                format!("Digest realm=\"{}\", nonce=\"{nonce}\",stale=\"{stale}\",qop=\"auth\"{alg}", self.realm)
            })
            .collect()
    }

    pub fn check(&mut self, method: &str, uri: &str, authorization: Option<&str>) -> AuthResult {
        let Some(header) = authorization else {
            return AuthResult::Challenge { stale: false, seen: None };
        };
        let Some(p) = parse_auth_header(header).into_iter().find(|p| p.scheme.eq_ignore_ascii_case("Digest")) else {
            return AuthResult::Challenge { stale: false, seen: None };
        };
        let summary = DigestSummary {
            username: p.get("username").unwrap_or_default().to_owned(),
            algorithm: p.get("algorithm").map(str::to_owned),
            nonce: p.get("nonce").unwrap_or_default().to_owned(),
            nc: p.get("nc").map(str::to_owned),
        };
        let deny = |stale| AuthResult::Challenge { stale, seen: Some(summary.clone()) };
        let algorithm = match p.get("algorithm") {
            None => Algorithm::Md5,
            Some(a) => match Algorithm::parse(a) {
                Some(a) => a,
                None => return deny(false),
            },
        };
        if !self.mode.algorithms().contains(&algorithm)
            || summary.username != self.username
            || p.get("realm") != Some(self.realm.as_str())
            || p.get("uri") != Some(uri)
            || p.get("qop") != Some("auth")
        {
            return deny(false);
        }
        let (Some(nc_text), Some(cnonce), Some(response)) = (p.get("nc"), p.get("cnonce"), p.get("response")) else {
            return deny(false);
        };
        let Ok(nc) = u32::from_str_radix(nc_text, 16) else {
            return deny(false);
        };
        if cnonce.is_empty() || nc_text.len() != 8 {
            return deny(false);
        }
        let expected = compute_response(&ResponseInput {
            algorithm,
            username: &self.username,
            realm: &self.realm,
            password: &self.password,
            method,
            uri,
            nonce: &summary.nonce,
            qop_auth: Some((nc_text, cnonce)),
        });
        if expected != response {
            return deny(false);
        }
        let Some(info) = self.nonces.get_mut(&summary.nonce) else {
            return deny(false);
        };
        if info.stale {
            return deny(true);
        }
        if nc <= info.last_nc {
            return deny(false); // replayed or reordered nonce count
        }
        info.last_nc = nc;
        AuthResult::Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_amt::digest::{Challenge, DigestState};
    use bmcfleet_schema::Secret;

    fn server(mode: DigestMode) -> DigestServer {
        DigestServer::new("Digest:ABC".into(), "admin".into(), "pw".into(), mode)
    }

    #[test]
    fn accepts_good_credentials_counts_and_expires() {
        for mode in [DigestMode::Md5, DigestMode::Sha256, DigestMode::Sha256AndMd5] {
            let mut s = server(mode);
            let mut c = DigestState::default();
            let ch = s.challenge(false);
            c.set_challenge(Challenge::select(ch.iter().map(String::as_str)).unwrap());
            let h1 = c.authorization("POST", "/wsman", "admin", &Secret::new("pw")).unwrap();
            assert!(matches!(s.check("POST", "/wsman", Some(&h1)), AuthResult::Ok(_)), "{mode:?}");
            // replay of nc=1
            assert!(matches!(s.check("POST", "/wsman", Some(&h1)), AuthResult::Challenge { stale: false, .. }));
            let h2 = c.authorization("POST", "/wsman", "admin", &Secret::new("pw")).unwrap();
            s.expire_all();
            assert!(matches!(s.check("POST", "/wsman", Some(&h2)), AuthResult::Challenge { stale: true, .. }));
        }
    }

    #[test]
    fn refuses_wrong_password_and_uri() {
        let mut s = server(DigestMode::Md5);
        let mut c = DigestState::default();
        let ch = s.challenge(false);
        assert!(ch[0].contains(r#",stale="false",qop="auth""#) && !ch[0].contains("algorithm"));
        c.set_challenge(Challenge::select(ch.iter().map(String::as_str)).unwrap());
        let bad = c.authorization("POST", "/wsman", "admin", &Secret::new("nope")).unwrap();
        assert!(matches!(s.check("POST", "/wsman", Some(&bad)), AuthResult::Challenge { stale: false, .. }));
        let other_uri = c.authorization("POST", "/other", "admin", &Secret::new("pw")).unwrap();
        assert!(matches!(s.check("POST", "/wsman", Some(&other_uri)), AuthResult::Challenge { stale: false, .. }));
        assert!(matches!(s.check("POST", "/wsman", None), AuthResult::Challenge { stale: false, seen: None }));
    }
}
