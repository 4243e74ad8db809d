//! [`Recorded`]: a real IPMI transport (RMCP+ to `ipmi_sim`, or
//! [`super::SpecBmc`]) that also keeps every request it sent, data
//! included, so a test can compare what went on the wire with what a plan
//! says would (`providers/ipmi/tests/plan.rs`).

use async_trait::async_trait;
use bmcfleet_ipmi::{Privilege, Request, Response, Transport, TransportError};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// `inner`, recording each request before it is handed over.
pub struct Recorded<T> {
    inner: T,
    sent: Arc<Mutex<Vec<Request>>>,
}

impl<T> Recorded<T> {
    pub fn new(inner: T) -> Self {
        Recorded { inner, sent: Arc::default() }
    }

    /// The requests sent so far, shared (read it while a session owns the transport).
    pub fn log(&self) -> Arc<Mutex<Vec<Request>>> {
        self.sent.clone()
    }
}

#[async_trait]
impl<T: Transport> Transport for Recorded<T> {
    async fn call(&mut self, deadline: Instant, request: &Request) -> Result<Response, TransportError> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).push(request.clone());
        self.inner.call(deadline, request).await
    }

    fn is_healthy(&self) -> bool {
        self.inner.is_healthy()
    }

    fn privilege(&self) -> Privilege {
        self.inner.privilege()
    }

    async fn close(&mut self) {
        self.inner.close().await
    }
}
