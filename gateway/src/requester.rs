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
        let Some(info) = header(headers, REQUEST_INFO_HEADER) else { return Ok(Requester::Operator) };
        let account = bmcfleet_schema::subject::request_account(info)?;
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
