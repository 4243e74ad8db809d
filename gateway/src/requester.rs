//! Who sent a request: the gateway's own account (an operator) or a tenant's.

use crate::service::header;
use async_nats::HeaderMap;
use bmcfleet_schema::subject::REQUEST_INFO_HEADER;

/// Who sent a request: an operator (a client of the gateway's own NATS
/// account: no request-info header), or a tenant (another account, which
/// reaches the service through an import; nats-server names the account in
/// `Nats-Request-Info`, which the client cannot forge across the import).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requester {
    Operator,
    Tenant(String),
}

impl Requester {
    /// From the request's headers; `Err` when the header is there but names
    /// no usable tenant (refused: never treated as an operator).
    pub fn of(headers: Option<&HeaderMap>) -> Result<Requester, String> {
        Requester::of_with(headers, &[])
    }

    /// As [`Requester::of`], with `operator_accounts`: accounts whose users
    /// are operators although they reach the service through an import
    /// (`--operator-accounts`). Their requests carry `Nats-Request-Info`
    /// as a tenant's do, so the audit names the user nats-server
    /// authenticated; an account not listed is a tenant (never more).
    pub fn of_with(headers: Option<&HeaderMap>, operator_accounts: &[String]) -> Result<Requester, String> {
        let Some(info) = header(headers, REQUEST_INFO_HEADER) else { return Ok(Requester::Operator) };
        let account = bmcfleet_schema::subject::request_account(info)?;
        if operator_accounts.contains(&account) {
            return Ok(Requester::Operator);
        }
        if !bmcfleet_schema::machine::valid_name(&account) {
            return Err(format!(
                "the requesting NATS account `{}` is not a tenant name ({}); name tenant accounts that way",
                account.chars().take(64).collect::<String>(),
                bmcfleet_schema::machine::NAME_RULE
            ));
        }
        Ok(Requester::Tenant(account))
    }

    /// Whose share of the gateway's budgets its requests take (`budget`):
    /// `""` for the operator's own account, else the tenant. (A request
    /// that names no usable tenant shares `"?"`; it is refused anyway.)
    pub fn budget_key(who: &Result<Requester, String>) -> &str {
        match who {
            Ok(Requester::Operator) => "",
            Ok(Requester::Tenant(t)) => t,
            Err(_) => "?",
        }
    }

    /// Whether this requester may see a batch of `tenant`.
    pub(crate) fn sees(&self, tenant: &str) -> bool {
        match self {
            Requester::Operator => true,
            Requester::Tenant(t) => t == tenant,
        }
    }
}

/// The audit record of `who` doing `what` with a request carrying
/// `headers`: its `actor` (`operator`, `tenant:<account>`), the identity
/// nats-server vouches for (`Nats-Request-Info`: account and user), and
/// any operator name the client claims (`Bmcfleet-Operator`), kept apart
/// as an unverified annotation: a claim never names who asked.
pub fn audit_record(
    at_ms: u64,
    who: &Requester,
    what: bmcfleet_schema::audit::AuditEvent,
    headers: Option<&HeaderMap>,
) -> bmcfleet_schema::audit::AuditRecord {
    use bmcfleet_schema::subject::{request_identity, OPERATOR_CLAIM_HEADER, OPERATOR_CLAIM_MAX};
    let mut record = bmcfleet_schema::audit::AuditRecord::new(at_ms, actor(who), what);
    // The header is the server's wherever it is: a request that carries it
    // crossed an import (a tenant's, or an operator account's, see
    // `of_with`); one from the gateway's own account that carries it is
    // a tenant's by `of_with`, never an operator's.
    record.nats = header(headers, REQUEST_INFO_HEADER).and_then(|h| request_identity(h).ok());
    record.claimed_operator = header(headers, OPERATOR_CLAIM_HEADER)
        .map(|c| c.chars().filter(|c| !c.is_control()).take(OPERATOR_CLAIM_MAX).collect::<String>())
        .filter(|c| !c.is_empty());
    record
}

/// The audit actor of a requester: `operator` (the gateway's own
/// account), `tenant:<account>`.
pub fn actor(who: &Requester) -> String {
    match who {
        Requester::Operator => "operator".to_owned(),
        Requester::Tenant(t) => format!("tenant:{t}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::audit::{AuditEvent, NatsIdentity};

    fn what() -> AuditEvent {
        AuditEvent::RolloutChanged { rollout: ulid::Ulid::nil(), tenant: "tenant-a".into(), change: "pause".into() }
    }

    #[test]
    fn a_claimed_operator_name_is_an_annotation_never_the_identity() {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_INFO_HEADER, r#"{"acc":"tenant-a","user":"producer-a","id":3,"server":"S"}"#);
        h.insert(bmcfleet_schema::subject::OPERATOR_CLAIM_HEADER, "root\u{7}");
        let who = Requester::of(Some(&h)).unwrap();
        let r = audit_record(1, &who, what(), Some(&h));
        assert_eq!(r.actor, "tenant:tenant-a");
        assert_eq!(r.nats, Some(NatsIdentity { account: "tenant-a".into(), user: Some("producer-a".into()) }));
        assert_eq!(r.claimed_operator.as_deref(), Some("root"));
        assert!(r.describe().starts_with("tenant:tenant-a (nats producer-a@tenant-a) (claims root, unverified) "));
        // An operator's request (no import): nothing the server vouches for but the account being the gateway's.
        let mut op = HeaderMap::new();
        op.insert(bmcfleet_schema::subject::OPERATOR_CLAIM_HEADER, "alice");
        let r = audit_record(1, &Requester::Operator, what(), Some(&op));
        assert_eq!(
            (r.actor.as_str(), r.nats.as_ref(), r.claimed_operator.as_deref()),
            ("operator", None, Some("alice"))
        );
    }

    #[test]
    fn an_operator_account_is_an_operator_with_the_user_the_server_names() {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_INFO_HEADER, r#"{"acc":"operators","user":"alice","id":3,"server":"S"}"#);
        let ops = ["operators".to_owned()];
        let who = Requester::of_with(Some(&h), &ops).unwrap();
        assert_eq!(who, Requester::Operator);
        let r = audit_record(1, &who, what(), Some(&h));
        assert_eq!(r.actor, "operator");
        assert_eq!(r.nats, Some(NatsIdentity { account: "operators".into(), user: Some("alice".into()) }));
        // Not listed: the same account is a tenant, never an operator.
        assert_eq!(Requester::of_with(Some(&h), &[]).unwrap(), Requester::Tenant("operators".into()));
        assert_eq!(
            Requester::of_with(Some(&h), &["tenant-a".to_owned()]).unwrap(),
            Requester::Tenant("operators".into())
        );
    }
}
