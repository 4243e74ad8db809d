//! Admission budgets. The gateway never waits for capacity: a request that
//! finds its budget spent is answered `unavailable` at once, so one noisy
//! producer cannot freeze the service for everyone else.
//!
//! - Short requests (submit without waiting, status, cancel) share
//!   `--max-concurrent-requests`, and each tenant at most
//!   `--max-requests-per-tenant` of it.
//! - Waiting submits (`Bmcfleet-Wait: true`, held open until the batch
//!   finishes) have their own budget, `--max-waiting-submits`, each tenant
//!   at most `--max-waiting-per-tenant` of it and each of a tenant's
//!   connections at most `--max-waiting-per-client`.
//!
//! Every share is keyed by who asks, as nats-server names it, never by the
//! reply subject: a tenant is the NATS account a request came from
//! (`Nats-Request-Info`; the operator's own account, with no such header,
//! counts as one tenant too), and a tenant's connection is the server and
//! client id the same header names when the service import shares the
//! requester's information (`share: true`, as in the shipped accounts
//! config). A reply subject identifies nothing: a service import rewrites
//! it to one `_R_.<prefix>.*` for every importing account, so keyed by it
//! one tenant's waiting submits counted against every other tenant's. A
//! request whose connection is not named (the operator's, or through an
//! import without `share`) has no per-connection share: its tenant's bounds
//! it. By default a tenant may hold half of each budget, so one tenant
//! flooding the gateway, with as many connections as it likes, always
//! leaves the other half to the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How much of each budget is held per key (a client, a tenant).
#[derive(Clone, Debug, Default)]
struct Shares(Arc<Mutex<HashMap<String, usize>>>);

impl Shares {
    /// One more for `key`, unless it holds `limit` already (then how many it holds).
    fn take(&self, key: &str, limit: usize) -> Result<Share, usize> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mine = held.get(key).copied().unwrap_or(0);
        if mine >= limit {
            return Err(mine);
        }
        held.insert(key.to_owned(), mine + 1);
        Ok(Share { shares: self.clone(), key: key.to_owned() })
    }
}

/// One unit of a key's share; given back when dropped.
#[derive(Debug)]
struct Share {
    shares: Shares,
    key: String,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.shares.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// The sizes of the budgets.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub short: usize,
    pub short_per_tenant: usize,
    pub waiting: usize,
    pub waiting_per_tenant: usize,
    pub waiting_per_client: usize,
}

/// Which budget is spent (the request is answered `unavailable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `--max-concurrent-requests`.
    Requests,
    /// The tenant's share of it (`--max-requests-per-tenant`).
    TenantRequests,
    /// `--max-waiting-submits`.
    Waiting,
    /// The tenant's share of it (`--max-waiting-per-tenant`).
    TenantWaiting,
    /// `--max-waiting-per-client`.
    ClientWaiting,
}

impl bmcfleet_schema::error::Coded for ErrorKind {
    fn code(self) -> bmcfleet_schema::ErrorCode {
        bmcfleet_schema::ErrorCode::Unavailable
    }
}

pub type Error = bmcfleet_schema::error::Error<ErrorKind>;

/// The gateway's budgets.
#[derive(Debug)]
pub struct Budgets {
    limits: Limits,
    short: Arc<Semaphore>,
    short_tenants: Shares,
    waiting: Arc<Semaphore>,
    waiting_tenants: Shares,
    clients: Shares,
}

/// Held while a request is handled; returns its shares when dropped.
#[derive(Debug)]
pub struct Permit {
    _slot: OwnedSemaphorePermit,
    _tenant: Share,
    _client: Option<Share>,
}

/// The connection a request came from, when nats-server names it in the
/// request's `Nats-Request-Info` (see the module doc); `None` otherwise.
pub fn client_of(headers: Option<&async_nats::HeaderMap>) -> Option<String> {
    let info = headers?.get(bmcfleet_schema::subject::REQUEST_INFO_HEADER)?;
    bmcfleet_schema::subject::request_connection(info.as_str())
}

impl Budgets {
    pub fn new(limits: Limits) -> Budgets {
        Budgets {
            limits,
            short: Arc::new(Semaphore::new(limits.short)),
            short_tenants: Shares::default(),
            waiting: Arc::new(Semaphore::new(limits.waiting)),
            waiting_tenants: Shares::default(),
            clients: Shares::default(),
        }
    }

    /// A permit for a request of `tenant` (see the module doc), or why
    /// there is none (for the `unavailable` answer).
    /// `client` names the requesting connection ([`client_of`]), if known.
    pub fn admit(&self, waiting: bool, client: Option<&str>, tenant: &str) -> Result<Permit, Error> {
        let l = &self.limits;
        if !waiting {
            let slot = self.short.clone().try_acquire_owned().map_err(|_| {
                Error::new(
                    ErrorKind::Requests,
                    format!("the gateway is handling {} requests already; retry shortly", l.short),
                )
            })?;
            let share = self.short_tenants.take(tenant, l.short_per_tenant).map_err(|held| {
                Error::new(
                    ErrorKind::TenantRequests,
                    format!(
                        "this tenant has {held} requests in progress already (its share of the gateway); retry shortly"
                    ),
                )
            })?;
            return Ok(Permit { _slot: slot, _tenant: share, _client: None });
        }
        let client = client
            .map(|client| {
                self.clients.take(client, l.waiting_per_client).map_err(|held| {
                    Error::new(ErrorKind::ClientWaiting, format!(
                        "this connection already has {held} waiting submits (the limit per client); submit without waiting and follow the batch's events or status"
                    ))
                })
            })
            .transpose()?;
        let slot = self.waiting.clone().try_acquire_owned().map_err(|_| {
            Error::new(ErrorKind::Waiting, "the gateway holds as many waiting submits as it may; submit without waiting and follow the batch's events or status")
        })?;
        let share = self.waiting_tenants.take(tenant, l.waiting_per_tenant).map_err(|held| {
            Error::new(ErrorKind::TenantWaiting, format!(
                "this tenant already has {held} waiting submits (its share of the gateway); submit without waiting and follow the batch's events or status"
            ))
        })?;
        Ok(Permit { _slot: slot, _tenant: share, _client: client })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_connections_nats_server_names_never_reply_subjects() {
        let mut h = async_nats::HeaderMap::new();
        h.insert(bmcfleet_schema::subject::REQUEST_INFO_HEADER, r#"{"acc":"tenant-a","id":7,"server":"NSRV","rtt":1}"#);
        assert_eq!(client_of(Some(&h)).as_deref(), Some("tenant-a/NSRV/7"));
        let mut unshared = async_nats::HeaderMap::new();
        unshared.insert(bmcfleet_schema::subject::REQUEST_INFO_HEADER, r#"{"acc":"tenant-a","rtt":1}"#);
        assert_eq!(client_of(Some(&unshared)), None);
        assert_eq!(client_of(None), None, "the operator's own requests");
    }

    fn limits(short: usize, waiting: usize, per_client: usize) -> Limits {
        Limits { short, short_per_tenant: short, waiting, waiting_per_tenant: waiting, waiting_per_client: per_client }
    }

    #[test]
    fn budgets_refuse_at_once_and_come_back() {
        let b = Budgets::new(limits(2, 3, 2));
        let s1 = b.admit(false, None, "").unwrap();
        let _s2 = b.admit(false, None, "").unwrap();
        assert!(b.admit(false, None, "").unwrap_err().to_string().contains("handling 2 requests"));
        drop(s1);
        let _s3 = b.admit(false, None, "").unwrap();
        // Waiting submits: their own budget, and a share per connection.
        let a1 = b.admit(true, Some("t/s/1"), "t").unwrap();
        let _a2 = b.admit(true, Some("t/s/1"), "t").unwrap();
        let e = b.admit(true, Some("t/s/1"), "t").unwrap_err();
        assert!(e.to_string().contains("limit per client"), "{e}");
        assert_eq!(e.kind(), ErrorKind::ClientWaiting);
        let _b1 = b.admit(true, Some("t/s/2"), "t").unwrap();
        assert!(b.admit(true, None, "").unwrap_err().to_string().contains("as many waiting submits"));
        drop(a1);
        let _a3 = b.admit(true, Some("t/s/1"), "t").unwrap();
        let full = b.admit(false, None, "").unwrap_err();
        assert_eq!(full.kind(), ErrorKind::Requests, "short requests are unaffected by waiting ones, and still full");
        assert_eq!(full.code(), bmcfleet_schema::ErrorCode::Unavailable);
    }

    /// Issue 32: one tenant holding its connection's whole share leaves every
    /// other tenant's connections theirs (through a service import, every
    /// tenant's requests carry one `_R_.<prefix>.*` reply prefix); a
    /// connection nats-server does not name is bounded by its tenant's share.
    #[test]
    fn one_tenants_connection_leaves_other_tenants_theirs() {
        let b = Budgets::new(Limits {
            short: 8,
            short_per_tenant: 4,
            waiting: 8,
            waiting_per_tenant: 4,
            waiting_per_client: 2,
        });
        let _a = [b.admit(true, Some("a/s/1"), "a").unwrap(), b.admit(true, Some("a/s/1"), "a").unwrap()];
        assert!(b.admit(true, Some("a/s/1"), "a").unwrap_err().to_string().contains("limit per client"));
        let _b = [b.admit(true, Some("b/s/2"), "b").unwrap(), b.admit(true, Some("b/s/2"), "b").unwrap()];
        let _op =
            [b.admit(true, None, "").unwrap(), b.admit(true, None, "").unwrap(), b.admit(true, None, "").unwrap()];
    }

    /// One tenant flooding the gateway, from as many connections as it
    /// likes, holds at most its share: the others still get in.
    #[test]
    fn a_tenant_holds_at_most_its_share_of_each_budget() {
        let b = Budgets::new(Limits {
            short: 4,
            short_per_tenant: 2,
            waiting: 4,
            waiting_per_tenant: 2,
            waiting_per_client: 4,
        });
        let (s1, _s2) = (b.admit(false, None, "noisy").unwrap(), b.admit(false, None, "noisy").unwrap());
        assert!(b.admit(false, None, "noisy").unwrap_err().to_string().contains("this tenant has 2 requests"));
        let _quiet = b.admit(false, None, "quiet").unwrap();
        let _operator = b.admit(false, None, "").unwrap();
        assert!(
            b.admit(false, None, "other").unwrap_err().to_string().contains("handling 4 requests"),
            "the global budget still holds"
        );
        drop(s1);
        let _s3 = b.admit(false, None, "noisy").unwrap();
        // Waiting submits: new connections do not get a tenant more.
        let w1 = b.admit(true, Some("noisy/s/1"), "noisy").unwrap();
        let _w2 = b.admit(true, Some("noisy/s/2"), "noisy").unwrap();
        assert!(b
            .admit(true, Some("noisy/s/3"), "noisy")
            .unwrap_err()
            .to_string()
            .contains("this tenant already has 2 waiting"));
        assert_eq!(b.admit(true, Some("noisy/s/4"), "noisy").unwrap_err().kind(), ErrorKind::TenantWaiting);
        let _q = b.admit(true, Some("quiet/s/4"), "quiet").unwrap();
        // A refusal gives back what it took on the way (the connection's share).
        assert!(b.clients.0.lock().unwrap().get("noisy/s/3").is_none());
        drop(w1);
        let _w3 = b.admit(true, Some("noisy/s/3"), "noisy").unwrap();
        assert!(b.short_tenants.0.lock().unwrap().get("quiet").is_some());
    }
}
