//! A lane's BMC session: opened on first use, reused across batches while
//! the target and credentials stay the same, reopened when broken.

use crate::registry::Registry;
use bmcfleet_provider::{capabilities, BmcSession, Capability, Ctx, ProviderError, ResolvedCredentials};
use bmcfleet_schema::{
    Action, ActionData, BmcTarget, ErrorCode, NetworkSourceOp, PowerOp, Protocol, UserOp, VirtualMediaOp,
};

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
    caps: Vec<Capability>,
}

/// Zero or one open session.
#[derive(Default)]
pub struct SessionSlot {
    open: Option<Open>,
}

impl SessionSlot {
    /// The session for `target`, opening (or re-opening) it when needed.
    pub async fn get(
        &mut self,
        registry: &Registry,
        ctx: &Ctx,
        target: &BmcTarget,
        creds: &ResolvedCredentials,
    ) -> Result<(&mut dyn BmcSession, &[Capability]), ProviderError> {
        // Compare what the credentials resolve to, not their form: a sealed
        // password is a new box in every batch.
        let mut same_target = target.clone();
        same_target.credentials = bmcfleet_schema::Credentials::Ref(String::new());
        let identity = Identity { target: same_target, username: creds.username.clone(), password: creds.password.clone() };
        let reuse = matches!(&self.open, Some(o) if o.identity == identity && o.session.is_healthy());
        if !reuse {
            self.close().await;
            let connectors = match target.protocol {
                Protocol::Auto => registry.auto(),
                p => registry.get(p).into_iter().collect(),
            };
            if connectors.is_empty() {
                return Err(ProviderError::new(
                    ErrorCode::UnsupportedProtocol,
                    format!("this worker has no provider for protocol `{}`", target.protocol),
                ));
            }
            let mut last = None;
            for c in connectors {
                match c.connect(ctx, target, creds).await {
                    Ok(mut session) => {
                        let caps = capabilities(session.as_mut());
                        tracing::info!(
                            bmc = %target.address.key(), provider = session.provider(),
                            capabilities = ?caps.iter().map(|c| c.as_str()).collect::<Vec<_>>(), "BMC session opened."
                        );
                        self.open = Some(Open { identity: identity.clone(), session, caps });
                        last = None;
                        break;
                    }
                    Err(e) => {
                        tracing::info!(bmc = %target.address.key(), provider = c.protocol(), error = %e, "BMC session failed to open.");
                        // An auth failure is an answer: do not probe further with the same password.
                        let stop = e.code == ErrorCode::AuthFailed;
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
        Ok((open.session.as_mut(), &open.caps))
    }

    pub fn provider(&self) -> Option<&'static str> {
        self.open.as_ref().map(|o| o.session.provider())
    }

    pub async fn close(&mut self) {
        if let Some(mut o) = self.open.take() {
            o.session.close().await;
        }
    }
}

fn unsupported(cap: Capability, provider: &str, caps: &[Capability]) -> ProviderError {
    ProviderError::new(
        ErrorCode::Unsupported,
        format!(
            "the {provider} provider does not implement {cap} (it offers: {})",
            caps.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
        ),
    )
}

/// Run one action on a session.
pub async fn perform(
    session: &mut dyn BmcSession,
    caps: &[Capability],
    ctx: &Ctx,
    action: &Action,
) -> Result<Option<ActionData>, ProviderError> {
    let cap = Capability::of(action);
    let provider = session.provider();
    let missing = || unsupported(cap, provider, caps);
    match action {
        Action::Power(op) => {
            let state = session.power().ok_or_else(missing)?.power(ctx, *op).await?;
            Ok(match (op, state) {
                (_, Some(s)) => Some(ActionData::PowerState(s)),
                (PowerOp::Status, None) => {
                    return Err(ProviderError::new(ErrorCode::ProtocolError, "the BMC returned no power state"))
                }
                _ => None,
            })
        }
        Action::BootDevice(req) => {
            session.boot().ok_or_else(missing)?.set_boot_device(ctx, req).await?;
            Ok(None)
        }
        Action::GetBootDevice => {
            Ok(Some(ActionData::BootDevice(session.boot().ok_or_else(missing)?.boot_device(ctx).await?)))
        }
        Action::User(op) => {
            let users = session.users().ok_or_else(missing)?;
            Ok(match op {
                UserOp::List => Some(ActionData::Users(users.list_users(ctx).await?)),
                UserOp::Create(spec) => Some(ActionData::Users(vec![users.create_user(ctx, spec).await?])),
                UserOp::Update(u) => Some(ActionData::Users(vec![users.update_user(ctx, u).await?])),
                UserOp::Delete { name } => {
                    users.delete_user(ctx, name).await?;
                    None
                }
            })
        }
        Action::BmcReset(kind) => {
            session.bmc_reset().ok_or_else(missing)?.reset_bmc(ctx, *kind).await?;
            Ok(None)
        }
        Action::NetworkSource(op) => {
            let net = session.network_source().ok_or_else(missing)?;
            match op {
                NetworkSourceOp::Get => Ok(Some(ActionData::NetworkSource(net.network_source(ctx).await?))),
                NetworkSourceOp::Dhcp => net.set_dhcp(ctx).await.map(|_| None),
                NetworkSourceOp::Static(s) => net.set_static(ctx, s).await.map(|_| None),
            }
        }
        Action::Raw(req) => Ok(Some(ActionData::Raw(session.raw().ok_or_else(missing)?.raw(ctx, req).await?))),
        Action::VirtualMedia(op) => {
            let vm = session.virtual_media().ok_or_else(missing)?;
            match op {
                VirtualMediaOp::Insert { url, media } => vm.insert_media(ctx, url, *media).await.map(|_| None),
                VirtualMediaOp::Eject { media } => vm.eject_media(ctx, *media).await.map(|_| None),
            }
        }
        Action::Inventory => {
            Ok(Some(ActionData::Inventory(session.inventory().ok_or_else(missing)?.inventory(ctx).await?)))
        }
    }
}
