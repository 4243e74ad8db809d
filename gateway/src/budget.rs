//! Admission budgets. The gateway never waits for capacity: a request that
//! finds its budget spent is answered `unavailable` at once, so one noisy
//! producer cannot freeze the service for everyone else.
//!
//! - Short requests (submit without waiting, status, cancel) share
//!   `--max-concurrent-requests`, and each tenant at most
//!   `--max-requests-per-tenant` of it.
//! - Waiting submits (`Bmcfleet-Wait: true`, held open until the batch
//!   finishes) have their own budget, `--max-waiting-submits`, each tenant
//!   at most `--max-waiting-per-tenant` of it and each client at most
//!   `--max-waiting-per-client`. A client is the connection a reply goes
//!   to: the reply subject without its last token
//!   (`_INBOX.<connection>.<request>`).
//!
//! A tenant is the NATS account a request came from (nats-server names it
//! in `Nats-Request-Info`; the operator's own account, with no such header,
//! counts as one tenant too). By default a tenant may hold half of each
//! budget, so one tenant flooding the gateway, with as many connections as
//! it likes, always leaves the other half to the others.

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

/// The client a reply subject belongs to.
pub fn client_of(reply: Option<&str>) -> String {
    reply.and_then(|r| r.rsplit_once('.')).map(|(client, _)| client.to_owned()).unwrap_or_default()
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
    pub fn admit(&self, waiting: bool, reply: Option<&str>, tenant: &str) -> Result<Permit, Error> {
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
        let client = self.clients.take(&client_of(reply), l.waiting_per_client).map_err(|held| {
            Error::new(ErrorKind::ClientWaiting, format!(
                "this client already has {held} waiting submits (the limit per client); submit without waiting and follow the batch's events or status"
            ))
        })?;
        let slot = self.waiting.clone().try_acquire_owned().map_err(|_| {
            Error::new(ErrorKind::Waiting, "the gateway holds as many waiting submits as it may; submit without waiting and follow the batch's events or status")
        })?;
        let share = self.waiting_tenants.take(tenant, l.waiting_per_tenant).map_err(|held| {
            Error::new(ErrorKind::TenantWaiting, format!(
                "this tenant already has {held} waiting submits (its share of the gateway); submit without waiting and follow the batch's events or status"
            ))
        })?;
        Ok(Permit { _slot: slot, _tenant: share, _client: Some(client) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_reply_subjects_without_the_request_token() {
        assert_eq!(client_of(Some("_INBOX.abc.17")), "_INBOX.abc");
        assert_eq!(client_of(Some("_INBOX.tenant.x.9")), "_INBOX.tenant.x");
        assert_eq!(client_of(None), "");
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
        // Waiting submits: their own budget, and a share per client.
        let a1 = b.admit(true, Some("_INBOX.a.1"), "").unwrap();
        let _a2 = b.admit(true, Some("_INBOX.a.2"), "").unwrap();
        assert!(b.admit(true, Some("_INBOX.a.3"), "").unwrap_err().to_string().contains("limit per client"));
        let _b1 = b.admit(true, Some("_INBOX.b.1"), "").unwrap();
        assert!(b.admit(true, Some("_INBOX.c.1"), "").unwrap_err().to_string().contains("as many waiting submits"));
        drop(a1);
        let _a3 = b.admit(true, Some("_INBOX.a.3"), "").unwrap();
        let full = b.admit(false, None, "").unwrap_err();
        assert_eq!(full.kind(), ErrorKind::Requests, "short requests are unaffected by waiting ones, and still full");
        assert_eq!(full.code(), bmcfleet_schema::ErrorCode::Unavailable);
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
        let w1 = b.admit(true, Some("_INBOX.n1.1"), "noisy").unwrap();
        let _w2 = b.admit(true, Some("_INBOX.n2.1"), "noisy").unwrap();
        assert!(b
            .admit(true, Some("_INBOX.n3.1"), "noisy")
            .unwrap_err()
            .to_string()
            .contains("this tenant already has 2 waiting"));
        assert_eq!(b.admit(true, Some("_INBOX.n4.1"), "noisy").unwrap_err().kind(), ErrorKind::TenantWaiting);
        let _q = b.admit(true, Some("_INBOX.q.1"), "quiet").unwrap();
        // A refusal gives back what it took on the way (the client's share).
        assert!(b.clients.0.lock().unwrap().get("_INBOX.n3").is_none());
        drop(w1);
        let _w3 = b.admit(true, Some("_INBOX.n3.1"), "noisy").unwrap();
        assert!(b.short_tenants.0.lock().unwrap().get("quiet").is_some());
    }
}
