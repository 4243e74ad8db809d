//! One module per command.

pub mod action;
pub mod audit;
pub mod bmc_cert;
pub mod complete;
pub mod completions;
pub mod console;
pub mod cred;
pub mod discover;
pub mod fleet;
pub mod keygen;
pub mod machine;
pub mod machine_file;
pub mod machine_watch;
pub mod man;
pub mod replay;
pub mod rollout;
pub mod single;
pub mod status;
pub mod submit;
pub mod watch;

use bmcfleet_schema::Credentials;

/// How long after sealing a box bmcctl seals may still open, beyond the
/// batch's deadline (time queued before admission, clock differences).
const BOX_SLACK: std::time::Duration = std::time::Duration::from_secs(300);

/// Replace inline credentials for the ad hoc `target` by a box sealed to
/// `key`, bound to that target and to `deadline` from now; others unchanged.
pub(crate) fn seal_inline(
    credentials: Credentials,
    key: Option<&str>,
    target: &bmcfleet_schema::BmcAddress,
    deadline: std::time::Duration,
) -> anyhow::Result<Credentials> {
    match (credentials, key) {
        (Credentials::Inline { username, password }, Some(key)) => {
            let key = bmcfleet_common::sealing::public_key(key).map_err(anyhow::Error::msg)?;
            let expires = bmcfleet_common::runtime::now_ms() + (deadline + BOX_SLACK).as_millis() as u64;
            let binding = bmcfleet_common::sealing::Binding::target(&target.key(), expires);
            let sealed =
                bmcfleet_common::sealing::seal(&username, &password, &key, &binding).map_err(anyhow::Error::msg)?;
            Ok(Credentials::Sealed(sealed))
        }
        (c, _) => Ok(c),
    }
}
