//! A lane's BMC session: opened on first use, reused across batches while
//! the target and credentials stay the same, reopened when broken.

use crate::providers::Providers;
use bmcfleet_provider::{capabilities, BmcSession, Ctx, ProviderError, ResolvedCredentials};
use bmcfleet_schema::{BmcTarget, ErrorCode, Protocol};

/// What a session was opened for, as a SHA-256 digest; any change means a
/// new session. The lane keeps it as long as the session lives: the
/// target and credentials themselves (~300 bytes inline, a few strings on
/// the heap, a CA bundle where the machine has one) would stay with every
/// live session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity([u8; 32]);

impl Identity {
    /// The target as the provider sees it (its credentials' form left
    /// out: a sealed password is a new box in every batch, so what they
    /// resolve to counts instead), the user name and the password. Each
    /// part is length-prefixed, so no two different identities hash the
    /// same input.
    fn of(target: &BmcTarget, creds: &ResolvedCredentials) -> Identity {
        use sha2::Digest;
        let mut same_target = target.clone();
        same_target.credentials = bmcfleet_schema::Credentials::Ref(String::new());
        // A derived `Serialize` of plain structs, lists and options cannot
        // fail; should it, the identity is new and the session reopened.
        let target = serde_json::to_vec(&same_target).unwrap_or_else(|_| ulid::Ulid::new().to_string().into_bytes());
        let mut hash = sha2::Sha256::new();
        for part in [&target[..], creds.username.as_bytes(), creds.password.expose().as_bytes()] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        Identity(hash.finalize().into())
    }
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
        providers: &Providers,
        ctx: &Ctx,
        target: &BmcTarget,
        creds: &ResolvedCredentials,
        routine: bool,
    ) -> Result<&mut dyn BmcSession, ProviderError> {
        let identity = Identity::of(target, creds);
        let reuse = matches!(&self.open, Some(o) if o.identity == identity && o.session.is_healthy());
        if !reuse {
            // Logging the old session out is a request: it passes the gate
            // too. A broken session's BMC just failed to answer: its logout
            // would most likely wait out its own timeout, so it is not waited for.
            if let Some(o) = &self.open {
                let broken = !o.session.is_healthy();
                let may_send = ctx.sending().await.is_ok();
                if broken {
                    self.close_in_background(may_send);
                } else {
                    self.close_if(may_send).await;
                }
            }
            let connectors = match target.protocol {
                Protocol::Auto => providers.auto(&target.options.protocols),
                p => providers.get(p).into_iter().collect(),
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
                        self.open = Some(Open { identity, session });
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
                        let stop =
                            !matches!(e.code, ErrorCode::Unreachable | ErrorCode::Timeout | ErrorCode::TargetNotFound);
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

    /// Close the session at once, its logout (when `may_send`) left to run
    /// on its own: for a session whose BMC just did not answer (a call cut
    /// off at its deadline, a broken transport), whose logout would hold
    /// the lane for as long as the provider's close timeout (Redfish: 5 s)
    /// past the action's deadline, or into the next action's.
    pub fn close_in_background(&mut self, may_send: bool) {
        if let Some(mut o) = self.open.take() {
            if may_send {
                tokio::spawn(async move { o.session.close().await });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::Credentials;

    fn target(address: &str, credentials: Credentials) -> BmcTarget {
        BmcTarget {
            address: address.parse().unwrap(),
            protocol: Protocol::Ipmi,
            credentials,
            tls: Default::default(),
            system_id: None,
            options: Default::default(),
        }
    }

    fn creds(username: &str, password: &str) -> ResolvedCredentials {
        ResolvedCredentials { username: username.into(), password: password.into() }
    }

    /// A session whose BMC stopped answering: broken, and its logout never ends.
    struct HungLogout(std::sync::Arc<std::sync::atomic::AtomicBool>);

    impl bmcfleet_provider::Offer for HungLogout {}

    #[async_trait::async_trait]
    impl BmcSession for HungLogout {
        fn provider(&self) -> &'static str {
            "test"
        }
        fn is_healthy(&self) -> bool {
            false
        }
        async fn close(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            std::future::pending::<()>().await
        }
    }

    /// Reopening after a broken session does not wait for the old one's
    /// logout (which a hung BMC never answers): the logout is sent, and the
    /// new session's opening goes on at once. (Paused clock: a wait would
    /// end only at the test's hour-long bound.)
    #[tokio::test(start_paused = true)]
    async fn a_broken_session_s_logout_does_not_hold_up_the_next_open() {
        let logout_sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut slot = SessionSlot {
            open: Some(Open { identity: Identity([0; 32]), session: Box::new(HungLogout(logout_sent.clone())) }),
        };
        let ctx = Ctx::with_timeout(std::time::Duration::from_secs(30));
        let target = target("10.0.0.1:623", Credentials::Ref("rack12".into()));
        let opened = tokio::time::timeout(
            std::time::Duration::from_secs(3600),
            slot.get(&Providers::default(), &ctx, &target, &creds("admin", "pw"), false),
        )
        .await;
        let Ok(Err(e)) = opened else { panic!("the reopen waited for the old session's logout") };
        assert_eq!(e.code, ErrorCode::UnsupportedProtocol, "{e}");
        assert!(slot.provider().is_none());
        tokio::time::timeout(std::time::Duration::from_secs(3600), async {
            while !logout_sent.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the old session's logout was never sent");
    }

    #[test]
    fn a_session_is_for_one_target_user_and_password_whatever_form_the_credentials_came_in() {
        let by_ref = target("10.0.0.1:623", Credentials::Ref("rack12".into()));
        let inline = target("10.0.0.1:623", Credentials::Inline { username: "other".into(), password: "other".into() });
        let id = Identity::of(&by_ref, &creds("admin", "pw"));
        assert_eq!(id, Identity::of(&inline, &creds("admin", "pw")), "the credentials' form does not count");
        assert_eq!(id, Identity::of(&by_ref.clone(), &creds("admin", "pw")));
        let mut tls = by_ref.clone();
        tls.tls.insecure = true;
        let mut suites = by_ref.clone();
        suites.options.ipmi.cipher_suites = vec![3];
        let mut system = by_ref.clone();
        system.system_id = Some("2".into());
        for (what, other) in [
            ("password", Identity::of(&by_ref, &creds("admin", "pw2"))),
            ("user", Identity::of(&by_ref, &creds("root", "pw"))),
            ("user and password split elsewhere", Identity::of(&by_ref, &creds("adminp", "w"))),
            (
                "address",
                Identity::of(&target("10.0.0.2:623", Credentials::Ref("rack12".into())), &creds("admin", "pw")),
            ),
            ("TLS options", Identity::of(&tls, &creds("admin", "pw"))),
            ("provider options", Identity::of(&suites, &creds("admin", "pw"))),
            ("system id", Identity::of(&system, &creds("admin", "pw"))),
        ] {
            assert_ne!(id, other, "another {what} is another session");
        }
    }
}
