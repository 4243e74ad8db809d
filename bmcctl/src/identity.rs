//! Who bmcctl is, for the audit log of registry changes: the identity the
//! NATS server authenticated (`$SYS.REQ.USER.INFO`, which any connection
//! may ask about itself since nats-server 2.10), not a variable the caller
//! sets. Falls back to `--nats-user`, then `$USER`, when the server names
//! no user (no authentication) or does not answer; then `operator:anonymous`
//! (the server authenticated no one) or `operator:unknown` (it did not say).

use std::time::Duration;

/// The subject a connection asks the server about itself.
const USER_INFO: &str = "$SYS.REQ.USER.INFO";

/// How long to wait for the server's answer.
const ASK_FOR: Duration = Duration::from_secs(2);

/// `(user, account)` as the server reports them for this connection.
async fn ask(nats: &async_nats::Client) -> Option<(String, String)> {
    let msg = tokio::time::timeout(ASK_FOR, nats.request(USER_INFO, "".into())).await.ok()?.ok()?;
    let v: serde_json::Value = serde_json::from_slice(&msg.payload).ok()?;
    let data = v.get("data")?;
    let field = |k: &str| data.get(k).and_then(|x| x.as_str()).unwrap_or_default().to_owned();
    Some((field("user"), field("account")))
}

/// `operator:<who>`, with `@<account>` when the server names an account
/// other than the default `$G`.
pub fn actor(server: Option<(String, String)>, nats_user: Option<&str>, env_user: Option<&str>) -> String {
    let answered = server.is_some();
    let (user, account) = server.unwrap_or_default();
    let who =
        [Some(user.as_str()), nats_user, env_user].into_iter().flatten().find(|u| !u.is_empty()).map(str::to_owned);
    let account = (!account.is_empty() && account != "$G").then_some(account);
    match (who, account) {
        (Some(w), Some(a)) => format!("operator:{w}@{a}"),
        (Some(w), None) => format!("operator:{w}"),
        (None, Some(a)) => format!("operator:anonymous@{a}"),
        // The server answered and authenticated no one: say so.
        (None, None) if answered => "operator:anonymous".into(),
        (None, None) => "operator:unknown".into(),
    }
}

/// The operator name bmcctl claims in its requests to the gateway
/// (`Bmcfleet-Operator`): `--nats-user`, else `$USER`. The gateway records
/// it only as an unverified annotation (header values are one line).
pub fn claim(nats_user: Option<&str>, env_user: Option<&str>) -> Option<String> {
    [nats_user, env_user]
        .into_iter()
        .flatten()
        .map(|u| u.chars().filter(|c| !c.is_control()).collect::<String>())
        .find(|u| !u.is_empty())
}

/// The audit actor of this connection (see the module).
pub async fn of(nats: &async_nats::Client, nats_user: Option<&str>) -> String {
    let env_user = std::env::var("USER").ok();
    actor(ask(nats).await, nats_user, env_user.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_s_user_wins_over_variables() {
        let s = |u: &str, a: &str| Some((u.to_owned(), a.to_owned()));
        assert_eq!(actor(s("alice", "OPS"), Some("bob"), Some("carol")), "operator:alice@OPS");
        assert_eq!(actor(s("alice", "$G"), None, Some("carol")), "operator:alice");
        assert_eq!(actor(s("", "$G"), None, Some("carol")), "operator:carol");
        assert_eq!(actor(s("", "OPS"), None, None), "operator:anonymous@OPS");
        assert_eq!(actor(s("", "$G"), None, None), "operator:anonymous", "no authentication, no $USER");
        assert_eq!(actor(None, Some("bob"), None), "operator:bob");
        assert_eq!(actor(None, None, None), "operator:unknown");
    }

    /// The claimed name is one header line: `--nats-user` first, then
    /// `$USER`, control characters (a line break) dropped; none if empty.
    #[test]
    fn the_claim_is_one_line_of_the_first_name_given() {
        assert_eq!(claim(Some("ali\r\nce"), Some("bob")).as_deref(), Some("alice"));
        assert_eq!(claim(Some(""), Some("bob")).as_deref(), Some("bob"));
        assert_eq!(claim(None, Some("\n")), None);
        assert_eq!(claim(None, None), None);
    }
}
