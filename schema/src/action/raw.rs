//! Parameters of the raw passthrough capability.

use serde::{Deserialize, Serialize};

/// Protocol-specific passthrough, bounded in size by [`crate::Limits`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawRequest {
    Ipmi(RawIpmi),
    Redfish(RawRedfish),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIpmi {
    pub netfn: u8,
    pub cmd: u8,
    #[serde(default)]
    pub data: Vec<u8>,
}

#[serde_with::skip_serializing_none]
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedfish {
    pub method: HttpMethod,
    /// Must start with `/redfish/v1`.
    pub path: String,
    pub body: Option<serde_json::Value>,
}

/// Logs show the body with the values of secret-looking keys (password,
/// token, secret, key) replaced by `[redacted]`.
impl std::fmt::Debug for RawRedfish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRedfish")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("body", &self.body.as_ref().map(redact_json))
            .finish()
    }
}

fn redact_json(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let l = k.to_ascii_lowercase();
                    let secret = ["password", "token", "secret", "key", "community"].iter().any(|s| l.contains(s));
                    (k.clone(), if secret { Value::String("[redacted]".into()) } else { redact_json(v) })
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact_json).collect()),
        other => other.clone(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    Get,
    Post,
    Patch,
    Put,
    Delete,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Put => "PUT",
            HttpMethod::Delete => "DELETE",
        }
    }
}
