//! Admission budgets. The gateway never waits for capacity: a request that
//! finds its budget spent is answered `unavailable` at once, so one noisy
//! producer cannot freeze the service for everyone else.
//!
//! - Short requests (submit without waiting, status, cancel) share
//!   `--max-concurrent-requests`.
//! - Waiting submits (`Bmcfleet-Wait: true`, held open until the batch
//!   finishes) have their own budget, `--max-waiting-submits`, and each
//!   client at most `--max-waiting-per-client` of it. A client is the
//!   connection a reply goes to: the reply subject without its last token
//!   (`_INBOX.<connection>.<request>`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Waiting submits held per client.
type Clients = Arc<Mutex<HashMap<String, usize>>>;

/// The gateway's budgets.
#[derive(Debug)]
pub struct Budgets {
    short: Arc<Semaphore>,
    /// The size of `short`, for messages.
    short_size: usize,
    waiting: Arc<Semaphore>,
    per_client: usize,
    clients: Clients,
}

/// Held while a request is handled; returns its share when dropped.
#[derive(Debug)]
pub struct Permit {
    _slot: OwnedSemaphorePermit,
    client: Option<(Clients, String)>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some((clients, key)) = self.client.take() {
            let mut clients = clients.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = clients.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    clients.remove(&key);
                }
            }
        }
    }
}

/// The client a reply subject belongs to.
pub fn client_of(reply: Option<&str>) -> String {
    reply.and_then(|r| r.rsplit_once('.')).map(|(client, _)| client.to_owned()).unwrap_or_default()
}

impl Budgets {
    pub fn new(short: usize, waiting: usize, per_client: usize) -> Budgets {
        Budgets {
            short: Arc::new(Semaphore::new(short)),
            short_size: short,
            waiting: Arc::new(Semaphore::new(waiting)),
            per_client,
            clients: Arc::default(),
        }
    }

    /// A permit for a request, or why there is none (for the `unavailable` answer).
    pub fn admit(&self, waiting: bool, reply: Option<&str>) -> Result<Permit, String> {
        if !waiting {
            let slot = self.short.clone().try_acquire_owned().map_err(|_| {
                format!("the gateway is handling {} requests already; retry shortly", self.short_size)
            })?;
            return Ok(Permit { _slot: slot, client: None });
        }
        let key = client_of(reply);
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let mine = clients.get(&key).copied().unwrap_or(0);
        if mine >= self.per_client {
            return Err(format!(
                "this client already has {mine} waiting submits (the limit per client); submit without waiting and follow the batch's events or status"
            ));
        }
        let slot = self.waiting.clone().try_acquire_owned().map_err(|_| {
            "the gateway holds as many waiting submits as it may; submit without waiting and follow the batch's events or status".to_owned()
        })?;
        *clients.entry(key.clone()).or_default() += 1;
        Ok(Permit { _slot: slot, client: Some((self.clients.clone(), key)) })
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

    #[test]
    fn budgets_refuse_at_once_and_come_back() {
        let b = Budgets::new(2, 3, 2);
        let s1 = b.admit(false, None).unwrap();
        let _s2 = b.admit(false, None).unwrap();
        assert!(b.admit(false, None).unwrap_err().contains("handling 2 requests"));
        drop(s1);
        let _s3 = b.admit(false, None).unwrap();
        // Waiting submits: their own budget, and a share per client.
        let a1 = b.admit(true, Some("_INBOX.a.1")).unwrap();
        let _a2 = b.admit(true, Some("_INBOX.a.2")).unwrap();
        assert!(b.admit(true, Some("_INBOX.a.3")).unwrap_err().contains("limit per client"));
        let _b1 = b.admit(true, Some("_INBOX.b.1")).unwrap();
        assert!(b.admit(true, Some("_INBOX.c.1")).unwrap_err().contains("as many waiting submits"));
        drop(a1);
        let _a3 = b.admit(true, Some("_INBOX.a.3")).unwrap();
        assert!(b.admit(false, None).is_err(), "short requests are unaffected by waiting ones, and still full");
    }
}
