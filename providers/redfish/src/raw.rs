//! Raw passthrough: one Redfish request under `/redfish/v1`, bounded, on
//! the session's authentication. HTTP errors map to typed errors like every
//! other action; a `202` is returned as is (not followed), so a caller can
//! see the task monitor in the answer. Raw requests are never retried.

use crate::error::{invalid, protocol};
use crate::session::RedfishSession;
use bmcfleet_provider::{Ctx, Raw, Result};
use bmcfleet_schema::{HttpMethod, RawRedfish, RawRequest, RawResponse};
use reqwest::Method;
use serde_json::{json, Value};

/// Longest raw path accepted.
const MAX_PATH: usize = 2048;

pub(crate) fn validate_path(path: &str) -> Result<()> {
    let under = path == "/redfish/v1" || path.starts_with("/redfish/v1/") || path.starts_with("/redfish/v1?");
    if !under {
        return Err(invalid(format!("raw Redfish path must be under /redfish/v1, got {path:?}")));
    }
    if path.len() > MAX_PATH {
        return Err(invalid(format!("raw Redfish path is longer than {MAX_PATH} bytes")));
    }
    let (p, _query) = path.split_once('?').unwrap_or((path, ""));
    if p.split('/').any(|seg| seg == ".." || seg == ".")
        || p.contains("//")
        || path.contains('#')
        || path.chars().any(|c| c.is_control() || c.is_whitespace())
        || p.to_ascii_lowercase().contains("%2e")
    {
        return Err(invalid(format!("raw Redfish path {path:?} is not a plain resource path")));
    }
    Ok(())
}

fn method_of(m: HttpMethod) -> Method {
    match m {
        HttpMethod::Get => Method::GET,
        HttpMethod::Post => Method::POST,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Delete => Method::DELETE,
    }
}

impl RedfishSession {
    async fn raw_redfish(&mut self, ctx: &Ctx, req: &RawRedfish) -> Result<RawResponse> {
        validate_path(&req.path)?;
        let max = self.transport.config().max_raw_body_bytes;
        if let Some(body) = &req.body {
            let n = serde_json::to_vec(body).map(|v| v.len()).unwrap_or(usize::MAX);
            if n > max {
                return Err(invalid(format!("raw Redfish body is {n} bytes; the limit is {max}")));
            }
        }
        let method = method_of(req.method);
        if matches!(method, Method::GET | Method::DELETE) && req.body.is_some() {
            return Err(invalid(format!("a raw {method} takes no body")));
        }
        tracing::info!(bmc = %self.transport.bmc(), %method, path = %req.path, "Raw Redfish request.");
        let reply = self.transport.exchange(ctx, method.clone(), &req.path, req.body.as_ref(), None).await?;
        if !reply.status.is_success() {
            return Err(crate::error::status_error(method.as_str(), &req.path, reply.status, &reply.body));
        }
        let body = if reply.body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            match serde_json::from_slice::<Value>(&reply.body) {
                Ok(v) => Some(v),
                Err(_) if reply.header("content-type").is_some_and(|c| c.contains("json")) => {
                    return Err(protocol(format!("{method} {}: the BMC's answer is not valid JSON", req.path)));
                }
                Err(_) => Some(json!(String::from_utf8_lossy(&reply.body))),
            }
        };
        let body = match (body, reply.location()) {
            (None, Some(loc)) => Some(json!({ "Location": loc })),
            (b, _) => b,
        };
        Ok(RawResponse { status: reply.status.as_u16(), data: Vec::new(), body })
    }
}

#[async_trait::async_trait]
impl Raw for RedfishSession {
    async fn raw(&mut self, ctx: &Ctx, req: &RawRequest) -> Result<RawResponse> {
        match req {
            RawRequest::Redfish(r) => self.raw_redfish(ctx, r).await,
            RawRequest::Ipmi(_) => Err(invalid("the redfish provider cannot send a raw IPMI request; use protocol ipmi")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        for ok in ["/redfish/v1", "/redfish/v1/Systems", "/redfish/v1/Systems?$expand=.", "/redfish/v1/Managers/iDRAC.Embedded.1"] {
            assert!(validate_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "/redfish/v10", "/etc/passwd", "/redfish/v1/../x", "/redfish/v1//x", "/redfish/v1/a b",
            "redfish/v1", "/redfish/v1/%2e%2e/x", "/redfish/v1/x#y", "http://evil/redfish/v1",
        ] {
            assert!(validate_path(bad).is_err(), "{bad}");
        }
    }
}
