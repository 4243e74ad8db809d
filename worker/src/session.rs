//! A lane's BMC session: opened on first use, reused across batches while
//! the target and credentials stay the same, reopened when broken.

use crate::registry::Registry;
use bmcfleet_provider::{capabilities, BmcSession, Ctx, ProviderError, ResolvedCredentials};
use bmcfleet_schema::{BmcTarget, ErrorCode, Protocol};

/// What a session was opened for; any change means a new session.
#[derive(Clone, Debug, PartialEq)]
struct Identity {
    target: BmcTarget,
    username: String,
    password: bmcfleet_schema::Secret,
}

struct Open {
    identity: Identity,
    session: Box<dyn BmcSession>,
}

/// Zero or one open session.
#[derive(Default)]
pub struct SessionSlot {
    open: Option<Open>,
}

impl SessionSlot {
    /// The session for `target`, opening (or re-opening) it when needed.
    /// `routine`: opened for a state poll, whose lane closes it right
    /// after. An opened session is logged at debug: a fleet at rest opens
    /// one per machine and poll interval (10,000 machines polled every
    /// minute would write 167 lines a second, ~6 % of the worker's CPU
    /// while polling), and a worker taking over thousands of BMCs one per
    /// BMC (the line was ~4.5 % of its CPU opening 10,000 IPMI sessions);
    /// the batch's own lines say which provider served it. A failure to
    /// open is logged at info.
    pub async fn get(
        &mut self,
        registry: &Registry,
        ctx: &Ctx,
        target: &BmcTarget,
        creds: &ResolvedCredentials,
        routine: bool,
    ) -> Result<&mut dyn BmcSession, ProviderError> {
        // Compare what the credentials resolve to, not their form: a sealed
        // password is a new box in every batch.
        let mut same_target = target.clone();
        same_target.credentials = bmcfleet_schema::Credentials::Ref(String::new());
        let identity = Identity { target: same_target, username: creds.username.clone(), password: creds.password.clone() };
        let reuse = matches!(&self.open, Some(o) if o.identity == identity && o.session.is_healthy());
        if !reuse {
            // Logging the old session out is a request: it passes the gate too.
            if self.open.is_some() {
                let may_send = ctx.sending().await.is_ok();
                self.close_if(may_send).await;
            }
            let connectors = match target.protocol {
                Protocol::Auto => registry.auto(&target.options.protocols),
                p => registry.get(p).into_iter().collect(),
            };
            if connectors.is_empty() {
                return Err(ProviderError::new(
                    ErrorCode::UnsupportedProtocol,
                    match target.options.protocols.as_slice() {
                        [] => format!("this worker has no provider for protocol `{}`", target.protocol),
                        list => format!(
                            "this worker has no provider for any protocol of the machine's preference ({})",
                            list.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                    },
                ));
            }
            let mut last = None;
            for c in connectors {
                match c.connect(ctx, target, creds).await {
                    Ok(mut session) => {
                        if tracing::enabled!(tracing::Level::DEBUG) {
                            let caps: Vec<&str> = capabilities(session.as_mut()).iter().map(|c| c.as_str()).collect();
                            tracing::debug!(bmc = %target.address.key(), provider = session.provider(), capabilities = ?caps, routine, "BMC session opened.");
                        }
                        self.open = Some(Open { identity: identity.clone(), session });
                        last = None;
                        break;
                    }
                    Err(e) => {
                        tracing::info!(bmc = %target.address.key(), provider = c.protocol(), error = %e, "BMC session failed to open.");
                        // Probing goes on only while nothing answers. A service
                        // that answered (a TLS failure, refused credentials,
                        // any protocol or BMC error) ends it: the credentials
                        // are never offered to a weaker protocol after a
                        // stronger one refused them or could not be verified.
                        let stop = !matches!(e.code, ErrorCode::Unreachable | ErrorCode::Timeout | ErrorCode::TargetNotFound);
                        last = Some(e);
                        if stop {
                            break;
                        }
                    }
                }
            }
            if let Some(e) = last {
                return Err(e);
            }
        }
        let open = self.open.as_mut().expect("opened above");
        Ok(open.session.as_mut())
    }

    pub fn provider(&self) -> Option<&'static str> {
        self.open.as_ref().map(|o| o.session.provider())
    }

    pub async fn close(&mut self) {
        self.close_if(true).await;
    }

    /// Close the session; log it out on the BMC only when `may_send` (a
    /// worker that lost its lease sends nothing, not even a logout).
    pub async fn close_if(&mut self, may_send: bool) {
        if let Some(mut o) = self.open.take() {
            if may_send {
                o.session.close().await;
            }
        }
    }
}
