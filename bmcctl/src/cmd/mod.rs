//! One module per command.

pub mod action;
pub mod cred;
pub mod keygen;
pub mod machine;
pub mod status;
pub mod submit;
pub mod watch;

use bmcfleet_schema::Credentials;

/// Replace inline credentials by a box sealed to `key`; others unchanged.
pub(crate) fn seal_inline(credentials: Credentials, key: Option<&str>) -> anyhow::Result<Credentials> {
    match (credentials, key) {
        (Credentials::Inline { username, password }, Some(key)) => {
            let key = bmcfleet_common::sealing::public_key(key).map_err(anyhow::Error::msg)?;
            let sealed = bmcfleet_common::sealing::seal(&username, &password, &key).map_err(anyhow::Error::msg)?;
            Ok(Credentials::Sealed(sealed))
        }
        (c, _) => Ok(c),
    }
}
