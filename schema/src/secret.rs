//! A secret string (BMC password, token) that never reaches logs.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A secret value. `Debug` and `Display` print `[redacted]`; the only way to
/// read it is [`Secret::expose`], which makes every use greppable.
///
/// It serialises as a plain string because a producer's request must carry
/// it (inline credentials, new BMC user passwords); the wire is not a log.
/// Inline credentials are sealed by the gateway before anything is stored.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself. Call only where the value is handed to a BMC.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_owned())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

/// For flags and environment variables holding a secret (clap parses through `FromStr`).
impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_redfish_bodies_are_redacted_in_debug() {
        let a = crate::Action::Raw(crate::RawRequest::Redfish(crate::RawRedfish {
            method: crate::HttpMethod::Patch,
            path: "/redfish/v1/AccountService/Accounts/3".into(),
            body: Some(serde_json::json!({"UserName": "ops", "Password": "hunter2", "Oem": [{"AuthToken": "t0k"}]})),
        }));
        let d = format!("{a:?}");
        assert!(!d.contains("hunter2") && !d.contains("t0k"), "{d}");
        assert!(d.contains("ops"));
    }

    #[test]
    fn never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{s}"), "[redacted]");
        assert_eq!(s.expose(), "hunter2");
    }
}

/// Remove every occurrence of each secret in `secrets` from `text` (as
/// written and percent-encoded, with upper- or lower-case escapes),
/// replacing it with `[redacted]`. Secrets shorter than 4 characters are
/// too common as text to remove reliably and are left alone. For messages
/// a BMC writes, which may echo what it was sent.
pub fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    // The longest first: a whole URL before its parts.
    let mut secrets: Vec<&str> = secrets.iter().copied().filter(|s| s.chars().count() >= 4).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets {
        let encoded = percent_encoded(secret);
        for form in [secret.to_string(), lower_escapes(secret), lower_escapes(&encoded), encoded] {
            if out.contains(form.as_str()) {
                out = out.replace(form.as_str(), "[redacted]");
            }
        }
    }
    out
}

/// `s` with the hex digits of its percent escapes in lower case (`%2F` → `%2f`).
fn lower_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut digits = 0;
    for c in s.chars() {
        if digits > 0 && c.is_ascii_hexdigit() {
            out.push(c.to_ascii_lowercase());
            digits -= 1;
            continue;
        }
        digits = if c == '%' { 2 } else { 0 };
        out.push(c);
    }
    out
}

/// `s` with its percent escapes decoded (a `+` stays a `+`); an escape that
/// is not one, or bytes that are not UTF-8, are kept or replaced, never fail.
pub(crate) fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%')
            .then(|| b.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encoded(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod scrub_tests {
    use super::scrub;

    #[test]
    fn secrets_are_removed_as_written_and_percent_encoded() {
        let pw = "s3cr3t/p@ss";
        let text = format!("Value '{pw}' for Password is invalid; also s3cr3t%2Fp%40ss and {pw}");
        let out = scrub(&text, &[pw]);
        assert!(!out.contains("s3cr3t"), "{out}");
        assert_eq!(out.matches("[redacted]").count(), 3, "{out}");
        assert_eq!(scrub("a b c", &["b"]), "a b c", "too short to remove");
        assert_eq!(scrub("nothing here", &[]), "nothing here");
    }
}
